# ferry_vllm.VllmStepPrep (vLLM's model runner v2 step preparation in one call and one launch)
# against a NumPy reference of vLLM 0.26.0's prepare_inputs + prepare_attn (prep_trace.py) on random
# scheduler traces, on each device the build serves here; and bad input: a ferry: error that
# changes nothing (the next good step is still right). Each runs as prepare() (one launch a step)
# and as graph=True: the step recorded into a torch.cuda.graph with a stand-in model after it,
# committed each step and run by the graph's replay (on device="cpu", the stand-in replay
# replay_recorded(): the same commit protocol, without a GPU).
import dataclasses
import inspect

import numpy as np
import pytest
import torch

import ferry_vllm as fv
from prep_trace import Reference, Trace, ferry_outputs, prepare, submit

MODES = ["prepare", "graph"]


def digest_of(ins, weights):
    """The stand-in model's reads of a step's inputs (the buffers whole), in NumPy."""
    return [int((ins["input_ids"].astype(np.int64) * weights).sum()), int((ins["positions"] * 3 + 1).sum()),
            int(ins["slot_mappings"].sum()),
            int(ins["seq_lens"].astype(np.int64).sum() + ins["query_start_loc"].astype(np.int64).sum()),
            int(ins["input_block_tables[0]"].astype(np.int64).sum())]


