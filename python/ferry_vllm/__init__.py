"""vLLM's buffer utilities over ferry's C++ components: a drop-in for

    vllm.v1.worker.gpu.buffer_utils   (UvaBuffer, UvaBufferPool, UvaBackedTensor,
                                       StagedWriteTensor, FusedStagedWriter)
    vllm.v1.utils                      (CpuGpuBuffer)
    vllm.utils.torch_utils             (async_tensor_h2d, get_accelerator_view_from_cpu_tensor)

with vLLM's names and signatures: tensors in, tensors out, every copy and kernel on torch's
current stream. Change the import and keep the code:

    from ferry_vllm import CpuGpuBuffer, StagedWriteTensor, UvaBufferPool, async_tensor_h2d

One build serves both devices, chosen per object from its device argument as vLLM's utilities
are: device="cpu" runs on ferry's host backend (vLLM's CPU worker), device="cuda" on its CUDA
backend (a CUDA build; `backends` says which the build holds). Classes without a device argument
take the platform's: "cuda" where the build holds CUDA and torch sees a GPU, else "cpu".

Values are converted only when exact, whatever the source; every error from bad input starts with
"ferry: " and arrives as ValueError (bad argument or value), TypeError (not a number, wrong
type), IndexError (out of bounds) or RuntimeError (capacity, stream or state). docs/python.md
lists what differs from vLLM.

Beyond vLLM's interface, ferry's own StepBatch does a whole step's uploads, gathers and staged
writes, and the derived inputs, in one Python call and one kernel launch (ferry::step_batch), and
VllmStepPrep prepares a whole step of vLLM's model runner v2 (prepare_inputs + prepare_attn) that
way.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

try:
    from . import _C
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "ferry: ferry_vllm's compiled core (ferry_vllm._C) did not load: rebuild it against the "
        f"torch installed now (pip install --no-build-isolation ./python): {e}"
    ) from e

if torch.__version__.split("+")[0] != _C.torch_version:  # pragma: no cover - depends on the install
    raise ImportError(
        f"ferry: ferry_vllm {_C.version} was built against torch {_C.torch_version}, and torch "
        f"{torch.__version__} is installed: rebuild it against this torch "
        "(pip install --no-build-isolation ./python)"
    )

__all__ = [
    "CpuGpuBuffer",
    "FROM_HOST",
    "FusedStagedWriter",
    "StagedWriteTensor",
    "StepBatch",
    "UvaBackedTensor",
    "UvaBuffer",
    "UvaBufferPool",
    "VllmStepPrep",
    "VllmStepInputs",
    "async_copy_to_gpu",
    "async_tensor_h2d",
    "backends",
    "current_platform",
    "get_accelerator_view_from_cpu_tensor",
    "is_uva_available",
    "set_default_max_concurrency",
]

#: The version; its local label names the backends the build holds ("0.1.0+cpu": ferry's host
#: backend only; "0.1.0+cpu.cu132": both, the CUDA one for torch's CUDA 13.2).
__version__: str = _C.version

#: True when the build holds ferry's CUDA backend (device="cuda"); every build holds the host one.
CUDA: bool = bool(_C.cuda)

#: The device types this build serves, each on its own ferry backend.
backends: tuple[str, ...] = ("cpu", "cuda") if CUDA else ("cpu",)

#: The gather index of a row that takes its value from the host (StepBatch.step's host_values).
FROM_HOST = -1

# Default depth of the rotating slots (vLLM's; at least the number of steps in flight). ferry
# never rewrites a slot the GPU may still read: it adds a slot instead of waiting.
_DEFAULT_MAX_CONCURRENCY = 2

# The element types ferry_vllm instantiates (vLLM's StagedWriteTensor takes the same three).
_SUPPORTED = (torch.int32, torch.int64, torch.float32)


def set_default_max_concurrency(n: int) -> None:
    global _DEFAULT_MAX_CONCURRENCY
    _DEFAULT_MAX_CONCURRENCY = max(2, _int(n, "set_default_max_concurrency", "n"))


@functools.lru_cache(maxsize=1)
def _gpu() -> bool:
    """The build holds CUDA and torch sees a GPU."""
    return CUDA and torch.cuda.is_available()


def is_uva_available() -> bool:
    """Kernels can read pinned host memory in place: on a GPU, and always on ferry's host backend
    (where "device" memory is host memory), as vLLM's CPU platform answers."""
    return True


