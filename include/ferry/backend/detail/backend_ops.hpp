// ferry/backend/detail/backend_ops.hpp: the few primitive operations every component is built
// from, one implementation per backend. Components call only these, so a backend is added here.
// Each operation that puts work on a stream counts it in backend_stats::enqueues (the host
// backend's in host_queue::enqueue, which every host task goes through).
#pragma once

#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/backend/event.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>

namespace ferry::detail {

template <class B>
struct backend_ops;

// ---- host -----------------------------------------------------------------------------------

template <>
struct backend_ops<backend::host> {
  using stream_type = stream_ref<backend::host>;
  static constexpr std::size_t alignment = 256;

  static int current_device() noexcept { return 0; }
  /// Every call on a stream checks this first (not empty; on CUDA also device match, not
  /// capturing).
  static void check_stream(stream_type s, int /*device*/) { static_cast<void>(checked(s)); }
  /// check_stream(s, device), then `device` current until the returned scope ends (one device
  /// on the host backend: nothing to switch).
  struct device_scope {};
  [[nodiscard]] static device_scope enter(stream_type s, int device) {
    check_stream(s, device);
    return {};
  }

  /// The stream's identity: no two live streams share it, and a destroyed stream (whose key a
  /// new one may get) has run all its work.
  static std::uint64_t stream_key(stream_type s) {
    return reinterpret_cast<std::uintptr_t>(checked(s));
  }

  /// Blocks until all work on every stream has run (cudaDeviceSynchronize); counted. Past `d`
  /// (by default the process-wide bound): ferry::timeout_error.
  static void synchronize_device(int /*device*/, wait_deadline& d) {
    count(counters<backend::host>().synchronizations);
    if (!host_queue::drain_all(d))
      throw timeout_error("ferry: the wait for every stream of the device (the host backend's device "
                          "synchronize) " + timeout_text(d));
  }
  static void synchronize_device(int device) {
    wait_deadline d;
    synchronize_device(device, d);
  }

  static void* alloc_pinned(std::size_t bytes) {
    void* p = aligned(bytes, "pinned");
    count(counters<backend::host>().pinned_allocations);
    return p;
  }
  /// Waits for the work of every stream first, as cudaFreeHost does; past the bound the memory is
  /// leaked (drained_for_free).
  static void free_pinned(void* p) noexcept {
    if (!p) return;
    count(counters<backend::host>().pinned_frees);
    if (drained_for_free()) ::operator delete(p, std::align_val_t{alignment});
  }
  /// The address kernels use for pinned memory: on the host backend the host address itself.
  static void* mapped(void* host) noexcept { return host; }
  /// Whether memory not allocated here (a pinned resource's) can be used as pinned memory: on the
  /// host backend any host memory can.
  static bool is_mapped_pinned(const void* /*p*/) noexcept { return true; }

  static void* alloc_device(std::size_t bytes) {
    void* p = aligned(bytes, "device");
    count(counters<backend::host>().device_allocations);
    return p;
  }
  /// Waits for the work of every stream first, as cudaFree does; past the bound the memory is
  /// leaked (drained_for_free).
  static void free_device(void* p) noexcept {
    if (!p) return;
    if (drained_for_free()) release_device(p);
  }
  static void* alloc_device_async(std::size_t bytes, stream_type) { return alloc_device(bytes); }
  /// Stream-ordered: the memory goes once the work enqueued before it on `s` has run.
  static void free_device_async(void* p, stream_type s) {
    checked(s)->enqueue([p] { release_device(p); });
  }

