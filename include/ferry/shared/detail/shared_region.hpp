// ferry/shared/detail/shared_region.hpp: the POSIX shared memory under a shared step ring: its
// layout (a header checked by every process that opens it, a record per rank, the slots), its
// creation and opening, and its registration as pinned, mapped memory on the CUDA backend
// (docs/multi_gpu.md, "One host write, every rank reads it").
#pragma once

#include <ferry/backend/detail/cuda_runtime.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ferry {

/// Where a rank of a shared step ring stands (shared_step_writer::rank_state): `absent` (never
/// joined, or left), `active` (the writer waits for its marks), `joining` (a reader is taking the
/// rank), `dropped` (the writer gave up on it: drop_rank).
enum class shared_rank_state : std::uint32_t { absent = 0, active = 1, joining = 2, dropped = 3 };

}  // namespace ferry

namespace ferry::detail {

/// "FERRYSSR": the first word of a shared step ring, stored last by its creator (with release), so
/// that an opener that reads it (with acquire) sees a complete header.
inline constexpr std::uint64_t shared_ring_magic = 0x5253535952524546ull;
/// The layout's version: a process of another version refuses to open the ring.
inline constexpr std::uint32_t shared_ring_version = 1;
/// Every record (header, rank, slot) starts on its own cache line, so that one process's stores
/// never share a line with another's.
inline constexpr std::size_t shared_ring_line = 64;
/// Rank records a ring may have (a node's GPUs, with room to spare).
inline constexpr std::uint32_t shared_ring_max_ranks = 1024;

static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free,
              "ferry: a shared step ring needs lock-free 64-bit atomics (they are shared between processes)");

/// What every process of a ring agrees on, written into its header by the writer.
struct shared_ring_shape {
  std::uint64_t slot_bytes = 0;   // bytes of one step's data
  std::uint32_t element_size = 0;
  std::uint32_t slots = 0;
  std::uint32_t ranks = 0;
};

/// The header, at offset 0.
struct alignas(shared_ring_line) shared_ring_header {
  std::uint64_t magic;    // shared_ring_magic once the header is complete
  std::uint32_t version;  // shared_ring_version
  std::uint32_t element_size;
  std::uint64_t slot_bytes;
  std::uint32_t slots;
  std::uint32_t ranks;
  std::uint64_t head;   // steps published (the next step's number)
  std::uint64_t claim;  // 1 + the last step whose slot the writer has begun to reuse; 0: none yet
};

/// A rank's record: its mark (the steps it has passed: every step below it) and its state word:
/// the shared_rank_state in the low byte, above it the count of joins of the rank, so that a
/// reader whose rank was dropped and joined again by another never takes it for its own.
struct alignas(shared_ring_line) rank_record {
  std::uint64_t mark;
  std::uint64_t state;
};

[[nodiscard]] constexpr shared_rank_state state_of(std::uint64_t word) noexcept {
  return static_cast<shared_rank_state>(word & 0xff);
}
[[nodiscard]] constexpr std::uint64_t with_state(std::uint64_t word, shared_rank_state s) noexcept {
  return (word & ~std::uint64_t{0xff}) | static_cast<std::uint64_t>(s);
}
/// The word of the next join of a rank whose word is `word`.
[[nodiscard]] constexpr std::uint64_t next_join(std::uint64_t word) noexcept {
  return ((word >> 8) + 1) << 8 | static_cast<std::uint64_t>(shared_rank_state::joining);
}

/// A slot's sequence word, on its own line before the slot's data: 0 never written, step + 1 once
/// that step is published, slot_writing while the writer writes it.
inline constexpr std::uint64_t slot_writing = std::numeric_limits<std::uint64_t>::max();

/// The byte offsets of the records of a ring of `shape`, and its total size.
struct shared_ring_offsets {
  std::size_t ranks = 0, slots = 0, slot_stride = 0, bytes = 0;

  /// The offsets, or false when the ring would not fit in size_t.
  [[nodiscard]] bool compute(const shared_ring_shape& s) noexcept {
    ranks = sizeof(shared_ring_header);
    slots = ranks + std::size_t{s.ranks} * sizeof(rank_record);
    std::size_t data = 0;
    if (s.slot_bytes > std::numeric_limits<std::size_t>::max() - shared_ring_line) return false;
    if (!round_up_fits(static_cast<std::size_t>(s.slot_bytes), shared_ring_line, data)) return false;
    slot_stride = shared_ring_line + data;
    if (s.slots != 0 && slot_stride > (std::numeric_limits<std::size_t>::max() - slots) / s.slots) return false;
    bytes = slots + slot_stride * s.slots;
    return true;
  }
};

