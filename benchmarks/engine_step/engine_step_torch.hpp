// benchmarks/engine_step/engine_step_torch.hpp: engine_workload.hpp's step written with libtorch
// (engine_step_torch.cpp), in bench.engine_step's own process, eager or replayed as CUDA graphs. As
// support/libtorch_peer.hpp: compiled by the host compiler against libtorch into
// ferry_bench_libtorch where CMake finds Torch's config (FERRY_BENCH_LIBTORCH=1 in the benchmarks
// that link it); a plain C++ interface, errors as std::runtime_error.
#pragma once

#include <engine_step/engine_workload.hpp>

#include <cstddef>

namespace ferry_bench::libtorch_engine {

/// The step on a stream of torch's pool, from a ring of up to `slots` pinned slots fenced by
/// events (support/fence.hpp); `graphs`: each slot's copy and ops captured once as a CUDA graph
/// (at construction), a step one replay. Construct and destroy it on the thread that calls step():
/// it holds c10::InferenceMode and a stream guard for its lifetime.
class engine_step_torch {
 public:
  /// Throws std::runtime_error when torch sees no CUDA device.
  engine_step_torch(const engine_step::shape& sh, int slots, bool graphs);
  ~engine_step_torch();
  engine_step_torch(const engine_step_torch&) = delete;
  engine_step_torch& operator=(const engine_step_torch&) = delete;

  /// One step: `d` written into a free pinned slot, its copy and ops enqueued (or replayed).
  void step(const engine_step::step_data& d);
  /// The engine's cudaStream_t.
  [[nodiscard]] void* stream() const noexcept;
  /// Its state and the last step's inputs on the device (for the check, once the stream drained).
  [[nodiscard]] engine_step::device_arrays arrays() const;
  /// Pinned slots used so far.
  [[nodiscard]] std::size_t slots() const noexcept;

 private:
  struct impl;
  impl* impl_;
};

}  // namespace ferry_bench::libtorch_engine