class _Platform:
    """The few members of vLLM's `current_platform` that its buffer tests read: the platform's
    device type is "cuda" where this build holds CUDA and torch sees a GPU, else "cpu"."""

    @property
    def device_type(self) -> str:
        return "cuda" if _gpu() else "cpu"

    def is_cuda(self) -> bool:
        return _gpu()

    def is_xpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return not _gpu()


current_platform = _Platform()


# ---- arguments ---------------------------------------------------------------------------------


def _int(v, api: str, what: str, minimum: int = 0) -> int:
    """An int argument of at least `minimum` (anything with __index__; not a bool, not a float)."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise TypeError(f"ferry: {api}: {what} must be an int, got {v!r} ({type(v).__name__})")
    v = v.__index__()
    if v < minimum:
        raise ValueError(f"ferry: {api}: {what} must be at least {minimum}, got {v}")
    return v


def _dtype(dtype, api: str) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"ferry: {api}: dtype must be a torch.dtype, got {dtype!r} ({type(dtype).__name__})")
    return dtype


def _supported(dtype, api: str) -> torch.dtype:
    if _dtype(dtype, api) not in _SUPPORTED:
        raise ValueError(f"ferry: {api}: unsupported dtype {dtype}: should be one of {list(_SUPPORTED)}")
    return dtype


def _sizes(size, api: str) -> tuple[int, ...]:
    """vLLM's `size`: an int or a sequence of ints, each at least 0."""
    if isinstance(size, (Sequence, torch.Size)) and not isinstance(size, str):
        if len(size) == 0:
            raise ValueError(f"ferry: {api}: size must have at least one dimension, got {size!r}")
        return tuple(_int(s, api, "size", 0) for s in size)
    return (_int(size, api, "size", 0),)


def _width(sizes: tuple[int, ...]) -> int:
    return math.prod(sizes[1:]) if len(sizes) > 1 else 1


def _max_concurrency(n, api: str, minimum: int = 1) -> int:
    return _DEFAULT_MAX_CONCURRENCY if n is None else _int(n, api, "max_concurrency", minimum)


def _tensor(t, api: str, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"ferry: {api}: {what} must be a torch.Tensor, got {type(t).__name__}")
    return t


@functools.lru_cache(maxsize=64)
def _resolve(device) -> tuple[bool, int | None] | str:
    """(cuda, index) for a device argument, or the message of why it is refused."""
    try:
        d = device if isinstance(device, torch.device) else torch.device(device)
    except (TypeError, RuntimeError, ValueError) as e:
        return f"device must be a torch.device, a str such as 'cpu' or 'cuda:0', or a CUDA index; got {device!r} ({e})"
    if d.type == "cpu":
        return False, None
    if d.type == "cuda":
        if not CUDA:
            return (
                f"device={str(d)!r} needs ferry_vllm's CUDA build; this build ({__version__}) holds ferry's host "
                "backend only (device='cpu'): rebuild where torch has CUDA and nvcc is found (docs/python.md)"
            )
        return True, d.index
    return f"device type {d.type!r} is not one ferry_vllm serves ({', '.join(backends)})"


def _device(device, api: str) -> tuple[bool, int | None]:
    """The backend of a device argument (None: the platform's): (cuda, CUDA index or None)."""
    if device is None:
        return (True, None) if _gpu() else (False, None)
    try:
        got = _resolve(device)
    except TypeError:  # unhashable
        got = f"device must be a torch.device, a str or an int, got {type(device).__name__}"
    if isinstance(got, str):
        raise (TypeError if got.startswith("device must") else ValueError)(f"ferry: {api}: {got}")
    if got[0] and not _gpu():
        raise RuntimeError(
            f"ferry: {api}: device={str(device)!r} but torch sees no CUDA device (torch.cuda.is_available() is "
            "False): use device='cpu' (ferry's host backend) on this machine"
        )
    return got


def _on(cuda: bool, index: int | None):
    """A context that makes CUDA device `index` current, or nothing to do."""
    if not cuda or index is None or index == torch.cuda.current_device():
        return _NoContext
    return torch.cuda.device(index)


class _NoContextType:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NoContext = _NoContextType()


def _torch_device(cuda: bool, index: int | None) -> torch.device:
    return torch.device("cuda", index if index is not None else torch.cuda.current_device()) if cuda else torch.device("cpu")


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


def _infer_dtype(data) -> torch.dtype:
    """torch.tensor's dtype for a sequence of Python numbers: bool, int64, or the default float."""
    kinds = {type(v) for v in data}
    if kinds and kinds <= {bool, np.bool_}:
        return torch.bool
    if any(issubclass(k, (float, np.floating)) for k in kinds):
        return torch.get_default_dtype()
    return torch.int64


