# ferry_vllm against torch's own results on random data, on each device the build serves here
# (device="cpu": CPU tensors, ferry's host backend; device="cuda": tensors on the current GPU,
# ferry's CUDA backend), one build for both.
import numpy as np
import pytest
import torch

import ferry_vllm as fv

DTYPES = [torch.int32, torch.int64, torch.float32]


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def rand(shape, dtype, gen):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-(2**20), 2**20, shape, generator=gen, dtype=dtype)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


# ---- async_tensor_h2d -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_h2d_both_signatures_and_sources(dtype, gen, device):
    ref = rand((1024,), dtype, gen)
    values = ref.tolist()
    old = fv.async_tensor_h2d(values, dtype, device, True)  # (data, dtype, target_device, pin_memory)
    new = fv.async_tensor_h2d(values, device, dtype)  # (data, device, dtype)
    from_np = fv.async_tensor_h2d(ref.numpy(), device=device)
    from_tensor = fv.async_tensor_h2d(ref, device=device, dtype=dtype)
    pinned = fv.async_tensor_h2d(ref.pin_memory() if (device == "cuda") else ref.clone(), device, dtype)
    sync(device)
    for out in (old, new, from_np, from_tensor, pinned):
        assert out.device.type == device and out.dtype == dtype and out.shape == (1024,)
        assert torch.equal(out.cpu(), ref)


def test_h2d_source_reusable_at_once(gen, device):
    values = rand((777,), torch.int32, gen).tolist()
    src = torch.tensor(values, dtype=torch.int32)
    out = fv.async_tensor_h2d(src, device, torch.int32)
    src.fill_(-1)  # a pageable source has been consumed when the call returns
    sync(device)
    assert out.cpu().tolist() == values


def test_h2d_converts_and_checks_values(gen, device):
    ref = rand((50,), torch.int64, gen)
    out = fv.async_tensor_h2d(ref, device, torch.int32)  # int64 tensor into int32
    sync(device)
    assert torch.equal(out.cpu(), ref.to(torch.int32))
    with pytest.raises(ValueError, match="2147483648"):
        fv.async_tensor_h2d([1, 2**31], torch.int32, device, True)
    # Element types without a ferry instantiation take torch's path, with the same result.
    bf = fv.async_tensor_h2d([1.5, -2.0], torch.bfloat16, device, True)
    sync(device)
    assert bf.dtype == torch.bfloat16 and bf.cpu().tolist() == [1.5, -2.0]


# ---- CpuGpuBuffer ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_gpu_buffer_prefix_copies(dtype, gen, device):
    buf = fv.CpuGpuBuffer(8, 5, dtype=dtype, device=device, pin_memory=True)
    assert buf.cpu.shape == (8, 5) and buf.gpu.shape == (8, 5) and buf.np.shape == (8, 5)
    assert buf.gpu.device.type == device and torch.count_nonzero(buf.gpu).item() == 0
    ref = rand((8, 5), dtype, gen)
    buf.np[:] = ref.numpy()
    out = buf.copy_to_gpu(3)
    assert out.shape == (3, 5)
    buf.cpu.fill_(7)  # ferry snapshots the host rows: rewriting them now changes nothing sent
    sync(device)
    assert torch.equal(buf.gpu[:3].cpu(), ref[:3])
    assert torch.count_nonzero(buf.gpu[3:]).item() == 0
    buf.copy_to_gpu()
    sync(device)
    assert torch.equal(buf.gpu.cpu(), torch.full((8, 5), 7, dtype=dtype))
    buf.gpu.copy_(ref.to(device))
    sync(device)
    back = buf.copy_to_cpu(6)
    sync(device)
    assert back.shape == (6, 5) and torch.equal(buf.cpu[:6], ref[:6])
    assert torch.equal(buf.cpu[6:], torch.full((2, 5), 7, dtype=dtype))
    with pytest.raises(IndexError, match="exceeds the size 40"):
        buf.copy_to_gpu(9)


