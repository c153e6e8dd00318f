// Benchmark support: libtorch (PyTorch's C++ API) in the benchmark's own process, so that its rows
// are measured interleaved and in rotated order with ferry's (SPEC §10). The implementation,
// libtorch_peer.cpp, is compiled by the host compiler against libtorch where CMake finds Torch's
// config (benchmarks/CMakeLists.txt: target ferry_bench_libtorch, which defines
// FERRY_BENCH_LIBTORCH=1 for the benchmarks that link it); without it nothing of this header is
// called, and the benchmarks print why their libtorch rows are absent.
//
// The interface is plain C++ (no torch type, no std::string: the two sides may be compiled with
// different flags); errors are std::runtime_error.
#pragma once

#include <cstddef>

namespace ferry_bench::libtorch_peer {

/// torch's version string (TORCH_VERSION).
const char* torch_version() noexcept;

/// SPEC §11's decode step written with libtorch (libtorch_peer.cpp's file comment says what the
/// step does), on a stream of torch's pool, from a ring of up to `slots` pinned slots fenced by
/// events (support/fence.hpp); `graphs`: each slot's copy and ops captured once as a CUDA graph, a
/// step one replay. Construct and destroy it on the thread that calls step(): it holds
/// c10::InferenceMode and a stream guard (torch's current stream is its stream) for its lifetime.
class decode_step_engine {
 public:
  /// Throws std::runtime_error when torch sees no CUDA device.
  decode_step_engine(int slots, bool graphs);
  ~decode_step_engine();
  decode_step_engine(const decode_step_engine&) = delete;
  decode_step_engine& operator=(const decode_step_engine&) = delete;

  /// One step: writes the step's host data into a free slot and enqueues (or replays) its copy and ops.
  void step();
  /// Waits for the engine's stream.
  void synchronize();
  /// The engine's cudaStream_t.
  [[nodiscard]] void* stream() const noexcept;
  /// Replays every step so far on the host (after synchronizing) and compares the device's
  /// state: nullptr when equal, else the first mismatch (valid until the next call).
  [[nodiscard]] const char* check();

 private:
  struct impl;
  impl* impl_;
};

/// PyTorch's best path for a small upload of data already pinned: out.copy_(pinned,
/// non_blocking=True) of `n` int32 (a pinned CPU tensor into a CUDA tensor), on a stream of
/// torch's pool. The same lifetime rule as decode_step_engine.
class pinned_copy {
 public:
  explicit pinned_copy(std::size_t n);
  ~pinned_copy();
  pinned_copy(const pinned_copy&) = delete;
  pinned_copy& operator=(const pinned_copy&) = delete;

  /// out.copy_(pinned, non_blocking=True).
  void copy();
  void synchronize();
  [[nodiscard]] void* stream() const noexcept;
  /// nullptr when the device tensor holds the pinned tensor's values (after synchronizing), else
  /// what differs.
  [[nodiscard]] const char* check();

 private:
  struct impl;
  impl* impl_;
};

}  // namespace ferry_bench::libtorch_peer
