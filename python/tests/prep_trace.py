"""Random scheduler traces of vLLM's model runner v2 and a NumPy reference of its step preparation,
for ferry_vllm.VllmStepPrep's tests, the oracle (tools/vllm-prep-oracle) and the benchmark
(benchmarks/python/bench_vllm_prep.py).

Trace: requests join (a prompt, a prefix already computed), prefill in chunks, decode with 0 to
`num_spec` draft tokens and leave; request slots are taken and freed as vLLM's RequestState takes
them (free_indices.pop() / append), so vLLM's own state gives every request the slot the trace
names. Each step is the scheduler's data (`Step`) and, after it, what the device's sampler does
(`Trace.sample`): the accepted drafts, the next sampled token and drafts, num_computed advanced by
the tokens kept (vLLM's post_update).

Reference (`Reference`): vLLM 0.26.0's prepare_inputs + prepare_attn in NumPy, element by element
as its Triton kernels write them (vllm/v1/worker/gpu/input_batch.py and block_table.py), over
buffers that keep what a step does not write, as vLLM's do.
"""

from __future__ import annotations

import dataclasses

import numpy as np

PAD_SLOT_ID = -1
# The buffers VllmStepPrep writes (besides each group's block tables), as the reference names them.
OUTPUTS = ("input_ids", "positions", "seq_lens", "query_start_loc", "idx_mapping", "cu_num_logits", "logits_indices",
           "expanded_idx_mapping", "expanded_local_pos", "slot_mappings", "next_prefill_tokens")


@dataclasses.dataclass
class Step:
    """One step of scheduler data, in the forms vLLM's model runner has them."""

    removed: list[int]  # request slots that finished (vLLM: finish_requests)
    added: list[tuple[int, np.ndarray, tuple[list[int], ...], int]]  # (slot, prefill tokens, block ids, computed)
    idx_mapping: np.ndarray  # int32 [n]: each row's request slot, in vLLM's order (decodes first)
    num_scheduled_tokens: np.ndarray  # int32 [n]
    num_draft_tokens: np.ndarray | None  # int32 [n], None when no row has drafts (vLLM: no spec tokens)
    new_block_ids: list[tuple[int, tuple[list[int], ...]]]  # (slot, ids per group): appends
    num_reqs_padded: int
    num_tokens_padded: int
    num_computed: np.ndarray  # int32 [n]: each row's computed tokens before the step (the scheduler's)

    @property
    def num_reqs(self) -> int:
        return len(self.idx_mapping)

    @property
    def num_tokens(self) -> int:
        return int(self.num_scheduled_tokens.sum())


@dataclasses.dataclass
class Request:
    prefill: np.ndarray  # int32 prefill tokens
    computed: int  # tokens computed, as the device has it (the host learns it after each step)
    prefill_done: int  # prefill tokens computed (the host's count)
    blocks: list[int]  # KV-cache blocks per group
    decoding: bool = False
    life: int = 0  # decode steps before it leaves


