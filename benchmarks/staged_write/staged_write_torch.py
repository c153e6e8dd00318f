"""PyTorch + Triton baseline of bench.staged_write at every point of its grid (SPEC §10: writes W in
{1, 8, 64, 256} x elements per write in {8, 64, 1024, 4096}), the way an inference engine written in
Python stages writes each step: the StagedWrites class and the per_call method of the baseline
script peer_torch.py (which measures 4 of these points), unchanged, over all 16. A separate process
run just before bench.staged_write on the same machine (tools/gpu-check); prints one line per point
in peer_torch.py's format, which bench.staged_write --torch FILE reads:

  staged_write W=<W> per=<per> (stage+apply)   host_us <host> device_us <device>

Calls per point: 300 as peer_torch.py, fewer where one call is slow (at least 20), so that the
largest points take seconds, not minutes. Usage: python3 staged_write_torch.py [--points WxP,...]
"""
import argparse
import time

import torch
import triton
import triton.language as tl

dev = torch.device("cuda:0")


def per_call(fn, n, warm):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    e1.record()
    e1.synchronize()
    return host, e0.elapsed_time(e1) * 1e3 / n


@triton.jit
def _apply_write(dst, stride, rows, starts, contents, cu, BLOCK: tl.constexpr):
    w = tl.program_id(0)
    r = tl.load(rows + w)
    st = tl.load(starts + w)
    b = tl.load(cu + w)
    e = tl.load(cu + w + 1)
    for i in range(b, e, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        m = offs < e
        v = tl.load(contents + offs, mask=m)
        tl.store(dst + r * stride + st + offs - b, v, mask=m)


class StagedWrites:
    """Python reimplementation of the staged-write pattern: writes are staged in host lists, then
    applied by one kernel with all metadata copied H2D."""

    def __init__(self, rows, cols):
        self.gpu = torch.zeros(rows, cols, dtype=torch.int32, device=dev)
        self.clear()

    def clear(self):
        self.idx, self.starts, self.cu, self.contents = [], [], [0], []

    def stage_write(self, row, start, values):
        self.idx.append(row)
        self.starts.append(start)
        self.contents.extend(values)
        self.cu.append(len(self.contents))

    def apply_write(self):
        n = len(self.idx)
        if n == 0:
            return
        h2d = lambda x: torch.tensor(x, dtype=torch.int32, pin_memory=True).to(dev, non_blocking=True)
        _apply_write[(n,)](self.gpu, self.gpu.stride(0), h2d(self.idx), h2d(self.starts), h2d(self.contents),
                           h2d(self.cu), BLOCK=1024)
        self.clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="", help="WxP,... (default: all 16)")
    a = ap.parse_args()
    points = [(W, per) for W in (1, 8, 64, 256) for per in (8, 64, 1024, 4096)]
    if a.points:
        points = [tuple(int(x) for x in p.split("x")) for p in a.points.split(",")]
    st = StagedWrites(1024, 4096)
    for W, per in points:
        vals = list(range(per))

        def step():
            for w in range(W):
                st.stage_write((w * 7) % 1024, 0, vals)
            st.apply_write()

        # One timed call first (after a warm-up one: Triton compiles on first use) to size the run.
        step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        one = time.perf_counter() - t0
        n = max(20, min(300, int(2.0 / max(one, 1e-6))))
        h, d = per_call(step, n, min(100, n))
        print("%-44s host_us %.2f device_us %.2f" % ("staged_write W=%d per=%d (stage+apply)" % (W, per), h, d),
              flush=True)
    print("done")


if __name__ == "__main__":
    main()
