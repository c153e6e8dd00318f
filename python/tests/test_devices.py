# One build, both devices: every object picks its backend from its device argument (device="cpu":
# ferry's host backend, in every build; device="cuda": ferry's CUDA backend, in a CUDA build), as
# vLLM's utilities take device="cpu" on its CPU worker; the version's local label and `backends`
# say which the build holds.
import re

import pytest
import torch

import ferry_vllm as fv
from conftest import GPU, NO_GPU


def test_the_build_says_which_backends_it_holds():
    label = fv.__version__.partition("+")[2]
    assert re.fullmatch(r"cpu(\.cu\d+)?", label), fv.__version__
    assert fv.backends == (("cpu", "cuda") if ".cu" in label else ("cpu",))
    assert fv.CUDA == ("cuda" in fv.backends)
    assert fv.current_platform.device_type == ("cuda" if GPU else "cpu")


def every_object(device):
    """One object of each class on `device`, and what each hands out."""
    staged = fv.StagedWriteTensor((2, 4), torch.int32, device)
    uva_staged = fv.StagedWriteTensor((2, 4), torch.float32, device, uva_instead_of_gpu=True)
    buf = fv.CpuGpuBuffer(4, dtype=torch.int64, device=device)
    pool = fv.UvaBufferPool(4, torch.int32, device=device)
    backed = fv.UvaBackedTensor(4, torch.float32, device=device)
    uva = fv.UvaBuffer(4, torch.int32, device=device)
    sb = fv.StepBatch(device=device)
    return {
        "StagedWriteTensor.gpu": staged.gpu,
        "StagedWriteTensor(uva).gpu": uva_staged.gpu,
        "CpuGpuBuffer.gpu": buf.gpu,
        "UvaBufferPool.copy_to_uva": pool.copy_to_uva([1, 2]),
        "UvaBackedTensor.gpu": backed.gpu,
        "UvaBuffer.uva": uva.uva,
        "async_tensor_h2d": fv.async_tensor_h2d([1, 2], device, torch.int32),
        "StepBatch.device": torch.empty(0, device=sb.device),
    }


def test_cpu_objects_in_any_build():
    # A CUDA build on a machine without a GPU serves device="cpu" (the host backend) in full.
    for what, t in every_object("cpu").items():
        assert t.device.type == "cpu", what
    t = fv.StagedWriteTensor((2, 4), torch.int32, "cpu")
    t.stage_write(1, 1, [5, 6])
    t.apply_write()
    assert t.gpu.tolist() == [[0, 0, 0, 0], [0, 5, 6, 0]]


@pytest.mark.skipif(not GPU, reason=NO_GPU)
def test_cuda_and_cpu_objects_side_by_side():
    cpu, cuda = every_object("cpu"), every_object("cuda")
    for what in cpu:
        assert cpu[what].device.type == "cpu" and cuda[what].device.type == "cuda", what
    a = fv.StagedWriteTensor((2, 4), torch.int64, "cpu")
    b = fv.StagedWriteTensor((2, 4), torch.int64, "cuda")
    a.stage_write(0, 0, [1, 2])
    b.stage_write(1, 2, [3, 4])
    fv.FusedStagedWriter("cuda", max_writes=4).apply([a, b])
    torch.cuda.synchronize()
    assert a.gpu.tolist() == [[1, 2, 0, 0], [0, 0, 0, 0]]
    assert b.gpu.cpu().tolist() == [[0, 0, 0, 0], [0, 0, 3, 4]]


@pytest.mark.skipif(fv.CUDA, reason="a CUDA build serves device='cuda'")
def test_cuda_in_a_host_only_build_says_how_to_get_it():
    with pytest.raises(ValueError, match=r"^ferry: StagedWriteTensor: device='cuda' needs ferry_vllm's CUDA build"):
        fv.StagedWriteTensor(4, torch.int32, "cuda")
    with pytest.raises(ValueError, match=r"^ferry: StepBatch: device='cuda:1' needs ferry_vllm's CUDA build"):
        fv.StepBatch(device="cuda:1")


@pytest.mark.skipif(not fv.CUDA or GPU, reason="needs a CUDA build on a machine without a GPU")
def test_cuda_without_a_gpu_says_so():
    for make in (lambda: fv.StagedWriteTensor(4, torch.int32, "cuda"), lambda: fv.StepBatch(device="cuda"),
                 lambda: fv.UvaBufferPool(4, torch.int32, device="cuda"),
                 lambda: fv.async_tensor_h2d([1], "cuda", torch.int32)):
        with pytest.raises(RuntimeError, match=r"^ferry: .*device='cuda' but torch sees no CUDA device"):
            make()


@pytest.mark.parametrize(
    "device, error, match",
    [
        ("meta", ValueError, r"device type 'meta' is not one ferry_vllm serves"),
        ("bogus", TypeError, r"device must be a torch.device"),
        ([0], TypeError, r"device must be a torch.device, a str or an int, got list"),
    ],
)
def test_devices_ferry_does_not_serve(device, error, match):
    for make in (lambda: fv.StagedWriteTensor(4, torch.int32, device), lambda: fv.StepBatch(device=device),
                 lambda: fv.CpuGpuBuffer(4, dtype=torch.int32, device=device)):
        with pytest.raises(error, match=r"^ferry: \w+: " + match):
            make()
