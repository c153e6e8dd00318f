// benchmarks/engine_step/engine_step_torch.hpp: the engine-shaped step written with libtorch the way
// vLLM's model runner v2 writes it (engine_step_torch.cpp), in bench.engine_step's own process. As
// support/libtorch_peer.hpp: compiled by the host compiler against libtorch into
// ferry_bench_libtorch where CMake finds Torch's config (FERRY_BENCH_LIBTORCH=1 in the benchmarks
// that link it); a plain C++ interface, errors as std::runtime_error.
#pragma once

#include <cstdint>

namespace ferry_bench::libtorch_engine {

/// engine_workload.hpp's step on a stream of torch's pool, with a ring of `slots` pinned slots,
/// each fenced by a CUDA event. Construct and destroy it on the thread that calls step(): it holds
/// c10::InferenceMode and a stream guard for its lifetime.
class engine_step_torch {
 public:
  /// Throws std::runtime_error when torch sees no CUDA device.
  explicit engine_step_torch(int slots);
  ~engine_step_torch();
  engine_step_torch(const engine_step_torch&) = delete;
  engine_step_torch& operator=(const engine_step_torch&) = delete;

  /// One step: the scheduler writes it into its pinned slot; the copy and the ops are enqueued.
  void step();
  /// The stand-in sampler (engine_workload.hpp's sampled_next) on the engine's stream, after the
  /// steps so far (untimed: checks only).
  void sample(std::uint64_t s);
  /// Waits for the engine's stream.
  void synchronize();
  /// The engine's cudaStream_t.
  [[nodiscard]] void* stream() const noexcept;
  /// Replays every step and sampler run on the host (after synchronizing) and compares the state
  /// and the last step's inputs: nullptr when equal, else the first mismatch (valid until the next
  /// call).
  [[nodiscard]] const char* check();

 private:
  struct impl;
  impl* impl_;
};

}  // namespace ferry_bench::libtorch_engine
