#!/usr/bin/env python3
"""examples/async_decode in Python: an asynchronous decode loop with speculative tokens over
ferry_vllm.StepBatch, as async_decode.hpp writes it in C++ (docs/step_batch.md).

Requests join and leave; the device keeps a block table int32[1024 x 64] and per-request state
(num_computed, and the sampled token and accepted draft count that a stand-in sampler writes after
each step), which the host never reads in the loop. Every step is ONE StepBatch.step (one launch):

  rows                         an upload: the request slot of each row
  input_ids, base, drafts      three gathers with the slots as indices: the previous step's
                               sampled, num_computed and accepted, read on the device in stream
                               order; a joining request's row is FROM_HOST and takes its first
                               token, its prompt length and 0 from host_values
  block table                  staged writes: a joining request's blocks, and a block appended
                               where a request may cross a 16-token boundary
  positions, seq_lens,         the shipped decode epilogue, in the same launch: pos = base +
  slot_mapping, num_computed   drafts, seq_lens = pos + 1, slot_mapping = block_table[r][pos / 16]
                               * 16 + pos % 16, num_computed[r] = pos + 1

followed by the sampler (torch ops on the same stream). Every --check steps the device's arrays
are read back and compared with a NumPy reference that replays the scheduler and the sampler; the
first difference is printed and the program exits 1.

Usage: async_decode.py [--steps N] [--check K] [--seed S] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np
import torch

import ferry_vllm as fv

MAX_REQUESTS = 1024  # request slots (rows of the block table)
MAX_BLOCKS = 64  # blocks per request (columns)
BLOCK_SIZE = 16  # tokens per KV-cache block
BATCH = 256  # most running requests in one step
MAX_JOINS = 8  # most requests joining in one step
MAX_DRAFTS = 3  # most accepted draft tokens per step
MAX_LEN = MAX_BLOCKS * BLOCK_SIZE
VOCAB = 32000
MAX_WRITES = BATCH + MAX_JOINS
MAX_WRITE_ELEMENTS = BATCH + MAX_JOINS * MAX_BLOCKS
PRIME = 2147483647  # the sampler's hash modulus: below 2^31, so its products fit int64


def sample(step, rows, input_ids, positions):
    """The stand-in sampler: each row's next token and accepted drafts (0..3), a hash of the step,
    the request slot, the row's input token and its position (one wrong input changes every later
    step). Works alike on NumPy arrays and torch tensors of int64."""
    h = (rows * 9973 + step * 40503 + 12345) % PRIME
    h = (h * 48271 + input_ids) % PRIME
    h = (h * 69621 + positions) % PRIME
    return h % VOCAB, (h // VOCAB) % (MAX_DRAFTS + 1)


def initial_state(which: int) -> np.ndarray:
    """Initial per-request arrays (not zeros: a row that read a stale entry would go unnoticed)."""
    r = np.arange(MAX_REQUESTS, dtype=np.int64)
    return ((r * 7919 + which * 104729) % 1000 - 500).astype(np.int32)


@dataclass
class Request:
    slot: int
    joined: bool = False  # joined in this step: its inputs come from the host
    first: int = 0  # first token (joined only)
    prompt: int = 0  # prompt length = its first position (joined only)
    bound: int = 0  # no position of this step exceeds it
    blocks: int = 0  # blocks written for it


class Scheduler:
    """Decides each step's requests from a seeded generator: which leave (at random, or when the
    next bound would pass the table's 64 blocks), which join (0..8, into free slots) and which
    block ids to write. The engine and the reference each run one with the same seed."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.free = list(range(MAX_REQUESTS - 1, -1, -1))
        self.rows: list[Request] = []
        self.steps = self.joined = self.left = 0
        self.next_block = 0

    def _block_id(self) -> int:
        self.next_block += 1
        return self.next_block % (1 << 30)

    def next(self, write) -> int:
        """Plans the next step: calls write(slot, column, ids) for its staged writes; returns its
        step number. `rows` then holds the step's requests."""
        rows, rng = self.rows, self.rng
        for i in range(len(rows) - 1, -1, -1):  # leave: swap-remove, as an engine's condensed batch
            if rows[i].bound + 1 + MAX_DRAFTS < MAX_LEN and rng.integers(40) != 0:
                continue
            self.free.append(rows[i].slot)
            rows[i] = rows[-1]
            rows.pop()
            self.left += 1
        for q in rows:  # the survivors' next bound, and an append where it crosses into a new block
            q.joined = False
            q.bound += 1 + MAX_DRAFTS
            if q.bound // BLOCK_SIZE >= q.blocks:
                write(q.slot, q.blocks, [self._block_id()])
                q.blocks += 1
        joins = int(rng.integers(MAX_JOINS + 1))
        if not rows and joins == 0:
            joins = 1
        while joins > 0 and len(rows) < BATCH and self.free:  # join: the whole block list of the prompt
            q = Request(self.free.pop(), joined=True, first=int(rng.integers(VOCAB)), prompt=int(1 + rng.integers(400)))
            q.bound = q.prompt
            q.blocks = q.prompt // BLOCK_SIZE + 1
            write(q.slot, 0, [self._block_id() for _ in range(q.blocks)])
            rows.append(q)
            self.joined += 1
            joins -= 1
        self.steps += 1
        return self.steps - 1


