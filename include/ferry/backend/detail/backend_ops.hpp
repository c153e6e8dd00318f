// ferry/backend/detail/backend_ops.hpp: the few primitive operations every component is built
// from, one implementation per backend. Components call only these, so a backend is added here.
// Each operation that puts work on a stream counts it in backend_stats::enqueues (the host
// backend's in host_queue::enqueue, which every host task goes through).
#pragma once

#include <ferry/backend/event.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

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

  /// Blocks until all work on every stream has run (cudaDeviceSynchronize); counted.
  static void synchronize_device(int /*device*/) {
    count(counters<backend::host>().synchronizations);
    host_queue::drain_all();
  }

  static void* alloc_pinned(std::size_t bytes) {
    void* p = aligned(bytes, "pinned");
    count(counters<backend::host>().pinned_allocations);
    return p;
  }
  /// Waits for the work of every stream first, as cudaFreeHost does.
  static void free_pinned(void* p) noexcept {
    if (!p) return;
    count(counters<backend::host>().pinned_frees);
    destructor_guard([] { host_queue::drain_all(); });
    ::operator delete(p, std::align_val_t{alignment});
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
  /// Waits for the work of every stream first, as cudaFree does.
  static void free_device(void* p) noexcept {
    if (!p) return;
    destructor_guard([] { host_queue::drain_all(); });
    release_device(p);
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
  /// A host-blocking copy (pin::allow_sync): counted as a synchronization.
  static void copy_blocking(void* dst, const void* src, std::size_t bytes, stream_type s) {
    count(counters<backend::host>().synchronizations);
    checked(s)->drain();
    std::memcpy(dst, src, bytes);
  }

 private:
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

  /// cudaDeviceSynchronize on `device` (the caller's current device is kept); counted.
  static void synchronize_device(int device) {
    const detail::device_scope on_device(device);
    count(counters<backend::cuda>().synchronizations);
    FERRY_CUDA_CHECK(cudaDeviceSynchronize());
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
  static void copy_blocking(void* dst, const void* src, std::size_t bytes, stream_type s) {
    count(counters<backend::cuda>().synchronizations);
    FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s.get()));
    count(counters<backend::cuda>().enqueues);
    FERRY_CUDA_CHECK(cudaStreamSynchronize(s.get()));
  }
};
#endif

}  // namespace ferry::detail
