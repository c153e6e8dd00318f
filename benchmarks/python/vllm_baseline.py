"""The baseline of bench_dropin.py: vLLM's buffer utilities as vLLM implements them (Python over
torch, one Triton kernel for staged writes), written anew here from their documented behaviour:

- async_tensor_h2d: a pinned CPU tensor made from the list, then a non-blocking copy to the GPU;
- UvaBufferPool: `max_concurrency` pinned buffers used round-robin; copy_to_uva assigns the source
  into the next buffer's host array and returns a slice of its UVA view (no fences: the caller
  keeps fewer steps in flight than buffers);
- UvaBackedTensor: host state in ordinary memory, copied into the pool on copy_to_uva;
- CpuGpuBuffer: a pinned CPU tensor and a GPU tensor, copied by slices with non_blocking=True;
- StagedWriteTensor: stage_write appends to Python lists; apply_write sends the row indices,
  starts and cumulative lengths through three UVA pools, the contents through async_tensor_h2d,
  and launches one Triton program per write that copies its contents into the target row.
"""

import torch
import triton
import triton.language as tl


def async_tensor_h2d(data, dtype, device):
    t = torch.tensor(data, dtype=dtype, pin_memory=True, device="cpu")
    return t.to(device=device, non_blocking=True)


class UvaBufferPool:
    def __init__(self, size, dtype, max_concurrency, uva_view):
        self.max_concurrency = max_concurrency
        self.cpu = [torch.zeros(size, dtype=dtype, pin_memory=True) for _ in range(max_concurrency)]
        self.np = [c.numpy() for c in self.cpu]
        self.uva = [uva_view(c) for c in self.cpu]  # made once, outside the timed calls
        self.curr = 0

    def copy_to_uva(self, x):
        self.curr = (self.curr + 1) % self.max_concurrency
        dst = self.cpu[self.curr] if isinstance(x, torch.Tensor) else self.np[self.curr]
        n = len(x)
        dst[:n] = x
        return self.uva[self.curr][:n]


class UvaBackedTensor:
    def __init__(self, size, dtype, max_concurrency, uva_view):
        self.cpu = torch.zeros(size, dtype=dtype)
        self.np = self.cpu.numpy()
        self.pool = UvaBufferPool(size, dtype, max_concurrency, uva_view)
        self.gpu = self.pool.copy_to_uva(self.np)

    def copy_to_uva(self, n=None):
        self.gpu = self.pool.copy_to_uva(self.np[:n] if n is not None else self.np)
        return self.gpu


class CpuGpuBuffer:
    def __init__(self, *size, dtype, device):
        self.cpu = torch.zeros(*size, dtype=dtype, pin_memory=True)
        self.gpu = torch.zeros_like(self.cpu, device=device)
        self.np = self.cpu.numpy()

    def copy_to_gpu(self, n=None):
        if n is None:
            return self.gpu.copy_(self.cpu, non_blocking=True)
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)


@triton.jit
def _scatter_rows(out_ptr, out_stride, rows_ptr, starts_ptr, contents_ptr, cu_lens_ptr, BLOCK: tl.constexpr):
    w = tl.program_id(0)
    row = tl.load(rows_ptr + w)
    start = tl.load(starts_ptr + w)
    end = tl.load(cu_lens_ptr + w)
    begin = tl.load(cu_lens_ptr + w - 1, mask=w > 0, other=0)
    length = end - begin
    for off in range(0, length, BLOCK):
        i = off + tl.arange(0, BLOCK)
        keep = i < length
        v = tl.load(contents_ptr + begin + i, mask=keep)
        tl.store(out_ptr + row * out_stride + start + i, v, mask=keep)


class StagedWriteTensor:
    def __init__(self, size, dtype, device, max_concurrency, uva_view):
        self.dtype = dtype
        self.device = device
        self.gpu = torch.zeros(size, dtype=dtype, device=device)
        rows = size[0]
        self.rows = UvaBufferPool(rows, torch.int32, max_concurrency, uva_view)
        self.starts = UvaBufferPool(rows, torch.int32, max_concurrency, uva_view)
        self.cu_lens = UvaBufferPool(rows, torch.int32, max_concurrency, uva_view)
        self._rows, self._starts, self._contents, self._cu = [], [], [], []

    def stage_write(self, index, start, x):
        if not x:
            return
        self._rows.append(index)
        self._starts.append(start)
        self._contents.extend(x)
        self._cu.append(len(self._contents))

    def stage_write_elem(self, index, x):
        self._rows.append(index)
        self._starts.append(0)
        self._contents.append(x)
        self._cu.append(len(self._contents))

    def apply_write(self):
        n = len(self._rows)
        if n == 0:
            return
        rows = self.rows.copy_to_uva(self._rows)
        starts = self.starts.copy_to_uva(self._starts)
        cu = self.cu_lens.copy_to_uva(self._cu)
        contents = async_tensor_h2d(self._contents, self.dtype, self.device)
        _scatter_rows[(n,)](self.gpu, self.gpu.stride(0), rows, starts, contents, cu, BLOCK=1024)
        self._rows.clear()
        self._starts.clear()
        self._contents.clear()
        self._cu.clear()
