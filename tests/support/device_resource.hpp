// Test support: an engine's device memory resource (ferry::device_memory_resource) that counts
// its calls and bytes, remembers every live block with its size, alignment and streams, and
// forwards to real memory in stream order: on the host backend host memory, freed by a task on
// the given stream; on CUDA cudaMallocAsync / cudaFreeAsync on the given stream. `fail` makes it
// run out of memory (null, or std::bad_alloc) or return misaligned memory.
#pragma once

#include <support/backends.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <type_traits>
#include <vector>

namespace ferry_test {

template <class B>
class counting_device_resource {
 public:
  enum class failure { none, null, bad_alloc, misaligned };

  counting_device_resource() = default;
  counting_device_resource(const counting_device_resource&) = delete;
  counting_device_resource& operator=(const counting_device_resource&) = delete;

  void* allocate(ferry::stream_ref<B> s, std::size_t bytes, std::size_t alignment) {
    ++calls;
    if (fail == failure::null) return nullptr;
    if (fail == failure::bad_alloc) throw std::bad_alloc();
    const std::size_t offset = fail == failure::misaligned ? 8 : 0;
    void* raw = raw_allocate(s, bytes + offset, alignment);
    void* p = static_cast<std::byte*>(raw) + offset;
    live[p] = {raw, bytes, alignment};
    ++allocations;
    bytes_allocated += bytes;
    allocation_streams.push_back(s);
    return p;
  }
  void deallocate(ferry::stream_ref<B> s, void* p, std::size_t bytes, std::size_t alignment) {
    ++deallocations;
    bytes_deallocated += bytes;
    const auto it = live.find(p);
    if (it == live.end() || it->second.bytes != bytes || it->second.alignment != alignment) {
      ++mismatches;  // unknown, or not the size and alignment it was allocated with: kept, leaked
      return;
    }
    raw_free(s, it->second.raw, alignment);
    live.erase(it);
    deallocation_streams.push_back(s);
  }

  /// Whether [p, p + bytes) lies in one live block.
  bool owns(const void* p, std::size_t bytes) const {
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& [q, blk] : live) {
      const auto* start = static_cast<const std::byte*>(q);
      if (b >= start && b + bytes <= start + blk.bytes) return true;
    }
    return false;
  }
  /// Every block given back once, with the size and alignment it was allocated with.
  bool all_given_back() const {
    return live.empty() && mismatches == 0 && deallocations == allocations &&
           bytes_deallocated == bytes_allocated;
  }
  /// Whether every block was given back on one of `streams`.
  bool given_back_on(const std::vector<ferry::stream_ref<B>>& streams) const {
    for (const auto& d : deallocation_streams) {
      bool known = false;
      for (const auto& s : streams) known = known || d == s;
      if (!known) return false;
    }
    return true;
  }

  struct block {
    void* raw;
    std::size_t bytes;
    std::size_t alignment;
  };

  failure fail = failure::none;
  std::uint64_t calls = 0;          // allocate calls, failed ones included
  std::uint64_t allocations = 0;    // blocks handed out
  std::uint64_t deallocations = 0;  // deallocate calls
  std::uint64_t mismatches = 0;     // unknown blocks, other sizes/alignments, failed frees
  std::size_t bytes_allocated = 0, bytes_deallocated = 0;
  std::map<void*, block> live;
  std::vector<ferry::stream_ref<B>> allocation_streams, deallocation_streams;

 private:
  static void* raw_allocate(ferry::stream_ref<B> s, std::size_t bytes, std::size_t alignment) {
#if FERRY_HAS_CUDA
    if constexpr (std::is_same_v<B, ferry::backend::cuda>) {
      (void)alignment;  // cudaMallocAsync gives 256 bytes, what ferry asks
      void* p = nullptr;
      if (cudaMallocAsync(&p, bytes ? bytes : 1, s.get()) != cudaSuccess) {
        (void)cudaGetLastError();
        throw std::bad_alloc();
      }
      return p;
    } else
#endif
    {
      (void)s;
      return ::operator new(bytes ? bytes : 1, std::align_val_t{alignment});
    }
  }
  void raw_free(ferry::stream_ref<B> s, void* raw, std::size_t alignment) {
#if FERRY_HAS_CUDA
    if constexpr (std::is_same_v<B, ferry::backend::cuda>) {
      (void)alignment;
      if (cudaFreeAsync(raw, s.get()) != cudaSuccess) ++mismatches;
    } else
#endif
    {
      // In stream order: work enqueued on `s` before this call may still use the block.
      ferry::enqueue_host(s, [raw, alignment] {
        ::operator delete(raw, std::align_val_t{alignment});
      });
    }
  }
};

}  // namespace ferry_test