template <class T>
std::atomic_ref<T> shared_atomic(T& x) noexcept {
  return std::atomic_ref<T>(x);
}

/// One process's mapping of a ring's shared memory: created (the writer) or opened (a reader)
/// by name, its header checked; on the CUDA backend registered as pinned, mapped memory of every
/// device (cudaHostRegisterPortable | cudaHostRegisterMapped), so that a kernel on any GPU reads
/// and writes it through UVA. Move-only; unmaps (and, for the creator, unlinks the name) when
/// destroyed.
template <class B>
class shared_region {
 public:
  shared_region() = default;
  shared_region(const shared_region&) = delete;
  shared_region& operator=(const shared_region&) = delete;
  shared_region(shared_region&& o) noexcept { swap(o); }
  shared_region& operator=(shared_region&& o) noexcept {
    if (this != &o) {
      shared_region(std::move(o)).swap(*this);
    }
    return *this;
  }
  ~shared_region() { release(); }

  /// Creates the shared memory `name` for a ring of `shape` (the name must not exist).
  static shared_region create(const std::string& name, const shared_ring_shape& shape) {
    check_name(name);
    shared_ring_offsets off;
    if (!off.compute(shape))
      throw std::invalid_argument("ferry: shared step ring \"" + name + "\": " + std::to_string(shape.slots) +
                                  " slots of " + std::to_string(shape.slot_bytes) + " bytes do not fit in memory");
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      const int e = errno;
      throw error("ferry: shared step ring \"" + name + "\": shm_open(O_CREAT | O_EXCL) failed: " +
                  std::strerror(e) + (e == EEXIST ? " (another writer holds the name, or a dead one left it: shm_unlink it)" : ""));
    }
    shared_region r;
    r.name_ = name;
    r.owner_ = true;  // from here on, a failure unlinks the name again
    r.map(fd, off.bytes, "ftruncate");
    auto* h = static_cast<shared_ring_header*>(r.base_);
    h->version = shared_ring_version;
    h->element_size = shape.element_size;
    h->slot_bytes = shape.slot_bytes;
    h->slots = shape.slots;
    h->ranks = shape.ranks;
    h->head = 0;
    h->claim = 0;
    shared_atomic(h->magic).store(shared_ring_magic, std::memory_order_release);
    r.shape_ = shape;
    r.off_ = off;
    r.register_memory();
    return r;
  }

  /// Opens the shared memory `name` that a writer created for a ring of `shape`: a name that does
  /// not exist, memory that is not a ring of this version, or a ring of another shape is
  /// std::invalid_argument naming what differs.
  static shared_region open(const std::string& name, const shared_ring_shape& shape) {
    check_name(name);
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
      const int e = errno;
      throw std::invalid_argument("ferry: shared step ring \"" + name + "\": shm_open failed: " + std::strerror(e) +
                                  (e == ENOENT ? " (no writer has created it)" : ""));
    }
    struct stat st{};
    if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(shared_ring_header))) {
      ::close(fd);
      throw std::invalid_argument("ferry: shared step ring \"" + name +
                                  "\": the shared memory is smaller than a ring's header (not a ferry shared step ring)");
    }
    shared_region r;
    r.name_ = name;
    r.map(fd, static_cast<std::size_t>(st.st_size), nullptr);
    const auto* h = static_cast<const shared_ring_header*>(r.base_);
    const std::uint64_t magic = shared_atomic(const_cast<std::uint64_t&>(h->magic)).load(std::memory_order_acquire);
    const std::string what = "ferry: shared step ring \"" + name + "\": ";
    if (magic != shared_ring_magic)
      throw std::invalid_argument(what + "not a ferry shared step ring (no magic word; or its writer has not finished creating it)");
    if (h->version != shared_ring_version)
      throw std::invalid_argument(what + "written by layout version " + std::to_string(h->version) +
                                  ", this process reads version " + std::to_string(shared_ring_version));
    mismatch(what, "element size", h->element_size, shape.element_size);
    mismatch(what, "slot bytes", h->slot_bytes, shape.slot_bytes);
    mismatch(what, "slot count", h->slots, shape.slots);
    mismatch(what, "rank count", h->ranks, shape.ranks);
    shared_ring_offsets off;
    if (!off.compute(shape) || off.bytes > static_cast<std::size_t>(st.st_size))
      throw std::invalid_argument(what + "the shared memory (" + std::to_string(st.st_size) +
                                  " bytes) is smaller than its header's layout");
    r.shape_ = shape;
    r.off_ = off;
    r.register_memory();
    return r;
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const shared_ring_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] shared_ring_header& header() const noexcept { return *static_cast<shared_ring_header*>(base_); }
  [[nodiscard]] rank_record& rank(std::uint32_t r) const noexcept {
    return reinterpret_cast<rank_record*>(static_cast<char*>(base_) + off_.ranks)[r];
  }
  /// Slot `i`'s sequence word, and its data (host addresses).
  [[nodiscard]] std::uint64_t& slot_seq(std::size_t i) const noexcept {
    return *reinterpret_cast<std::uint64_t*>(static_cast<char*>(base_) + off_.slots + i * off_.slot_stride);
  }
  [[nodiscard]] void* slot_data(std::size_t i) const noexcept {
    return static_cast<char*>(base_) + off_.slots + i * off_.slot_stride + shared_ring_line;
  }
  /// The address a kernel uses for host address `p` of this mapping (the CUDA backend: the mapped
  /// device address; the host backend: `p`).
  template <class T>
  [[nodiscard]] T* device_address(T* p) const noexcept {
    const std::ptrdiff_t at = reinterpret_cast<const char*>(p) - static_cast<const char*>(base_);
    return reinterpret_cast<T*>(static_cast<char*>(device_base_) + at);
  }

  /// Leaks the mapping instead of unmapping it (a destructor whose stream work may still write it).
  void leak() noexcept { base_ = nullptr; }

 private:
  static void check_name(const std::string& name) {
    if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos || name.size() > NAME_MAX)
      throw std::invalid_argument("ferry: shared step ring \"" + name +
                                  "\": a name is '/' and 1 to 254 more characters, none of them '/' (POSIX shm_open)");
  }
  template <class V>
  static void mismatch(const std::string& what, const char* field, V theirs, V ours) {
    if (theirs != ours)
      throw std::invalid_argument(what + field + " " + std::to_string(theirs) + " in the shared memory, " +
                                  std::to_string(ours) + " in this process");
  }

  // Sizes (when `truncate`), maps `fd` and closes it; on failure unmaps, unlinks (the creator) and
  // throws ferry::error.
  void map(int fd, std::size_t bytes, const char* truncate) {
    const auto fail = [&](const char* call) {
      const int e = errno;
      ::close(fd);
      std::string msg = "ferry: shared step ring \"" + name_ + "\": " + call + " failed: " + std::strerror(e);
      release();
      throw error(msg);
    };
    if (truncate != nullptr && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) fail(truncate);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) fail("mmap");
    ::close(fd);
    base_ = device_base_ = p;
    bytes_ = bytes;
  }

  void register_memory() {
    if constexpr (std::is_same_v<B, backend::host>) {
      return;
    } else {
#if FERRY_HAS_CUDA
      try {
        FERRY_CUDA_CHECK(cudaHostRegister(base_, bytes_, cudaHostRegisterPortable | cudaHostRegisterMapped));
        registered_ = true;
        FERRY_CUDA_CHECK(cudaHostGetDevicePointer(&device_base_, base_, 0));
      } catch (...) {
        release();
        throw;
      }
#endif
    }
  }

  void release() noexcept {
#if FERRY_HAS_CUDA
    if (registered_) static_cast<void>(cudaHostUnregister(base_));
#endif
    registered_ = false;
    if (base_ != nullptr) ::munmap(base_, bytes_);
    if (owner_) ::shm_unlink(name_.c_str());
    base_ = device_base_ = nullptr;
    owner_ = false;
  }

  void swap(shared_region& o) noexcept {
    std::swap(name_, o.name_);
    std::swap(shape_, o.shape_);
    std::swap(off_, o.off_);
    std::swap(base_, o.base_);
    std::swap(device_base_, o.device_base_);
    std::swap(bytes_, o.bytes_);
    std::swap(owner_, o.owner_);
    std::swap(registered_, o.registered_);
  }

  std::string name_;
  shared_ring_shape shape_{};
  shared_ring_offsets off_{};
  void* base_ = nullptr;
  void* device_base_ = nullptr;
  std::size_t bytes_ = 0;
  bool owner_ = false;       // created the name: unlinks it
  bool registered_ = false;  // cudaHostRegister'd
};

}  // namespace ferry::detail
