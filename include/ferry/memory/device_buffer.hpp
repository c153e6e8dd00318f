// ferry/memory/device_buffer.hpp: device_buffer<T, B>, device memory owned by RAII.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/resource.hpp>

#include <cstddef>
#include <optional>
#include <utility>

namespace ferry {

/// `n` elements of device memory, contents uninitialized.
///  - `device_buffer(n)`: cudaMalloc; complete on return. The destructor's cudaFree waits for the
///    whole device.
///  - `device_buffer(n, stream)`: stream-ordered (cudaMallocAsync): usable by work on `stream`
///    enqueued after the constructor; the destructor frees it in order on the same stream
///    (cudaFreeAsync), which therefore must outlive the buffer.
///  - `device_buffer(n, stream, resource)`: from an engine's device_memory_resource, in stream
///    order on `stream` (`allocate(stream, bytes, device_alignment)`), given back to it on the
///    same stream with the same size and alignment; the stream and the resource must outlive the
///    buffer. n == 0 asks nothing of the resource (an empty buffer). The resource returning null
///    or throwing std::bad_alloc → ferry::out_of_memory; a block that is not device_alignment
///    aligned is given back, ferry::error; nothing is leaked. backend_stats_of counts ferry's own
///    allocations only, not the resource's.
/// n * sizeof(T) beyond size_t → std::invalid_argument, nothing allocated. Move-only; a
/// moved-from buffer is empty.
template <class T, class B = default_backend>
class device_buffer {
  static_assert((detail::check_element<T>(), true));
  static_assert((detail::check_backend<B>(), true));
  using ops = detail::backend_ops<B>;

 public:
  using value_type = T;    ///< The element type.
  using backend_type = B;  ///< The backend.

  /// An empty buffer.
  device_buffer() noexcept = default;
  /// `n` elements (cudaMalloc); complete on return.
  explicit device_buffer(std::size_t n)
      : data_(static_cast<T*>(
            ops::alloc_device(detail::checked_bytes(n, sizeof(T), "device_buffer")))),
        size_(n) {}
  /// `n` elements allocated in stream order on `s` (cudaMallocAsync), freed in order on `s`.
  device_buffer(std::size_t n, stream_ref<B> s) : size_(n), stream_(s) {
    ops::check_stream(s, ops::current_device());
    data_ = static_cast<T*>(
        ops::alloc_device_async(detail::checked_bytes(n, sizeof(T), "device_buffer"), s));
  }
  /// `n` elements from `mr`, allocated in stream order on `s`, given back to `mr` on `s`.
  device_buffer(std::size_t n, stream_ref<B> s, device_resource_ref<B> mr)
      : stream_(s), resource_(mr) {
    ops::check_stream(s, ops::current_device());
    const std::size_t bytes = detail::checked_bytes(n, sizeof(T), "device_buffer");
    if (n == 0) return;
    data_ = static_cast<T*>(detail::allocate_device(mr, s, bytes, "the device_buffer's resource"));
    size_ = n;
  }
  /// Takes over `o`'s memory; `o` is left empty.
  device_buffer(device_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        stream_(std::exchange(o.stream_, std::nullopt)),
        resource_(std::exchange(o.resource_, std::nullopt)) {}
  /// Swaps contents with `o` (this buffer's memory is freed by `o`'s destructor).
  device_buffer& operator=(device_buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(stream_, o.stream_);
    std::swap(resource_, o.resource_);
    return *this;
  }
  ~device_buffer() {
    if (!data_) return;
    if (resource_)
      detail::destructor_guard(
          [&] { resource_->deallocate(*stream_, data_, size_ * sizeof(T), device_alignment); });
    else if (stream_)
      detail::destructor_guard([&] { ops::free_device_async(data_, *stream_); });
    else
      ops::free_device(data_);
  }

  /// The whole buffer, for kernels and transfers.
  [[nodiscard]] device_span<T> span() const noexcept { return {data_, size_}; }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The device address of the first element.
  [[nodiscard]] T* data() const noexcept { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::optional<stream_ref<B>> stream_;
  std::optional<device_resource_ref<B>> resource_;  // set only for memory from a resource
};

}  // namespace ferry
