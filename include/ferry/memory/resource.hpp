// ferry/memory/resource.hpp: the allocator seam. An engine's own memory pool models
// ferry::device_memory_resource (stream-ordered device memory) or ferry::pinned_memory_resource
// (pinned, mapped host memory) and is passed to ferry as a non-owning device_resource_ref /
// pinned_resource_ref. What takes one: pinned_arena (a pinned_resource_ref, the source of its
// blocks); device_buffer(n, stream, device_resource_ref); staged_write_tensor and
// fused_staged_writer through ferry::staging_memory (<ferry/staged/staging_memory.hpp>: an arena
// for their pinned staging, a device_resource_ref for their device target and H2D scratch). The
// member names are those of cuda::mr from CCCL 3.1 on (allocate(stream, bytes, alignment),
// allocate_sync(bytes, alignment)); <ferry/interop/cccl.hpp> adapts CCCL 3.0's experimental
// resources, named differently (docs/interop.md).
#pragma once

#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace ferry {

/// Stream-ordered device memory of backend B: `allocate(stream, bytes, alignment)` returns memory
/// usable by work enqueued on `stream` after the call; `deallocate(stream, p, bytes, alignment)`
/// frees it once `stream` has passed the work enqueued before the call. A resource whose stream
/// parameter is cuda::stream_ref (cuda::mr::resource from CCCL 3.1, RMM's resources) models it
/// for the CUDA backend: ferry::stream_ref<backend::cuda> converts.
template <class R, class B = default_backend>
concept device_memory_resource = requires(R& r, stream_ref<B> s, void* p, std::size_t bytes,
                                          std::size_t alignment) {
  { r.allocate(s, bytes, alignment) } -> std::same_as<void*>;
  { r.deallocate(s, p, bytes, alignment) } -> std::same_as<void>;
};

/// The alignment ferry asks of a device_memory_resource, and checks: 256 bytes, what cudaMalloc
/// guarantees and ferry's kernels and copies assume of all device memory.
inline constexpr std::size_t device_alignment = 256;

/// Pinned, mapped host memory (page-locked, reachable from every device through UVA; CCCL's
/// host_accessible and device_accessible): `allocate_sync(bytes, alignment)` and
/// `deallocate_sync(p, bytes, alignment)`. Pinned allocation is not stream-ordered: ferry gives a
/// block back only once the streams that used it have passed that use. What ferry asks of the
/// memory (the concept checks only the members): on the CUDA backend, memory from
/// cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable), or host memory registered with
/// cudaHostRegister(cudaHostRegisterMapped | cudaHostRegisterPortable), whose device address is
/// its host address (UVA) — pinned_arena checks each block with cudaPointerGetAttributes; on the
/// host backend, any host memory. Out of memory: return nullptr or throw std::bad_alloc (ferry
/// reports ferry::out_of_memory).
template <class R>
concept pinned_memory_resource = requires(R& r, void* p, std::size_t bytes, std::size_t alignment) {
  { r.allocate_sync(bytes, alignment) } -> std::same_as<void*>;
  { r.deallocate_sync(p, bytes, alignment) } -> std::same_as<void>;
};

/// A non-owning, trivially copyable reference to any device_memory_resource<R, B>: what ferry's
/// components take to allocate device memory from an engine's pool. The resource must outlive it.
template <class B = default_backend>
class device_resource_ref {
 public:
  /// Refers to `r` (an lvalue: a temporary would not outlive the reference).
  template <class R>
  requires(!std::is_const_v<R> && !std::is_same_v<R, device_resource_ref> && device_memory_resource<R, B>)
      device_resource_ref(R& r)
  noexcept  // NOLINT: implicit, as cuda::mr::resource_ref
      : resource_(std::addressof(r)), allocate_(&allocate_fn<R>), deallocate_(&deallocate_fn<R>) {}

  /// r.allocate(s, bytes, alignment).
  [[nodiscard]] void* allocate(stream_ref<B> s, std::size_t bytes, std::size_t alignment) const {
    return allocate_(resource_, s, bytes, alignment);
  }
  /// r.deallocate(s, p, bytes, alignment).
  void deallocate(stream_ref<B> s, void* p, std::size_t bytes, std::size_t alignment) const {
    deallocate_(resource_, s, p, bytes, alignment);
  }
  /// The same resource object.
  friend bool operator==(device_resource_ref a, device_resource_ref b) noexcept {
    return a.resource_ == b.resource_;
  }

