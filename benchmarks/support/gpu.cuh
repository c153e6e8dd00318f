// The harness's CUDA side: a benchmark's main (a clear skip without a GPU), the GPU's name, a
// kernel that holds a stream for a while, and device time: operations queued behind a gate that
// holds the stream until the host has enqueued them all, so that the device, not the host, sets
// the pace; CUDA events time the operations only.
#pragma once

#include "bench.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ferry_bench {

#define BENCH_CUDA(call)                                                            \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

/// The GPU's name, for the results' "machine" field.
inline std::string gpu_name() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "no GPU";
  return p.name;
}

/// A benchmark's main: parses the options and runs `run(o)`. Without a CUDA device it prints why
/// and exits with 77 (ctest: skipped), or fails when FERRY_REQUIRE_GPU=1; an exception ends it with
/// "NAME: what" and 1.
template <class Run>
int bench_main(const char* name, int argc, char** argv, Run&& run) {
  try {
    const options o = parse(argc, argv);
    int n = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
      const std::string why = e != cudaSuccess ? cudaGetErrorString(e) : "no device";
      const char* require = std::getenv("FERRY_REQUIRE_GPU");
      if (require != nullptr && std::string(require) == "1") throw std::runtime_error("FERRY_REQUIRE_GPU=1 but no CUDA device (" + why + ")");
      std::cout << name << ": skipped: no CUDA device (" << why << ")\n";
      return 77;
    }
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
}

__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

/// Enqueues a kernel that keeps the stream busy for `ms` milliseconds.
inline void hold_stream(cudaStream_t s, double ms) {
  hold_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long>(ms * 1e6));
  BENCH_CUDA(cudaPeekAtLastError());
}

/// Polls a flag in mapped memory (about every microsecond) until the host sets it, or until a cap,
/// counted in `cut` (the stream then opened before the host had queued its burst).
__global__ void gate_kernel(const volatile unsigned* open, unsigned long long cap_ns, volatile unsigned* cut) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (*open == 0u) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > cap_ns) {
      *cut = *cut + 1u;  // one gate kernel at a time: no other writer
      return;
    }
    __nanosleep(1000);
  }
}

/// A stream held until the host opens it: close(), enqueue, open().
class stream_gate {
 public:
  explicit stream_gate(cudaStream_t s) : s_(s) {
    BENCH_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&flags_), 2 * sizeof(unsigned), cudaHostAllocMapped));
    flags_[0] = 1;  // open
    flags_[1] = 0;  // gates cut by their cap
    BENCH_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_), flags_, 0));
  }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;
  ~stream_gate() {
    open();
    cudaStreamSynchronize(s_);
    cudaFreeHost(flags_);
  }
  /// Holds the stream until open() or `cap_ms`. The stream must have passed the previous gate.
  void close(double cap_ms = 1000) {
    std::atomic_ref<unsigned>(flags_[0]).store(0, std::memory_order_release);
    gate_kernel<<<1, 1, 0, s_>>>(dev_, static_cast<unsigned long long>(cap_ms * 1e6), dev_ + 1);
    BENCH_CUDA(cudaPeekAtLastError());
  }
  void open() { std::atomic_ref<unsigned>(flags_[0]).store(1, std::memory_order_release); }
  /// Gates cut by their cap so far (read once the stream has passed them).
  [[nodiscard]] unsigned cut() const { return std::atomic_ref<unsigned>(flags_[1]).load(std::memory_order_acquire); }
  [[nodiscard]] cudaStream_t stream() const noexcept { return s_; }

 private:
  cudaStream_t s_;
  unsigned* flags_ = nullptr;
  unsigned* dev_ = nullptr;
};

/// A variant timed on the device: `n` (or `count`, when n is 0) operations op(i) enqueued behind
/// the closed gate, CUDA events around them, the gate opened once all are enqueued; device µs per
/// operation, NaN when the gate reached its cap first (the host, not the device, set the pace).
template <class Op>
timed_burst device_burst(stream_gate& gate, Op op, std::size_t n = 0, double cap_ms = 1000) {
  return [&gate, op = std::move(op), n, cap_ms, i = std::size_t{0}](std::size_t count) mutable {
    const std::size_t k = n ? n : count;
    cudaEvent_t e[2];
    for (auto& x : e) BENCH_CUDA(cudaEventCreate(&x));
    const unsigned cut = gate.cut();
    gate.close(cap_ms);
    BENCH_CUDA(cudaEventRecord(e[0], gate.stream()));
    for (std::size_t j = 0; j < k; ++j) op(i++);
    BENCH_CUDA(cudaEventRecord(e[1], gate.stream()));
    gate.open();
    BENCH_CUDA(cudaEventSynchronize(e[1]));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e[0], e[1]));
    for (auto x : e) cudaEventDestroy(x);
    return gate.cut() != cut ? nan : ms * 1e3 / static_cast<double>(k);
  };
}

}  // namespace ferry_bench
