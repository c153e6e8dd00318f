"""vLLM's step preparation, its own code against ferry_vllm.VllmStepPrep, same process, same data.

    python3 benchmarks/python/bench_vllm_prep.py [--json FILE] [--rounds N] [--burst N] [--quick]

A decode step of b running requests (b = 1, 8, 64, 256, 1,024; without drafts, and with 3 draft
tokens per request), from the scheduler's data in NumPy (idx_mapping, num_scheduled_tokens,
num_draft_tokens, the block ids of the requests that cross a block boundary, in vLLM's
scheduler's form) to the step's inputs ready on the GPU for the model's replay:
  vLLM   vLLM 0.26.0's own code (tools/vllm_prep.py, its files from .carry/vllm): the block appends
         (BlockTables.append_block_ids for each), BlockTables.apply_staged_writes, prepare_inputs'
         uploads and kernels, prepare_attn's two kernels, as its model runner calls them
  ferry  one VllmStepPrep.prepare call: one kernel launch
over the same device state (vLLM's RequestState tensors). Each is first checked against the other
on the step (every output equal), and so is ferry's VllmStepPrep(graph=True) (below). Host time per step: bursts of --burst steps, the stream drained
between bursts (not counted); every case's variants (vLLM, ferry, and each one's A/A twin: the same
code and object, timed again) run one burst per round, in an order rotated from round to round;
medians over --rounds rounds. With "+ graph", each step is followed by the replay of a stand-in
model graph (a few kernels reading the side's input buffers, captured once) and the time is the
whole step's: vLLM's preparation, then the replay; ferry at its best path there, a
VllmStepPrep(graph=True) whose step kernel was recorded into that graph's capture (record()),
each step a commit() with no CUDA call, then the replay, which runs the preparation and the model. Per step also: the launches and syncs of each side (torch.profiler's CUDA runtime
and driver API records), and the device time of the preparation alone (steps enqueued behind a
kernel that holds the stream, back to back).

Targets (SPEC §10): vllm_prep.host_speedup_min >= 20 (the smallest vLLM/ferry ratio of host time
over the batch sizes and draft settings, preparation alone), vllm_prep.python_us_per_step_b256 <= 10
(ferry's host us per step at b = 256, the larger of the two draft settings), vllm_prep.extra_launches_per_step
= 0 (ferry's launches per step beside the replay, graph=True) and vllm_prep.syncs_per_step = 0. Each target
carries its A/A noise (the same target from the twins' figures) and verdict. Exits 77 (skipped)
without a GPU, without ferry_vllm, or without vLLM's files in .carry/vllm
(tools/vllm-prep-oracle --fetch).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import vllm_prep  # noqa: E402

SKIP = 77
BATCHES = [1, 8, 64, 256, 1024]
DRAFTS = [0, 3]
BLOCK = 16
MAX_MODEL_LEN = 4096
DEVICE_STEPS = 12  # the steps timed back to back on the device: fewer than ferry's 16 slots


class Decode:
    """A steady decode of b requests: each step every request is scheduled with 1 + d tokens; the
    host's view of its length grows by that much, and a request that crosses a block boundary
    gets a block appended (the scheduler's new_block_ids). The device's num_computed stays at the
    first length, and every round starts the requests afresh (Case.reset): the preparation's work
    is the same from round to round."""

    def __init__(self, rng, b, d, steps, max_num_reqs):
        self.b, self.d = b, d
        self.lengths = rng.integers(64, 2048, b)
        # request i's slot: the one vLLM's RequestState gives the i-th request added (free_indices.pop())
        self.added = np.arange(max_num_reqs - 1, max_num_reqs - 1 - b, -1, dtype=np.int32)
        self.order = rng.permutation(b)  # the batch's rows: requests in this order
        self.slots = self.added[self.order]
        q = 1 + d
        next_block = 1 + int(self.lengths.sum()) // BLOCK + 2 * b
        # step 0's tokens are in the blocks a request is added with; from step 1 on, the blocks the
        # step's tokens need beyond the last step's (at most one a step: q <= BLOCK)
        host = self.lengths[self.order] + q
        self.steps = [[]]
        for _ in range(1, steps):
            appends = []
            for i in range(b):
                if -(-(host[i] + q) // BLOCK) > -(-host[i] // BLOCK):
                    appends.append((int(self.slots[i]), ([next_block],)))
                    next_block += 1
            host += q
            self.steps.append(appends)
        self.idx = self.slots.copy()
        self.q = np.full(b, q, np.int32)
        self.drafts = np.full(b, d, np.int32) if d else None
        self.tokens = b * q

    def initial_blocks(self, i):
        """Request i's blocks when it is added: those of its computed tokens and its first step's."""
        start = 1 + int(self.lengths[:i].sum()) // BLOCK + 2 * i
        return list(range(start, start + -(-(int(self.lengths[i]) + 1 + self.d) // BLOCK)))


class Case:
    """One batch size and draft setting: vLLM's objects and ferry's, over one device state, and
    each side's step (with its stand-in model graph)."""

    def __init__(self, vllm, rng, b, d, steps, device="cuda"):
        import torch

        import ferry_vllm

        self.b, self.d, self.device = b, d, device
        R, T = max(b, 8), max(b * (1 + d), 16)
        self.data = Decode(rng, b, d, steps, R)
        blocks = [MAX_MODEL_LEN // BLOCK]
        self.runner = vllm_prep.VllmRunner(vllm, max_num_reqs=R, max_num_tokens=T, block_sizes=[BLOCK],
                                           kernel_block_sizes=[BLOCK], max_num_blocks=blocks, num_spec=d,
                                           device=torch.device(device))
        rs = self.runner.req_states
        self.prep = ferry_vllm.VllmStepPrep(max_num_reqs=R, max_num_tokens=T, block_sizes=[BLOCK], max_num_blocks=blocks,
                                            num_computed_tokens=rs.num_computed_tokens.gpu,
                                            last_sampled_tokens=rs.last_sampled_tokens,
                                            draft_tokens=rs.draft_tokens if d else None, max_concurrency=16)
        # the same preparation inside the model's graph (graph=True): its own buffers and slots
        self.prep_g = ferry_vllm.VllmStepPrep(max_num_reqs=R, max_num_tokens=T, block_sizes=[BLOCK],
                                              max_num_blocks=blocks, num_computed_tokens=rs.num_computed_tokens.gpu,
                                              last_sampled_tokens=rs.last_sampled_tokens,
                                              draft_tokens=rs.draft_tokens if d else None, max_concurrency=16,
                                              graph=True)
        self.ids = {}
        self.tokens = [rng.integers(0, 150_000, int(n)).astype(np.int32) for n in self.data.lengths]
        rs.last_sampled_tokens.copy_(torch.randint(0, 150_000, rs.last_sampled_tokens.shape))
        if d:
            rs.draft_tokens.copy_(torch.randint(0, 150_000, rs.draft_tokens.shape))
        self.live = self.live_cells()
        self.graph = {}
        if device == "cuda":
            self.make_graphs()
        self.fresh()

    def reset(self):
        """Every request (again) as it starts: added with its prompt computed and the blocks of its
        length, so that each side's steps start over (untimed, between rounds). Requests leave in
        the reverse of their order of arrival, so that vLLM's RequestState gives each its slot again."""
        data = self.data
        step = _Step(data, [])
        step.removed = [slot for slot in reversed(data.added.tolist()) if slot in self.ids]
        for slot in step.removed:
            self.prep.remove_request(slot)
            self.prep_g.remove_request(slot)
        for i, slot in enumerate(data.added.tolist()):
            length = int(data.lengths[i])
            step.added.append((slot, self.tokens[i], (data.initial_blocks(i),), length))
            self.prep.add_request(slot, self.tokens[i], (data.initial_blocks(i),), length)
            self.prep_g.add_request(slot, self.tokens[i], (data.initial_blocks(i),), length)
        self.runner.lifecycle(step, self.ids)
        self.k = {"vllm": 0, "ferry": 0, "ferry_g": 0}

    def fresh(self):
        """reset(), then one step of each side (their re-added blocks land), checked."""
        self.reset()
        self.check()

    def step_data(self, who):
        k = self.k[who]
        self.k[who] += 1
        return _Step(self.data, self.data.steps[k])

    def vllm_step(self):
        self.runner.prepare(self.step_data("vllm"))

    def ferry_step(self):
        s = self.step_data("ferry")
        self.prep.prepare(s.idx_mapping, s.num_scheduled_tokens, s.num_draft_tokens, new_block_ids=s.new_block_ids,
                          num_reqs_padded=s.num_reqs_padded, num_tokens_padded=s.num_tokens_padded)

    def ferry_commit(self):
        """graph=True: the step committed (no CUDA call); the next replay of the model graph runs it."""
        s = self.step_data("ferry_g")
        self.prep_g.commit(s.idx_mapping, s.num_scheduled_tokens, s.num_draft_tokens, new_block_ids=s.new_block_ids,
                           num_reqs_padded=s.num_reqs_padded, num_tokens_padded=s.num_tokens_padded)

    def ferry_replay(self):
        """graph=True: the replay of the model graph the step kernel was recorded into (device="cpu":
        the host backend's stand-in, run by the time it returns)."""
        if self.device == "cuda":
            self.graph["ferry_g"].replay()
        else:
            self.prep_g.replay_recorded()

    def live_cells(self):
        """Where the block tables hold a request's blocks after the first step of a reset: in the
        gathered rows (a batch row each) and in the persistent table (a row per request slot). The
        cells past them hold what earlier steps appended (neither side clears a row when it adds a
        request), and in the timed rounds vLLM's side runs more steps between resets than each of
        ferry's two objects (its step is in two variants, ferry's in one each): those cells differ
        and are read by nobody. tools/vllm-prep-oracle compares whole tables over equal histories."""
        import torch

        bt, n = self.runner.block_tables, self.b
        gathered = torch.zeros(bt.input_block_tables[0][:n].shape, dtype=torch.bool)
        table = torch.zeros(bt.block_tables[0].gpu.shape, dtype=torch.bool)
        for row, (i, slot) in enumerate(zip(self.data.order, self.data.slots)):
            blocks = len(self.data.initial_blocks(int(i)))
            gathered[row, :blocks] = True
            table[int(slot), :blocks] = True
        return gathered.to(self.device), table.to(self.device)

    def check(self):
        """One step of each, the first after reset(): every output of ferry's equals vLLM's (the
        block tables where they hold the requests' blocks: live_cells). Where one differs, the
        message names every output that does (where, and each side's values) and whose gathered
        block tables hold the blocks the requests were added with."""
        import torch

        self.vllm_step()
        self.ferry_step()
        self.ferry_commit()
        self.ferry_replay()
        sync(self.device)
        self.prep_g.check_replayed()
        ib, bt, n = self.runner.input_buffers, self.runner.block_tables, self.b
        names = ("input_ids", "positions", "seq_lens", "query_start_loc", "slot_mappings", "input_block_tables[0]",
                 "block_tables[0]")
        gathered = {"vLLM": bt.input_block_tables[0][:n]}
        live = (None,) * 5 + self.live
        wrong = []
        for who, p in (("ferry", self.prep), ("ferry graph=True", self.prep_g)):
            pairs = [(ib.input_ids, p.input_ids), (ib.positions, p.positions), (ib.seq_lens, p.seq_lens),
                     (ib.query_start_loc, p.query_start_loc), (bt.slot_mappings, p.slot_mappings),
                     (bt.input_block_tables[0][:n], p.input_block_tables[0][:n]),
                     (bt.block_tables[0].gpu, p.block_tables[0])]
            gathered[who] = pairs[5][1]
            for name, (a, b), cells in zip(names, pairs, live):
                differ = a != b if cells is None else (a != b) & cells
                if differ.any():
                    at = differ.nonzero()[:4].tolist()
                    wrong.append(f"{name} of {who} differs in {int(differ.sum())} elements, the first at {at}: "
                                 f"vLLM {[a[tuple(x)].item() for x in at]}, ferry {[b[tuple(x)].item() for x in at]}")
        if wrong:
            added = [self.data.initial_blocks(int(i)) for i in self.data.order]
            rows = {who: t.cpu() for who, t in gathered.items()}
            holds = {who: all(t[i, : len(blk)].tolist() == blk for i, blk in enumerate(added))
                     for who, t in rows.items()}
            sys.exit(f"bench_vllm_prep: b={self.b} d={self.d}, the step after a reset: "
                     + "; ".join(wrong) + ". The gathered rows hold the blocks the requests were added with: "
                     + ", ".join(f"{who} {'yes' if ok else 'NO'}" for who, ok in holds.items()))

    def make_graphs(self):
        """A stand-in model graph per side: a few kernels reading its input buffers; graph=True's with
        its step kernel recorded first."""
        import torch

        T = self.data.tokens
        # the graphs read and write these at every replay: kept as long as the graphs (freed, their
        # memory would go to later tensors, which the replays would then overwrite)
        weight = torch.randn(150_000, 64, device="cuda")
        cache = torch.zeros(1 << 18, 64, device="cuda")
        self.model_tensors = weight, cache
        ib, bt, p = self.runner.input_buffers, self.runner.block_tables, self.prep_g
        for who, (ids, pos, slots, lens) in {
            "vllm": (ib.input_ids, ib.positions, bt.slot_mappings, ib.seq_lens),
            "ferry_g": (p.input_ids, p.positions, p.slot_mappings, p.seq_lens),
        }.items():
            def model(ids=ids, pos=pos, slots=slots, lens=lens):
                h = weight.index_select(0, ids[:T].long()) * (pos[:T, None].float() + 1)
                cache.index_copy_(0, slots[0, :T].clamp(min=0) % (cache.shape[0] - 1), h)
                return h.sum() + lens[: self.b].sum()

            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                if who == "ferry_g":
                    p.record()
                model()
            self.graph[who] = g

    def variants(self):
        vg = self.graph["vllm"]

        def vllm_graph():
            self.vllm_step()
            vg.replay()

        def ferry_graph():
            self.ferry_commit()
            self.ferry_replay()

        return {"prep": (self.vllm_step, self.ferry_step), "graph": (vllm_graph, ferry_graph)}


class _Step:
    """A Decode step in prep_trace.Step's form (what VllmRunner.prepare reads)."""

    def __init__(self, data, appends):
        self.removed, self.added = [], []
        self.idx_mapping, self.num_scheduled_tokens, self.num_draft_tokens = data.idx, data.q, data.drafts
        self.new_block_ids = appends
        self.num_reqs, self.num_tokens = data.b, data.tokens
        self.num_reqs_padded, self.num_tokens_padded = data.b, data.tokens
        self.num_computed = data.lengths[data.order].astype(np.int32)


def sync(device):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def burst(f, n, device="cuda"):
    sync(device)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f()
    t1 = time.perf_counter_ns()
    sync(device)
    return (t1 - t0) / n / 1000.0


LAUNCH = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaMemcpyAsync",
          "cudaMemsetAsync", "cudaGraphLaunch")
SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cuStreamSynchronize",
        "cuCtxSynchronize", "cuEventSynchronize")


