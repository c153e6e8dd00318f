// ferry/backend/detail/cuda_runtime.hpp: checked CUDA runtime calls and the per-stream record of
// errors raised inside stream work.
#pragma once

#include <ferry/backend/stats.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/stream_errors.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>

#if FERRY_HAS_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace ferry::detail {

inline cuda_error make_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  return cuda_error(static_cast<int>(code), std::string("ferry: ") + call + " failed with " +
                                                cudaGetErrorName(code) + " (" +
                                                cudaGetErrorString(code) + ") at " + file + ":" +
                                                std::to_string(line));
}

/// Consumes the error `code` that the call ferry just made returned from the thread's last-error
/// state when it is still there (a sticky error stays, as CUDA keeps it), so that a later launch
/// check cannot report it again.
inline void consume_error(cudaError_t code) noexcept {
  if (cudaPeekAtLastError() == code) static_cast<void>(cudaGetLastError());
}

/// Throws the error `code` that the call ferry just made returned, consumed.
[[noreturn]] inline void throw_cuda(cudaError_t code, const char* call, const char* file, int line) {
  consume_error(code);
  throw make_cuda_error(code, call, file, line);
}

inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw_cuda(code, call, file, line);
}

/// Checks an allocation of `bytes` bytes of `kind` memory ("pinned", "device"): running out
/// throws ferry::out_of_memory, any other failure ferry::cuda_error; the error is consumed.
inline void check_alloc(cudaError_t code, const char* call, const char* kind, std::size_t bytes,
                        const char* file, int line) {
  if (code == cudaSuccess) [[likely]] return;
  if (code != cudaErrorMemoryAllocation) throw_cuda(code, call, file, line);
  consume_error(code);
  throw out_of_memory(std::string("ferry: out of ") + kind + " memory: " + std::to_string(bytes) +
                      " bytes requested; " + call + " failed with cudaErrorMemoryAllocation at " +
                      file + ":" + std::to_string(line));
}

/// Checks the launch just made with cudaPeekAtLastError: an error there may be the caller's, so
/// it is reported but never cleared.
inline void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t code = cudaPeekAtLastError();
  if (code != cudaSuccess) throw make_cuda_error(code, kernel, file, line);
}

/// A launch's name and the place in ferry that makes it (taken where a name converts to it), for
/// its error message.
struct launch_site {
  launch_site(const char* launch_name,
              std::source_location where = std::source_location::current()) noexcept
      : name(launch_name), at(where) {}
  const char* name;
  std::source_location at;
};

/// Launches `kernel` over `grid` blocks of `block` threads on `s`, with `args` (each converted to
/// its parameter's type), by cudaLaunchKernel. Its error is ferry's own, so it is thrown and
/// consumed: after a <<<>>> launch, cudaPeekAtLastError could not tell it from the caller's.
/// Counted in backend_stats::enqueues, as every launch of ferry's (launch_graph too).
template <class... Params>
void launch_kernel(launch_site site, void (*kernel)(Params...), unsigned grid, unsigned block,
                   cudaStream_t s, const std::type_identity_t<Params>&... args) {
  void* values[] = {const_cast<void*>(static_cast<const void*>(&args))...};
  check_cuda(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid), dim3(block), values, 0, s),
             site.name, site.at.file_name(), static_cast<int>(site.at.line()));
  count(counters<backend::cuda>().enqueues);
}