# ---- vllm.utils.torch_utils ---------------------------------------------------------------------


def async_tensor_h2d(data, *args, dtype=None, device=None, target_device=None, pin_memory=None, out=None):
    """A device tensor holding `data` (a list, NumPy array or CPU tensor), copied by
    ferry::async_h2d on torch's current stream without blocking the host; into `out` when given.

    Takes both of vLLM's signatures: `(data, device=None, dtype=None, out=None)` and the older
    `(data, dtype, target_device, pin_memory)`. A list or pageable source is staged through
    ferry's pinned arena (it may be modified as soon as this returns); `pin_memory` is accepted and
    not needed."""
    if args:
        if isinstance(args[0], torch.dtype) or args[0] is None:
            dtype = args[0]
            if len(args) > 1:
                target_device = args[1]
            if len(args) > 2:
                pin_memory = args[2]
            if len(args) > 3:
                raise TypeError(f"ferry: async_tensor_h2d: at most 4 positional arguments, got {len(args) + 1}")
        else:
            device = args[0]
            if len(args) > 1:
                dtype = args[1]
            if len(args) > 2:
                out = args[2]
            if len(args) > 3:
                raise TypeError(f"ferry: async_tensor_h2d: at most 4 positional arguments, got {len(args) + 1}")
    del pin_memory  # accepted for vLLM's signature: ferry stages a pageable source either way
    if device is None:
        device = target_device
    if out is not None:
        _tensor(out, "async_tensor_h2d", "out")
        if dtype is None:
            dtype = out.dtype
        if device is None:
            device = out.device
    if dtype is None:
        if isinstance(data, np.ndarray):
            dtype = torch.from_numpy(data[:0]).dtype if data.dtype.kind in "biuf" else None
        elif isinstance(data, torch.Tensor):
            dtype = data.dtype
        else:
            dtype = _infer_dtype(data)
    _dtype(dtype, "async_tensor_h2d")
    if device is None:
        raise ValueError("ferry: async_tensor_h2d: must provide destination tensor or device")
    if torch.compiler.is_compiling() and dtype in _SUPPORTED:
        # torch.compile traces the op (torch.ops.ferry_vllm.async_tensor_h2d, with a fake kernel);
        # the op checks the device when it runs.
        src = data if isinstance(data, torch.Tensor) else torch.as_tensor(data)
        t = torch.ops.ferry_vllm.async_tensor_h2d(src, dtype, torch.device(device))
        return t if out is None else out.copy_(t)
    cuda, index = _device(device, "async_tensor_h2d")
    if dtype not in _SUPPORTED:
        # Element types ferry_vllm does not instantiate take torch's own path.
        t = data if isinstance(data, torch.Tensor) else torch.tensor(data, dtype=dtype, device="cpu")
        t = t.pin_memory().to(device=device, dtype=dtype, non_blocking=True) if cuda else t.to(dtype)
        return t if out is None else out.copy_(t, non_blocking=True)
    with _on(cuda, index):
        return _C.h2d(data, dtype, cuda, out)


