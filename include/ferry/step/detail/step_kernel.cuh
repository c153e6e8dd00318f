// ferry/step/detail/step_kernel.cuh: the CUDA step kernel of step_batch, its launcher, the one
// graph of a batch under launch::graph, and the device lanes. Block b runs descriptor b of the
// step's table (plan.hpp), read through UVA: a copy or fill with the write plan's kernel body
// (write/kernel.cuh), or a piece of a gather or scatter; the last block to arrive
// runs the epilogue, advances the batch's step counter (launch::graph) and stores the kernel mark;
// and step_ops<backend::cuda>, which step_batch submits through.
#pragma once

#if defined(__CUDACC__)

#include <ferry/backend/detail/cuda_runtime.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/step_context.hpp>
#include <ferry/write/kernel.cuh>

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace ferry::detail {
/// The kernel's functor when a batch has no epilogue.
struct no_step_epilogue {};
/// A device lane's words (step_lane): the arrival count, then the step counter.
struct step_lane_words {
  unsigned arrivals;
  unsigned unused;
  unsigned long long step;
};
}  // namespace ferry::detail

namespace ferry {
inline namespace FERRY_KERNEL_NAMESPACE {
namespace step_kernels {

/// Every device's lanes, zero when the module loads (plan.hpp, step_lane).
FERRY_KERNEL_VISIBILITY __device__ detail::step_lane_words lanes[detail::step_lane_count];

/// One piece of a record (plan.hpp): `n` elements of U from element `first` of the record at
/// `rec`; a gather's into `dst`, a scatter's (`scatter`) into the target at `dst`.
template <class U>
__device__ __forceinline__ void run_piece(U* dst, const detail::piece_record* rec, std::size_t first, unsigned n,
                                          bool scatter) {
  const U* values = reinterpret_cast<const U*>(rec->values) + first;
  if (scatter) {
    const auto* idx = reinterpret_cast<const std::uint32_t*>(rec + 1) + first;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[idx[i]] = values[i];
    return;
  }
  const auto* idx = reinterpret_cast<const std::int32_t*>(rec + 1) + first;
  const U* src = reinterpret_cast<const U*>(rec->src);
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
    const std::int32_t j = idx[i];
    dst[i] = j >= 0 ? src[j] : values[i];
  }
}

/// The step kernel: block b runs descriptor b of the step's table when b < its work count; the
/// last block to arrive runs the epilogue `f` (F: no_step_epilogue for none), advances the step
/// counter (launch::graph, launch::capture) and stores the kernel mark. Under launch::graph a
/// launch whose table names another step than the counter's does nothing (not a submitted step);
/// under launch::capture it reports so in the batch's capture_status (plan.hpp, report_replay).
template <class F>
FERRY_KERNEL_VISIBILITY __global__ void __launch_bounds__(detail::write_block_threads)
    run_step(detail::step_locator loc, F f) {
  // Header words 0-4 (work, mark counter, mark value, unused, step) and descriptor b's three
  // words, in one round trip. Plain loads: the launch orders them after the host's writes, and
  // __ldcv of mapped memory is slower (docs/design.md, "What the core's calls cost").
  __shared__ unsigned long long w[5], d[3];
  // What the block needs after its work stays in shared memory and the parameters, out of the
  // copy's registers (kept live across the copy, it spilled to a stack frame). launch::graph:
  // `table` is the table found, `counted` the counter's value; `ours`: the step is submitted.
  __shared__ unsigned long long table, counted;
  __shared__ bool ours, last;
  auto* lane = reinterpret_cast<detail::step_lane_words*>(loc.lane);
  const bool graph = loc.count != 0;
  if (graph) {
    if (threadIdx.x == 0) {
      counted = *reinterpret_cast<volatile unsigned long long*>(&lane->step);
      table = detail::ring_table(loc, counted);
    }
    __syncthreads();
  }
  {
    const auto* words = reinterpret_cast<const unsigned long long*>(graph ? table : loc.tables);
    constexpr unsigned first_desc = sizeof(detail::step_header) / sizeof(unsigned long long);
    if (threadIdx.x < 5)
      w[threadIdx.x] = words[threadIdx.x];
    else if (threadIdx.x < 8)
      d[threadIdx.x - 5] = words[first_desc + 3ull * blockIdx.x + (threadIdx.x - 5)];
  }
  __syncthreads();
  if (threadIdx.x == 0) ours = !graph || w[4] == counted;
  if ((!graph || w[4] == counted) && blockIdx.x < w[0]) {
    const auto kind = static_cast<unsigned>(d[2] >> 32);
    if (kind & detail::piece_flag) {
      const auto n = static_cast<unsigned>(d[2] & 0xffffffffu);
      const std::size_t first = detail::piece_first(kind);
      const auto* rec = reinterpret_cast<const detail::piece_record*>(d[1]);
      const bool scatter = (kind & detail::scatter_flag) != 0;
      switch (kind & 0xfu) {
        case 0: run_piece(reinterpret_cast<unsigned char*>(d[0]), rec, first, n, scatter); break;
        case 1: run_piece(reinterpret_cast<unsigned short*>(d[0]), rec, first, n, scatter); break;
        case 2: run_piece(reinterpret_cast<unsigned*>(d[0]), rec, first, n, scatter); break;
        default: run_piece(reinterpret_cast<unsigned long long*>(d[0]), rec, first, n, scatter); break;
      }
    } else {
      write_kernels::run_chunk<unsigned char>(d, 0, 0);
    }
  }
  // The last block to arrive: every block's work has landed (each fenced before arriving).
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(&lane->arrivals, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const auto* words = reinterpret_cast<const unsigned long long*>(graph ? table : loc.tables);
  if constexpr (!std::is_same_v<F, detail::no_step_epilogue>) {
    if (ours) {
      f(step_context(reinterpret_cast<const detail::step_view_entry*>(words[5]), words[7], threadIdx.x, blockDim.x));
      __syncthreads();
    }
  }
  if (threadIdx.x != 0) return;
  lane->arrivals = 0;  // the lane's next launch starts after this one
  if (graph && ours) lane->step = counted + 1;
  if (graph) detail::report_replay(loc.status, counted, ours);  // launch::capture: what the replay found
  if (!ours) return;
  if (w[1] != 0) {
    __threadfence_system();
    *reinterpret_cast<volatile unsigned long long*>(w[1]) = w[2];
  }
}

}  // namespace step_kernels
}  // namespace FERRY_KERNEL_NAMESPACE

namespace detail {

/// The kernel of epilogue F (void: none).
template <class F>
using step_functor = std::conditional_t<std::is_void_v<F>, no_step_epilogue, F>;

/// Loads the step kernel's module once per process and epilogue, at construction (see
/// preload_apply_kernels).
template <class F>
FERRY_KERNEL_VISIBILITY void preload_step_kernel() {
  static const bool loaded = [] {
    cudaFuncAttributes a{};
    FERRY_CUDA_CHECK(cudaFuncGetAttributes(&a, step_kernels::run_step<step_functor<F>>));
    return true;
  }();
  (void)loaded;
}

/// The device lanes of the process, per device: which are free, and where each one's step counter
/// stands. Thread-safe.
class step_lane_pool {
 public:
  FERRY_KERNEL_VISIBILITY step_lane take(int device) {
    std::lock_guard lock(mutex_);
    auto& d = of(device);
    if (d.free.empty())
      throw capacity_error("ferry: step_batch: every one of the " + std::to_string(step_lane_count) +
                           " device lanes of device " + std::to_string(device) +
                           " is held (a slot in use holds one under launch::kernel, a batch one "
                           "under launch::graph)");
    const std::uint32_t i = d.free.back();
    d.free.pop_back();
    return {d.base + i * sizeof(step_lane_words), d.steps[i]};
  }
  /// Gives `lane` back, its step counter at `step` (every launch that used it has finished).
  void give(int device, const step_lane& lane) noexcept {
    std::lock_guard lock(mutex_);
    auto& d = devices_[static_cast<std::size_t>(device)];
    const auto i = static_cast<std::uint32_t>((lane.address - d.base) / sizeof(step_lane_words));
    d.steps[i] = lane.step;
    d.free.push_back(i);  // room kept: never allocates
  }

