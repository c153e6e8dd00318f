"""ferry_vllm's torch.library ops: the free functions, so that torch.compile(fullgraph=True)
traces them (vLLM registers its UVA view as an op the same way). Each has a fake (meta) kernel that
says what it returns without running it.

    torch.ops.ferry_vllm.async_tensor_h2d(src, dtype, device) -> Tensor
        ferry_vllm.async_tensor_h2d of a CPU tensor: a new tensor of src's shape on `device`
    torch.ops.ferry_vllm.uva_view(cpu_tensor) -> Tensor
        ferry_vllm.get_accelerator_view_from_cpu_tensor: the platform device's view of the memory
    torch.ops.ferry_vllm.step(batch, uploads, gathers, host_values, publishes) -> Tensor[]
        StepBatch.submit: a step of uploads, gathers (with host rows) and publishes, given as
        tensors; returns the batch's destinations (which the step writes), for compiled code to
        read after it

ferry_vllm's Python functions call these ops while torch.compile traces (and the extension
directly otherwise, to keep the eager path's cost).
"""

from __future__ import annotations

import weakref

import torch

from . import _C

_batches: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # StepBatch.submit's batches


def _platform_cuda() -> bool:
    from . import _gpu

    return _gpu()


@torch.library.custom_op("ferry_vllm::async_tensor_h2d", mutates_args=())
def async_tensor_h2d(src: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    from . import _device, _on

    cuda, index = _device(device, "async_tensor_h2d")
    with _on(cuda, index):
        return _C.h2d(src, dtype, cuda, None).view(src.shape)


@async_tensor_h2d.register_fake
def _(src, dtype, device):
    return torch.empty(src.shape, dtype=dtype, device=device)


@torch.library.custom_op("ferry_vllm::uva_view", mutates_args=())
def uva_view(cpu_tensor: torch.Tensor) -> torch.Tensor:
    cuda = _platform_cuda()
    if cuda and not cpu_tensor.is_pinned():
        cpu_tensor = cpu_tensor.pin_memory()
    return _C.uva_view(cpu_tensor, cuda)


@uva_view.register_fake
def _(cpu_tensor):
    device = "cuda" if _platform_cuda() else "cpu"
    return torch.empty_strided(cpu_tensor.shape, cpu_tensor.stride(), dtype=cpu_tensor.dtype, device=device)


@torch.library.custom_op("ferry_vllm::step", mutates_args=())
def step(
    batch: int,
    uploads: list[torch.Tensor | None],
    gathers: list[torch.Tensor | None],
    host_values: list[torch.Tensor | None],
    publishes: list[torch.Tensor | None],
) -> list[torch.Tensor]:
    sb = _batch(batch)
    sb.step(uploads, [], gathers or None, host_values or None, publishes or None)
    # The destinations the step wrote, as the op's results: compiled code reads them from here, so
    # that its reads come after the step.
    return [t.view(t.shape) for t in sb._outputs]


@step.register_fake
def _(batch, uploads, gathers, host_values, publishes):
    return [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device) for t in _batch(batch)._outputs]


def _batch(key: int):
    sb = _batches.get(key)
    if sb is None:
        raise RuntimeError(f"ferry: ferry_vllm::step: batch {key} no longer exists")
    return sb