class Trace:
    """A random scheduler: `next()` gives a step's data, `sample(step)` the device state after it
    (applied to the arrays given: num_computed, last_sampled, draft_tokens, each NumPy)."""

    def __init__(self, rng, *, max_num_reqs, max_num_tokens, block_sizes, max_num_blocks, num_spec=0,
                 max_batch=None, max_prompt=None, join=(0, 4), leave=0.02, pad=True):
        self.rng = rng
        self.max_num_reqs, self.max_num_tokens = max_num_reqs, max_num_tokens
        self.block_sizes, self.max_num_blocks = list(block_sizes), list(max_num_blocks)
        self.num_spec = num_spec
        self.max_batch = max_batch or max_num_reqs
        # the longest a request may get: every group's table holds it
        self.max_len = min(m * b for m, b in zip(self.max_num_blocks, self.block_sizes))
        self.max_prompt = min(max_prompt or self.max_len // 2, self.max_len // 2)
        self.join, self.leave, self.pad = join, leave, pad
        self.free = list(range(max_num_reqs))  # vLLM's RequestState.free_indices
        self.reqs: dict[int, Request] = {}
        self.next_block = [1] * len(self.block_sizes)
        self.steps = 0

    def _blocks_for(self, r: Request, tokens: int) -> tuple[list[int], ...]:
        """Block ids per group that make r's table cover `tokens` positions."""
        out = []
        for g, bs in enumerate(self.block_sizes):
            need = -(-tokens // bs) - r.blocks[g]
            ids = []
            for _ in range(max(need, 0)):
                ids.append(self.next_block[g])
                self.next_block[g] = self.next_block[g] % 1_000_000 + 1 + int(self.rng.integers(0, 3))
            r.blocks[g] += len(ids)
            out.append(ids)
        return tuple(out)

    def next(self) -> Step:
        rng = self.rng
        self.steps += 1
        removed = []
        for slot, r in list(self.reqs.items()):
            gone = r.decoding and (r.life <= 0 or rng.random() < self.leave)
            if gone or (r.decoding and r.computed + 2 * (1 + self.num_spec) >= self.max_len):
                removed.append(slot)
                del self.reqs[slot]
                self.free.append(slot)
        added = []
        joins = int(rng.integers(self.join[0], self.join[1] + 1)) if self.free else 0
        if not self.reqs:
            joins = max(joins, 1)
        for _ in range(min(joins, len(self.free))):
            slot = self.free.pop()
            length = int(rng.integers(1, self.max_prompt + 1))
            tokens = rng.integers(0, 150_000, length).astype(np.int32)
            bs0 = self.block_sizes[0]
            cached = int(rng.integers(0, length // bs0 + 1)) * bs0 if rng.random() < 0.3 else 0
            cached = min(cached, length - 1)
            r = Request(tokens, cached, cached, [0] * len(self.block_sizes), life=int(rng.integers(1, 400)))
            self.reqs[slot] = r
            added.append([slot, tokens, self._blocks_for(r, cached), cached])
        # schedule: every running request while the batch and the token budget allow
        rows = []
        budget = self.max_num_tokens
        order = list(self.reqs)
        rng.shuffle(order)
        for slot in order:
            if len(rows) == self.max_batch or budget == 0:
                break
            r = self.reqs[slot]
            left = len(r.prefill) - r.prefill_done
            if left > 0:
                q = min(left, budget, int(rng.integers(1, 2 * self.max_num_tokens // max(len(self.reqs), 1) + 2)))
                d = 0
            else:
                d = int(rng.integers(0, self.num_spec + 1)) if self.num_spec and r.decoding else 0
                q = 1 + d
                if q > budget:
                    continue
            rows.append((slot, q, d))
            budget -= q
        if not rows:  # nothing fits: the first running request alone
            slot = order[0]
            r = self.reqs[slot]
            left = len(r.prefill) - r.prefill_done
            rows.append((slot, min(left, self.max_num_tokens) if left > 0 else 1, 0))
        # vLLM's order (sort_batch_req_ids): uniform decodes first, then by query length
        decode_len = 1 + self.num_spec
        rows.sort(key=lambda x: (x[1] != decode_len, x[1]))
        # the blocks the rows' tokens need: a new request's with its whole list (vLLM's
        # scheduled_new_reqs), a running one's as appends (scheduled_cached_reqs.new_block_ids)
        new_block_ids = []
        joining = {a[0]: a for a in added}
        for slot, q, d in rows:
            r = self.reqs[slot]
            ids = self._blocks_for(r, r.computed + q)
            if slot in joining:
                joining[slot][2] = tuple(a + b for a, b in zip(joining[slot][2], ids))
            elif any(ids):
                new_block_ids.append((slot, ids))
        added = [tuple(a) for a in added]
        n = len(rows)
        tokens = sum(q for _, q, _ in rows)
        idx = np.array([s for s, _, _ in rows], dtype=np.int32)
        q = np.array([q for _, q, _ in rows], dtype=np.int32)
        d = np.array([d for _, _, d in rows], dtype=np.int32)
        n_pad, t_pad = n, tokens
        if self.pad and rng.random() < 0.7:
            n_pad = int(rng.integers(n, self.max_num_reqs + 1))
            t_pad = int(rng.integers(tokens, self.max_num_tokens + 1))
        computed = np.array([self.reqs[s].computed for s, _, _ in rows], dtype=np.int32)
        return Step(removed, added, idx, q, d if d.any() else None, new_block_ids, n_pad, t_pad, computed)

    def sample(self, step: Step, num_computed, last_sampled, draft_tokens) -> None:
        """The device after the step (vLLM's sampler, rejection sampler, post_update and the
        speculator), applied to the state arrays; the host learns each request's count."""
        rng = self.rng
        for i, slot in enumerate(step.idx_mapping):
            r = self.reqs[int(slot)]
            q = int(step.num_scheduled_tokens[i])
            d = 0 if step.num_draft_tokens is None else int(step.num_draft_tokens[i])
            left = len(r.prefill) - r.prefill_done
            if left > 0:
                r.prefill_done += q
                r.computed += q
                num_computed[slot] = r.computed
                if r.prefill_done < len(r.prefill):
                    continue  # a chunk: nothing sampled
                r.decoding = True
            else:
                accepted = int(rng.integers(0, d + 1))
                r.computed += 1 + accepted  # q - rejected
                r.life -= 1
            num_computed[slot] = r.computed
            last_sampled[slot] = int(rng.integers(0, 150_000))
            if draft_tokens is not None and draft_tokens.shape[1]:
                draft_tokens[slot, :] = rng.integers(0, 150_000, draft_tokens.shape[1])

    def joined(self, step: Step, num_computed, draft_tokens) -> None:
        """What vLLM's add_requests writes to the device for the step's new requests."""
        for slot, _, _, computed in step.added:
            num_computed[slot] = computed
            if draft_tokens is not None:
                draft_tokens[slot, :] = 0


class Reference:
    """vLLM 0.26.0's step preparation in NumPy over persistent buffers (see the module)."""

    def __init__(self, *, max_num_reqs, max_num_tokens, block_sizes, max_num_blocks, kernel_block_sizes=None):
        self.R, self.T = max_num_reqs, max_num_tokens
        self.kernel = list(kernel_block_sizes or block_sizes)
        self.bpk = [b // k for b, k in zip(block_sizes, self.kernel)]
        self.G = len(block_sizes)
        cols = [m * p for m, p in zip(max_num_blocks, self.bpk)]
        self.tables = [np.zeros((self.R, c), np.int32) for c in cols]
        self.num_blocks = np.zeros((self.G, self.R), np.int64)
        self.prefill: dict[int, np.ndarray] = {}
        self.done: dict[int, int] = {}
        self.next_prefill_tokens = np.zeros(self.R, np.int32)
        self.input_ids = np.zeros(self.T, np.int32)
        self.positions = np.zeros(self.T, np.int64)
        self.seq_lens = np.zeros(self.R, np.int32)
        self.query_start_loc = np.zeros(self.R + 1, np.int32)
        self.idx_mapping = np.zeros(self.R, np.int32)
        self.cu_num_logits = np.zeros(self.R + 1, np.int32)
        self.logits_indices = np.zeros(self.T, np.int64)
        self.expanded_idx_mapping = np.zeros(self.T, np.int32)
        self.expanded_local_pos = np.zeros(self.T, np.int32)
        self.input_block_tables = [np.zeros_like(t) for t in self.tables]
        self.slot_mappings = np.full((self.G, self.T), PAD_SLOT_ID, np.int64)

    def _append(self, slot, ids, overwrite):
        for g in range(self.G):
            start = 0 if overwrite else int(self.num_blocks[g, slot])
            k = [b * self.bpk[g] + j for b in ids[g] for j in range(self.bpk[g])]
            self.tables[g][slot, start:start + len(k)] = k
            self.num_blocks[g, slot] = start + len(k)

    def step(self, s: Step, num_computed, last_sampled, draft_tokens) -> None:
        for slot in s.removed:
            self.prefill.pop(slot, None)
        for slot, tokens, ids, computed in s.added:
            self.prefill[slot] = tokens
            self.done[slot] = computed
            self._append(slot, ids, True)
        for slot, ids in s.new_block_ids:
            self._append(slot, ids, False)
        n, T = s.num_reqs, s.num_tokens
        idx, q = s.idx_mapping.astype(np.int64), s.num_scheduled_tokens.astype(np.int64)
        d = np.zeros(n, np.int64) if s.num_draft_tokens is None else s.num_draft_tokens.astype(np.int64)
        qsl = np.concatenate([[0], np.cumsum(q)])
        cu = np.concatenate([[0], np.cumsum(d + 1)])
        self.idx_mapping[:n] = idx
        self.query_start_loc[: n + 1] = qsl
        self.query_start_loc[n + 1:] = T
        self.cu_num_logits[: n + 1] = cu
        last = np.asarray(last_sampled).reshape(-1)
        for i in range(n):
            r, lo, hi = int(idx[i]), int(qsl[i]), int(qsl[i + 1])
            nc = int(num_computed[r])
            self.positions[lo:hi] = nc + np.arange(hi - lo)
            self.seq_lens[i] = nc + hi - lo
            tokens = self.prefill[r]
            if self.done[r] < len(tokens):
                self.input_ids[lo:hi] = tokens[self.done[r]:self.done[r] + hi - lo]
                self.done[r] += hi - lo
                if self.done[r] < len(tokens):
                    self.next_prefill_tokens[r] = tokens[self.done[r]]
            else:
                logits = int(d[i]) + 1
                start = hi - logits
                self.input_ids[start] = np.int32(last[r])
                if d[i]:
                    self.input_ids[start + 1:hi] = draft_tokens[r, : d[i]].astype(np.int32)
            count = int(cu[i + 1] - cu[i])
            self.logits_indices[cu[i]:cu[i + 1]] = hi - count + np.arange(count)
            self.expanded_idx_mapping[cu[i]:cu[i + 1]] = r
            self.expanded_local_pos[cu[i]:cu[i + 1]] = np.arange(count)
        self.seq_lens[n:] = 0
        for g in range(self.G):
            for i in range(n):
                r = int(idx[i])
                nb = int(self.num_blocks[g, r])
                self.input_block_tables[g][i, :nb] = self.tables[g][r, :nb]
            self.input_block_tables[g][n:s.num_reqs_padded] = 0
            bs = self.kernel[g]
            pos = self.positions[:T]
            rows = np.repeat(idx, q)
            blk = pos // bs
            cols = self.tables[g].shape[1]
            inside = blk < cols
            sm = np.full(T, PAD_SLOT_ID, np.int64)
            sm[inside] = self.tables[g][rows[inside], blk[inside]].astype(np.int64) * bs + pos[inside] % bs
            self.slot_mappings[g, :T] = sm
            self.slot_mappings[g, T:] = PAD_SLOT_ID

    def outputs(self) -> dict[str, np.ndarray]:
        """Every buffer, whole."""
        out = {k: getattr(self, k) for k in OUTPUTS}
        for g in range(self.G):
            out[f"block_tables[{g}]"] = self.tables[g]
            out[f"input_block_tables[{g}]"] = self.input_block_tables[g]
        return out


def ferry_outputs(prep) -> dict[str, np.ndarray]:
    """A VllmStepPrep's buffers, whole, as the reference names them."""
    out = {k: getattr(prep, k).cpu().numpy() for k in OUTPUTS}
    for g in range(prep.num_kv_cache_groups):
        out[f"block_tables[{g}]"] = prep.block_tables[g].cpu().numpy()
        out[f"input_block_tables[{g}]"] = prep.input_block_tables[g].cpu().numpy()
    return out


def prepare(prep, s: Step) -> None:
    """The step's scheduler data into a VllmStepPrep (removals, new requests, then the step)."""
    for slot in s.removed:
        prep.remove_request(slot)
    for slot, tokens, ids, computed in s.added:
        prep.add_request(slot, tokens, ids, computed)
    submit(prep, s)


def submit(prep, s: Step) -> None:
    """The step itself: prepare(), or on a graph=True object commit() (its graph's replay runs it)."""
    call = prep.commit if getattr(prep, "graph", False) else prep.prepare
    call(s.idx_mapping, s.num_scheduled_tokens, s.num_draft_tokens, new_block_ids=s.new_block_ids,
         num_reqs_padded=s.num_reqs_padded, num_tokens_padded=s.num_tokens_padded)
