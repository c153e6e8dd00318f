// ferry/backend/detail/kernel_mark.cuh: the device side of timeline<cuda>::mark_with.
#pragma once

#include <ferry/backend/detail/timeline.hpp>

namespace ferry::detail {

/// The last act of a ferry kernel launched through timeline<cuda>::mark_with: once every block
/// has finished, the last one stores the mark's value into the line's mapped counter, which tells
/// the host that the kernel no longer reads what the mark guards. Every thread of every block
/// calls it, after its last access to that memory (no thread may have returned before).
__device__ inline void finish_kernel_mark(const kernel_mark& m) {
  if (m.counter == nullptr) return;
  __syncthreads();
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
  __threadfence();
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  if (atomicAdd(m.blocks_done, 1u) != blocks - 1) return;
  *m.blocks_done = 0;  // the next kernel of this line starts after this one (stream order)
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(m.counter) = m.value;
}

}  // namespace ferry::detail