def test_cpu_gpu_buffer_one_dimension_and_other_dtypes(gen, device):
    buf = fv.CpuGpuBuffer(100, dtype=torch.int64, device=device, pin_memory=True)
    ref = rand((100,), torch.int64, gen)
    buf.cpu.copy_(ref)
    buf.copy_to_gpu(100)
    sync(device)
    assert torch.equal(buf.gpu.cpu(), ref)
    half = fv.CpuGpuBuffer(4, dtype=torch.float16, device=device, pin_memory=False)
    half.np[:] = [1, 2, 3, 4]
    half.copy_to_gpu(2)
    sync(device)
    assert half.gpu.cpu().tolist() == [1, 2, 0, 0]


# ---- UvaBuffer, UvaBufferPool, UvaBackedTensor ----------------------------------------------------


def test_uva_buffer_and_view_share_memory(gen, device):
    buf = fv.UvaBuffer((6, 4), torch.int32, device=device)
    assert buf.uva.device.type == device and buf.uva.shape == (6, 4)
    ref = rand((6, 4), torch.int32, gen)
    buf.np[:] = ref.numpy()
    doubled = buf.uva * 2
    sync(device)
    assert torch.equal(doubled.cpu(), ref * 2)
    # No device argument (vLLM's): the platform's device, "cuda" where the build meets a GPU.
    view = fv.get_accelerator_view_from_cpu_tensor(torch.arange(12, dtype=torch.float32).view(3, 4))
    sync(fv.current_platform.device_type)
    assert view.device.type == fv.current_platform.device_type
    assert view.cpu().tolist() == torch.arange(12.0).view(3, 4).tolist()


@pytest.mark.parametrize("size", [(4,), (4, 3)])
@pytest.mark.parametrize("kind", ["list", "numpy", "tensor"])
def test_uva_pool_rotation_growth_and_contents(size, kind, gen, device):
    pool = fv.UvaBufferPool(size, torch.int32, max_concurrency=2, device=device)
    assert pool.size == size and pool.max_concurrency == 2
    slots_seen = []
    for length in [3, 4, 5, 1, 9, 2, 17, 17, 0, 6]:
        ref = rand((length, *size[1:]), torch.int32, gen)
        src = {"list": ref.tolist(), "numpy": ref.numpy(), "tensor": ref}[kind]
        if kind == "list" and len(size) > 1 and length == 0:
            with pytest.raises(ValueError, match="could not broadcast"):
                pool.copy_to_uva(src)
            continue
        out = pool.copy_to_uva(src)
        slots_seen.append(pool._curr)
        assert out.device.type == device and tuple(out.shape) == (length, *size[1:])
        sync(device)
        assert torch.equal(out.cpu(), ref)
        if length > size[0]:  # grown to the next power of two of rows
            assert pool._pool.capacity(pool._curr) >= 1 << (length - 1).bit_length()
    assert slots_seen[:4] == [1, 0, 1, 0]