 private:
  template <class R>
  static void* allocate_fn(void* r, stream_ref<B> s, std::size_t bytes, std::size_t alignment) {
    return static_cast<R*>(r)->allocate(s, bytes, alignment);
  }
  template <class R>
  static void deallocate_fn(void* r, stream_ref<B> s, void* p, std::size_t bytes, std::size_t alignment) {
    static_cast<R*>(r)->deallocate(s, p, bytes, alignment);
  }

  void* resource_;
  void* (*allocate_)(void*, stream_ref<B>, std::size_t, std::size_t);
  void (*deallocate_)(void*, stream_ref<B>, void*, std::size_t, std::size_t);
};

/// A non-owning, trivially copyable reference to any pinned_memory_resource: what ferry's pinned
/// arena takes to get its blocks from an engine's pool. The resource must outlive it.
class pinned_resource_ref {
 public:
  /// Refers to `r` (an lvalue: a temporary would not outlive the reference).
  template <class R>
  requires(!std::is_const_v<R> && !std::is_same_v<R, pinned_resource_ref> && pinned_memory_resource<R>)
      pinned_resource_ref(R& r)
  noexcept  // NOLINT: implicit, as cuda::mr::resource_ref
      : resource_(std::addressof(r)), allocate_(&allocate_fn<R>), deallocate_(&deallocate_fn<R>) {}

  /// r.allocate_sync(bytes, alignment).
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment) const {
    return allocate_(resource_, bytes, alignment);
  }
  /// r.deallocate_sync(p, bytes, alignment).
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment) const {
    deallocate_(resource_, p, bytes, alignment);
  }
  /// The same resource object.
  friend bool operator==(pinned_resource_ref a, pinned_resource_ref b) noexcept {
    return a.resource_ == b.resource_;
  }

 private:
  template <class R>
  static void* allocate_fn(void* r, std::size_t bytes, std::size_t alignment) {
    return static_cast<R*>(r)->allocate_sync(bytes, alignment);
  }
  template <class R>
  static void deallocate_fn(void* r, void* p, std::size_t bytes, std::size_t alignment) {
    static_cast<R*>(r)->deallocate_sync(p, bytes, alignment);
  }

  void* resource_;
  void* (*allocate_)(void*, std::size_t, std::size_t);
  void (*deallocate_)(void*, void*, std::size_t, std::size_t);
};

namespace detail {

/// `allocate()`, a resource's allocation of `bytes` bytes of `kind` memory ("pinned", "device"),
/// whose running out (null, or std::bad_alloc) becomes ferry::out_of_memory naming `who`.
template <class Allocate>
void* allocate_or_report(Allocate&& allocate, std::size_t bytes, const char* kind,
                         const char* who) {
  void* p = nullptr;
  try {
    p = std::forward<Allocate>(allocate)();
  } catch (const out_of_memory&) {
    throw;
  } catch (const std::bad_alloc& e) {
    throw out_of_memory(std::string("ferry: out of ") + kind + " memory: " + who +
                        " failed to allocate " + std::to_string(bytes) + " bytes (" + e.what() +
                        ")");
  }
  if (p == nullptr)
    throw out_of_memory(std::string("ferry: out of ") + kind + " memory: " + who +
                        " returned null for " + std::to_string(bytes) + " bytes");
  return p;
}

/// `bytes` bytes from `mr` in stream order on `s`, device_alignment-aligned (a block that is not
/// is given back at once and ferry::error thrown); out of memory as allocate_or_report. Every
/// device allocation from a resource goes through here.
template <class B>
void* allocate_device(device_resource_ref<B> mr, stream_ref<B> s, std::size_t bytes,
                      const char* who) {
  void* p = allocate_or_report([&] { return mr.allocate(s, bytes, device_alignment); }, bytes,
                               "device", who);
  if (reinterpret_cast<std::uintptr_t>(p) % device_alignment != 0) {
    mr.deallocate(s, p, bytes, device_alignment);
    throw error(std::string("ferry: ") + who + " returned device memory that is not " +
                std::to_string(device_alignment) + "-byte aligned (ferry asks for " +
                std::to_string(device_alignment) + ", what cudaMalloc gives)");
  }
  return p;
}

}  // namespace detail

}  // namespace ferry
