# vLLM's surface, exactly: the keyword names of vLLM's functions and classes (vLLM 0.34.0's
# vllm/v1/worker/gpu/buffer_utils.py, vllm/v1/utils.py, vllm/utils/torch_utils.py), their growth
# where vLLM's pools grow, type stubs, py.typed and __version__; and every error from bad input
# starting with "ferry: ". On the host backend (device="cpu").
import inspect
import pathlib

import numpy as np
import pytest
import torch

import ferry_vllm as fv

DEVICE = "cpu"

# Parameter names (in order) of vLLM 0.34.0's Python signatures.
VLLM_SIGNATURES = {
    fv.CpuGpuBuffer.__init__: ["self", "size", "dtype", "device", "pin_memory", "with_numpy"],
    fv.CpuGpuBuffer.copy_to_gpu: ["self", "n"],
    fv.CpuGpuBuffer.copy_to_cpu: ["self", "n"],
    fv.async_copy_to_gpu: ["x", "out", "device"],
    fv.UvaBuffer.__init__: ["self", "size", "dtype"],
    fv.UvaBufferPool.__init__: ["self", "size", "dtype", "max_concurrency"],
    fv.UvaBufferPool.copy_to_uva: ["self", "x"],
    fv.UvaBufferPool.copy_chunks_to_uva: ["self", "chunks", "n"],
    fv.UvaBufferPool.copy_to_gpu: ["self", "x", "out"],
    fv.UvaBackedTensor.__init__: ["self", "size", "dtype", "max_concurrency"],
    fv.UvaBackedTensor.copy_to_uva: ["self", "n"],
    fv.StagedWriteTensor.__init__: ["self", "size", "dtype", "device", "max_concurrency", "uva_instead_of_gpu"],
    fv.StagedWriteTensor.clear_staged_writes: ["self"],
    fv.FusedStagedWriter.__init__: ["self", "device", "max_writes", "max_concurrency"],
    fv.FusedStagedWriter.apply: ["self", "tensors", "output_ptrs", "output_strides"],
    fv.set_default_max_concurrency: ["n"],
    fv.get_accelerator_view_from_cpu_tensor: ["cpu_tensor"],
}


@pytest.mark.parametrize("fn", list(VLLM_SIGNATURES), ids=lambda f: f.__qualname__)
def test_python_signatures_are_vllms(fn):
    # vLLM's parameters, in vLLM's order; ferry's additions only after them, keyword-only.
    params = list(inspect.signature(fn).parameters.values())
    names = [p.name for p in params]
    assert names[: len(VLLM_SIGNATURES[fn])] == VLLM_SIGNATURES[fn], names
    assert all(p.kind is p.KEYWORD_ONLY for p in params[len(VLLM_SIGNATURES[fn]):]), names


def test_keyword_names_of_the_cpp_members():
    t = fv.StagedWriteTensor(size=(2, 4), dtype=torch.int32, device=DEVICE, max_concurrency=2,
                             uva_instead_of_gpu=False)
    t.stage_write(index=1, start=1, x=[1, 2])
    t.stage_write_elem(index=0, x=7)
    t.apply_write()
    assert t.gpu.tolist() == [[7, 0, 0, 0], [0, 1, 2, 0]]
    out = fv.async_tensor_h2d(data=[1, 2], device=DEVICE, dtype=torch.int64)
    into = torch.zeros(2, dtype=torch.int64)
    assert fv.async_tensor_h2d([3, 4], DEVICE, torch.int64, into) is into and into.tolist() == [3, 4]
    assert fv.async_tensor_h2d([5, 6], out=into) is into and into.tolist() == [5, 6]
    assert out.tolist() == [1, 2]
    sb = fv.StepBatch(max_concurrency=2, device=DEVICE)
    dst = torch.zeros(3, dtype=torch.int32)
    table = torch.zeros((2, 2), dtype=torch.int32)
    sb.add_upload(dst=dst)
    sb.add_writes(target=table, max_writes=1, max_elements=1)
    sb.step(uploads=[[1, 2, 3]], writes=[(0, 1, 1, [9])])
    assert dst.tolist() == [1, 2, 3] and table.tolist() == [[0, 0], [0, 9]]


def test_version_stubs_and_py_typed():
    here = pathlib.Path(fv.__file__).parent
    assert fv.__version__.startswith("0.1.0+")
    assert (here / "py.typed").is_file() and (here / "__init__.pyi").is_file()
    stub = (here / "__init__.pyi").read_text()
    for name in fv.__all__:
        assert f"{name}" in stub, name


def test_max_writes_and_a_full_pool_grow_as_vllms_pools_do():
    # vLLM 0.34's FusedStagedWriter sizes UvaBufferPools by max_writes, and its pools grow a slot
    # to the next power of two of rows: max_writes is a starting size, as ferry's staging is.
    tensors = [fv.StagedWriteTensor((4, 4), torch.int32, DEVICE) for _ in range(3)]
    for i, t in enumerate(tensors):
        t.stage_write(i, 0, [i + 1, i + 2])
    fv.FusedStagedWriter(DEVICE, max_writes=1).apply(tensors)
    assert [t.gpu[i, :2].tolist() for i, t in enumerate(tensors)] == [[1, 2], [2, 3], [3, 4]]
    pool = fv.UvaBufferPool(8, torch.int32, max_concurrency=2, device=DEVICE)
    out = pool.copy_to_uva(list(range(20)))
    assert out.tolist() == list(range(20))
    assert pool._uva_bufs[pool._curr].cpu.shape == (32,)  # 1 << (20 - 1).bit_length(), as vLLM's
    chunks = pool.copy_chunks_to_uva([np.arange(3, dtype=np.int64), [3, 4], torch.tensor([5])], 6)
    assert chunks.tolist() == [0, 1, 2, 3, 4, 5]