@pytest.mark.parametrize("size", [(4,), (4, 3)])
def test_uva_pool_uva_bufs_are_ferrys_slots(size, gen, device):
    pool = fv.UvaBufferPool(size, torch.float32, max_concurrency=3, device=device)
    bufs = pool._uva_bufs
    assert len(bufs) == 3 and len({b.cpu.data_ptr() for b in bufs}) == 3
    for b in bufs:  # every slot starts as zeros, of the pool's size
        assert tuple(b.cpu.shape) == size and b.np.shape == size and tuple(b.uva.shape) == size
        assert b.uva.device.type == device and b.uva.data_ptr() == b.cpu.data_ptr()
        assert torch.count_nonzero(b.cpu).item() == 0
        assert b.cpu.is_pinned() or not (device == "cuda")
    for length in [3, 2, 7, 4, 1, 20, 5, 20]:
        ref = rand((length, *size[1:]), torch.float32, gen)
        before = pool._uva_bufs
        out = pool.copy_to_uva(ref)
        sync(device)
        now, cur = pool._uva_bufs, pool._curr
        assert len(now) == 3
        # The view is the head of the current slot, which holds the source's rows.
        assert out.data_ptr() == now[cur].uva.data_ptr()
        assert torch.equal(now[cur].cpu[:length], ref) and np.array_equal(now[cur].np[:length], ref.numpy())
        assert now[cur].cpu.shape[0] == pool._pool.capacity(cur)
        # Untouched slots keep their object; the used one a new object exactly when it grew.
        assert all(now[i] is before[i] for i in range(3) if i != cur)
        if length <= before[cur].cpu.shape[0]:
            assert now[cur] is before[cur]
        else:
            assert now[cur] is not before[cur] and now[cur].cpu.shape[0] == 1 << (length - 1).bit_length()
    # One memory: a write through the slot's host tensor is what the last view reads.
    last = pool._uva_bufs[pool._curr]
    last.cpu[1:3] = -last.cpu[1:3] - 1
    assert torch.equal(out.cpu()[1:3], -ref[1:3] - 1)


def test_uva_pool_rejects_rows_of_another_shape(device):
    pool = fv.UvaBufferPool((4, 3), torch.float32, max_concurrency=2, device=device)
    with pytest.raises(ValueError, match=r"\[2\] do not match the pool's rows \[3\]"):
        pool.copy_to_uva(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="unsupported dtype"):
        fv.UvaBufferPool(4, torch.float16, device=device)


@pytest.mark.parametrize("use_out", [False, True])
def test_uva_pool_copy_to_gpu(use_out, gen, device):
    pool = fv.UvaBufferPool((2, 3), torch.int64, max_concurrency=3, device=device)
    for length in (2, 5, 3):
        ref = rand((length, 3), torch.int64, gen)
        out = torch.empty((length, 3), dtype=torch.int64, device=device) if use_out else None
        got = pool.copy_to_gpu(ref.numpy(), out=out)
        if use_out:
            assert got is out
        sync(device)
        assert torch.equal(got.cpu(), ref)
    small = torch.empty((1, 3), dtype=torch.int64, device=device)
    with pytest.raises(IndexError, match="room for 3"):
        pool.copy_to_gpu(torch.zeros(2, 3, dtype=torch.int64), out=small)


def test_uva_backed_tensor_publishes_snapshots(gen, device):
    t = fv.UvaBackedTensor((10, 2), torch.float32, max_concurrency=2, device=device)
    assert t.cpu.shape == (10, 2) and t.gpu.shape == (10, 2)
    ref = rand((10, 2), torch.float32, gen)
    t.np[:] = ref.numpy()
    first = t.copy_to_uva(4)
    t.cpu.zero_()  # the published rows were snapshotted
    sync(device)
    assert first.shape == (4, 2) and torch.equal(first.cpu(), ref[:4])
    second = t.copy_to_uva()
    sync(device)
    assert t.gpu is second and torch.count_nonzero(second.cpu()).item() == 0
    with pytest.raises(IndexError, match="exceeds the 10 rows"):
        t.copy_to_uva(11)


# ---- StagedWriteTensor and FusedStagedWriter ------------------------------------------------------


def stage_random(t, ref, gen, writes):
    rows, cols = ref.shape
    for _ in range(writes):
        row = int(torch.randint(0, rows, (1,), generator=gen))
        start = int(torch.randint(0, cols, (1,), generator=gen))
        n = int(torch.randint(0, cols - start + 1, (1,), generator=gen))
        values = rand((n,), ref.dtype, gen)
        if n == 1 and torch.rand(1, generator=gen).item() < 0.5:
            t.stage_write_elem(row, values.item())
            ref[row, 0] = values[0]
        else:
            t.stage_write(row, start, values.tolist())
            ref[row, start : start + n] = values