def get_accelerator_view_from_cpu_tensor(cpu_tensor: torch.Tensor) -> torch.Tensor:
    """The device (UVA) view of a CPU tensor's memory, same sizes and strides, on the platform's
    device (current_platform.device_type). A tensor that is not pinned is first copied into pinned
    memory (the view then shows that copy). On the CPU platform, the tensor itself."""
    _tensor(cpu_tensor, "get_accelerator_view_from_cpu_tensor", "cpu_tensor")
    if torch.compiler.is_compiling():
        return torch.ops.ferry_vllm.uva_view(cpu_tensor)  # traced as an op, as vLLM's view is
    cuda = _gpu()
    if cuda and not cpu_tensor.is_pinned():
        cpu_tensor = cpu_tensor.pin_memory()
    return _C.uva_view(cpu_tensor, cuda)


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
        api = "CpuGpuBuffer"
        sizes = _sizes(size[0] if len(size) == 1 and not isinstance(size[0], int) else size, api)
        dtype = _dtype(dtype, api)
        cuda, index = _device(device, api)
        self._row = _width(sizes)
        if dtype in _SUPPORTED:
            with _on(cuda, index):
                self._buf = _C.CpuGpu(math.prod(sizes), dtype, cuda)
                self.cpu = self._buf.cpu(list(sizes))
                self.gpu = self._buf.gpu(list(sizes))
                self.gpu.zero_()
        else:
            # Element types ferry_vllm does not instantiate keep torch's own copies.
            self._buf = None
            self.cpu = torch.zeros(sizes, dtype=dtype, device="cpu", pin_memory=bool(pin_memory) and cuda)
            self.gpu = torch.zeros_like(self.cpu, device=_torch_device(cuda, index))
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError(
                    "ferry: CpuGpuBuffer: bfloat16 tensors have no NumPy view; pass with_numpy=False"
                )
            self.np = self.cpu.numpy()

    def _rows(self, n, api: str) -> int | None:
        return None if n is None else _int(n, api, "n")

    def copy_to_gpu(self, n: int | None = None) -> torch.Tensor:
        n = self._rows(n, "CpuGpuBuffer.copy_to_gpu")
        if self._buf is None:
            src, dst = (self.cpu, self.gpu) if n is None else (self.cpu[:n], self.gpu[:n])
            return dst.copy_(src, non_blocking=True)
        rows = self.gpu.shape[0] if n is None else n
        self._buf.copy_to_gpu(rows * self._row)
        return self.gpu if n is None else self.gpu[:n]

    def copy_to_cpu(self, n: int | None = None) -> torch.Tensor:
        """Enqueues the copy of gpu[:n] into cpu[:n]; read cpu once the stream has passed it."""
        n = self._rows(n, "CpuGpuBuffer.copy_to_cpu")
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
    _tensor(x, "async_copy_to_gpu", "x")
    if out is None:
        if device is None:
            raise ValueError("ferry: async_copy_to_gpu: must provide out or device")
        return async_tensor_h2d(x, device=device, dtype=x.dtype).view(x.shape)
    _tensor(out, "async_copy_to_gpu", "out")
    return out.copy_(x.pin_memory() if out.is_cuda else x, non_blocking=True)


class UvaBuffer:
    """Pinned host memory (`cpu`, `np`) and its UVA view (`uva`) that kernels read in place. On the
    CPU platform (or device="cpu", ferry's addition) `uva` is `cpu` itself, as vLLM's CPU worker's."""

    def __init__(self, size: int | Sequence[int], dtype: torch.dtype, *, device=None):
        api = "UvaBuffer"
        sizes, dtype = _sizes(size, api), _dtype(dtype, api)
        cuda, index = _device(device, api)
        with _on(cuda, index):
            self.cpu = torch.zeros(sizes, dtype=dtype, device="cpu", pin_memory=cuda)
            self.np = self.cpu.numpy()
            self.uva = _C.uva_view(self.cpu, cuda)

    @classmethod
    def _over(cls, cpu: torch.Tensor, uva: torch.Tensor) -> UvaBuffer:
        """A UvaBuffer over memory someone else owns (a slot of a UvaBufferPool)."""
        buf = cls.__new__(cls)
        buf.cpu, buf.np, buf.uva = cpu, cpu.numpy(), uva
        return buf


class UvaBufferPool:
    """A ring of `max_concurrency` pinned, mapped slots (ferry::uva_pool): copy_to_uva writes the
    source into the next slot and returns its UVA view. A source longer than the slot grows it to
    the next power of two of rows (as vLLM's pool does); a slot the GPU may still read is never
    rewritten (ferry inserts a fresh slot instead of waiting)."""

    def __init__(
        self,
        size: int | Sequence[int],
        dtype: torch.dtype,
        max_concurrency: int | None = None,
        *,
        device=None,
    ):
        api = "UvaBufferPool"
        sizes = _sizes(size, api)
        self.size = size
        self.dtype = _supported(dtype, api)
        self.max_concurrency = _max_concurrency(max_concurrency, api)
        self._cuda, index = _device(device, api)
        self._tail = list(sizes[1:])
        with _on(self._cuda, index):
            self._pool = _C.UvaPool(sizes[0], _width(sizes), dtype, self.max_concurrency, self._cuda)
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

    def copy_chunks_to_uva(self, chunks: Sequence, n: int) -> torch.Tensor:
        """vLLM's copy of several 1-D chunks (NumPy arrays, array.array, lists) of `n` elements in
        all, one after the other, into the next slot; each element converted exactly."""
        api = "copy_chunks_to_uva"
        n = _int(n, api, "n")
        if self._tail:
            raise ValueError(f"ferry: {api}: a pool of rows {self._tail} takes copy_to_uva (chunks are 1-D)")
        flat: list = []
        for c in chunks:
            flat.extend(c.tolist() if hasattr(c, "tolist") else c)  # Python numbers: the values as they are
        if len(flat) != n:
            raise ValueError(f"ferry: {api}: the chunks hold {len(flat)} elements, n is {n}")
        return self.copy_to_uva(flat)

    def copy_to_gpu(self, x: torch.Tensor | np.ndarray, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is None:
            return self.copy_to_uva(x).clone()
        return self._pool.copy_to_device(self._source(x), _tensor(out, "UvaBufferPool.copy_to_gpu", "out"))

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
        *,
        device=None,
    ):
        api = "UvaBackedTensor"
        sizes = _sizes(size, api)
        self.dtype = _supported(dtype, api)
        cuda, index = _device(device, api)
        self._rows = sizes[0]
        self._tail = list(sizes[1:])
        with _on(cuda, index):
            self._state = _C.UvaBacked(sizes[0], _width(sizes), dtype, _max_concurrency(max_concurrency, api), cuda)
        self.cpu = self._state.host(list(sizes))
        self.np = self.cpu.numpy()
        self.gpu = self._state.publish(self._rows, self._tail)

    def copy_to_uva(self, n: int | None = None) -> torch.Tensor:
        rows = self._rows if n is None else _int(n, "UvaBackedTensor.copy_to_uva", "n")
        self.gpu = self._state.publish(rows, self._tail)
        return self.gpu