class Engine:
    """The decode loop's input preparation: each step() is one StepBatch.step followed by the
    sampler, on the device's stream. Never reads device memory in the loop."""

    def __init__(self, device: str, seed: int, slots: int):
        i32, i64 = dict(dtype=torch.int32, device=device), dict(dtype=torch.int64, device=device)
        self.device = device
        self.sched = Scheduler(seed)
        self.table = torch.zeros((MAX_REQUESTS, MAX_BLOCKS), **i32)
        self.num_computed = torch.tensor(initial_state(0), device=device)
        self.sampled = torch.tensor(initial_state(1), device=device)
        self.accepted = torch.tensor(initial_state(2), device=device)
        self.rows = torch.zeros(BATCH, **i32)
        self.input_ids, self.base, self.drafts = (torch.zeros(BATCH, **i32) for _ in range(3))
        self.positions, self.slot_mapping = torch.zeros(BATCH, **i64), torch.zeros(BATCH, **i64)
        self.seq_lens = torch.zeros(BATCH, **i32)
        sb = self.sb = fv.StepBatch(max_concurrency=slots, device=device)
        sb.add_upload(self.rows)
        sb.add_gather(self.input_ids, self.sampled)
        sb.add_gather(self.base, self.num_computed)
        sb.add_gather(self.drafts, self.accepted)
        sb.add_writes(self.table, MAX_WRITES, MAX_WRITE_ELEMENTS)
        sb.set_decode_epilogue(self.rows, self.base, self.drafts, block_table=self.table, block_size=BLOCK_SIZE,
                               num_computed=self.num_computed, positions=self.positions, seq_lens=self.seq_lens,
                               slot_mapping=self.slot_mapping)

    def step(self) -> None:
        writes = []
        t = self.sched.next(lambda slot, col, ids: writes.append((0, slot, col, ids)))
        rows = self.sched.rows
        n = len(rows)
        slots = [q.slot for q in rows]
        idx = [fv.FROM_HOST if q.joined else q.slot for q in rows]
        host = None
        if any(q.joined for q in rows):  # the joining rows' values; the others' are not read
            host = [[q.first for q in rows], [q.prompt for q in rows], [0] * n]
        self.sb.step([slots], writes, gathers=[idx, idx, idx], host_values=host)
        if n:  # the sampler, after the step on the same stream
            r = self.rows[:n].long()
            s, a = sample(t, r, self.input_ids[:n].long(), self.positions[:n])
            self.sampled[r] = s.to(torch.int32)
            self.accepted[r] = a.to(torch.int32)


