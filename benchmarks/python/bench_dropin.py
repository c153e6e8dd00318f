"""ferry_vllm against vLLM's way (vllm_baseline.py: Python, torch and Triton), same data, same
process, interleaved: in every round each case runs a burst of calls of both implementations, in
an order rotated from round to round; host time per call is the burst's time / calls (the stream
drained between bursts, not counted); medians over the rounds.

Cases: upload (async_tensor_h2d of 1024 int32 from a list), copy_to_uva (1024 int32 from a NumPy
array), staged apply (64 stage_write calls of 1..64 int32 each into a 1024 x 1024 target, then
apply_write), and a decode step (64 requests: token ids uploaded, positions through a UVA pool,
sequence lengths through a UVA-backed tensor, one new block-table entry for 8 requests staged and
applied, slot mapping through a CpuGpuBuffer). Each drop-in case is first checked against the
baseline's result. Ablation rows, timed in the same rounds, split the drop-in's calls: a
Python -> C++ crossing alone, a crossing that returns two tensor views, a tensor view made by
slicing in Python, and the staged case's stage_write calls without the apply.

    python3 benchmarks/python/bench_dropin.py [--json FILE] [--rounds N] [--burst N]
"""

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ferry_vllm as fv  # noqa: E402
import vllm_baseline as vb  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
uva_view = fv.get_accelerator_view_from_cpu_tensor  # builds the baseline's views once


def upload_case(rng):
    data = rng.integers(-(2**30), 2**30, 1024).astype(np.int32).tolist()
    base = lambda: vb.async_tensor_h2d(data, torch.int32, DEV)  # noqa: E731
    drop = lambda: fv.async_tensor_h2d(data, torch.int32, DEV, True)  # noqa: E731
    return base, drop, lambda f: f().cpu()


def copy_to_uva_case(rng):
    src = rng.integers(-(2**30), 2**30, 1024).astype(np.int32)
    bp = vb.UvaBufferPool(1024, torch.int32, 2, uva_view)
    dp = fv.UvaBufferPool(1024, torch.int32, max_concurrency=2)
    return (lambda: bp.copy_to_uva(src)), (lambda: dp.copy_to_uva(src)), lambda f: f().cpu()


def staged_case(rng):
    shape = (1024, 1024)
    bt = vb.StagedWriteTensor(shape, torch.int32, DEV, 2, uva_view)
    dt = fv.StagedWriteTensor(shape, torch.int32, DEV, max_concurrency=2)
    # 64 writes to distinct rows: vLLM's kernel applies a call's writes in parallel, so the result
    # of two writes over one element is unspecified there (ferry's: the later one).
    writes = []
    for row in rng.choice(1024, 64, replace=False):
        n = int(rng.integers(1, 65))
        writes.append((int(row), int(rng.integers(0, 1024 - n)), rng.integers(0, 2**30, n).tolist()))

    def run(t):
        def f():
            for row, start, values in writes:
                t.stage_write(row, start, values)
            t.apply_write()
            return t.gpu

        return f

    return run(bt), run(dt), lambda f: f().cpu()


