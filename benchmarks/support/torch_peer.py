"""The PyTorch-in-Python peers of the benchmarks (SPEC §10), served to a benchmark binary so that they
run in its interleaved rounds (support/torch_peer.hpp starts `python3 torch_peer.py [--carry DIR]
--serve` once and asks one line at a time; this process has its own CUDA context and stream):

  host CASE [ARGS] N    -> "ok US": host µs per operation of a burst of N (fewer for an operation
                           slower than 1 ms: the burst is cut at 0.25 s, at least 3), then a drain
  device CASE [ARGS] N  -> "ok US": device µs per operation, N queued behind torch.cuda._sleep
  quit
An error answers "error MESSAGE". A case is made (and checked, and warmed up) the first time it
is named. Cases:
  copy_pinned              out.copy_(pinned, non_blocking=True), 1024 int32 (bench.h2d)
  tensor_pinned            torch.tensor(list, pin_memory=True).to(cuda, non_blocking=True), 1024 int32
  pageable                 a pageable tensor's .to(cuda, non_blocking=True), 1024 int32
  staged W PER             W stage_write calls of PER int32 + apply_write: Python lists, one
                           pinned tensor per array, a Triton kernel (bench.staged_write)
  decode_eager             decode_step_torch.py's Step.run (the shared baseline, from --carry DIR),
                           as written: its pinned buffers are rewritten every step, unfenced
  decode_graph SLOTS       the same step as CUDA graphs: one per pinned slot (SLOTS of them), each
                           copying its slot into static device buffers and running the Triton apply
                           and the logits fill; the host writes a step into a free slot (events,
                           the newest queried once per 32 steps) and replays that slot's graph.
                           Checked against decode_eager over 40 steps before it is timed.
"""
import argparse
import sys
import time

try:
    import numpy as np
    import torch
    import triton
    import triton.language as tl
except ImportError as e:  # answered as the first line: the benchmark's Python rows say why they are absent
    print(f"error {e}", flush=True)
    sys.exit(0)

DEV = torch.device("cuda:0")
N1 = 1024


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
        tl.store(dst + r * stride + st + offs - b, tl.load(contents + offs, mask=m), mask=m)


class StagedWrites:
    """An engine's staged writes in Python: host lists, then one kernel with its metadata copied."""

    def __init__(self, W, per):
        self.gpu = torch.zeros(1024, 4096, dtype=torch.int32, device=DEV)
        self.W, self.vals = W, list(range(per))
        self.idx, self.starts, self.cu, self.contents = [], [], [0], []

    def __call__(self):
        for w in range(self.W):
            self.idx.append((w * 7) % 1024)
            self.starts.append(0)
            self.contents.extend(self.vals)
            self.cu.append(len(self.contents))
        h2d = lambda x: torch.tensor(x, dtype=torch.int32, pin_memory=True).to(DEV, non_blocking=True)  # noqa: E731
        _apply_write[(len(self.idx),)](self.gpu, self.gpu.stride(0), h2d(self.idx), h2d(self.starts),
                                       h2d(self.contents), h2d(self.cu), BLOCK=1024)
        self.idx, self.starts, self.cu, self.contents = [], [], [0], []


