# ferry_vllm.StepBatch (ferry's own addition: a whole step in one call and one launch) against a
# NumPy reference on random data, on each device the build serves here (device="cpu": CPU tensors,
# ferry's host backend; device="cuda": tensors on the current GPU, ferry's CUDA backend).
import numpy as np
import pytest
import torch

import ferry_vllm as fv

NP = {torch.int32: np.int32, torch.int64: np.int64, torch.float32: np.float32}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def rand(shape, dtype, rng):
    """Random values of `dtype`, none of them zero."""
    if dtype == torch.float32:
        v = rng.uniform(0.5, 1000.0, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        v = rng.integers(1, 2**20, shape) * rng.choice([-1, 1], shape)
    return v.astype(NP[dtype])


def misaligned(values):
    """A copy of `values` at an odd address: a NumPy array that is not read in place."""
    raw = np.empty(values.nbytes + 1, dtype=np.uint8)
    out = raw[1:].view(values.dtype)
    out[:] = values
    assert out.size == 0 or not out.flags.aligned
    return out


def source(values, dtype, rng):
    """`values` as one of the sources step() takes: a list, tuple, NumPy array (of the dtype, in
    place, misaligned or strided; or of another dtype, converted exactly) or CPU tensor."""
    kind = rng.integers(0, 7)
    if kind == 5:
        return misaligned(values)
    if kind == 6:
        spread = np.zeros(2 * values.size, dtype=values.dtype)
        spread[::2] = values
        return spread[::2]
    if kind == 0:
        return values.tolist()
    if kind == 1:
        return tuple(values.tolist())
    if kind == 2:
        return values.copy()
    if kind == 3:
        return torch.from_numpy(values.copy())
    return values.astype(np.float64 if dtype == torch.float32 else (np.int64 if dtype == torch.int32 else np.int32))


class Plan:
    """A batch over three uploads (int32, int64, float32) and two write targets (int32, float32),
    every tensor starting as random values, with a NumPy reference of each."""

    def __init__(self, rng, device, max_concurrency=2):
        self.rng = rng
        self.device = device
        self.sb = fv.StepBatch(max_concurrency=max_concurrency, device=device)
        self.dsts, self.refs = [], []
        for n, dtype in [(64, torch.int32), (100, torch.int64), (50, torch.float32)]:
            ref = rand(n, dtype, rng)
            self.dsts.append(torch.from_numpy(ref.copy()).to(device))
            self.refs.append(ref)
            assert self.sb.add_upload(self.dsts[-1]) == len(self.dsts) - 1
        self.targets, self.target_refs = [], []
        for shape, dtype in [((16, 32), torch.int32), ((8, 20), torch.float32)]:
            ref = rand(shape, dtype, rng)
            self.targets.append(torch.from_numpy(ref.copy()).to(device))
            self.target_refs.append(ref)
            # Small maxima: the slots grow past them (growth::pow2).
            assert self.sb.add_writes(self.targets[-1], 4, 16) == len(self.targets) - 1

    def random_step(self):
        """One step's arguments, and the references after it (applied only when it lands)."""
        rng = self.rng
        sources, refs = [], [r.copy() for r in self.refs]
        for dst, ref in zip(self.dsts, refs):
            if rng.random() < 0.2:
                sources.append(None)  # nothing this step: the destination keeps its contents
                continue
            n = int(rng.integers(0, dst.numel() + 1))
            values = rand(n, dst.dtype, rng)
            sources.append(source(values, dst.dtype, rng))
            ref[:n] = values
        writes, target_refs = [], [r.copy() for r in self.target_refs]
        for _ in range(int(rng.integers(0, 25))):
            k = int(rng.integers(0, len(self.targets)))
            rows, cols = self.targets[k].shape
            row, start = int(rng.integers(0, rows)), int(rng.integers(0, cols))
            n = 1 if rng.random() < 0.4 else int(rng.integers(0, cols - start + 1))
            values = rand(n, self.targets[k].dtype, rng)
            writes.append((k, row, start, source(values, self.targets[k].dtype, rng)))
            target_refs[k][row, start : start + n] = values  # a later write wins where they overlap
        return sources, writes, refs, target_refs

    def landed(self, refs, target_refs):
        self.refs, self.target_refs = refs, target_refs

    def good_step(self):
        """A random step, submitted: what it writes becomes the reference."""
        sources, writes, refs, target_refs = self.random_step()
        self.sb.step(sources, writes)
        self.landed(refs, target_refs)

    def refused(self, sources, writes, error, match):
        """A step that raises `error`: nothing of it lands, and the batch then takes a good step."""
        steps = self.sb.steps
        with pytest.raises(error, match=match):
            self.sb.step(sources, writes)
        self.check()  # no upload, no write of the refused step
        assert self.sb.steps == steps
        self.good_step()
        self.check()
        assert self.sb.steps == steps + 1

    def check(self):
        sync(self.device)
        for dst, ref in zip(self.dsts, self.refs):
            np.testing.assert_array_equal(dst.cpu().numpy(), ref)
        for t, ref in zip(self.targets, self.target_refs):
            np.testing.assert_array_equal(t.cpu().numpy(), ref)


@pytest.fixture
def rng():
    return np.random.default_rng(20261205)


@pytest.mark.parametrize("max_concurrency", [2, 3])
def test_steps_match_the_reference(max_concurrency, rng, device):
    p = Plan(rng, device, max_concurrency)
    for i in range(12):
        p.good_step()
        p.check()
        assert p.sb.steps == i + 1
    # Several steps in flight before one synchronization: each lands in stream order.
    for _ in range(10):
        p.good_step()
    p.check()
    assert p.sb.steps == 22


def test_a_source_too_long_drops_the_step(rng, device):
    p = Plan(rng, device)
    sources, writes, _, _ = p.random_step()
    sources[1] = rand(101, torch.int64, rng)  # upload 1 holds 100
    writes.append((0, 0, 0, [7]))
    p.refused(sources, writes, IndexError, r"upload 1 has 101 elements, more than its destination's 100")


def test_an_upload_value_that_does_not_fit_drops_the_step(rng, device):
    p = Plan(rng, device)
    sources, writes, _, _ = p.random_step()
    sources[0] = [5, 6, 2**40, 7]  # upload 0 is int32: read into the step's staging, then refused
    p.refused(sources, writes, ValueError, "value 1099511627776 at position 2 is out of int32's range")


def test_a_wrong_number_of_sources_raises(rng, device):
    p = Plan(rng, device)
    sources, writes, refs, target_refs = p.random_step()
    with pytest.raises(ValueError, match="2 sources for 3 uploads"):
        p.sb.step(sources[:2], writes)
    with pytest.raises(ValueError, match="4 sources for 3 uploads"):
        p.sb.step(sources + [None], writes)
    p.check()
    p.sb.step(sources, writes)
    p.landed(refs, target_refs)
    p.check()


@pytest.mark.parametrize(
    "bad, error, match",
    [
        ((0, 16, 0, [1]), IndexError, "row 16, start 0, len 1 for a 16 x 32 target"),  # past the rows
        ((0, 3, 30, [1, 2, 3]), IndexError, "row 3, start 30, len 3"),  # past the row's end
        ((1, -1, 0, [1.0]), IndexError, "negative row -1"),
        ((2, 0, 0, [1]), IndexError, "writes index 2 of 2"),
        ((0, 0, 0), ValueError, r"\(writes_index, row, start, values\), got 3 items"),
        ((0, 0, 0, [1.5]), ValueError, "not an integer"),  # a float into an int32 target is not truncated
        ((0, 0, 0, [2**40]), ValueError, "out of int32's range"),
    ],
)
def test_a_bad_write_cancels_the_step(bad, error, match, rng, device):
    p = Plan(rng, device)
    sources, writes, _, _ = p.random_step()
    sources[0] = rand(64, torch.int32, rng)  # would land, were the step submitted
    writes = [(0, 1, 2, [5, 6]), bad] + writes
    p.refused(sources, writes, error, match)


def test_plan_checks(device):
    sb = fv.StepBatch(device=device)
    with pytest.raises(ValueError, match="expected a 1-D tensor, got 2-D"):
        sb.add_upload(torch.zeros((2, 3), dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="expected a 2-D tensor, got 1-D"):
        sb.add_writes(torch.zeros(6, dtype=torch.int32, device=device), 1, 1)
    with pytest.raises(ValueError, match="unsupported dtype"):
        sb.add_upload(torch.zeros(4, dtype=torch.float16, device=device))
    with pytest.raises(ValueError, match="contiguous"):
        sb.add_writes(torch.zeros((4, 6), dtype=torch.int32, device=device).t(), 1, 1)
    other = "cpu" if device == "cuda" else "meta"
    with pytest.raises(ValueError, match=f"the tensor is on {other}"):
        sb.add_upload(torch.zeros(4, dtype=torch.int32, device=other))
    whole = torch.full((8,), 3, dtype=torch.int64, device=device)
    assert sb.add_upload(whole[:4]) == 0
    with pytest.raises(ValueError):  # overlaps the first upload's destination
        sb.add_upload(whole[2:6])
    with pytest.raises(ValueError, match="at least 2"):
        fv.StepBatch(max_concurrency=1, device=device)
    # The plan's tensors are held by the batch: a destination the caller dropped is still written.
    sb.add_upload(torch.zeros(5, dtype=torch.float32, device=device))
    sb.step([[9, 8, 7, 6], np.arange(1, 6, dtype=np.float32)], [])
    sync(device)
    assert whole.cpu().tolist() == [9, 8, 7, 6, 3, 3, 3, 3]


# ---- gathers, publishes, fills and the decode epilogue ---------------------------------------------


def test_gathers_take_device_rows_or_host_rows(rng, device):
    sb = fv.StepBatch(device=device)
    src = torch.from_numpy(rand(300, torch.int64, rng)).to(device)
    other = torch.from_numpy(rand(50, torch.float32, rng)).to(device)
    dst = torch.zeros(64, dtype=torch.int64, device=device)
    fdst = torch.zeros(16, dtype=torch.float32, device=device)
    assert sb.add_gather(dst, src) == 0 and sb.add_gather(fdst, other, 16) == 1
    ref, fref = np.zeros(64, dtype=np.int64), np.zeros(16, dtype=np.float32)
    for step in range(20):
        n, m = int(rng.integers(0, 65)), int(rng.integers(0, 17))
        idx = rng.integers(0, 300, n)
        host = rand(n, torch.int64, rng)
        from_host = rng.random(n) < 0.3
        idx[from_host] = fv.FROM_HOST
        fidx = rng.integers(0, 50, m)
        values = [host.tolist(), None] if from_host.any() else None
        sb.step([], [], gathers=[idx.tolist(), fidx], host_values=values)
        ref[:n] = np.where(from_host, host, src.cpu().numpy()[np.maximum(idx, 0)])
        fref[:m] = other.cpu().numpy()[fidx]
        sync(device)
        np.testing.assert_array_equal(dst.cpu().numpy(), ref)
        np.testing.assert_array_equal(fdst.cpu().numpy(), fref)
    assert sb.steps == 20
    # Refused gathers drop the whole step (nothing of it lands).
    for gathers, values, error, match in [
        ([[300], None], None, IndexError, "row 0 of gather 0 has index 300, outside its source of 300 elements"),
        ([[fv.FROM_HOST], None], None, IndexError, r"row 0 of gather 0 takes its value from the host \(ferry::from_host\)"),
        ([[0] * 65, None], None, IndexError, "gather 0 has 65 indices, more than its destination's 64"),
        ([[1, 2], None], [[5], None], ValueError, "host_values of gather 0 has 1 values for its 2 indices"),
        ([[1]], None, ValueError, "1 gathers for 2"),
        (None, [[5], None], ValueError, "host_values without gathers"),
        ([None, None], [[5], None], ValueError, "host_values for gather 0, which has no indices"),
        ([[2**31], None], None, ValueError, "out of int32's range"),
    ]:
        with pytest.raises(error, match=match):
            sb.step([], [], gathers=gathers, host_values=values)
        sync(device)
        np.testing.assert_array_equal(dst.cpu().numpy(), ref)
    assert sb.steps == 20


def test_publishes_and_fills(rng, device):
    sb = fv.StepBatch(device=device)
    p = sb.add_publish(torch.int32, 8)
    lens = torch.zeros(5, dtype=torch.int32, device=device)
    sb.add_fill(lens, publish=p, index=3)
    value = torch.tensor([-7], dtype=torch.int64, device=device)
    filled = torch.zeros(4, dtype=torch.int64, device=device)
    sb.add_fill(filled, value)
    for step in range(5):
        values = rand(8, torch.int32, rng)
        value.fill_(step * 11)  # read by the step's launch, in stream order
        sb.step([], [], publishes=[values])
        view = sb.publish_view(p)
        assert view.device.type == device and view.dtype == torch.int32
        sync(device)
        np.testing.assert_array_equal(view.cpu().numpy(), values)
        assert lens.cpu().tolist() == [int(values[3])] * 5 and filled.cpu().tolist() == [step * 11] * 4
    with pytest.raises(IndexError, match="a fill reads element 3 of a publish that holds 2 elements"):
        sb.step([], [], publishes=[[1, 2]])
    with pytest.raises(ValueError, match="either value"):
        sb.add_fill(torch.zeros(2, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="publish 0 is Int, dst Long"):
        sb.add_fill(torch.zeros(2, dtype=torch.int64, device=device), publish=p, index=0)
    with pytest.raises(ValueError, match="one element of dst's dtype"):
        sb.add_fill(torch.zeros(2, dtype=torch.int32, device=device), torch.zeros(2, dtype=torch.int32, device=device))
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        sb.add_publish("int32", 4)


def decode_reference(rows, base, drafts, table, num_computed, block_size):
    """The decode epilogue's rule in NumPy (rows out of the table: slot -1, state kept)."""
    pos = base.astype(np.int64) + drafts
    block = pos // block_size
    inside = (rows >= 0) & (rows < table.shape[0]) & (pos >= 0) & (block < table.shape[1])
    slots = np.full(len(rows), -1, dtype=np.int64)
    r, b = rows[inside], block[inside]
    slots[inside] = table[r, b].astype(np.int64) * block_size + pos[inside] % block_size
    keep = (rows >= 0) & (rows < len(num_computed))
    num_computed[rows[keep]] = (pos[keep] + 1).astype(np.int32)
    return pos, (pos + 1).astype(np.int32), slots


@pytest.mark.parametrize("with_drafts", [True, False])
def test_the_decode_epilogue(with_drafts, rng, device):
    requests, blocks, block_size = 40, 6, 4
    i32 = dict(dtype=torch.int32, device=device)
    table = torch.zeros((requests, blocks), **i32)
    state = torch.from_numpy(rng.integers(0, 20, requests).astype(np.int32)).to(device)
    rows_dev, base_dev, drafts_dev = (torch.zeros(16, **i32) for _ in range(3))
    positions = torch.zeros(16, dtype=torch.int64, device=device)
    seq_lens = torch.zeros(16, **i32)
    slots = torch.zeros(16, dtype=torch.int64, device=device)
    sb = fv.StepBatch(device=device)
    sb.add_upload(rows_dev)
    sb.add_gather(base_dev, state)  # each row's state, as the last step left it
    if with_drafts:
        sb.add_upload(drafts_dev)
    sb.add_writes(table, 4, 16)
    sb.set_decode_epilogue(rows_dev, base_dev, drafts_dev if with_drafts else None, block_table=table,
                           block_size=block_size, num_computed=state, positions=positions, seq_lens=seq_lens,
                           slot_mapping=slots)
    ref_table, ref_state = np.zeros((requests, blocks), dtype=np.int32), state.cpu().numpy().copy()
    outside = 0
    for step in range(12):
        n = int(rng.integers(1, 17))
        rows = rng.permutation(requests + 3)[:n].astype(np.int32) - 1  # distinct; -1 and past the table too
        rows[rows >= requests] = requests + 5
        drafts = rng.integers(0, 4, n).astype(np.int32) if with_drafts else np.zeros(n, dtype=np.int32)
        writes = []
        for _ in range(int(rng.integers(0, 4))):
            r, c = int(rng.integers(0, requests)), int(rng.integers(0, blocks))
            ids = rand(1, torch.int32, rng)
            writes.append((0, r, c, ids))
            ref_table[r, c] = ids[0]
        gather_rows = np.clip(rows, 0, requests - 1)  # the gather reads the state of valid rows
        sources = [rows] + ([drafts] if with_drafts else [])
        sb.step(sources, writes, gathers=[gather_rows])
        base = ref_state[gather_rows]
        pos, lens, slot = decode_reference(rows, base, drafts, ref_table, ref_state, block_size)
        sync(device)
        np.testing.assert_array_equal(positions.cpu().numpy()[:n], pos)
        np.testing.assert_array_equal(seq_lens.cpu().numpy()[:n], lens)
        np.testing.assert_array_equal(slots.cpu().numpy()[:n], slot)
        np.testing.assert_array_equal(state.cpu().numpy(), ref_state)
        outside += int((slot == -1).sum())
    assert outside > 0  # rows outside the table (slot -1, state kept) did occur


def test_decode_epilogue_plan_errors(device):
    sb = fv.StepBatch(device=device)
    rows = torch.zeros(8, dtype=torch.int32, device=device)
    base = torch.zeros(8, dtype=torch.int32, device=device)
    wide = torch.zeros(8, dtype=torch.int64, device=device)
    sb.add_upload(rows)
    sb.add_upload(wide)
    api = "ferry: StepBatch.set_decode_epilogue: "
    with pytest.raises(ValueError, match=api + "base must be the destination of an int32 upload or gather"):
        sb.set_decode_epilogue(rows, base)
    with pytest.raises(ValueError, match=api + "rows must be the destination of an int32"):
        sb.set_decode_epilogue(wide, rows)
    sb.add_upload(base)
    with pytest.raises(ValueError, match=api + r"positions must be a contiguous Long tensor of at least 8 elements, got 4"):
        sb.set_decode_epilogue(rows, base, positions=torch.zeros(4, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match=api + "seq_lens must be a contiguous Int"):
        sb.set_decode_epilogue(rows, base, seq_lens=torch.zeros(8, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match=api + "slot_mapping needs block_table"):
        sb.set_decode_epilogue(rows, base, slot_mapping=torch.zeros(8, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match=api + "block_size must be at least 1"):
        sb.set_decode_epilogue(rows, base, block_size=0)
    with pytest.raises(TypeError, match=api + "rows must be a torch.Tensor"):
        sb.set_decode_epilogue([1], base)
    sb.set_decode_epilogue(rows, base, positions=torch.zeros(8, dtype=torch.int64, device=device))
    sb.step([[1, 2], None, [5, 6]], [])
    with pytest.raises(RuntimeError, match="ferry: .*set_epilogue"):  # plan time only
        sb.set_decode_epilogue(rows, base)