@pytest.mark.parametrize("uva", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_staged_write_matches_reference(dtype, uva, gen, device):
    t = fv.StagedWriteTensor((16, 64), dtype, torch.device(device), max_concurrency=2, uva_instead_of_gpu=uva)
    assert (t.write_contents is not None) == uva
    ref = torch.zeros((16, 64), dtype=dtype)
    for _ in range(6):  # later writes of one apply win where they overlap
        stage_random(t, ref, gen, writes=40)
        t.apply_write()
        sync(device)
        assert torch.equal(t.gpu.cpu(), ref)
        assert t.num_staged_writes == 0


def test_staged_write_inputs_and_errors(gen, device):
    t = fv.StagedWriteTensor((4, 8), torch.int32, device)
    t.stage_write(0, 1, np.asarray([1, 2, 3], dtype=np.int64))
    t.stage_write(1, 0, (v for v in [4, 5]))
    t.stage_write(2, 6, range(2))
    t.stage_write(3, 4, torch.tensor([9, 8], dtype=torch.int64))
    with pytest.raises(IndexError, match="start"):
        t.stage_write(3, 7, [1, 2])  # past the row: rejected, nothing recorded
    with pytest.raises(IndexError):
        t.stage_write(4, 0, [1])
    with pytest.raises(IndexError, match="negative index -1"):
        t.stage_write_elem(-1, 3)
    with pytest.raises(ValueError, match="out of int32's range"):
        t.stage_write_elem(0, 2**40)
    with pytest.raises(ValueError, match="value 1.5 at position 0 is not an integer"):
        t.stage_write(0, 0, [1.5])  # a float into an integer tensor is not truncated silently
    assert t.num_staged_writes == 4
    t.apply_write()
    sync(device)
    assert t.gpu.cpu().tolist() == [
        [0, 1, 2, 3, 0, 0, 0, 0],
        [4, 5, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 1],
        [0, 0, 0, 0, 9, 8, 0, 0],
    ]
    t.stage_write(0, 0, [5])
    t.clear_staged_writes()
    t.apply_write()
    sync(device)
    assert t.gpu.cpu()[0, 0].item() == 0
    with pytest.raises(ValueError, match="Unsupported dtype"):
        fv.StagedWriteTensor((4, 8), torch.float16, device)


@pytest.mark.parametrize("dtype", DTYPES)
def test_staged_write_numpy_sources(dtype, gen, device):
    t = fv.StagedWriteTensor((3, 40), dtype, device)
    ref = torch.zeros((3, 40), dtype=dtype)
    same = rand((40,), dtype, gen)  # the tensor's own dtype: read as one buffer
    other_dtype = {torch.int32: torch.int64, torch.int64: torch.int32, torch.float32: torch.float64}[dtype]
    other = rand((20,), other_dtype, gen)
    strided = rand((30,), dtype, gen)
    t.stage_write(0, 0, same.numpy())
    t.stage_write(1, 5, other.numpy())  # another dtype: converted element by element
    t.stage_write(2, 1, strided.numpy()[::2])  # not contiguous: read element by element
    raw = np.empty(same.numpy().nbytes + 1, dtype=np.uint8)
    odd = raw[1:].view(same.numpy().dtype)  # at an odd address: read element by element
    odd[:] = same.numpy()
    assert not odd.flags.aligned
    t.stage_write(2, 20, odd[:20])
    ref[0] = same
    ref[1, 5:25] = other.to(dtype)
    ref[2, 1:16] = strided[::2]
    ref[2, 20:40] = same[:20]
    t.apply_write()
    sync(device)
    assert torch.equal(t.gpu.cpu(), ref)
    pool = fv.UvaBufferPool(8, dtype, max_concurrency=2, device=device)
    out = pool.copy_to_uva(same.numpy()[:13])  # grows the slot to 16
    sync(device)
    assert torch.equal(out.cpu(), same[:13])


def test_fused_writer_applies_every_tensor(gen, device):
    shapes = [((8, 32), torch.int32, False), ((8, 32), torch.int32, True), ((5, 16), torch.float32, False)]
    shapes += [((3, 7), torch.int32, False)] * 4  # more than one fused launch of one kind
    tensors = [fv.StagedWriteTensor(s, d, device, uva_instead_of_gpu=u) for s, d, u in shapes]
    refs = [torch.zeros(s, dtype=d) for s, d, _ in shapes]
    writer = fv.FusedStagedWriter(torch.device(device), max_writes=256)
    for _ in range(3):
        for t, ref in zip(tensors, refs):
            stage_random(t, ref, gen, writes=10)
        writer.apply(tensors, output_ptrs=None, output_strides=None)
        sync(device)
        for t, ref in zip(tensors, refs):
            assert torch.equal(t.gpu.cpu(), ref)
            assert t.num_staged_writes == 0
    tensors[0].stage_write(0, 0, [1])
    with pytest.raises(ValueError, match="same tensor twice"):
        writer.apply([tensors[0], tensors[0]])
    assert tensors[0].num_staged_writes == 1  # nothing applied, nothing dropped


@pytest.mark.parametrize("dtype", DTYPES)
def test_staged_write_on_the_cpu_device(dtype, gen, device):
    # vLLM's CPU worker: the tensor lives on the CPU, written on ferry's host backend (in every
    # build), and holds its writes when apply returns.
    t = fv.StagedWriteTensor((6, 40), dtype, torch.device("cpu"))
    assert t.gpu.device.type == "cpu" and t.write_contents is None
    ref = torch.zeros(6, 40, dtype=dtype)
    for _ in range(3):
        stage_random(t, ref, gen, writes=12)
        t.apply_write()  # no synchronization: read at once
        assert torch.equal(t.gpu, ref) and t.num_staged_writes == 0
    with pytest.raises(IndexError):
        t.stage_write(6, 0, [1])
    # Fused with a tensor on the other device: each gets its own writes.
    other = fv.StagedWriteTensor((3, 8), dtype, device)
    other_ref = torch.zeros(3, 8, dtype=dtype)
    stage_random(t, ref, gen, writes=8)
    stage_random(other, other_ref, gen, writes=8)
    fv.FusedStagedWriter(torch.device("cpu"), max_writes=64).apply([t, other])
    assert torch.equal(t.gpu, ref) and t.num_staged_writes == 0
    sync(device)
    assert torch.equal(other.gpu.cpu(), other_ref) and other.num_staged_writes == 0


def test_staged_write_made_without_init_raises_and_applies_nothing(gen, device):
    # vLLM's own tests build a StagedWriteTensor with __new__ alone: it has no C++ object, and
    # every member raises (rather than reaching C++ with no object behind it).
    bare = fv.StagedWriteTensor.__new__(fv.StagedWriteTensor)
    calls = [lambda: bare.stage_write(0, 0, [1]), lambda: bare.stage_write_elem(0, 1), bare.apply_write,
             bare.clear_staged_writes, lambda: bare.num_staged_writes]
    for call in calls:
        with pytest.raises(RuntimeError, match="non-held"):
            call()
    made = fv.StagedWriteTensor((2, 4), torch.int32, device)
    ref = torch.zeros(2, 4, dtype=torch.int32)
    stage_random(made, ref, gen, writes=3)
    vals = rand((3,), torch.int32, gen)
    made.stage_write(1, 1, vals.tolist())
    ref[1, 1:4] = vals
    pending = made.num_staged_writes
    assert pending > 0
    with pytest.raises(RuntimeError, match="non-held"):
        fv.FusedStagedWriter(device, max_writes=8).apply([made, bare])
    assert made.num_staged_writes == pending  # nothing applied, nothing dropped
    fv.FusedStagedWriter(device, max_writes=8).apply([made])
    sync(device)
    assert torch.equal(made.gpu.cpu(), ref) and made.num_staged_writes == 0