  static void copy_async(void* dst, const void* src, std::size_t bytes, stream_type s) {
    checked(s)->enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  static void fill_zero_async(void* dst, std::size_t bytes, stream_type s) {
    checked(s)->enqueue([dst, bytes] { std::memset(dst, 0, bytes); });
  }
  /// A host-blocking copy (pin::allow_sync): counted as a synchronization. It waits for the
  /// stream first, then copies; past the process-wide bound: ferry::timeout_error, nothing copied.
  static void copy_blocking(void* dst, const void* src, std::size_t bytes, stream_type s) {
    host_queue* q = checked(s);
    count(counters<backend::host>().synchronizations);
    wait_deadline d;
    if (!q->wait_until(q->enqueued(), d.until()))
      throw timeout_error("ferry: a blocking copy (pin::allow_sync) waits for its stream first; the wait " +
                          timeout_text(d) + "; nothing was copied");
    std::memcpy(dst, src, bytes);
  }

 private:
  // The frees' wait for every stream (as cudaFree's), bounded by the process-wide bound: false
  // past it (or on a bad bound, the default's), and the memory is then leaked, never freed under
  // work that may still use it (counted in ferry::swallowed_errors()).
  static bool drained_for_free() noexcept {
    try {
      wait_deadline d = destructor_deadline();
      if (host_queue::drain_all(d)) return true;
    } catch (...) {
    }
    count_swallowed_error();
    return false;
  }
  static void release_device(void* p) noexcept {
    count(counters<backend::host>().device_frees);
    ::operator delete(p, std::align_val_t{alignment});
  }
  // Zero-filled memory, or ferry::out_of_memory (`kind`: "pinned" or "device").
  static void* aligned(std::size_t bytes, const char* kind) {
    void* p = ::operator new(bytes ? bytes : 1, std::align_val_t{alignment}, std::nothrow);
    if (!p)
      throw out_of_memory(std::string("ferry: out of ") + kind + " memory: " +
                          std::to_string(bytes) + " bytes requested (host backend)");
    std::memset(p, 0, bytes);
    return p;
  }
};

// ---- CUDA -----------------------------------------------------------------------------------

#if FERRY_HAS_CUDA
template <>
struct backend_ops<backend::cuda> {
  using stream_type = stream_ref<backend::cuda>;
  static constexpr std::size_t alignment = 256;  // cudaHostAlloc and cudaMalloc give at least this

  static int current_device() {
    int d = 0;
    FERRY_CUDA_CHECK(cudaGetDevice(&d));
    return d;
  }

  /// The stream must not be empty, must belong to `device` (the device current when the object
  /// was made) and must not be capturing: ferry's hot paths fence slots with events and reuse memory, which a graph
  /// replayed later would not respect.
  static void check_stream(stream_type s, int device) {
    const cudaStream_t handle = checked(s);
    // Capture status first: it is the one query that is legal on every capturing stream.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    FERRY_CUDA_CHECK(cudaStreamIsCapturing(handle, &status));
    if (status != cudaStreamCaptureStatusNone)
      throw error(
          "ferry: the stream is capturing a CUDA graph; ferry calls are eager (apply before "
          "capture, and use growth::fixed for stable addresses that a graph may read)");
    const int d = s.device();  // carried by a ferry::stream's reference: no call then
    if (d != device)
      throw error("ferry: the stream belongs to device " + std::to_string(d) +
                  " but the object was made on device " + std::to_string(device));
  }

  /// check_stream(s, device), then `device` current until the returned scope ends (restoring the
  /// caller's device): for calls on objects made on another device than the caller's current one.
  using device_scope = detail::device_scope;
  [[nodiscard]] static device_scope enter(stream_type s, int device) {
    check_stream(s, device);
    return device_scope(device);
  }

  /// The stream's identity: its process-unique id (never reused by a later stream).
  static std::uint64_t stream_key(stream_type s) { return s.id(); }

  /// cudaDeviceSynchronize on `device`, bounded by `d` (by default the process-wide bound): the
  /// runtime's call cannot be given up, so a helper thread makes it while this one waits for it
  /// until `d`; past it, ferry::timeout_error (the helper stays blocked until the device drains).
  /// Counted, and in blocking_waits (sync_guard sees the helper's call as one of ferry's waits).
  /// The caller's current device is kept. Called by destructors only: a thread each time.
  static void synchronize_device(int device, wait_deadline& d) {
    struct state {
      std::mutex m;
      std::condition_variable cv;
      bool done = false;
      cudaError_t result = cudaSuccess;
    };
    const auto until = d.until();
    count(counters<backend::cuda>().synchronizations);
    ++blocking_waits;
    auto st = std::make_shared<state>();
    std::thread([st, device] {
      cudaError_t r = cudaSetDevice(device);
      if (r == cudaSuccess) r = cudaDeviceSynchronize();
      std::lock_guard lock(st->m);
      st->result = r;
      st->done = true;
      st->cv.notify_all();
    }).detach();
    std::unique_lock lock(st->m);
    if (!st->cv.wait_until(lock, until, [&] { return st->done; }))
      throw timeout_error("ferry: the wait for device " + std::to_string(device) +
                          " to run all its work (cudaDeviceSynchronize) " + timeout_text(d));
    if (st->result != cudaSuccess) throw make_cuda_error(st->result, "cudaDeviceSynchronize", __FILE__, __LINE__);
  }
  static void synchronize_device(int device) {
    wait_deadline d;
    synchronize_device(device, d);
  }