class Rig:
    """A VllmStepPrep, its reference and a trace, over one device state. graph=True: on CUDA, a
    torch.cuda.graph of the recorded step and a stand-in model (a digest of the step's inputs
    into `out`), replayed after each commit; on the CPU, replay_recorded() after each commit."""

    def __init__(self, device, seed, *, max_num_reqs=64, max_num_tokens=256, block_sizes=(16,),
                 kernel_block_sizes=None, max_num_blocks=None, num_spec=0, graph=False, record=True,
                 max_concurrency=None, **trace):
        self.device = device
        self.rng = np.random.default_rng(seed)
        max_num_blocks = list(max_num_blocks or [64 * 16 // b for b in block_sizes])
        self.num_computed = torch.zeros(max_num_reqs, dtype=torch.int32, device=device)
        self.last_sampled = torch.zeros(max_num_reqs, 1, dtype=torch.int64, device=device)
        self.draft_tokens = torch.zeros(max_num_reqs, num_spec, dtype=torch.int64, device=device) if num_spec else None
        sizes = dict(max_num_reqs=max_num_reqs, max_num_tokens=max_num_tokens, block_sizes=list(block_sizes),
                     max_num_blocks=max_num_blocks)
        self.sizes = dict(sizes, kernel_block_sizes=kernel_block_sizes)
        self.prep = self.object_over_state(graph, max_concurrency=max_concurrency, **self.sizes)
        self.ref = Reference(**sizes, kernel_block_sizes=kernel_block_sizes)
        self.trace = Trace(self.rng, **sizes, num_spec=num_spec, **trace)
        # the device state on the host, written to the device before each step
        self.nc = np.zeros(max_num_reqs, np.int32)
        self.last = np.zeros(max_num_reqs, np.int64)
        self.drafts = np.zeros((max_num_reqs, num_spec), np.int64) if num_spec else None
        self.g = self.capture() if graph and device == "cuda" and record else None

    def object_over_state(self, graph, **sizes):
        """A VllmStepPrep over this rig's device state (its own next_prefill_tokens)."""
        return fv.VllmStepPrep(**sizes, num_computed_tokens=self.num_computed, last_sampled_tokens=self.last_sampled,
                               draft_tokens=self.draft_tokens, graph=graph,
                               next_prefill_tokens=torch.zeros(sizes["max_num_reqs"], dtype=torch.int32,
                                                               device=self.device))

    def model(self):
        """The stand-in model: a few kernels reading the step's outputs whole into `out`."""
        p = self.prep
        self.out[0] = (p.input_ids.long() * self.weights_dev).sum()
        self.out[1] = (p.positions * 3 + 1).sum()
        self.out[2] = p.slot_mappings.sum()
        self.out[3] = p.seq_lens.long().sum() + p.query_start_loc.long().sum()
        self.out[4] = p.input_block_tables[0].long().sum()

    def capture(self):
        """The engine's graph: the recorded step, then the model (warmed up first, as torch asks)."""
        self.out = torch.zeros(5, dtype=torch.int64, device="cuda")
        self.weights = np.arange(1, self.prep.max_num_tokens + 1, dtype=np.int64)
        self.weights_dev = torch.from_numpy(self.weights).cuda()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.model()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self.prep.record()
            self.model()
        return g

    def replay(self):
        """graph=True: the replay that runs the committed step (and the model)."""
        if self.g is not None:
            self.g.replay()
        elif self.prep.graph:
            self.prep.replay_recorded()

    def upload(self):
        self.num_computed.copy_(torch.from_numpy(self.nc))
        self.last_sampled.copy_(torch.from_numpy(self.last).view(-1, 1))
        if self.drafts is not None:
            self.draft_tokens.copy_(torch.from_numpy(self.drafts))

    def next(self):
        s = self.trace.next()
        self.trace.joined(s, self.nc, self.drafts)
        self.upload()
        return s

    def run(self, s):
        """The step through ferry (graph=True: committed, then replayed) and the reference, then
        the sampler."""
        prepare(self.prep, s)
        self.replay()
        self.after(s)

    def run_checked(self, n, where=""):
        """n steps run and checked; the last one."""
        for k in range(n):
            s = self.next()
            self.run(s)
            self.check(s, f"{where}step {k}: ")
        return s

    def after(self, s):
        """Once ferry's step ran: the reference's step, then the sampler."""
        self.ref.step(s, self.nc, self.last, self.drafts)
        self.trace.sample(s, self.nc, self.last, self.drafts)

    def compare(self, prep, s, where=""):
        """Every buffer of `prep` equals the reference's after step s, whole; returns the reference's outputs."""
        if self.device == "cuda":
            torch.cuda.synchronize()
        got, want = ferry_outputs(prep), self.ref.outputs()
        for k, w in want.items():
            if not np.array_equal(got[k], w):
                bad = np.argwhere(got[k] != w)[:5].tolist()
                pytest.fail(f"{where}{k} differs at {bad}: ferry {got[k][tuple(np.array(bad).T)]}, "
                            f"reference {w[tuple(np.array(bad).T)]} (step: n={s.num_reqs}, tokens={s.num_tokens})")
        return want

    def check(self, s, where=""):
        want = self.compare(self.prep, s, where)
        if self.g is not None:
            assert self.out.tolist() == digest_of(want, self.weights), \
                f"{where}the model's replay read other inputs than the step's"
        if self.prep.graph:
            assert self.prep.replayed == self.prep.steps
            self.prep.check_replayed()
        assert (self.prep.num_reqs, self.prep.num_tokens) == (s.num_reqs, s.num_tokens)
        assert self.prep.num_reqs_padded == s.num_reqs_padded and self.prep.num_tokens_padded == s.num_tokens_padded


CONFIGS = {
    "1 group, block 16, no drafts": dict(),
    "1 group, block 32, 3 drafts": dict(block_sizes=(32,), num_spec=3),
    "2 groups (16, 32), 4 drafts": dict(block_sizes=(16, 32), num_spec=4),
    "2 groups, kernel blocks of 16 in blocks of 32": dict(block_sizes=(32, 16), kernel_block_sizes=[16, 16], num_spec=1),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_random_trace_matches_reference(device, config, mode):
    """Requests join (prefix-cached or not), prefill in chunks, decode with drafts and leave; every
    buffer equals the reference's after every step, whole (what vLLM leaves, ferry leaves)."""
    rig = Rig(device, 1 + list(CONFIGS).index(config), graph=mode == "graph", **CONFIGS[config])
    kinds = set()
    for k in range(300):
        s = rig.next()
        rig.run(s)
        rig.check(s, f"step {k}: ")
        kinds.update("prefill" if rig.prep.is_prefilling(int(r)) else "decode" for r in s.idx_mapping)
        kinds.update(["joined"] * bool(s.added) + ["left"] * bool(s.removed))
        kinds.update(["drafts"] * (s.num_draft_tokens is not None) + ["padded"] * (s.num_reqs_padded > s.num_reqs))
    want = {"prefill", "decode", "joined", "left", "padded"} | ({"drafts"} if rig.drafts is not None else set())
    assert want <= kinds, f"the trace never had {want - kinds}"
    assert rig.prep.steps == 300


# new_block_ids in other forms than the trace's list of (slot, (list of ids, ...)) tuples
BLOCK_ID_FORMS = {
    "lists": lambda nb: [[slot, [list(ids) for ids in groups]] for slot, groups in nb],
    "NumPy values": lambda nb: [(np.int64(slot), tuple(np.array(ids, np.int32) for ids in groups)) for slot, groups in nb],
    "tuples and ranges": lambda nb: tuple(
        (slot, tuple(range(ids[0], ids[0] + 1) if len(ids) == 1 else tuple(ids) for ids in groups)) for slot, groups in nb),
}


@pytest.mark.parametrize("form", list(BLOCK_ID_FORMS))
def test_block_ids_in_other_forms(form):
    """new_block_ids as lists, NumPy values, or tuples and ranges: the same steps as the trace's."""
    rig = Rig("cpu", 31, block_sizes=(16, 32), num_spec=2)
    for k in range(60):
        s = rig.next()
        prepare(rig.prep, dataclasses.replace(s, new_block_ids=BLOCK_ID_FORMS[form](s.new_block_ids)))
        rig.after(s)
        rig.check(s, f"step {k}: ")


def test_large_batches_grow_the_slots(device):
    """Steps of 1 request, then of hundreds with prefill chunks, then of 1 again: the slots grow
    to the largest step (growth::pow2) and every step is right."""
    rig = Rig(device, 11, max_num_reqs=512, max_num_tokens=2048, num_spec=2, join=(0, 2))
    for k in range(40):
        s = rig.next()
        rig.run(s)
        rig.check(s, f"small step {k}: ")
    rig.trace.join = (40, 120)
    for k in range(40):
        s = rig.next()
        rig.run(s)
        rig.check(s, f"large step {k}: ")
    assert len(rig.trace.reqs) > 200
    rig.trace.max_batch = 1
    for k in range(20):
        s = rig.next()
        rig.run(s)
        rig.check(s, f"small step again {k}: ")


def test_inputs_are_vllms_views(device):
    rig = Rig(device, 5, num_spec=2)
    for _ in range(5):
        s = rig.next()
        rig.run(s)
    x = rig.prep.inputs()
    n, t, rp, tp, lg = s.num_reqs, s.num_tokens, s.num_reqs_padded, s.num_tokens_padded, rig.prep.num_logits
    assert x.input_ids.shape == (tp,) and x.positions.shape == (tp,) and x.seq_lens.shape == (rp,)
    assert x.query_start_loc.shape == (rp + 1,) and x.idx_mapping.shape == (n,) and x.cu_num_logits.shape == (n + 1,)
    assert x.logits_indices.shape == (lg,) and x.expanded_idx_mapping.shape == (lg,) and x.slot_mappings.shape == (1, tp)
    assert x.block_tables[0].shape == (rp, rig.prep.block_tables[0].shape[1])
    assert x.input_ids.data_ptr() == rig.prep.input_ids.data_ptr()  # fixed addresses
    d = 0 if s.num_draft_tokens is None else int(s.num_draft_tokens.sum())
    assert lg == n + d and int(x.query_start_loc[rp]) == t


# ---- bad input: a ferry: error, nothing changed --------------------------------------------------


def bad_cases(rig, s):
    """(name, call, exception): each a bad version of the step s (or of a call beside it)."""
    p, n = rig.prep, s.num_reqs
    idx, q = s.idx_mapping, s.num_scheduled_tokens
    d = np.zeros(n, np.int32) if s.num_draft_tokens is None else s.num_draft_tokens
    R, T = p.max_num_reqs, p.max_num_tokens
    free = next(x for x in range(R) if x not in rig.trace.reqs)  # a slot no request holds
    call = p.commit if p.graph else p.prepare

    def step(**kw):
        args = dict(idx_mapping=idx, num_scheduled_tokens=q, num_draft_tokens=s.num_draft_tokens,
                    new_block_ids=s.new_block_ids, num_reqs_padded=s.num_reqs_padded,
                    num_tokens_padded=s.num_tokens_padded)
        args.update(kw)
        return lambda: call(args.pop("idx_mapping"), args.pop("num_scheduled_tokens"), args.pop("num_draft_tokens"),
                            **args)

    past = idx.copy()
    past[-1] = R
    twice = np.concatenate([idx, idx[:1]])
    cols = p.block_tables[0].shape[1]
    full = [(int(idx[0]), tuple([list(range(1, cols + 2))] * p.num_kv_cache_groups))]
    more_drafts = d.copy()
    more_drafts[0] = (0 if rig.drafts is None else rig.drafts.shape[1]) + 1
    return [
        ("a request index past the state", step(idx_mapping=past), IndexError),
        ("a negative request index", step(idx_mapping=-1 - idx), IndexError),
        ("a request not added", step(idx_mapping=np.array([free], np.int32), num_scheduled_tokens=q[:1],
                                      num_draft_tokens=None, num_reqs_padded=None, num_tokens_padded=None),
         ValueError),
        ("a request twice", step(idx_mapping=twice, num_scheduled_tokens=np.concatenate([q, q[:1]]),
                                 num_draft_tokens=np.concatenate([d, d[:1]]), num_reqs_padded=None,
                                 num_tokens_padded=None), ValueError),
        ("a draft count past the maximum", step(num_draft_tokens=more_drafts), ValueError),
        ("negative drafts", step(num_draft_tokens=-1 - d), ValueError),
        ("fewer token counts than rows", step(num_scheduled_tokens=q[:-1]), ValueError),
        ("draft counts of another length", step(num_draft_tokens=np.zeros(n + 1, np.int32)), ValueError),
        ("no tokens for a row", step(num_scheduled_tokens=np.where(np.arange(n) == 0, 0, q).astype(np.int32)),
         ValueError),
        ("more tokens than max_num_tokens", step(num_scheduled_tokens=np.full(n, T, np.int32), num_draft_tokens=None,
                                                 num_tokens_padded=None), ValueError),
        ("a batch larger than the captured size (num_reqs_padded)", step(num_reqs_padded=n - 1), ValueError),
        ("a batch larger than max_num_reqs (graph=True: the capacity)",
         step(idx_mapping=np.arange(R + 1, dtype=np.int32), num_scheduled_tokens=np.ones(R + 1, np.int32),
              num_draft_tokens=None, num_reqs_padded=None, num_tokens_padded=None), ValueError),
        ("num_reqs_padded past max_num_reqs", step(num_reqs_padded=R + 1), ValueError),
        ("num_tokens_padded below the step's tokens", step(num_tokens_padded=s.num_tokens - 1), ValueError),
        ("num_tokens_padded past max_num_tokens", step(num_tokens_padded=T + 1), ValueError),
        ("a block table full", step(new_block_ids=full), RuntimeError),
        ("block ids of too few groups", step(new_block_ids=[(int(idx[0]), ())]), ValueError),
        ("block appends for a request past the state", step(new_block_ids=[(R, ([1],) * p.num_kv_cache_groups)]),
         IndexError),
        # after the step's own appends (written into the slot before the bad entry is met)
        ("a negative block id", step(new_block_ids=[*s.new_block_ids, (int(idx[0]), ([-1], [1]))]), ValueError),
        ("a block id past int32 once expanded to kernel blocks",
         step(new_block_ids=[*s.new_block_ids, (int(idx[0]), ([1], [2**30]))]), ValueError),
        ("an append that is not (req_index, block ids)", step(new_block_ids=[*s.new_block_ids, int(idx[0])]),
         TypeError),
        ("a token count that does not convert", step(num_scheduled_tokens=q.astype(np.float64) + 0.5), ValueError),
        ("idx_mapping of strings", step(idx_mapping=["a"] * n), TypeError),
        ("idx_mapping on the wrong device", step(idx_mapping=torch.zeros(n, dtype=torch.int32, device="meta")),
         ValueError),
        # the call's own signature: (idx_mapping, num_scheduled_tokens, num_draft_tokens=None, *, ...)
        ("a keyword the call does not take", step(num_reqs=n), TypeError),
        ("new_block_ids given positionally", lambda: call(idx, q, s.num_draft_tokens, s.new_block_ids), TypeError),
        ("idx_mapping given twice", lambda: call(idx, q, idx_mapping=idx), TypeError),
        ("no num_scheduled_tokens", lambda: call(idx, num_draft_tokens=s.num_draft_tokens), TypeError),
        ("add_request past the state", lambda: p.add_request(R, [1, 2], ([1],) * p.num_kv_cache_groups), IndexError),
        ("add_request of an active request", lambda: p.add_request(int(idx[0]), [1], ([1],) * p.num_kv_cache_groups),
         ValueError),
        ("add_request with a full block table", lambda: p.add_request(free, [1], ([0] * (cols + 1),) * p.num_kv_cache_groups),
         RuntimeError),
        ("add_request computing past its tokens", lambda: p.add_request(free, [1, 2], ([1],) * p.num_kv_cache_groups, 3),
         ValueError),
        ("remove_request of a request not added", lambda: p.remove_request(free), ValueError),
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_spec", [0, 2])
def test_bad_input_changes_nothing(device, num_spec, mode):
    """Each bad call raises a ferry: error and changes nothing: the good step after it (the one
    the bad call was a bad version of) gives exactly the reference's buffers. graph=True: a bad
    commit() commits nothing, so the replay after the good commit runs the good step."""
    # group 1: 2 kernel blocks of 16 per block of 32 (each block id b written as 2b, 2b + 1)
    rig = Rig(device, 21 + num_spec, num_spec=num_spec, block_sizes=(16, 32), kernel_block_sizes=[16, 16],
              join=(0, 1), leave=0.1, graph=mode == "graph")
    for _ in range(30):
        s = rig.next()
        rig.run(s)
    names = []
    for k in range(len(bad_cases(rig, s))):
        s = rig.next()
        for slot in s.removed:
            rig.prep.remove_request(slot)
        for slot, tokens, ids, computed in s.added:
            rig.prep.add_request(slot, tokens, ids, computed)
        name, call, error = bad_cases(rig, s)[k]
        before = ferry_outputs(rig.prep)
        steps = rig.prep.steps
        with pytest.raises(error, match="^ferry: ") as e:
            call()
        names.append((name, str(e.value)))
        if device == "cuda":
            torch.cuda.synchronize()
        after = ferry_outputs(rig.prep)
        assert rig.prep.steps == steps, name
        for key in before:
            assert np.array_equal(before[key], after[key]), f"{name}: {key} changed"
        # the good step, as the reference has it (removals and additions already made above)
        submit(rig.prep, s)
        rig.replay()
        rig.after(s)
        rig.check(s, f"after {name}: ")
    assert len(names) == 33


def test_prepare_and_commit_signatures():
    """prepare() and commit() take the scheduler's arrays by position or by name, the rest by name
    only; every optional argument is None by default. On an object made without __init__ they
    raise, as every member of it does."""
    P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
    for f in (fv.VllmStepPrep.prepare, fv.VllmStepPrep.commit):
        params = list(inspect.signature(f).parameters.values())[1:]
        assert [(x.name, x.kind, x.default) for x in params] == [
            ("idx_mapping", P, inspect.Parameter.empty), ("num_scheduled_tokens", P, inspect.Parameter.empty),
            ("num_draft_tokens", P, None), ("new_block_ids", K, None), ("num_reqs_padded", K, None),
            ("num_tokens_padded", K, None)]
    bare = fv.VllmStepPrep.__new__(fv.VllmStepPrep)  # no C++ object: an error, as any member's
    for f in (bare.prepare, bare.commit):
        with pytest.raises(RuntimeError, match="non-held"):
            f(np.zeros(1, np.int32), np.ones(1, np.int32))


def test_bad_state_tensors(device):
    """The device state and the sizes are checked when the object is made."""
    R = 8
    ok = dict(max_num_reqs=R, max_num_tokens=32, block_sizes=[16], max_num_blocks=[4],
              num_computed_tokens=torch.zeros(R, dtype=torch.int32, device=device),
              last_sampled_tokens=torch.zeros(R, 1, dtype=torch.int64, device=device))
    fv.VllmStepPrep(**ok)
    bad = [
        ("num_computed_tokens", torch.zeros(R, dtype=torch.int64, device=device), "must be Int"),
        ("last_sampled_tokens", torch.zeros(R, 2, dtype=torch.int64, device=device), "max_num_reqs, 1"),
        ("last_sampled_tokens", torch.zeros(R - 1, dtype=torch.int64, device=device), "at least"),
        ("draft_tokens", torch.zeros(4, R, dtype=torch.int64, device=device).t(), "contiguous"),
        ("draft_tokens", torch.zeros(R, 3, dtype=torch.int32, device=device), "must be Long"),
        ("last_sampled_tokens", torch.zeros(R, 1, dtype=torch.int64, device="meta"), "is on meta"),
        ("input_ids", torch.zeros(64, dtype=torch.int32, device=device)[::2], "contiguous"),
        ("block_sizes", [16, 16, 16, 16, 16], "1 to 4"),
        ("kernel_block_sizes", [12], "multiple"),
        ("max_num_blocks", [0], "at least 1"),
    ]
    for key, value, match in bad:
        with pytest.raises((ValueError, TypeError), match=f"^ferry: .*{match}"):
            fv.VllmStepPrep(**{**ok, key: value})
    with pytest.raises(TypeError, match="^ferry: "):
        fv.VllmStepPrep(**{**ok, "num_computed_tokens": np.zeros(R, np.int32)})


# ---- CUDA: the step beside a graph's replay, and capture -------------------------------------------

cuda_only = pytest.mark.skipif(not torch.cuda.is_available() or not fv.CUDA,
                               reason="no CUDA device here, or a host-only build: the CUDA half runs on a GPU")


@cuda_only
def test_graph_replays_read_each_step():
    """1,000 steps, each followed by the replay of a graph captured once over the object's
    buffers (fixed addresses), with the batch size changing and the slots growing mid-run: each
    replay computes from that step's inputs."""
    rig = Rig("cuda", 31, max_num_reqs=256, max_num_tokens=1024, block_sizes=(16, 32), num_spec=3, join=(0, 2))
    p = rig.prep
    out = torch.zeros(5, dtype=torch.int64, device="cuda")

    def model():  # a few kernels over whole buffers: a digest of the step's inputs
        out[0] = (p.input_ids.long() * torch.arange(1, p.max_num_tokens + 1, device="cuda")).sum()
        out[1] = (p.positions * 3 + 1).sum()
        out[2] = p.slot_mappings.sum()
        out[3] = p.seq_lens.long().sum() + p.query_start_loc.long().sum()
        out[4] = p.input_block_tables[1].long().sum()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        model()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model()
    weights = np.arange(1, p.max_num_tokens + 1, dtype=np.int64)
    for k in range(1000):
        if k == 500:
            rig.trace.join = (20, 60)  # the batch grows: the slots grow with it
        s = rig.next()
        rig.run(s)
        g.replay()
        want = rig.ref.outputs()
        digest = [int((want["input_ids"].astype(np.int64) * weights).sum()), int((want["positions"] * 3 + 1).sum()),
                  int(want["slot_mappings"].sum()),
                  int(want["seq_lens"].astype(np.int64).sum() + want["query_start_loc"].astype(np.int64).sum()),
                  int(want["input_block_tables[1]"].astype(np.int64).sum())]
        assert out.tolist() == digest, f"step {k}: the replay read other inputs than the step's"
    assert len(rig.trace.reqs) > 100


@cuda_only
def test_prepare_while_capturing_raises_and_changes_nothing():
    """prepare() on a capturing stream raises (a captured launch would replay a slot the ring has
    moved past): nothing captured, nothing changed, the next step right."""
    rig = Rig("cuda", 41, num_spec=2)
    for _ in range(10):
        s = rig.next()
        rig.run(s)
    s = rig.next()
    for slot in s.removed:
        rig.prep.remove_request(slot)
    for slot, tokens, ids, computed in s.added:
        rig.prep.add_request(slot, tokens, ids, computed)
    torch.cuda.synchronize()
    before = ferry_outputs(rig.prep)
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="^ferry: .*captur"):
        with torch.cuda.graph(g):
            rig.prep.prepare(s.idx_mapping, s.num_scheduled_tokens, s.num_draft_tokens, new_block_ids=s.new_block_ids,
                             num_reqs_padded=s.num_reqs_padded, num_tokens_padded=s.num_tokens_padded)
    torch.cuda.synchronize()
    after = ferry_outputs(rig.prep)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    rig.prep.prepare(s.idx_mapping, s.num_scheduled_tokens, s.num_draft_tokens, new_block_ids=s.new_block_ids,
                     num_reqs_padded=s.num_reqs_padded, num_tokens_padded=s.num_tokens_padded)
    rig.ref.step(s, rig.nc, rig.last, rig.drafts)
    rig.check(s, "after the capture: ")


def test_an_eager_and_a_graph_object_over_one_state(device):
    """Two objects over one device state, 16 slots each, as an engine with both paths has them
    (and bench.vllm_prep): every step prepared by the eager one (its launch) and committed to the
    graph=True one, whose graph (on the CPU, replay_recorded()) runs before anything synchronizes;
    each equals the reference after every step, requests leaving and others joining at the index
    just freed included."""
    rig = Rig(device, 71, num_spec=2, max_concurrency=16, join=(0, 3))
    sib = rig.object_over_state(True, max_concurrency=16, **rig.sizes)
    g = None
    if device == "cuda":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            sib.record()
    reused = 0
    for k in range(200):
        s = rig.next()
        reused += bool(set(s.removed) & {slot for slot, *_ in s.added})
        prepare(rig.prep, s)
        prepare(sib, s)
        if g is not None:
            g.replay()
        else:
            sib.replay_recorded()
        rig.after(s)
        rig.check(s, f"step {k}, the eager object: ")
        rig.compare(sib, s, f"step {k}, the graph=True object: ")
        sib.check_replayed()
    assert reused, "no step gave a request the index another left in it"


# ---- graph=True: the commit protocol (both devices), then CUDA's capture -----------------------------


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def same(a, b):
    return all(np.array_equal(a[k], b[k]) for k in a)


def test_graph_commit_writes_nothing_until_the_replay_runs_it(device):
    """graph=True: commit() checks and writes the step into its slot and nothing the model reads
    (no CUDA call: every buffer keeps the step before) until the replay after it runs the step;
    check_replayed() names the committed step no replay has run yet."""
    rig = Rig(device, 51, num_spec=2, block_sizes=(16, 32), graph=True)
    for k in range(60):
        s = rig.next()
        sync(device)
        before = ferry_outputs(rig.prep)
        prepare(rig.prep, s)
        assert (rig.prep.steps, rig.prep.replayed) == (k + 1, k)
        sync(device)
        assert same(before, ferry_outputs(rig.prep)), f"step {k}: the commit wrote what the replay writes"
        with pytest.raises(RuntimeError, match=f"^ferry: .*step {k} was committed but no replay has run it"):
            rig.prep.check_replayed()
        rig.replay()
        rig.after(s)
        rig.check(s, f"step {k}: ")  # replayed == steps, check_replayed() passes


def test_graph_replay_without_commit_is_reported(device):
    """A replay with no committed step does none of the step's work (the model reads the step
    before) and makes the next commit() and check_replayed() raise a ferry: RuntimeError that
    commits nothing; the pairing stays broken (a new object and graph are needed)."""
    rig = Rig(device, 52, num_spec=1, graph=True)
    rig.run_checked(10)
    before = ferry_outputs(rig.prep)
    digest = rig.out.tolist() if rig.g is not None else None
    rig.replay()  # no commit before it
    sync(device)
    assert same(before, ferry_outputs(rig.prep)), "a replay without a commit did step work"
    if rig.g is not None:
        assert rig.out.tolist() == digest  # the model read the step before
    assert (rig.prep.steps, rig.prep.replayed) == (10, 10)
    s = rig.next()
    for call in (lambda: prepare(rig.prep, s), rig.prep.check_replayed, lambda: submit(rig.prep, s)):
        with pytest.raises(RuntimeError, match="^ferry: .*a replay without a commit.*the replay that was to run "
                                               "step 10 found it not committed"):
            call()
    sync(device)
    assert rig.prep.steps == 10 and same(before, ferry_outputs(rig.prep))


def test_graph_commit_without_replay_is_reported(device):
    """A commit no replay ran is named by check_replayed() once the replays' stream is
    synchronized; the late replay then runs it, and the steps go on right."""
    rig = Rig(device, 53, num_spec=2, graph=True)
    rig.run_checked(10)
    s = rig.next()
    prepare(rig.prep, s)
    sync(device)
    with pytest.raises(RuntimeError, match="^ferry: .*step 10 was committed but no replay has run it .*a commit "
                                           "without a replay"):
        rig.prep.check_replayed()
    assert (rig.prep.steps, rig.prep.replayed) == (11, 10)
    rig.replay()  # the replay that was missing
    rig.after(s)
    rig.check(s, "the late replay: ")
    rig.run_checked(10, "after it, ")


def test_graph_mode_calls_of_the_other_mode_raise():
    """device="cpu" has no capture (record() raises, replay_recorded() stands in); prepare() is
    not a graph=True object's, commit() and the replay checks are only theirs. Nothing changes."""
    graph, plain = Rig("cpu", 54, graph=True), Rig("cpu", 54)
    with pytest.raises(RuntimeError, match="^ferry: VllmStepPrep.record: device='cpu' has no CUDA graph"):
        graph.prep.record()
    s = graph.next()
    plain.next()
    for slot, tokens, ids, computed in s.added:
        graph.prep.add_request(slot, tokens, ids, computed)
        plain.prep.add_request(slot, tokens, ids, computed)
    with pytest.raises(RuntimeError, match="^ferry: VllmStepPrep.prepare: a graph=True object's steps run in the"):
        graph.prep.prepare(s.idx_mapping, s.num_scheduled_tokens)
    for call in (lambda: plain.prep.commit(s.idx_mapping, s.num_scheduled_tokens), plain.prep.record,
                 plain.prep.replay_recorded, plain.prep.check_replayed, lambda: plain.prep.replayed):
        with pytest.raises(RuntimeError, match="^ferry: VllmStepPrep.* made without graph=True"):
            call()
    with pytest.raises(TypeError, match="^ferry: VllmStepPrep: graph must be True or False"):
        Rig("cpu", 54, graph=1)
    assert graph.prep.steps == plain.prep.steps == 0
    submit(graph.prep, s)
    graph.replay()
    graph.ref.step(s, graph.nc, graph.last, graph.drafts)
    graph.check(s)


@cuda_only
def test_graph_1000_replays_with_changing_sizes():
    """1,000 steps in a torch.cuda.graph of the recorded step and a stand-in model: each step
    committed (no CUDA call), then one replay; the batch grows to hundreds of requests and shrinks
    to a few; after every replay every buffer equals the reference's and the model read that
    step's inputs."""
    rig = Rig("cuda", 61, max_num_reqs=256, max_num_tokens=1024, block_sizes=(16, 32), num_spec=3, join=(0, 2),
              graph=True)
    sizes = set()
    for k in range(1000):
        if k == 300:
            rig.trace.join = (20, 60)
        if k == 700:
            rig.trace.max_batch = 3
        s = rig.next()
        rig.run(s)
        rig.check(s, f"step {k}: ")
        sizes.add(s.num_reqs)
    assert rig.prep.steps == rig.prep.replayed == 1000
    assert max(sizes) > 100 and min(sizes) <= 3 and len(sizes) > 30, sorted(sizes)


@cuda_only
def test_graph_commit_before_record_and_record_outside_a_capture_raise():
    """commit() before record() and record() outside a capture raise a ferry: RuntimeError and
    change nothing; recorded in a capture after that, the steps run right."""
    rig = Rig("cuda", 62, num_spec=1, graph=True, record=False)
    s = rig.next()
    for slot, tokens, ids, computed in s.added:
        rig.prep.add_request(slot, tokens, ids, computed)
    before = ferry_outputs(rig.prep)
    with pytest.raises(RuntimeError, match="^ferry: VllmStepPrep.commit: no step recorded yet"):
        submit(rig.prep, s)
    with pytest.raises(RuntimeError, match="^ferry: step_batch::record: the stream is not capturing"):
        rig.prep.record()
    with pytest.raises(RuntimeError, match="^ferry: VllmStepPrep.replay_recorded: the stand-in replay is"):
        rig.prep.replay_recorded()
    torch.cuda.synchronize()
    assert rig.prep.steps == 0 and same(before, ferry_outputs(rig.prep))
    rig.g = rig.capture()
    submit(rig.prep, s)
    rig.replay()
    rig.after(s)
    rig.check(s, "after recording: ")
    rig.run_checked(20)