/// Launches the instantiated graph `exec` on `s` (cudaGraphLaunch), counted as one enqueue.
inline void launch_graph(launch_site site, cudaGraphExec_t exec, cudaStream_t s) {
  check_cuda(cudaGraphLaunch(exec, s), site.name, site.at.file_name(), static_cast<int>(site.at.line()));
  count(counters<backend::cuda>().enqueues);
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

/// The process-unique id of stream `s` (a handle may be reused once its stream is destroyed).
inline unsigned long long stream_id(cudaStream_t s) {
  unsigned long long id = 0;
  check_cuda(cudaStreamGetId(s, &id), "cudaStreamGetId", __FILE__, __LINE__);
  return id;
}

// Errors thrown by host functions enqueued on CUDA streams (ferry::enqueue_host), per stream id,
// each with the ticket of the host function that threw, until a synchronizing call ordered after
// it hands it out. Tickets grow across all streams, so an event that reads ticket() after its
// cudaEventRecord is ordered after exactly the host functions of its stream with tickets up to
// that. A stream is listed only while it has host functions in flight or errors to hand out.
class stream_error_registry {
 public:
  static stream_error_registry& instance() {
    static auto* r = new stream_error_registry;  // leaked: host functions may run at exit
    return *r;
  }
  /// A host function is about to be enqueued on stream `id`: its ticket.
  std::uint64_t enqueue(unsigned long long id) {
    std::lock_guard lock(mutex_);
    ++streams_[id].in_flight;
    listed_.store(true, std::memory_order_release);
    return tickets_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  /// The host function `ticket` on stream `id` has ended, having thrown `e` (or not: null).
  void finish(unsigned long long id, std::uint64_t ticket, std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    const auto it = streams_.find(id);
    if (e) it->second.errors.add(ticket, std::move(e));
    --it->second.in_flight;
    retire_if_done(it);
  }
  /// The largest ticket handed out so far (0: no host function was ever enqueued).
  [[nodiscard]] std::uint64_t ticket() const noexcept { return tickets_.load(std::memory_order_relaxed); }
  /// The first error of stream `id` from a host function with a ticket up to `upto` (null if
  /// none); consumes every such error.
  std::exception_ptr take(unsigned long long id, std::uint64_t upto) {
    if (!listed_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(mutex_);
    const auto it = streams_.find(id);
    if (it == streams_.end() || it->second.destroyed) return nullptr;
    auto e = it->second.errors.take(upto);
    retire_if_done(it);
    return e;
  }
  /// Whether any stream has host functions in flight or errors to hand out (no lock): when not,
  /// a synchronizing call need not look its stream up.
  [[nodiscard]] bool any() const noexcept { return listed_.load(std::memory_order_acquire); }
  /// The owning ferry::stream `id` was destroyed: its errors are dropped (counted in
  /// swallowed_errors()) once its last host function has ended.
  void destroyed(unsigned long long id) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = streams_.find(id);
    if (it == streams_.end()) return;
    it->second.destroyed = true;
    retire_if_done(it);
  }

 private:
  struct stream_state {
    std::uint64_t in_flight = 0;
    bool destroyed = false;
    stream_errors errors;
  };
  using map = std::unordered_map<unsigned long long, stream_state>;
  void retire_if_done(map::iterator it) noexcept {
    auto& st = it->second;
    if (st.in_flight != 0) return;
    if (st.destroyed) st.errors.drop();
    if (!st.errors.empty()) return;
    streams_.erase(it);
    listed_.store(!streams_.empty(), std::memory_order_release);
  }

  std::mutex mutex_;
  map streams_;
  std::atomic<std::uint64_t> tickets_{0};
  std::atomic<bool> listed_{false};  // streams_ is not empty: lets synchronizing calls skip the lock
};

// A host function enqueued by ferry::enqueue_host on a CUDA stream: runs `fn`, keeps what it
// throws in the registry under its ticket, and deletes itself.
template <class F>
struct host_fn_task {
  F fn;
  unsigned long long stream_id;
  std::uint64_t ticket;
  static void CUDART_CB trampoline(void* p) noexcept {
    std::unique_ptr<host_fn_task> t(static_cast<host_fn_task*>(p));
    std::exception_ptr failure;
    try {
      t->fn();
    } catch (...) {
      failure = capture_stream_error();
    }
    stream_error_registry::instance().finish(t->stream_id, t->ticket, std::move(failure));
  }
};

}  // namespace ferry::detail

/// Checks a CUDA runtime call; throws ferry::cuda_error naming the call, the error and file:line.
#define FERRY_CUDA_CHECK(call) ::ferry::detail::check_cuda((call), #call, __FILE__, __LINE__)

/// Checks a CUDA allocation call of `bytes` bytes of `kind` memory: ferry::out_of_memory when
/// the device or host is out of memory, ferry::cuda_error otherwise.
#define FERRY_CUDA_CHECK_ALLOC(call, kind, bytes) \
  ::ferry::detail::check_alloc((call), #call, kind, bytes, __FILE__, __LINE__)

/// Checks a kernel launch without clearing the caller's sticky error state.
#define FERRY_CUDA_CHECK_LAUNCH(kernel_name) \
  ::ferry::detail::check_launch("launch of " kernel_name, __FILE__, __LINE__)

#endif  // FERRY_HAS_CUDA