  static void* alloc_pinned(std::size_t bytes) {
    void* p = nullptr;
    FERRY_CUDA_CHECK_ALLOC(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable),
                           "pinned", bytes);
    count(counters<backend::cuda>().pinned_allocations);
    // Fail closed: the block must really be pinned, mapped, and addressed through UVA.
    if (!is_mapped_pinned(p)) {
      free_pinned(p);
      throw error(
          "ferry: cudaHostAlloc returned memory that is not pinned, mapped and UVA-addressed "
          "(no unified addressing, WSL2, or confidential computing?); ferry needs kernels to "
          "read pinned host memory in place");
    }
    std::memset(p, 0, bytes);
    return p;
  }
  static void free_pinned(void* p) noexcept {
    if (!p) return;
    count(counters<backend::cuda>().pinned_frees);
    destructor_guard([&] { FERRY_CUDA_CHECK(cudaFreeHost(p)); });
  }
  /// Under UVA the device address of mapped pinned memory is its host address.
  static void* mapped(void* host) noexcept { return host; }
  /// Whether `p` is pinned host memory mapped into the device's address space at the same address
  /// (cudaHostAlloc'd mapped, or cudaHostRegister'd mapped, under UVA): what mapped() assumes. A
  /// failed query is consumed (cudaGetLastError) and answers false.
  static bool is_mapped_pinned(const void* p) noexcept {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    return attr.type == cudaMemoryTypeHost && attr.devicePointer == p;
  }

  static void* alloc_device(std::size_t bytes) {
    void* p = nullptr;
    FERRY_CUDA_CHECK_ALLOC(cudaMalloc(&p, bytes ? bytes : 1), "device", bytes);
    count(counters<backend::cuda>().device_allocations);
    return p;
  }
  static void free_device(void* p) noexcept {
    if (!p) return;
    count(counters<backend::cuda>().device_frees);
    destructor_guard([&] { FERRY_CUDA_CHECK(cudaFree(p)); });
  }
  static void* alloc_device_async(std::size_t bytes, stream_type s) {
    void* p = nullptr;
    FERRY_CUDA_CHECK_ALLOC(cudaMallocAsync(&p, bytes ? bytes : 1, s.get()), "device", bytes);
    count(counters<backend::cuda>().device_allocations);
    count(counters<backend::cuda>().enqueues);
    return p;
  }
  static void free_device_async(void* p, stream_type s) {
    count(counters<backend::cuda>().device_frees);
    FERRY_CUDA_CHECK(cudaFreeAsync(p, s.get()));
    count(counters<backend::cuda>().enqueues);
  }

  static void copy_async(void* dst, const void* src, std::size_t bytes, stream_type s) {
    FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s.get()));
    count(counters<backend::cuda>().enqueues);
  }
  static void fill_zero_async(void* dst, std::size_t bytes, stream_type s) {
    FERRY_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s.get()));
    count(counters<backend::cuda>().enqueues);
  }
  /// A host-blocking copy (pin::allow_sync): the copy, then a bounded wait for it (counted as one
  /// synchronization, seen by sync_guard in blocking_waits). Past the process-wide bound:
  /// ferry::timeout_error; the copy is enqueued and may still run.
  static void copy_blocking(void* dst, const void* src, std::size_t bytes, stream_type s) {
    FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s.get()));
    count(counters<backend::cuda>().enqueues);
    auto& core = shared_timeline<backend::cuda>();
    const stamp p = core.mark(s);
    wait_deadline d;
    const wait_result r = core.wait_until(p, d);
    if (r == wait_result::timed_out)
      throw timeout_error("ferry: a blocking copy (pin::allow_sync) of " + std::to_string(bytes) +
                          " bytes was enqueued, and the wait for it (" + point_name(p) + ") " + timeout_text(d) +
                          "; the copy may still run: keep its source and destination until the stream "
                          "has passed that point");
    if (r == wait_result::passed) {  // done already: still the synchronization it was asked for
      count(counters<backend::cuda>().synchronizations);
      ++blocking_waits;
    }
  }
};
#endif

}  // namespace ferry::detail
