"""vLLM's buffer utilities over ferry's C++ components: a drop-in for

    vllm.v1.worker.gpu.buffer_utils   (UvaBuffer, UvaBufferPool, UvaBackedTensor,
                                       StagedWriteTensor, FusedStagedWriter)
    vllm.v1.utils                      (CpuGpuBuffer)
    vllm.utils.torch_utils             (async_tensor_h2d, get_accelerator_view_from_cpu_tensor)

with vLLM's names and signatures: tensors in, tensors out, every copy and kernel on torch's
current stream. Change the import and keep the code:

    from ferry_vllm import CpuGpuBuffer, StagedWriteTensor, UvaBufferPool, async_tensor_h2d

ferry's errors arrive as ValueError (bad argument), IndexError (out of bounds) and RuntimeError
(capacity, stream or state), each naming the mismatch. docs/python.md lists what differs.

Beyond vLLM's interface, ferry's own StepBatch does a whole step's uploads and staged writes in
one Python call and one kernel launch (ferry::step_batch).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

try:
    from . import _C
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "ferry_vllm: its compiled core (ferry_vllm._C) did not load: rebuild it against the "
        f"torch installed now (pip install --no-build-isolation ./python): {e}"
    ) from e

__all__ = [
    "CpuGpuBuffer",
    "FusedStagedWriter",
    "StagedWriteTensor",
    "StepBatch",
    "UvaBackedTensor",
    "UvaBuffer",
    "UvaBufferPool",
    "async_copy_to_gpu",
    "async_tensor_h2d",
    "current_platform",
    "get_accelerator_view_from_cpu_tensor",
    "is_uva_available",
    "set_default_max_concurrency",
]

#: True when the core was built for ferry's CUDA backend; False on ferry's host backend, where
#: "device" memory is host memory and every tensor handed out is a CPU tensor.
CUDA = bool(_C.cuda)

# Default depth of the rotating slots (vLLM's; at least the number of steps in flight). ferry
# never rewrites a slot the GPU may still read: it adds a slot instead of waiting.
_DEFAULT_MAX_CONCURRENCY = 2

# The element types ferry_vllm instantiates (vLLM's StagedWriteTensor takes the same three).
_SUPPORTED = (torch.int32, torch.int64, torch.float32)


def set_default_max_concurrency(n: int) -> None:
    global _DEFAULT_MAX_CONCURRENCY
    _DEFAULT_MAX_CONCURRENCY = max(2, n)


def is_uva_available() -> bool:
    """Kernels can read pinned host memory in place (always on ferry's host backend)."""
    return torch.cuda.is_available() if CUDA else True


class _Platform:
    """The few members of vLLM's `current_platform` that its buffer tests read."""

    device_type = "cuda" if CUDA else "cpu"

    def is_cuda(self) -> bool:
        return CUDA

    def is_xpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return not CUDA


current_platform = _Platform()


def _sizes(size: int | Sequence[int]) -> tuple[int, ...]:
    return (int(size),) if isinstance(size, int) else tuple(int(s) for s in size)


def _width(sizes: tuple[int, ...]) -> int:
    return math.prod(sizes[1:]) if len(sizes) > 1 else 1


def _flatten_rows(rows, tail: list[int], api: str) -> list:
    """Nested lists of rows of shape `tail`, flattened in C order (the numbers are converted by the
    C++ side, exactly); ValueError naming the first row of another shape."""
    flat: list = []

    def walk(v, dims: list[int], where: tuple[int, ...]) -> None:
        if not dims:
            flat.append(v)
            return
        if isinstance(v, (torch.Tensor, np.ndarray)):
            if list(v.shape) != dims:
                raise ValueError(f"ferry: {api}: row {list(where)} has shape {list(v.shape)}, not the pool's rows {dims}")
            flat.extend(v.reshape(-1).tolist())  # Python numbers: the values as they are
            return
        if not isinstance(v, Sequence) or isinstance(v, str) or len(v) != dims[0]:
            got = len(v) if isinstance(v, Sequence) and not isinstance(v, str) else type(v).__name__
            raise ValueError(f"ferry: {api}: row {list(where)} has {got} elements where the pool's rows have {dims[0]}")
        for i, e in enumerate(v):
            walk(e, dims[1:], (*where, i))

    for i, row in enumerate(rows):
        walk(row, tail, (i,))
    return flat


@functools.lru_cache(maxsize=64)
def _device_index(device) -> int | None:
    """The CUDA device index `device` names (None: the current one); ValueError for another type."""
    if device is None:
        return None
    d = torch.device(device) if not isinstance(device, torch.device) else device
    if d.type != current_platform.device_type:
        raise ValueError(
            f"ferry: device type mismatch: this ferry_vllm build places tensors on "
            f"{current_platform.device_type}, got {d}"
        )
    return d.index if CUDA else None


def _on_device(device):
    """A context that makes `device` current (torch.cuda.device), or nothing to do."""
    index = _device_index(device)
    if index is None or not CUDA or index == torch.cuda.current_device():
        return _NoContext
    return torch.cuda.device(index)


class _NoContextType:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NoContext = _NoContextType()


# ---- vllm.utils.torch_utils ---------------------------------------------------------------------


def async_tensor_h2d(data, *args, dtype=None, device=None, target_device=None, pin_memory=None):
    """A new device tensor holding `data` (a list, NumPy array or CPU tensor), copied by
    ferry::async_h2d on torch's current stream without blocking the host.

    Takes both of vLLM's signatures: `(data, dtype, target_device, pin_memory)` and
    `(data, device, dtype=None)`. A list or pageable source is staged through ferry's pinned arena
    (it may be modified as soon as this returns); `pin_memory` is accepted and not needed."""
    if args:
        if isinstance(args[0], torch.dtype) or args[0] is None:
            dtype = args[0]
            if len(args) > 1:
                target_device = args[1]
            if len(args) > 2:
                pin_memory = args[2]
        else:
            device = args[0]
            if len(args) > 1:
                dtype = args[1]
    del pin_memory  # accepted for vLLM's signature: ferry stages a pageable source either way
    if device is None:
        device = target_device
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if dtype is None:
        dtype = data.dtype if isinstance(data, torch.Tensor) else torch.tensor(data[:1], device="cpu").dtype
    if dtype not in _SUPPORTED:
        # Element types ferry_vllm does not instantiate take torch's own path.
        t = data if isinstance(data, torch.Tensor) else torch.tensor(data, dtype=dtype, device="cpu")
        return t.pin_memory().to(device=device, dtype=dtype, non_blocking=True) if CUDA else t.to(dtype)
    with _on_device(device):
        return _C.h2d(data, dtype)


def get_accelerator_view_from_cpu_tensor(cpu_tensor: torch.Tensor) -> torch.Tensor:
    """The device (UVA) view of a CPU tensor's memory, same sizes and strides. A tensor that is
    not pinned is first copied into pinned memory (the view then shows that copy)."""
    if CUDA and not cpu_tensor.is_pinned():
        cpu_tensor = cpu_tensor.pin_memory()
    return _C.uva_view(cpu_tensor)


# ---- vllm.v1.utils ------------------------------------------------------------------------------


class CpuGpuBuffer:
    """A pinned host array (`cpu`, with its NumPy view `np`) and a device array (`gpu`) of the
    same sizes, over ferry::cpu_gpu_buffer. copy_to_gpu snapshots cpu[:n] before it returns, so the
    host array may be rewritten at once (vLLM: not before the copy has run)."""

    def __init__(
        self,
        *size: int,
        dtype: torch.dtype,
        device: torch.device | str | None = None,
        pin_memory: bool = True,
        with_numpy: bool = True,
    ) -> None:
        sizes = _sizes(size[0]) if len(size) == 1 and not isinstance(size[0], int) else _sizes(size)
        self._row = _width(sizes)
        if dtype in _SUPPORTED:
            with _on_device(device):
                self._buf = _C.CpuGpu(math.prod(sizes), dtype)
                self.cpu = self._buf.cpu(list(sizes))
                self.gpu = self._buf.gpu(list(sizes))
                self.gpu.zero_()
        else:
            # Element types ferry_vllm does not instantiate keep torch's own copies.
            self._buf = None
            self.cpu = torch.zeros(sizes, dtype=dtype, device="cpu", pin_memory=pin_memory and CUDA)
            self.gpu = torch.zeros_like(self.cpu, device=device if CUDA else "cpu")
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError(
                    "ferry: CpuGpuBuffer: bfloat16 tensors have no NumPy view; pass with_numpy=False"
                )
            self.np = self.cpu.numpy()

    def copy_to_gpu(self, n: int | None = None) -> torch.Tensor:
        if self._buf is None:
            src, dst = (self.cpu, self.gpu) if n is None else (self.cpu[:n], self.gpu[:n])
            return dst.copy_(src, non_blocking=True)
        rows = self.gpu.shape[0] if n is None else n
        self._buf.copy_to_gpu(rows * self._row)
        return self.gpu if n is None else self.gpu[:n]

    def copy_to_cpu(self, n: int | None = None) -> torch.Tensor:
        """Enqueues the copy of gpu[:n] into cpu[:n]; read cpu once the stream has passed it."""
        if self._buf is None:
            src, dst = (self.gpu, self.cpu) if n is None else (self.gpu[:n], self.cpu[:n])
            return dst.copy_(src, non_blocking=True)
        rows = self.cpu.shape[0] if n is None else n
        self._buf.copy_to_cpu(rows * self._row)
        return self.cpu if n is None else self.cpu[:n]


# ---- vllm.v1.worker.gpu.buffer_utils ------------------------------------------------------------


def async_copy_to_gpu(x, out: torch.Tensor | None = None, device=None) -> torch.Tensor:
    """Copies the CPU tensor or NumPy array `x` to the device (into `out` when given)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if out is None:
        return async_tensor_h2d(x, device=device, dtype=x.dtype).view(x.shape)
    return out.copy_(x.pin_memory() if CUDA else x, non_blocking=True)


class UvaBuffer:
    """Pinned host memory (`cpu`, `np`) and its UVA view (`uva`) that kernels read in place."""

    def __init__(self, size: int | Sequence[int], dtype: torch.dtype):
        if not is_uva_available():
            raise RuntimeError("UVA is not available")
        self.cpu = torch.zeros(_sizes(size), dtype=dtype, device="cpu", pin_memory=CUDA)
        self.np = self.cpu.numpy()
        self.uva = _C.uva_view(self.cpu)

    @classmethod
    def _over(cls, cpu: torch.Tensor, uva: torch.Tensor) -> UvaBuffer:
        """A UvaBuffer over memory someone else owns (a slot of a UvaBufferPool)."""
        buf = cls.__new__(cls)
        buf.cpu, buf.np, buf.uva = cpu, cpu.numpy(), uva
        return buf


class UvaBufferPool:
    """A ring of `max_concurrency` pinned, mapped slots (ferry::uva_pool): copy_to_uva writes the
    source into the next slot and returns its UVA view. A source longer than the slot grows it to
    the next power of two of rows; a slot the GPU may still read is never rewritten (ferry inserts
    a fresh slot instead of waiting)."""

    def __init__(
        self,
        size: int | Sequence[int],
        dtype: torch.dtype,
        max_concurrency: int | None = None,
    ):
        if max_concurrency is None:
            max_concurrency = _DEFAULT_MAX_CONCURRENCY
        self.size = size
        self.dtype = dtype
        self.max_concurrency = max_concurrency
        sizes = _sizes(size)
        self._tail = list(sizes[1:])
        self._pool = _C.UvaPool(sizes[0], _width(sizes), dtype, max_concurrency)
        self._slot_bufs: dict[tuple[int, int], UvaBuffer] = {}

    @property
    def _curr(self) -> int:
        """The index of the slot the last copy_to_uva used (0 before the first): ferry's
        current_slot()."""
        return self._pool.current_slot

    @property
    def _uva_bufs(self) -> list[UvaBuffer]:
        """vLLM's list of the pool's slots, read from ferry's ring as it is now: one UvaBuffer per
        slot, in ring order, whose `cpu`/`np`/`uva` are all of that slot (its capacity in rows;
        past what the slot's last call wrote, the rows are the slot's old contents; every slot is
        zero-filled when the pool is made). A slot whose memory and capacity are unchanged gives
        the same object; one that grew gives a new one. ferry may hold more slots than
        max_concurrency (a fresh slot is inserted when every other is still read). An entry lives
        as the views copy_to_uva returns do: once its slot grows, its old memory may go back to
        ferry's arena."""
        seen: dict[tuple[int, int], UvaBuffer] = {}
        bufs = []
        for i in range(self._pool.slots):
            key = (self._pool.slot_address(i), self._pool.capacity(i))
            buf = self._slot_bufs.get(key)
            if buf is None:
                buf = UvaBuffer._over(*self._pool.slot(i, self._tail))
            seen[key] = buf
            bufs.append(buf)
        self._slot_bufs = seen
        return bufs

    def _source(self, x):
        """x as copy_to_uva reads it: a tensor or NumPy array whose rows match the pool's (its
        elements converted exactly by the C++ side), or nested lists flattened row by row."""
        if not self._tail:
            return x  # lists, NumPy arrays and tensors are read by the C++ side as they are
        if isinstance(x, (torch.Tensor, np.ndarray)):
            if x.ndim < 1 or list(x.shape[1:]) != self._tail:
                raise ValueError(
                    f"ferry: copy_to_uva: rows of shape {list(x.shape[1:])} do not match the "
                    f"pool's rows {self._tail}"
                )
            return x
        if not x:
            raise ValueError(
                f"ferry: copy_to_uva: could not broadcast an empty list into rows of shape {self._tail}"
            )
        return _flatten_rows(x, self._tail, "copy_to_uva")

    def copy_to_uva(self, x: torch.Tensor | np.ndarray | list) -> torch.Tensor:
        return self._pool.copy_to_uva(self._source(x), self._tail)

    def copy_to_gpu(self, x: torch.Tensor | np.ndarray, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is None:
            return self.copy_to_uva(x).clone()
        return self._pool.copy_to_device(self._source(x), out)

    def record_use(self) -> None:
        """Declares that work enqueued on torch's current stream reads the last view (needed only
        for a reader on a stream other than the pool's next call's)."""
        self._pool.record_use()


class UvaBackedTensor:
    """Host-owned state (`cpu`, `np`: ordinary memory, the source of truth) published to kernels
    by copy_to_uva into the next slot of a UVA ring (ferry::uva_backed); `gpu` is the last view."""

    def __init__(
        self,
        size: int | Sequence[int],
        dtype: torch.dtype,
        max_concurrency: int | None = None,
    ):
        if max_concurrency is None:
            max_concurrency = _DEFAULT_MAX_CONCURRENCY
        self.dtype = dtype
        sizes = _sizes(size)
        self._rows = sizes[0]
        self._tail = list(sizes[1:])
        self._state = _C.UvaBacked(sizes[0], _width(sizes), dtype, max_concurrency)
        self.cpu = self._state.host(list(sizes))
        self.np = self.cpu.numpy()
        self.gpu = self._state.publish(self._rows, self._tail)

    def copy_to_uva(self, n: int | None = None) -> torch.Tensor:
        self.gpu = self._state.publish(self._rows if n is None else n, self._tail)
        return self.gpu


class StagedWriteTensor(_C.Staged):
    """A persistent device tensor (`gpu`) updated by staged row-segment writes, applied with one
    kernel launch (ferry::staged_write_tensor). stage_write checks its bounds at once (IndexError,
    nothing recorded); within one apply, of two overlapping writes the later one wins.

    stage_write(index, start, x), stage_write_elem(index, x) and apply_write() are ferry's own
    (the C++ members, called without a Python frame); x is a list, tuple, range, generator, NumPy
    array or CPU tensor. device="cpu" (vLLM's CPU worker) makes `gpu` a CPU tensor, written on
    ferry's host backend; apply_write is then done when it returns."""

    def __init__(
        self,
        size: int | Sequence[int],
        dtype: torch.dtype,
        device: torch.device | str,
        max_concurrency: int | None = None,
        uva_instead_of_gpu: bool = False,
    ):
        if max_concurrency is None:
            max_concurrency = _DEFAULT_MAX_CONCURRENCY
        if dtype not in _SUPPORTED:
            raise ValueError(f"Unsupported dtype {dtype}: should be one of {list(_SUPPORTED)}")
        sizes = _sizes(size)
        self.num_rows = sizes[0]
        self.dtype = dtype
        self.device = device
        self.max_concurrency = max_concurrency
        if CUDA and not uva_instead_of_gpu and device is not None and torch.device(device).type == "cpu":
            # vLLM's CPU worker: a CPU tensor, written on ferry's host backend (each apply done
            # when it returns, as torch's CPU ops are).
            self.gpu = torch.zeros(sizes, dtype=dtype, device="cpu")
            _C.Staged.__init__(self, self.gpu, sizes[0], _width(sizes), False, max_concurrency)
            self.write_contents = None
            return
        with _on_device(device):
            if not uva_instead_of_gpu:
                self.gpu = torch.zeros(sizes, dtype=dtype, device=device if CUDA else "cpu")
                _C.Staged.__init__(self, self.gpu, sizes[0], _width(sizes), False, max_concurrency)
            else:
                # A large, rarely read tensor in pinned host memory that kernels write in place.
                self._uva_buf = UvaBuffer(sizes, dtype)
                self.gpu = self._uva_buf.uva
                _C.Staged.__init__(self, self._uva_buf.cpu, sizes[0], _width(sizes), True, max_concurrency)
        # vLLM keeps a UVA pool for the contents of UVA targets (read in place, never copied to
        # the device); ferry does the same for a UVA target (its staging slots are read in place).
        self.write_contents = self if uva_instead_of_gpu else None

    def clear_staged_writes(self) -> None:
        self.clear()

    @property
    def num_staged_writes(self) -> int:
        return self.pending


class FusedStagedWriter:
    """Applies the staged writes of several StagedWriteTensors with one launch per element type
    and target kind (ferry::fused_staged_writer); tensors on device="cpu" are applied one by one,
    each done when the call returns (vLLM's CPU worker applies them so)."""

    def __init__(self, device: torch.device | str, max_writes: int, max_concurrency: int | None = None):
        if max_concurrency is None:
            max_concurrency = _DEFAULT_MAX_CONCURRENCY
        self.device = device
        self.max_writes = max_writes
        self._w = _C.Fused(max_concurrency)

    def apply(
        self,
        tensors: Sequence[StagedWriteTensor],
        output_ptrs: torch.Tensor | None = None,
        output_strides: torch.Tensor | None = None,
    ) -> None:
        """Applies and clears the staged writes of `tensors` (output_ptrs and output_strides, vLLM's
        scratch for its kernel's table, are accepted and not needed)."""
        self._w.apply(list(tensors))


# ---- ferry's own addition -----------------------------------------------------------------------


class StepBatch(_C.Step):
    """A whole engine step's uploads and staged writes in ONE call and ONE kernel launch
    (ferry::step_batch: growth::pow2, reuse::event_fenced, launch::kernel), on torch's current
    stream of the device current when it is made. Not a vLLM name: ferry's own addition.

    Plan, once (the tensors are held by the batch; each must be contiguous, on the batch's
    memory device, of dtype int32, int64 or float32):

        sb = StepBatch(max_concurrency=2)
        ids = sb.add_upload(input_ids)        # 1-D: each step writes input_ids[:n]
        table = sb.add_writes(block_table, max_writes=64, max_elements=1024)   # 2-D target

    Every step, one call:

        sb.step([token_ids, None],            # one source per upload, in order (None: none)
                [(table, row, start, values), ...])

    A source or a write's values is a list, tuple, NumPy array or CPU tensor, read as
    StagedWriteTensor.stage_write reads its values, and consumed when step() returns. The maxima
    of add_writes are starting sizes (the slots grow to the largest step); an upload takes at most
    its destination's numel() elements. Any error (a source longer than its destination:
    IndexError naming the upload and both sizes; a write out of bounds: IndexError; a wrong number
    of sources: ValueError) drops the whole step: nothing of it lands, and the batch is ready for
    the next step(). On the host backend a step has landed when step() returns. `steps` counts
    the steps submitted."""

    def __init__(self, max_concurrency: int | None = None):
        if max_concurrency is None:
            max_concurrency = _DEFAULT_MAX_CONCURRENCY
        _C.Step.__init__(self, max_concurrency)