class DecodeGraph:
    """decode_step_torch.py's step (SPEC §11) replayed as CUDA graphs, one per pinned slot."""

    B, WRITES, CONTENTS = 256, 24, 528  # 16 appends of 1 id + 8 admissions of 64: fixed sizes
    PARTS = [("rows", np.int32, WRITES), ("starts", np.int32, WRITES), ("cu", np.int32, WRITES + 1),
             ("contents", np.int32, CONTENTS), ("positions", np.int64, B), ("seq_lens", np.int32, B),
             ("token_ids", np.int32, B), ("temperature", np.float32, B), ("top_p", np.float32, B),
             ("top_k", np.int32, B), ("seed", np.int64, B), ("logprobs", np.int64, B * 6)]

    def __init__(self, slots):
        self.off, n = {}, 0
        for name, dt, count in self.PARTS:
            n = -(-n // 8) * 8
            self.off[name] = (n, dt, count)
            n += np.dtype(dt).itemsize * count
        self.pinned = [torch.zeros(n, dtype=torch.uint8, pin_memory=True) for _ in range(slots)]
        self.np = [{k: np.frombuffer(p.numpy(), dt, c, o) for k, (o, dt, c) in self.off.items()} for p in self.pinned]
        self.dev = torch.zeros(n, dtype=torch.uint8, device=DEV)
        self.d = {k: self.dev[o:o + np.dtype(dt).itemsize * c].view(getattr(torch, np.dtype(dt).name))
                  for k, (o, dt, c) in self.off.items()}
        self.table = torch.zeros(1024, 512, dtype=torch.int32, device=DEV)
        self.logits_indices = torch.zeros(self.B, dtype=torch.int32, device=DEV)
        self.seq_lens = np.arange(self.B) % 4096 + 1
        self.positions = self.seq_lens - 1
        self.next_block = self.step_no = self.n = self.last = 0
        for s in self.np:
            s["logprobs"][:] = 0
        self.events = [torch.cuda.Event() for _ in range(slots)]
        self.pending = [False] * slots
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._replay_body(0)  # a warm-up outside the captures (Triton compiles here): zero slots write nothing
        torch.cuda.current_stream().wait_stream(side)
        self.graphs, pool = [], torch.cuda.graph_pool_handle()
        for k in range(slots):
            self.graphs.append(torch.cuda.CUDAGraph())
            with torch.cuda.graph(self.graphs[-1], pool=pool):
                self._replay_body(k)
        torch.cuda.synchronize()

    def _replay_body(self, k):
        self.dev.copy_(self.pinned[k], non_blocking=True)
        d = self.d
        _apply_write[(self.WRITES,)](self.table, self.table.stride(0), d["rows"], d["starts"], d["contents"], d["cu"],
                                     BLOCK=1024)
        self.logits_indices[-1:] = d["seq_lens"][-1:]

    def _slot(self):  # a slot whose last replay has run: the newest event queried once per round
        k = self.n % len(self.graphs)
        self.n += 1
        if self.pending[k]:
            if self.events[self.last].query():
                self.pending = [False] * len(self.pending)
            else:
                self.events[k].synchronize()
            self.pending[k] = False
        return k

    def __call__(self):
        s = self.step_no
        self.step_no += 1
        k = self._slot()
        p = self.np[k]
        self.positions += 1
        self.seq_lens += 1
        rows, starts, contents = [], [], []
        for r in range(s % 16, self.B, 16):
            rows.append(r)
            starts.append(int(self.seq_lens[r]) // 16 % 512)
            contents.append(self.next_block)
            self.next_block += 1
        for j in range(8):
            rows.append((s * 8 + j) % 1024)
            starts.append(0)
            contents.extend(range(self.next_block, self.next_block + 64))
            self.next_block += 64
        p["rows"][:] = rows
        p["starts"][:] = starts
        p["cu"][:] = [0] + [w + 1 for w in range(16)] + [16 + 64 * (j + 1) for j in range(8)]
        p["contents"][:] = contents
        p["positions"][:] = self.positions
        p["seq_lens"][:] = self.seq_lens
        p["token_ids"][:] = (np.arange(self.B) * 31 + s) % 32000
        p["temperature"][:] = 0.7
        p["top_p"][:] = 0.9
        p["top_k"][:] = 50
        p["seed"][:] = s
        p["logprobs"].reshape(self.B, 6)[:32, 1:] = (np.arange(32 * 5).reshape(32, 5) + s) % 32000
        self.graphs[k].replay()
        self.events[k].record()
        self.pending[k] = True
        self.last = k


def check_decode_graph(graph, eager):
    """decode_graph and decode_eager, 40 steps each from the start, hold the same device state."""
    for _ in range(40):
        graph()
        eager.run()
    torch.cuda.synchronize()
    d = graph.d
    pairs = [("block table", graph.table, eager.table.gpu), ("positions", d["positions"], eager.positions.gpu),
             ("seq_lens", d["seq_lens"], eager.seq_lens.gpu), ("token ids", d["token_ids"], eager.token_ids.gpu),
             ("temperature", d["temperature"], eager.temperature.gpu), ("top_p", d["top_p"], eager.top_p.gpu),
             ("top_k", d["top_k"], eager.top_k.gpu), ("seed", d["seed"], eager.seed.gpu),
             ("logprobs", d["logprobs"].view(-1, 6), eager.logprob_gpu),
             ("logits index", graph.logits_indices[-1:], eager.logits_indices[-1:])]
    for what, a, b in pairs:
        if not torch.equal(a, b):
            raise RuntimeError(f"decode_graph differs from decode_eager in {what}")


class Peers:
    def __init__(self, carry):
        self.carry, self.cases = carry, {}

    def _eager(self):
        if self.carry:
            sys.path.insert(0, self.carry)
        try:
            import decode_step_torch
        except ImportError as e:
            raise RuntimeError(f"decode_step_torch.py not importable from --carry {self.carry}: {e}") from e
        return decode_step_torch.Step()  # its own state: a fresh step 0

    def make(self, case, args):
        if case == "copy_pinned":
            out = torch.empty(N1, dtype=torch.int32, device=DEV)
            pinned = torch.arange(N1, dtype=torch.int32).pin_memory()
            return lambda: out.copy_(pinned, non_blocking=True)
        if case == "tensor_pinned":
            lst = list(range(N1))
            return lambda: torch.tensor(lst, dtype=torch.int32, pin_memory=True).to(DEV, non_blocking=True)
        if case == "pageable":
            pageable = torch.arange(N1, dtype=torch.int32)
            return lambda: pageable.to(DEV, non_blocking=True)
        if case == "staged":
            return StagedWrites(int(args[0]), int(args[1]))
        if case == "decode_eager":
            return self._eager().run
        if case == "decode_graph":
            check_decode_graph(DecodeGraph(8), self._eager())  # 8 slots: the ring turns 5 times
            return DecodeGraph(int(args[0]))
        raise RuntimeError(f"unknown case {case}")

    def case(self, key):
        if key not in self.cases:
            f = self.make(key[0], key[1:])
            for _ in range(3):
                f()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f()
            torch.cuda.synchronize()
            self.cases[key] = (f, time.perf_counter() - t0)
        return self.cases[key]

    def host(self, key, n):
        f, one = self.case(key)
        n = max(3, min(n, int(0.25 / one))) if one > 1e-3 else n
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        us = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        return us

    def device(self, key, n):
        f, one = self.case(key)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(max(0.05, 3 * n * one) * 1.9e9))  # holds the stream while the burst is queued
        e0.record()
        for _ in range(n):
            f()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e3 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--carry", default="", help="where decode_step_torch.py is")
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    if not a.serve:
        sys.exit("torch_peer.py is served to a benchmark binary (--serve); see its docstring")
    if not torch.cuda.is_available():
        print("error torch sees no CUDA device", flush=True)
        return
    peers = Peers(a.carry)
    print("ready", torch.__version__, flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        try:
            if words[0] not in ("host", "device") or len(words) < 3:
                raise RuntimeError(f"not a request: {line.strip()}")
            us = getattr(peers, words[0])(tuple(words[1:-1]), int(words[-1]))
            print(f"ok {us:.4f}", flush=True)
        except Exception as e:  # noqa: BLE001 (the answer names it; the benchmark records the row as absent)
            print(f"error {type(e).__name__}: {' '.join(str(e).split())}", flush=True)


if __name__ == "__main__":
    main()