class StagedWriteTensor(_C.Staged):
    """A persistent device tensor (`gpu`) updated by staged row-segment writes, applied with one
    kernel launch (ferry::staged_write_tensor). stage_write checks its bounds at once (IndexError,
    nothing recorded); within one apply, of two overlapping writes the later one wins.

    stage_write(index, start, x), stage_write_elem(index, x) and apply_write() are ferry's own
    (the C++ members, called without a Python frame); x is a list, tuple, range, generator, NumPy
    array or CPU tensor, converted exactly. device="cpu" (vLLM's CPU worker) makes `gpu` a CPU
    tensor, written on ferry's host backend; apply_write is then done when it returns."""

    def __init__(
        self,
        size: int | Sequence[int],
        dtype: torch.dtype,
        device: torch.device | str,
        max_concurrency: int | None = None,
        uva_instead_of_gpu: bool = False,
    ):
        api = "StagedWriteTensor"
        sizes = _sizes(size, api)
        if _dtype(dtype, api) not in _SUPPORTED:
            raise ValueError(f"ferry: Unsupported dtype {dtype}: should be one of {list(_SUPPORTED)}")
        max_concurrency = _max_concurrency(max_concurrency, api)
        cuda, index = _device(device, api)
        self.num_rows = sizes[0]
        self.dtype = dtype
        self.device = device
        self.max_concurrency = max_concurrency
        with _on(cuda, index):
            if not uva_instead_of_gpu:
                self.gpu = torch.zeros(sizes, dtype=dtype, device=_torch_device(cuda, index))
                memory = self.gpu
            else:
                # A large, rarely read tensor in pinned host memory that kernels write in place.
                self._uva_buf = UvaBuffer(sizes, dtype, device=_torch_device(cuda, index))
                self.gpu = self._uva_buf.uva
                memory = self._uva_buf.cpu
            _C.Staged.__init__(self, memory, sizes[0], _width(sizes), bool(uva_instead_of_gpu), max_concurrency, cuda)
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
    and target kind (ferry::fused_staged_writer): those on device="cpu" on ferry's host backend
    (done when the call returns), those on a GPU on the current stream. `max_writes` is where
    vLLM's pools start; they grow past it, as ferry's staging does: any number of writes applies."""

    def __init__(self, device: torch.device | str, max_writes: int, max_concurrency: int | None = None):
        api = "FusedStagedWriter"
        _device(device, api)
        self.device = device
        self.max_writes = _int(max_writes, api, "max_writes")
        self._w = _C.Fused(_max_concurrency(max_concurrency, api))

    def apply(
        self,
        tensors: Sequence[StagedWriteTensor],
        output_ptrs: torch.Tensor | None = None,
        output_strides: torch.Tensor | None = None,
    ) -> None:
        """Applies and clears the staged writes of `tensors` (output_ptrs and output_strides, vLLM's
        scratch for its kernel's table, are accepted and not needed)."""
        self._w.apply(tensors)


# ---- ferry's own addition -----------------------------------------------------------------------


class StepBatch(_C.Step):
    """A whole engine step in ONE call and ONE kernel launch (ferry::step_batch: growth::pow2,
    reuse::event_fenced, launch::kernel, and the epilogue the package ships), on the device given
    (default: the platform's; a CUDA device: torch's current stream of the device current when it
    is made). Not a vLLM name: ferry's own addition (docs/python.md, docs/step_batch.md).

    Plan, once (every tensor contiguous, on the batch's device, int32, int64 or float32; held by
    the batch):

        sb = StepBatch(max_concurrency=2)
        sb.add_upload(rows)                          # -> upload 0: each step writes rows[:n]
        sb.add_gather(input_ids, sampled)            # -> gather 0: input_ids[i] = sampled[idx[i]]
        sb.add_writes(block_table, 64, 1024)         # -> writes 0: staged writes into a 2-D target
        p = sb.add_publish(torch.int32, 256)         # -> publish 0: read in place (UVA)
        sb.add_fill(logits_idx[255:], publish=p, index=255)   # filled from the step's publish
        sb.set_decode_epilogue(rows, base, drafts, block_table=block_table, block_size=16,
                               num_computed=..., positions=..., seq_lens=..., slot_mapping=...)

    Every step, one call:

        sb.step([slots],                             # one source per upload (None: none)
                [(0, row, start, ids), ...],         # (writes index, row, start, values)
                gathers=[idx],                       # one index list per gather; FROM_HOST: ...
                host_values=[first_tokens],          # ... the row's value from here
                publishes=[lens])                    # one source per publish

    Sources, indices and values are lists, tuples, NumPy arrays or CPU tensors, converted exactly
    (as StagedWriteTensor.stage_write reads its values) and consumed when step() returns. The
    maxima are starting sizes (the slots grow to the largest step); an upload or gather takes at
    most its destination's numel() elements. Any error drops the whole step: nothing of it lands,
    and the batch is ready for the next step(). On the host backend a step has landed when step()
    returns; on CUDA in stream order. `publish_view(i)` is the last step's publish i as a tensor
    on the device, valid for work enqueued before the next step; `steps` counts the steps
    submitted."""

    def __init__(self, max_concurrency: int | None = None, *, device=None):
        api = "StepBatch"
        cuda, index = _device(device, api)
        self.device = _torch_device(cuda, index)
        with _on(cuda, index):
            _C.Step.__init__(self, _max_concurrency(max_concurrency, api, 0), cuda)
        self._outputs: list[torch.Tensor] = []  # what a step writes: submit's op returns them
        self._key = id(self)
        _ops._batches[self._key] = self

    def add_upload(self, dst):
        i = _C.Step.add_upload(self, dst)
        self._outputs.append(dst)
        return i

    def add_writes(self, target, max_writes, max_elements):
        i = _C.Step.add_writes(self, target, max_writes, max_elements)
        self._outputs.append(target)
        return i

    def add_gather(self, dst, src, max_n=None):
        i = _C.Step.add_gather(self, dst, src, max_n)
        self._outputs.append(dst)
        return i

    def add_fill(self, dst, value=None, *, publish=None, index=0):
        _C.Step.add_fill(self, dst, value, publish=publish, index=index)
        self._outputs.append(dst)

    def set_decode_epilogue(self, rows, base, drafts=None, *, block_table=None, block_size=16, num_computed=None,
                            positions=None, seq_lens=None, slot_mapping=None):
        _C.Step.set_decode_epilogue(self, rows, base, drafts, block_table=block_table, block_size=block_size,
                                    num_computed=num_computed, positions=positions, seq_lens=seq_lens,
                                    slot_mapping=slot_mapping)
        self._outputs += [t for t in (num_computed, positions, seq_lens, slot_mapping) if t is not None]

    def submit(self, uploads, gathers=None, host_values=None, publishes=None) -> list[torch.Tensor]:
        """step() as the torch.library op ferry_vllm::step, which torch.compile traces: the sources,
        indices and values are CPU tensors (None: none); staged writes are not taken (use step()).
        Returns the batch's destinations in the order the plan declared them (each upload's,
        gather's, writes target's and fill's tensor, then the epilogue's outputs): compiled code
        reads the step's results from these, which orders its reads after the step."""
        return torch.ops.ferry_vllm.step(self._key, list(uploads), list(gathers or []), list(host_values or []),
                                         list(publishes or []))


class VllmStepInputs(NamedTuple):
    """What vLLM's prepare_inputs + prepare_attn return for a step, as views of a VllmStepPrep's
    buffers (vLLM's shapes: padded where vLLM pads)."""

    input_ids: torch.Tensor  # [num_tokens_padded]
    positions: torch.Tensor  # [num_tokens_padded]
    seq_lens: torch.Tensor  # [num_reqs_padded]
    query_start_loc: torch.Tensor  # [num_reqs_padded + 1]
    idx_mapping: torch.Tensor  # [num_reqs]
    cu_num_logits: torch.Tensor  # [num_reqs + 1]
    logits_indices: torch.Tensor  # [num_logits]
    expanded_idx_mapping: torch.Tensor  # [num_logits]
    expanded_local_pos: torch.Tensor  # [num_logits]
    block_tables: tuple[torch.Tensor, ...]  # each [num_reqs_padded, max_num_blocks]
    slot_mappings: torch.Tensor  # [num_kv_cache_groups, num_tokens_padded]


class VllmStepPrep(_C.Prep):
    """The preparation of one step of vLLM's model runner v2 (vLLM 0.26.0: GPUModelRunner's
    prepare_inputs and prepare_attn, and BlockTables.apply_staged_writes before them) in ONE
    Python call and ONE kernel launch of ferry's step_batch, on the device of the state tensors.
    Not a vLLM name: ferry's own addition (docs/python.md says which vLLM function each part
    replaces).

    The device state it reads, never brought to the host (vLLM's RequestState tensors):
    num_computed_tokens int32 [max_num_reqs], last_sampled_tokens int64 [max_num_reqs, 1] (or
    [max_num_reqs]) and draft_tokens int64 [max_num_reqs, num_speculative_steps] (None: no
    speculative decoding). It owns the block tables (`block_tables`, one per KV-cache group, int32
    [max_num_reqs, max_num_blocks * block_size // kernel_block_size]) and writes its outputs into
    buffers at fixed addresses (given, or made here): input_ids, positions, seq_lens,
    query_start_loc, input_block_tables, slot_mappings (vLLM's InputBuffers and BlockTables
    tensors); idx_mapping, cu_num_logits, logits_indices, expanded_idx_mapping and
    expanded_local_pos are made here; next_prefill_tokens (int32 [max_num_reqs], vLLM's
    RequestState.next_prefill_tokens) is written where given.

        prep.add_request(req_index, prefill_token_ids, block_ids, num_computed_tokens)  # a new request
        prep.remove_request(req_index)                                                  # a finished one
        prep.prepare(idx_mapping, num_scheduled_tokens, num_draft_tokens,               # every step
                     new_block_ids=[(req_index, (ids_group0, ...)), ...],
                     num_reqs_padded=..., num_tokens_padded=...)

    prepare() takes the scheduler's arrays (NumPy int32, or anything converted exactly), checks
    them as it writes the step into a pinned slot (a `ferry:` error cancels the step and changes
    nothing), then submits it: one launch on torch's current stream (on device="cpu" one host
    task, done when it returns). A row is a prefill row while its request has prefill tokens
    left (its tokens come from the host), else a decode row (its last sampled token and drafts
    are read on the device). `inputs()` gives the step's outputs as views (VllmStepInputs); num_reqs,
    num_tokens, num_logits, num_reqs_padded and num_tokens_padded are the last step's sizes.

    graph=True: the step inside the model's CUDA graph (ferry's step_batch under launch::capture,
    fixed capacities: max_num_reqs and max_num_tokens, the padded batch sizes' maximum).
    `record()`, inside `torch.cuda.graph(g)` before the model, records the step into the capture
    (one kernel node); each step `commit(...)` (prepare()'s arguments) checks the scheduler data and
    writes it into its slot with NO CUDA call, and the next `g.replay()` runs it, then the model.
    A replay that found no committed step does nothing (the model reads the step before) and
    makes the next commit() or check_replayed() raise RuntimeError; a commit no replay ran is
    reported by check_replayed() (called after the replays' stream was synchronized) or by the
    commit that finds the ring of slots full. On device="cpu" there is no capture:
    `replay_recorded()` stands in for the replay (the same protocol, run as host work)."""

    def __init__(
        self,
        *,
        max_num_reqs: int,
        max_num_tokens: int,
        block_sizes: Sequence[int],
        max_num_blocks: Sequence[int],
        num_computed_tokens: torch.Tensor,
        last_sampled_tokens: torch.Tensor,
        draft_tokens: torch.Tensor | None = None,
        kernel_block_sizes: Sequence[int] | None = None,
        max_concurrency: int | None = None,
        input_ids: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        seq_lens: torch.Tensor | None = None,
        query_start_loc: torch.Tensor | None = None,
        input_block_tables: Sequence[torch.Tensor] | None = None,
        slot_mappings: torch.Tensor | None = None,
        next_prefill_tokens: torch.Tensor | None = None,
        graph: bool = False,
    ):
        api = "VllmStepPrep"
        if not isinstance(graph, bool):
            raise TypeError(f"ferry: {api}: graph must be True or False, got {type(graph).__name__}")
        self.graph = graph
        reqs = _int(max_num_reqs, api, "max_num_reqs", 1)
        tokens = _int(max_num_tokens, api, "max_num_tokens", 1)
        state = _tensor(num_computed_tokens, api, "num_computed_tokens")
        cuda, index = _device(state.device, api)
        self.device = _torch_device(cuda, index)
        block_sizes = [_int(b, api, "block_sizes", 1) for b in block_sizes]
        kernel = block_sizes if kernel_block_sizes is None else [_int(b, api, "kernel_block_sizes", 1) for b in kernel_block_sizes]
        blocks = [_int(b, api, "max_num_blocks", 1) for b in max_num_blocks]
        cols = [m * (b // k) if k and b % k == 0 else m for m, b, k in zip(blocks, block_sizes, kernel)]
        groups = len(block_sizes)

        def zeros(*size, dtype=torch.int32):
            return torch.zeros(size, dtype=dtype, device=self.device)

        self.max_num_reqs, self.max_num_tokens, self.num_kv_cache_groups = reqs, tokens, groups
        self.input_ids = zeros(tokens) if input_ids is None else input_ids
        self.positions = zeros(tokens, dtype=torch.int64) if positions is None else positions
        self.seq_lens = zeros(reqs) if seq_lens is None else seq_lens
        self.query_start_loc = zeros(reqs + 1) if query_start_loc is None else query_start_loc
        self.idx_mapping = zeros(reqs)
        self.cu_num_logits = zeros(reqs + 1)
        self.logits_indices = zeros(tokens, dtype=torch.int64)
        self.expanded_idx_mapping = zeros(tokens)
        self.expanded_local_pos = zeros(tokens)
        self.block_tables = tuple(zeros(reqs, c) for c in cols)
        self.input_block_tables = (
            tuple(zeros(reqs, c) for c in cols) if input_block_tables is None else tuple(input_block_tables)
        )
        # Past the most tokens of any step, a slot mapping made here is PAD_SLOT_ID already.
        padded = slot_mappings is None
        self.slot_mappings = torch.full((groups, tokens), -1, dtype=torch.int64, device=self.device) if padded else slot_mappings
        self.num_computed_tokens, self.last_sampled_tokens, self.draft_tokens = state, last_sampled_tokens, draft_tokens
        self.next_prefill_tokens = next_prefill_tokens
        with _on(cuda, index):
            _C.Prep.__init__(
                self,
                dict(
                    max_num_reqs=reqs, max_num_tokens=tokens, block_sizes=block_sizes, kernel_block_sizes=kernel,
                    max_num_blocks=blocks, num_computed_tokens=state, last_sampled_tokens=last_sampled_tokens,
                    draft_tokens=draft_tokens, next_prefill_tokens=next_prefill_tokens, input_ids=self.input_ids, positions=self.positions,
                    seq_lens=self.seq_lens, query_start_loc=self.query_start_loc, idx_mapping=self.idx_mapping,
                    cu_num_logits=self.cu_num_logits, logits_indices=self.logits_indices,
                    expanded_idx_mapping=self.expanded_idx_mapping, expanded_local_pos=self.expanded_local_pos,
                    block_tables=list(self.block_tables), input_block_tables=list(self.input_block_tables),
                    slot_mappings=self.slot_mappings, slot_mappings_padded=padded,
                ),
                cuda,
                _max_concurrency(max_concurrency, api, 0),
                graph,
            )

    def inputs(self) -> VllmStepInputs:
        """The last step's outputs as vLLM's prepare_inputs and prepare_attn return them (views,
        valid until the next prepare())."""
        n, t, lg, rp, tp = self.num_reqs, self.num_tokens, self.num_logits, self.num_reqs_padded, self.num_tokens_padded
        return VllmStepInputs(
            self.input_ids[:tp], self.positions[:tp], self.seq_lens[:rp], self.query_start_loc[: rp + 1],
            self.idx_mapping[:n], self.cu_num_logits[: n + 1], self.logits_indices[:lg],
            self.expanded_idx_mapping[:lg], self.expanded_local_pos[:lg],
            tuple(b[:rp] for b in self.input_block_tables), self.slot_mappings[:, :tp],
        )


from . import _ops  # noqa: E402  (registers the torch.library ops, which call back into this module)