def api_calls(f, steps):
    """The CUDA runtime and driver calls per step of f (torch.profiler: CUPTI's records), by name: a
    window of `steps` steps less an empty window (the synchronize that ends a window, and what the
    profiler calls itself when it stops, are not the steps')."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def window(fn, n):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
        counts = {}
        for e in prof.events():
            if e.name in LAUNCH or e.name in SYNC:
                counts[e.name] = counts.get(e.name, 0) + 1
        return counts

    for _ in range(3):
        f()
    base = window(lambda: None, 0)
    counts = window(f, steps)
    return {k: (v - base.get(k, 0)) / steps for k, v in counts.items() if v != base.get(k, 0)}


def device_us(f, steps):
    """Device time per step: `steps` steps enqueued behind a kernel that holds the stream, timed
    by events from the first to the last (back to back on the device)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000_000)  # about 0.5 s: longer than the host takes to enqueue the steps
    start.record()
    t0 = time.perf_counter()
    for _ in range(steps):
        f()
    enqueue = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    if enqueue > 0.4:
        return float("nan")  # the host may not have stayed ahead of the device
    return start.elapsed_time(end) * 1000.0 / steps


def cpu_smoke(carry: Path) -> int:
    import os

    os.environ["TRITON_INTERPRET"] = "1"
    vllm = vllm_prep.load_vllm(carry, cpu=True)
    rng = np.random.default_rng(1)
    for b in BATCHES[:2]:
        for d in DRAFTS:
            c = Case(vllm, rng, b, d, 16, device="cpu")
            v, f = burst(c.vllm_step, 2, "cpu"), burst(c.ferry_step, 2, "cpu")
            c.ferry_commit(), c.ferry_replay(), c.ferry_commit(), c.ferry_replay()
            c.check()
            # as in the timed rounds, each side's own number of steps before the next reset
            burst(c.vllm_step, 12, "cpu")
            c.fresh()
            print(f"  cpu smoke b={b} d={d}: checked three times; vLLM {v:.0f} us (interpreted), ferry {f:.1f} us per step")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--burst", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="5 rounds of 4-step bursts at b = 1, 8, 64: a smoke run")
    ap.add_argument("--carry", default=str(vllm_prep.CARRY))
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="no measurement: the cases at b = 1, 8 on the CPU (vLLM's kernels in Triton's interpreter, "
                         "ferry's host backend), each checked and run for a few steps; for a machine without a GPU")
    args = ap.parse_args()
    if args.cpu_smoke:
        return cpu_smoke(Path(args.carry))
    try:
        import torch

        import ferry_vllm
    except ImportError as e:
        print(f"bench_vllm_prep: skipped: {e} (tools/gpu-check's python phase installs ferry_vllm)")
        return SKIP
    if not (ferry_vllm.CUDA and torch.cuda.is_available()):
        print(f"bench_vllm_prep: skipped: no GPU here (ferry_vllm {ferry_vllm.__version__}, "
              f"torch.cuda.is_available() = {torch.cuda.is_available()})")
        return SKIP
    carry = Path(args.carry)
    if not (carry / vllm_prep.FILES[0]).is_file():
        print(f"bench_vllm_prep: skipped: vLLM's files are not in {carry} (tools/vllm-prep-oracle --fetch)")
        return SKIP
    if args.quick:
        args.rounds, args.burst = 5, 4
    batches = BATCHES[:3] if args.quick else BATCHES
    vllm_prep.check_citations(carry)
    vllm = vllm_prep.load_vllm(carry, cpu=False)
    vllm.buffer_utils.set_default_max_concurrency(32)  # vLLM's knob: its UVA rings outlast the steps in flight
    rng = np.random.default_rng(20261207)
    warmup = 3
    per_case_steps = max(4 * args.burst, 3 + 8 * 2, 24) + 2  # the most steps a side takes between two resets
    cases = []
    for b in batches:
        for d in DRAFTS:
            c = Case(vllm, rng, b, d, per_case_steps)
            cases.append(c)
            print(f"  case b={b} d={d}: checked (every output of ferry's equals vLLM's), graphs captured", flush=True)

    # the variants: (case, kind, side, twin)
    variants = []
    for c in cases:
        for kind, (v, f) in c.variants().items():
            for twin in (False, True):
                variants += [(c, kind, "vllm", twin, v), (c, kind, "ferry", twin, f)]
    times = {(id(c), kind, side, twin): [] for c, kind, side, twin, _ in variants}
    for r in range(-warmup, args.rounds):
        for c in cases:  # every side starts its steps over, checked against the other
            c.fresh()
        shift = (r + warmup) % len(variants)
        for c, kind, side, twin, f in variants[shift:] + variants[:shift]:
            us = burst(f, args.burst)
            if r >= 0:
                times[(id(c), kind, side, twin)].append(us)
    med = {k: statistics.median(v) for k, v in times.items()}

    # launches, syncs and device time per step, each side, outside the timed rounds
    rows = []
    for c in cases:
        for kind, (v, f) in c.variants().items():
            row = {"case": f"b={c.b} drafts={c.d}" + (" + graph" if kind == "graph" else ""), "batch": c.b,
                   "drafts": c.d, "graph": kind == "graph"}
            for side, fn in (("vllm", v), ("ferry", f)):
                m, t = med[(id(c), kind, side, False)], med[(id(c), kind, side, True)]
                row[f"{side}_us"] = round(m, 3)
                row[f"{side}_us_twin"] = round(t, 3)
                row[f"{side}_aa"] = round(t / m - 1, 4)
                c.fresh()
                calls = api_calls(fn, 8)
                row[f"{side}_launches_per_step"] = round(sum(n for k, n in calls.items() if k in LAUNCH), 2)
                row[f"{side}_syncs_per_step"] = round(sum(n for k, n in calls.items() if k in SYNC), 2)
                row[f"{side}_calls"] = ", ".join(f"{k} {n:.2f}" for k, n in sorted(calls.items()))
                if kind == "prep":
                    c.fresh()
                    # fewer steps than ferry's slots (max_concurrency 16): a 17th would wait for the
                    # held stream, and the figure would be nan (the host not ahead of the device)
                    row[f"{side}_device_us"] = round(device_us(fn, DEVICE_STEPS), 2)
            row["speedup"] = round(row["vllm_us"] / row["ferry_us"], 2)
            row["speedup_twin"] = round(row["vllm_us_twin"] / row["ferry_us_twin"], 2)
            rows.append(row)
            print(f"  {row['case']:24} vLLM {row['vllm_us']:8.2f} us (twin {row['vllm_us_twin']:8.2f})  "
                  f"ferry {row['ferry_us']:7.2f} us (twin {row['ferry_us_twin']:7.2f})  {row['speedup']:6.1f}x  "
                  f"launches {row['vllm_launches_per_step']:.1f} / {row['ferry_launches_per_step']:.1f}  "
                  f"device {row.get('vllm_device_us', '-')} / {row.get('ferry_device_us', '-')} us", flush=True)

    def target(name, value, op, goal, twin, **extra):
        met = value <= goal if op == "<=" else value >= goal
        noise = abs(twin - value)
        verdict = "met" if met else ("within noise" if abs(value - goal) <= noise else "missed")
        return {"name": name, "value": round(value, 3), "op": op, "target": goal, "noise": round(noise, 3),
                "met": met, "verdict": verdict, **extra}

    prep_rows = [r for r in rows if not r["graph"]]
    worst = min(prep_rows, key=lambda r: r["speedup"])
    worst_twin = min(r["speedup_twin"] for r in prep_rows)
    b256 = [r for r in prep_rows if r["batch"] == 256] or [max(prep_rows, key=lambda r: r["batch"])]
    slow = max(b256, key=lambda r: r["ferry_us"])
    graph_rows = [r for r in rows if r["graph"]]
    extra = max(r["ferry_launches_per_step"] - 1 for r in graph_rows)  # beside the replay's cudaGraphLaunch
    syncs = max(r["ferry_syncs_per_step"] for r in rows)
    targets = [
        target("host_speedup_min", worst["speedup"], ">=", 20, worst_twin, case=worst["case"]),
        target("python_us_per_step_b256", slow["ferry_us"], "<=", 10, slow["ferry_us_twin"], case=slow["case"]),
        target("extra_launches_per_step", extra, "<=", 0, extra,
               note="ferry's launches per step beside the model graph's replay, VllmStepPrep(graph=True) "
                    "(torch.profiler's CUPTI records)"),
        target("syncs_per_step", syncs, "<=", 0, syncs, note="of ferry's steps, every case"),
    ]
    print("targets:")
    for t in targets:
        print(f"  vllm_prep.{t['name']}: {t['value']} (wanted {t['op']} {t['target']}; A/A noise {t['noise']}): "
              f"{t['verdict']}")
    doc = {
        "benchmark": "vllm_prep",
        "machine": torch.cuda.get_device_name(),
        "date": datetime.date.today().isoformat(),
        "aa": True,
        "vllm": (carry / "VERSION").read_text().strip() if (carry / "VERSION").is_file() else "?",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "ferry_vllm": ferry_vllm.__version__,
        "method": f"host us per step, median of {args.rounds} rounds of {args.burst}-step bursts, every variant and "
                  "its A/A twin interleaved and rotated; launches and syncs per step from torch.profiler (CUPTI); "
                  f"device us per step: {DEVICE_STEPS} steps back to back behind a kernel holding the stream",
        "rows": rows,
        "targets": targets,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
