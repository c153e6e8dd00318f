// ferry/backend/detail/cuda_runtime.hpp: checked CUDA runtime calls and the per-stream record of
// errors raised inside stream work.
#pragma once

#include <ferry/config.hpp>
#include <ferry/error.hpp>

#if FERRY_HAS_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ferry::detail {

[[noreturn]] inline void throw_cuda(cudaError_t code, const char* call, const char* file, int line) {
  throw cuda_error(static_cast<int>(code), std::string("ferry: ") + call + " failed with " +
                                               cudaGetErrorName(code) + " (" +
                                               cudaGetErrorString(code) + ") at " + file + ":" +
                                               std::to_string(line));
}

inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw_cuda(code, call, file, line);
}

/// Makes `device` the calling thread's current device for its lifetime, when it is not already,
/// and restores the caller's device at the end: ferry never changes the caller's current device,
/// yet kernel launches, event creation and device allocations must happen on the device of the
/// object (and stream) they serve.
class device_scope {
 public:
  explicit device_scope(int device) {
    int current = 0;
    check_cuda(cudaGetDevice(&current), "cudaGetDevice", __FILE__, __LINE__);
    if (current != device) {
      check_cuda(cudaSetDevice(device), "cudaSetDevice", __FILE__, __LINE__);
      previous_ = current;
    }
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() {
    if (previous_ >= 0) static_cast<void>(cudaSetDevice(previous_));  // was current a moment ago
  }

 private:
  int previous_ = -1;
};

// Errors thrown by host functions enqueued on CUDA streams (ferry::enqueue_host), kept per stream
// until the next synchronizing call on that stream (or an event recorded on it) hands them out.
class stream_error_registry {
 public:
  static stream_error_registry& instance() {
    static auto* r = new stream_error_registry;  // leaked: host functions may run at exit
    return *r;
  }
  void record(cudaStream_t s, std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    errors_.try_emplace(s, std::move(e));  // the first error wins
    any_.store(true, std::memory_order_release);
  }
  std::exception_ptr take(cudaStream_t s) {
    if (!any_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(mutex_);
    auto it = errors_.find(s);
    if (it == errors_.end()) return nullptr;
    auto e = std::move(it->second);
    errors_.erase(it);
    any_.store(!errors_.empty(), std::memory_order_release);
    return e;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<cudaStream_t, std::exception_ptr> errors_;
  std::atomic<bool> any_{false};
};

}  // namespace ferry::detail

/// Checks a CUDA runtime call; throws ferry::cuda_error naming the call, the error and file:line.
#define FERRY_CUDA_CHECK(call) ::ferry::detail::check_cuda((call), #call, __FILE__, __LINE__)

/// Checks a kernel launch without clearing the caller's sticky error state.
#define FERRY_CUDA_CHECK_LAUNCH(kernel_name) \
  ::ferry::detail::check_cuda(cudaPeekAtLastError(), "launch of " kernel_name, __FILE__, __LINE__)

#endif  // FERRY_HAS_CUDA