def step_case(rng):
    reqs, blocks = 64, 512
    start_pos = rng.integers(0, 4000, reqs).astype(np.int32)  # the same requests for both
    tokens = rng.integers(0, 150000, reqs).tolist()

    def make(mod, is_base):
        if is_base:
            pool = mod.UvaBufferPool(reqs, torch.int32, 2, uva_view)
            lens = mod.UvaBackedTensor(reqs, torch.int32, 2, uva_view)
            table = mod.StagedWriteTensor((reqs, blocks), torch.int32, DEV, 2, uva_view)
            slots = mod.CpuGpuBuffer(reqs, dtype=torch.int64, device=DEV)
            h2d = lambda d: mod.async_tensor_h2d(d, torch.int32, DEV)  # noqa: E731
        else:
            pool = mod.UvaBufferPool(reqs, torch.int32, max_concurrency=2)
            lens = mod.UvaBackedTensor(reqs, torch.int32, max_concurrency=2)
            table = mod.StagedWriteTensor((reqs, blocks), torch.int32, DEV, max_concurrency=2)
            slots = mod.CpuGpuBuffer(reqs, dtype=torch.int64, device=DEV, pin_memory=True)
            h2d = lambda d: mod.async_tensor_h2d(d, torch.int32, DEV, True)  # noqa: E731
        state = {"pos": start_pos, "k": 0}

        def step():
            k = state["k"] = state["k"] + 1
            pos = state["pos"] + k
            ids = h2d(tokens)
            positions = pool.copy_to_uva(pos)
            lens.np[:] = pos + 1
            seq_lens = lens.copy_to_uva(reqs)
            for r in range(8):
                req = (k * 8 + r) % reqs
                table.stage_write(req, (k // 8) % blocks, [k * 100 + r])
            table.apply_write()
            slots.np[:] = pos.astype(np.int64) * 16 + 3
            mapping = slots.copy_to_gpu(reqs)
            return ids, positions, seq_lens, table.gpu, mapping

        return step

    base, drop = make(vb, True), make(fv, False)
    return base, drop, lambda f: [x.cpu() for x in f()]


CASES = [("upload", upload_case), ("copy_to_uva", copy_to_uva_case), ("staged_apply", staged_case), ("step", step_case)]


def ablations(rng):
    """Parts of the drop-in's calls, timed alone (not steps, no baseline): where a call's host time
    goes between the Python -> C++ crossing, the torch tensor it returns and ferry's own work."""
    pool = fv.UvaBufferPool(1024, torch.int32, max_concurrency=2)
    pool.copy_to_uva(np.zeros(1024, dtype=np.int32))
    dev = torch.zeros(1024, dtype=torch.int32, device=DEV)
    staged = fv.StagedWriteTensor((1024, 1024), torch.int32, DEV, max_concurrency=2)
    writes = []
    for row in rng.choice(1024, 64, replace=False):
        n = int(rng.integers(1, 65))
        writes.append((int(row), int(rng.integers(0, 1024 - n)), rng.integers(0, 2**30, n).tolist()))

    def stage_only():
        for row, start, values in writes:
            staged.stage_write(row, start, values)
        staged.clear_staged_writes()

    c = pool._pool
    return [
        ("crossing: a C++ property read (UvaBufferPool._pool.current_slot)", lambda: c.current_slot),
        ("crossing + two tensor views over a slot (UvaBufferPool._pool.slot(0, []))", lambda: c.slot(0, [])),
        ("a tensor view by slicing in Python (dev[:1024])", lambda: dev[:1024]),
        ("staged apply's 64 stage_write calls alone, then clear (no apply)", stage_only),
    ]


def burst(f, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f()
    t1 = time.perf_counter_ns()
    torch.cuda.synchronize()
    return (t1 - t0) / n / 1000.0


def check(name, base, drop, read):
    a, b = read(base), read(drop)
    torch.cuda.synchronize()
    same = all(torch.equal(x, y) for x, y in zip(a, b)) if isinstance(a, list) else torch.equal(a, b)
    if not same:
        sys.exit(f"bench_dropin: {name}: ferry_vllm's result differs from the baseline's")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--burst", type=int, default=64)
    args = ap.parse_args()
    rng = np.random.default_rng(20261203)
    cases = []
    for name, make in CASES:
        base, drop, read = make(rng)
        check(name, base, drop, read)
        for _ in range(3):  # warm-up (Triton's compile, pools at their working size)
            burst(base, args.burst)
            burst(drop, args.burst)
        cases.append((name, base, drop))
    for name, f in ablations(rng):
        for _ in range(3):
            burst(f, args.burst)
        cases.append((name, None, f))
    times = {name: {"vllm": [], "ferry": []} for name, _, _ in cases}
    for r in range(args.rounds):
        for name, base, drop in cases[r % len(cases) :] + cases[: r % len(cases)]:
            order = [("vllm", base), ("ferry", drop)] if r % 2 == 0 else [("ferry", drop), ("vllm", base)]
            for who, f in order:
                if f is not None:
                    times[name][who].append(burst(f, args.burst))
    rows, targets = [], []
    print(f"{'case':14} {'vLLM way us':>12} {'ferry_vllm us':>14} {'speedup':>8}")
    for name, base, _ in cases:
        f = statistics.median(times[name]["ferry"])
        if base is None:
            rows.append({"case": f"ablation: {name}", "ferry_us": round(f, 3)})
            print(f"ablation: {name}: {f:.2f} us")
            continue
        v = statistics.median(times[name]["vllm"])
        rows.append({"case": name, "vllm_us": round(v, 3), "ferry_us": round(f, 3), "speedup": round(v / f, 2)})
        targets.append({"name": f"{name}_speedup", "value": round(v / f, 2), "op": ">=", "target": 10, "met": v / f >= 10})
        print(f"{name:14} {v:12.2f} {f:14.2f} {v / f:7.1f}x")
    doc = {
        "benchmark": "python_dropin",
        "machine": torch.cuda.get_device_name(),
        "date": datetime.date.today().isoformat(),
        "method": f"host us per call, median of {args.rounds} rounds of {args.burst}-call bursts, interleaved, rotated",
        "rows": rows,
        "targets": targets,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