 private:
  struct per_device {
    std::uint64_t base = 0;
    std::vector<std::uint32_t> free;
    std::vector<std::uint64_t> steps;
  };
  FERRY_KERNEL_VISIBILITY per_device& of(int device) {
    if (devices_.size() <= static_cast<std::size_t>(device)) devices_.resize(static_cast<std::size_t>(device) + 1);
    auto& d = devices_[static_cast<std::size_t>(device)];
    if (d.base == 0) {
      const device_scope on_device(device);
      void* p = nullptr;
      FERRY_CUDA_CHECK(cudaGetSymbolAddress(&p, step_kernels::lanes));
      d.free.reserve(step_lane_count);
      for (std::size_t i = step_lane_count; i-- > 0;) d.free.push_back(static_cast<std::uint32_t>(i));
      d.steps.assign(step_lane_count, 0);
      d.base = reinterpret_cast<std::uintptr_t>(p);
    }
    return d;
  }
  std::mutex mutex_;
  std::vector<per_device> devices_;
};
/// The process's lane pool (leaked: batches with static storage may outlive any other order).
FERRY_KERNEL_VISIBILITY inline step_lane_pool& step_lanes() {
  static auto* pool = new step_lane_pool();
  return *pool;
}

/// The grid of a step of `blocks` descriptors; ferry::capacity_error past CUDA's limit.
inline unsigned step_grid(std::size_t blocks) {
  if (blocks > static_cast<std::size_t>(INT_MAX))
    throw capacity_error("ferry: a step of " + std::to_string(blocks) +
                         " descriptors exceeds the grid limit of 2^31-1 blocks");
  return static_cast<unsigned>(blocks);
}

/// The batch's one graph on `device`: the step kernel over `blocks` blocks finding its table
/// through `loc`, with epilogue `f`, and its executable.
template <class F>
FERRY_KERNEL_VISIBILITY step_graph make_step_graph(const step_locator& loc, std::size_t blocks, int device,
                                                   const F* f) {
  const device_scope on_device(device);
  cudaGraph_t g = nullptr;
  FERRY_CUDA_CHECK(cudaGraphCreate(&g, 0));
  step_locator l = loc;
  step_functor<F> fn{};
  if constexpr (!std::is_void_v<F>) fn = *f;
  void* args[] = {&l, &fn};
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(&step_kernels::run_step<step_functor<F>>);
  p.gridDim = dim3(step_grid(blocks));
  p.blockDim = dim3(write_block_threads);
  p.kernelParams = args;
  cudaGraphNode_t node = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaError_t r = cudaGraphAddKernelNode(&node, g, nullptr, 0, &p);
  if (r == cudaSuccess) r = cudaGraphInstantiate(&exec, g, 0);
  if (r != cudaSuccess) {
    static_cast<void>(cudaGraphDestroy(g));
    throw_cuda(r, "building a step_batch's graph", __FILE__, __LINE__);
  }
  return {g, exec};
}

/// The CUDA backend's step: the step kernel, or a replay of the batch's graph (step_ops in
/// plan.hpp).
template <>
struct step_ops<backend::cuda> {
  static constexpr bool graphs = true;
  template <class F>
  FERRY_KERNEL_VISIBILITY static void preload() {
    preload_step_kernel<F>();
  }
  /// The step kernel over `blocks` blocks for the table at `table` (mapped), on `lane`.
  template <class F>
  FERRY_KERNEL_VISIBILITY static void launch(stream_ref<backend::cuda> s, const void* table, std::size_t blocks,
                                             const step_lane& lane, const F* f) {
    step_functor<F> fn{};
    if constexpr (!std::is_void_v<F>) fn = *f;
    launch_kernel("launch of ferry::step_kernels::run_step", step_kernels::run_step<step_functor<F>>,
                  step_grid(blocks), write_block_threads, s.get(),
                  step_locator{reinterpret_cast<std::uintptr_t>(table), 0, 0, lane.address}, fn);
  }
  template <class F>
  FERRY_KERNEL_VISIBILITY static step_graph make_graph(const step_locator& loc, std::size_t blocks, int device,
                                                       const F* f) {
    return make_step_graph<F>(loc, blocks, device, f);
  }
  /// launch::capture: the step kernel over `blocks` blocks finding its table through `loc`,
  /// launched on `s` (a capturing stream: recorded into the engine's graph).
  template <class F>
  FERRY_KERNEL_VISIBILITY static void record(stream_ref<backend::cuda> s, const step_locator& loc, std::size_t blocks,
                                             const F* f) {
    step_functor<F> fn{};
    if constexpr (!std::is_void_v<F>) fn = *f;
    launch_kernel("recording of ferry::step_kernels::run_step", step_kernels::run_step<step_functor<F>>,
                  step_grid(blocks), write_block_threads, s.get(), loc, fn);
  }
  static void replay(stream_ref<backend::cuda> s, const step_graph& g) {
    launch_graph("cudaGraphLaunch of a step_batch's graph", static_cast<cudaGraphExec_t>(g.exec), s.get());
  }
  static void destroy_graph(const step_graph& g) {
    if (g.exec) FERRY_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g.exec)));
    if (g.graph) FERRY_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(g.graph)));
  }
  FERRY_KERNEL_VISIBILITY static step_lane take_lane(int device) { return step_lanes().take(device); }
  static void give_lane(int device, const step_lane& lane) noexcept { step_lanes().give(device, lane); }
};

}  // namespace detail
}  // namespace ferry

#endif  // defined(__CUDACC__)