def ferry_error(call, error):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith("ferry: "), (type(info.value).__name__, str(info.value))
    return str(info.value)


BAD = [
    # constructors
    (lambda: fv.StagedWriteTensor((4, -1), torch.int32, DEVICE), ValueError),
    (lambda: fv.StagedWriteTensor("4", torch.int32, DEVICE), TypeError),
    (lambda: fv.StagedWriteTensor(4, "int32", DEVICE), TypeError),
    (lambda: fv.StagedWriteTensor(4, torch.float16, DEVICE), ValueError),
    (lambda: fv.StagedWriteTensor(4, torch.int32, DEVICE, max_concurrency=0), ValueError),
    (lambda: fv.StagedWriteTensor(4, torch.int32, DEVICE, max_concurrency=2.0), TypeError),
    (lambda: fv.StagedWriteTensor([], torch.int32, DEVICE), ValueError),
    (lambda: fv.UvaBufferPool(4.5, torch.int32), TypeError),
    (lambda: fv.UvaBufferPool(4, torch.bool), ValueError),
    (lambda: fv.UvaBackedTensor(-3, torch.int32), ValueError),
    (lambda: fv.CpuGpuBuffer(4, dtype=None, device=DEVICE), TypeError),
    (lambda: fv.CpuGpuBuffer(-4, dtype=torch.int32, device=DEVICE), ValueError),
    (lambda: fv.FusedStagedWriter(DEVICE, max_writes="8"), TypeError),
    (lambda: fv.StepBatch(max_concurrency=1, device=DEVICE), ValueError),
    (lambda: fv.StepBatch(max_concurrency="2", device=DEVICE), TypeError),
    (lambda: fv.set_default_max_concurrency(None), TypeError),
    # calls
    (lambda: fv.async_tensor_h2d([1, 2]), ValueError),  # no device
    (lambda: fv.async_tensor_h2d([1, 2.5], DEVICE, torch.int32), ValueError),
    (lambda: fv.async_tensor_h2d([1, 2], DEVICE, "int32"), TypeError),
    (lambda: fv.async_tensor_h2d([1, 2], out=torch.zeros(3, dtype=torch.int32)), ValueError),
    (lambda: fv.async_tensor_h2d([1, 2], out=[0, 0]), TypeError),
    (lambda: fv.get_accelerator_view_from_cpu_tensor([1, 2]), TypeError),
    (lambda: fv.async_copy_to_gpu([1, 2], device=DEVICE), TypeError),
    (lambda: fv.StagedWriteTensor((2, 4), torch.int32, DEVICE).stage_write(0, 3, [1, 2]), IndexError),
    (lambda: fv.StagedWriteTensor((2, 4), torch.int32, DEVICE).stage_write(-1, 0, [1]), IndexError),
    (lambda: fv.StagedWriteTensor((2, 4), torch.int32, DEVICE).stage_write(0, 0, None), TypeError),
    (lambda: fv.StagedWriteTensor((2, 4), torch.int32, DEVICE).stage_write_elem(0, "7"), TypeError),
    (lambda: fv.UvaBufferPool((4, 3), torch.int32).copy_to_uva([[1, 2, 3], [4, 5]]), ValueError),
    (lambda: fv.UvaBufferPool((4, 3), torch.int32).copy_to_uva(np.zeros((2, 2))), ValueError),
    (lambda: fv.UvaBufferPool(4, torch.int32).copy_to_gpu([1], out="x"), TypeError),
    (lambda: fv.UvaBufferPool(4, torch.int32, device=DEVICE).copy_to_gpu([1, 2], out=torch.zeros(1, dtype=torch.int32)), IndexError),
    (lambda: fv.UvaBufferPool(4, torch.int32).copy_chunks_to_uva([[1, 2]], 3), ValueError),
    (lambda: fv.UvaBackedTensor(4, torch.int32).copy_to_uva(5), IndexError),
    (lambda: fv.UvaBackedTensor(4, torch.int32).copy_to_uva(-1), ValueError),
    (lambda: fv.CpuGpuBuffer(4, dtype=torch.int32, device=DEVICE).copy_to_gpu(5), IndexError),
    (lambda: fv.CpuGpuBuffer(4, dtype=torch.int32, device=DEVICE).copy_to_cpu("2"), TypeError),
    (lambda: fv.FusedStagedWriter(DEVICE, 4).apply([1]), TypeError),
    (lambda: fv.FusedStagedWriter(DEVICE, 4).apply(5), TypeError),
    (lambda: fv.StepBatch(device=DEVICE).add_upload([1, 2]), TypeError),
    (lambda: fv.StepBatch(device=DEVICE).add_writes(torch.zeros((2, 2), dtype=torch.int32), "1", 1), TypeError),
    (lambda: fv.StepBatch(device=DEVICE).step(5, []), TypeError),
    (lambda: fv.StepBatch(device=DEVICE).step([], [(0, 0, 0, [1])]), IndexError),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_every_error_from_bad_input_starts_with_ferry(case):
    call, error = BAD[case]
    ferry_error(call, error)
