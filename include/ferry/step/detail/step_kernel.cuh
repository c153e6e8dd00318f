// ferry/step/detail/step_kernel.cuh: the CUDA step kernel of step_batch, its launcher and the
// graph of one slot. Block b runs descriptor b of the slot's table (plan.hpp), read through UVA
// with the step's work count and kernel mark, with the write plan's kernel body
// (staged/detail/write_kernel.cuh); every block then finishes the kernel mark; and
// step_ops<backend::cuda>, which step_batch submits through.
#pragma once

#if defined(__CUDACC__)

#include <ferry/backend/detail/cuda_runtime.hpp>
#include <ferry/backend/detail/kernel_mark.cuh>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/staged/detail/write_kernel.cuh>
#include <ferry/step/detail/plan.hpp>

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {
inline namespace FERRY_KERNEL_NAMESPACE {
namespace step_kernels {

/// The step kernel: block b runs descriptor b when b < the table's work count; every block
/// finishes the kernel mark written in the table's header.
FERRY_KERNEL_VISIBILITY __global__ void __launch_bounds__(detail::write_block_threads)
    run_step(const detail::step_header* table) {
  // Header words 0-3 (work, mark), descriptor b's three words. Plain loads: the launch orders them
  // after the host's writes, and __ldcv of mapped memory is slower (docs/design.md, "What the core's calls cost").
  __shared__ unsigned long long w[7];
  const auto* words = reinterpret_cast<const unsigned long long*>(table);
  constexpr unsigned first_desc = sizeof(detail::step_header) / sizeof(unsigned long long);
  if (threadIdx.x < 4)
    w[threadIdx.x] = words[threadIdx.x];
  else if (threadIdx.x < 7)
    w[threadIdx.x] = words[first_desc + 3ull * blockIdx.x + (threadIdx.x - 4)];
  __syncthreads();
  if (blockIdx.x < w[0]) write_kernels::run_chunk<unsigned char>(w + 4, 0, 0);
  detail::finish_kernel_mark(detail::kernel_mark{reinterpret_cast<std::uint64_t*>(w[1]),
                                                 reinterpret_cast<unsigned*>(w[2]), w[3]});
}

}  // namespace step_kernels
}  // namespace FERRY_KERNEL_NAMESPACE

namespace detail {

/// Loads the step kernel's module once per process, at construction (see preload_apply_kernels).
FERRY_KERNEL_VISIBILITY inline void preload_step_kernel() {
  static const bool loaded = [] {
    cudaFuncAttributes a{};
    FERRY_CUDA_CHECK(cudaFuncGetAttributes(&a, step_kernels::run_step));
    return true;
  }();
  (void)loaded;
}

/// Launches the step kernel over `blocks` blocks for the table at `table` (mapped) on `s`.
FERRY_KERNEL_VISIBILITY inline void launch_step_kernel(const void* table, std::size_t blocks, cudaStream_t s) {
  if (blocks > static_cast<std::size_t>(INT_MAX))
    throw capacity_error("ferry: a step of " + std::to_string(blocks) +
                         " descriptors exceeds the grid limit of 2^31-1 blocks");
  launch_kernel("launch of ferry::step_kernels::run_step", step_kernels::run_step,
                static_cast<unsigned>(blocks), write_block_threads, s, static_cast<const step_header*>(table));
}

/// The graph of one slot, on `device`: the step kernel over `blocks` blocks reading `table`, and
/// its executable.
FERRY_KERNEL_VISIBILITY inline step_graph make_step_graph(const void* table, std::size_t blocks, int device) {
  if (blocks > static_cast<std::size_t>(INT_MAX))
    throw capacity_error("ferry: a step graph of " + std::to_string(blocks) +
                         " descriptors exceeds the grid limit of 2^31-1 blocks");
  const device_scope on_device(device);
  cudaGraph_t g = nullptr;
  FERRY_CUDA_CHECK(cudaGraphCreate(&g, 0));
  const auto* arg = static_cast<const step_header*>(table);
  void* args[] = {&arg};
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(&step_kernels::run_step);
  p.gridDim = dim3(static_cast<unsigned>(blocks));
  p.blockDim = dim3(write_block_threads);
  p.kernelParams = args;
  cudaGraphNode_t node = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaError_t r = cudaGraphAddKernelNode(&node, g, nullptr, 0, &p);
  if (r == cudaSuccess) r = cudaGraphInstantiate(&exec, g, 0);
  if (r != cudaSuccess) {
    static_cast<void>(cudaGraphDestroy(g));
    throw_cuda(r, "building a step_batch slot's graph", __FILE__, __LINE__);
  }
  return {g, exec};
}

/// The CUDA backend's step: the step kernel, or a replay of the slot's graph (step_ops in plan.hpp).
template <>
struct step_ops<backend::cuda> {
  static constexpr bool graphs = true;
  FERRY_KERNEL_VISIBILITY static void preload() { preload_step_kernel(); }
  FERRY_KERNEL_VISIBILITY static void launch(stream_ref<backend::cuda> s, const void* table, std::size_t blocks) {
    launch_step_kernel(table, blocks, s.get());
  }
  FERRY_KERNEL_VISIBILITY static step_graph make_graph(const void* table, std::size_t blocks, int device) {
    return make_step_graph(table, blocks, device);
  }
  static void replay(stream_ref<backend::cuda> s, const step_graph& g) {
    launch_graph("cudaGraphLaunch of a step_batch slot's graph", static_cast<cudaGraphExec_t>(g.exec), s.get());
  }
  static void destroy_graph(const step_graph& g) {
    if (g.exec) FERRY_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g.exec)));
    if (g.graph) FERRY_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(g.graph)));
  }
};

}  // namespace detail
}  // namespace ferry

#endif  // defined(__CUDACC__)