class Reference:
    """The host model: the same scheduler, the device's state as NumPy arrays, the epilogue's rule
    written out again, and the same sampler."""

    def __init__(self, seed: int):
        self.sched = Scheduler(seed)
        self.table = np.zeros((MAX_REQUESTS, MAX_BLOCKS), dtype=np.int32)
        self.num_computed, self.sampled, self.accepted = (initial_state(k) for k in range(3))

    def write(self, slot: int, col: int, ids: list[int]) -> None:
        self.table[slot, col : col + len(ids)] = ids

    def slot_of(self, r: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return self.table[r, pos // BLOCK_SIZE].astype(np.int64) * BLOCK_SIZE + pos % BLOCK_SIZE

    def step(self) -> None:
        t = self.sched.next(self.write)
        q = self.sched.rows
        r = np.array([x.slot for x in q], dtype=np.int64)
        joined = np.array([x.joined for x in q], dtype=bool)
        self.rows = r.astype(np.int32)
        self.input_ids = np.where(joined, [x.first for x in q], self.sampled[r]).astype(np.int32)
        pos = np.where(joined, [x.prompt for x in q], self.num_computed[r].astype(np.int64) + self.accepted[r])
        pos = pos.astype(np.int64)
        if len(q) and (pos > np.array([x.bound for x in q])).any():
            raise AssertionError("the reference passed the scheduler's bound")
        self.positions, self.seq_lens = pos, (pos + 1).astype(np.int32)
        self.slot_mapping = self.slot_of(r, pos)
        self.num_computed[r] = pos + 1
        s, a = sample(t, r, self.input_ids.astype(np.int64), pos)
        self.sampled[r], self.accepted[r] = s, a


def same(what: str, step: int, got: torch.Tensor, want: np.ndarray) -> bool:
    got = got.cpu().numpy()
    if got.shape != want.shape:
        print(f"MISMATCH after step {step}: {what} has shape {got.shape}, the reference {want.shape}")
        return False
    diff = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    if diff.size:
        i = int(diff[0])
        print(f"MISMATCH after step {step}: {what}[{i}] is {got.reshape(-1)[i]}, the reference {want.reshape(-1)[i]}")
        return False
    return True


def check(e: Engine, ref: Reference) -> bool:
    n, t = len(ref.rows), ref.sched.steps - 1
    return (same("input_ids", t, e.input_ids[:n], ref.input_ids) and same("positions", t, e.positions[:n], ref.positions)
            and same("seq_lens", t, e.seq_lens[:n], ref.seq_lens)
            and same("slot_mapping", t, e.slot_mapping[:n], ref.slot_mapping)
            and same("num_computed", t, e.num_computed, ref.num_computed)
            and same("sampled", t, e.sampled, ref.sampled) and same("accepted", t, e.accepted, ref.accepted)
            and same("block_table", t, e.table, ref.table))


def run(device: str, steps: int, check_every: int, seed: int) -> int:
    # At most `check_every` steps are in flight between two checks: a ring of that many slots + 2
    # never waits.
    e = Engine(device, seed, check_every + 2)
    ref = Reference(seed)
    print(f"async_decode.py on device={device!r} ({fv.__version__}): up to {BATCH} of {MAX_REQUESTS} requests, "
          f"block table {MAX_REQUESTS} x {MAX_BLOCKS} int32, one StepBatch.step + a sampler per step")
    done = checks = rows = 0
    while done < steps:
        m = min(check_every, steps - done)
        for _ in range(m):
            e.step()
        for _ in range(m):
            ref.step()
            rows += len(ref.rows)
        done += m
        checks += 1
        if not check(e, ref):  # reads the device back: the stream is passed here, outside the loop
            print("check: FAILED")
            return 1
    q = ref.sched
    print(f"check: {checks} read-backs over {q.steps} steps equal to the NumPy reference ({q.joined} requests "
          f"joined, {q.left} left, {rows / q.steps:.1f} rows a step; {e.sb.steps} steps submitted)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=512)
    p.add_argument("--check", type=int, default=8, help="steps between checks (1..256)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default=fv.current_platform.device_type, choices=["cpu", "cuda"])
    a = p.parse_args(argv)
    if a.steps < 1 or not 1 <= a.check <= 256:
        p.error("--steps must be at least 1, --check 1..256")
    return run(a.device, a.steps, a.check, a.seed)


if __name__ == "__main__":
    sys.exit(main())
