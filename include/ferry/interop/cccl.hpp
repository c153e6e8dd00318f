// ferry/interop/cccl.hpp: the allocator seam in CCCL's terms. The seam itself (the resource
// concepts and the non-owning device_resource_ref / pinned_resource_ref that ferry's components
// take) is <ferry/memory/resource.hpp>, in the shape of cuda::mr from CCCL 3.1 on, which a CCCL 3.1
// resource models as it is. CCCL 3.0 (CUDA 13.0) has cuda::mr only as an experimental API
// (LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE, defined before any CCCL header) with other
// member names; when it is enabled (in a CUDA build), cccl_pinned_resource adapts such a resource,
// pinned and mapped (host_accessible and device_accessible), to ferry's pinned_memory_resource,
// and cccl_device_resource a stream-ordered one (async_resource, device_accessible) to ferry's
// device_memory_resource of the CUDA backend. The stream conversions (stream_ref <->
// cuda::stream_ref) and device_span -> cuda::std::span live with those types.
#pragma once

#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/memory/resource.hpp>

#include <cstddef>
#include <memory>

#if FERRY_HAS_CUDA && defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) && \
    __has_include(<cuda/memory_resource>)
#include <cuda/memory_resource>
#define FERRY_HAS_CCCL_MEMORY_RESOURCE 1
#else
#define FERRY_HAS_CCCL_MEMORY_RESOURCE 0
#endif

namespace ferry {

#if FERRY_HAS_CCCL_MEMORY_RESOURCE
/// A CCCL 3.0 synchronous resource of pinned, mapped host memory (cuda::mr::resource_with<R,
/// host_accessible, device_accessible>: allocate(bytes, alignment), deallocate(p, bytes,
/// alignment)) seen as a ferry::pinned_memory_resource, so that a pinned_resource_ref can refer to
/// it (bind the ref to the adaptor, an lvalue). Non-owning: `r` must outlive it. The memory must
/// meet what pinned_memory_resource asks (mapped, device address = host address).
template <class R>
class cccl_pinned_resource {
  static_assert(cuda::mr::resource_with<R, cuda::mr::host_accessible, cuda::mr::device_accessible>,
                "cccl_pinned_resource adapts a cuda::mr::resource whose memory is both "
                "host_accessible and device_accessible: pinned, mapped host memory.");

 public:
  /// Adapts `r`.
  explicit cccl_pinned_resource(R& r) noexcept : resource_(std::addressof(r)) {}
  /// r.allocate(bytes, alignment).
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment) {
    return resource_->allocate(bytes, alignment);
  }
  /// r.deallocate(p, bytes, alignment).
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment) {
    resource_->deallocate(p, bytes, alignment);
  }

 private:
  R* resource_;
};

/// A CCCL 3.0 stream-ordered resource of device memory (cuda::mr::async_resource_with<R,
/// device_accessible>: allocate_async(bytes, alignment, cuda::stream_ref), deallocate_async(p,
/// bytes, alignment, cuda::stream_ref)) seen as a ferry::device_memory_resource of the CUDA
/// backend, so that a device_resource_ref<backend::cuda> can refer to it (bind the ref to the
/// adaptor, an lvalue). Non-owning: `r` must outlive it.
template <class R>
class cccl_device_resource {
  static_assert(cuda::mr::async_resource_with<R, cuda::mr::device_accessible>,
                "cccl_device_resource adapts a stream-ordered cuda::mr::async_resource whose "
                "memory is device_accessible.");

 public:
  /// Adapts `r`.
  explicit cccl_device_resource(R& r) noexcept : resource_(std::addressof(r)) {}
  /// r.allocate_async(bytes, alignment, s).
  [[nodiscard]] void* allocate(stream_ref<backend::cuda> s, std::size_t bytes,
                               std::size_t alignment) {
    return resource_->allocate_async(bytes, alignment, ::cuda::stream_ref(s.get()));
  }
  /// r.deallocate_async(p, bytes, alignment, s).
  void deallocate(stream_ref<backend::cuda> s, void* p, std::size_t bytes, std::size_t alignment) {
    resource_->deallocate_async(p, bytes, alignment, ::cuda::stream_ref(s.get()));
  }

 private:
  R* resource_;
};
#endif

}  // namespace ferry
