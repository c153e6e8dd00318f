// CCCL interop: stream_ref<backend::cuda> <-> cuda::stream_ref, device_span -> cuda::std::span
// (read by a kernel under nvcc), and the allocator seam of <ferry/interop/cccl.hpp>: an engine's
// pool modelling ferry::device_memory_resource / ferry::pinned_memory_resource behind a
// non-owning resource ref, a CCCL 3.0 cuda::mr resource (experimental, enabled here) backing a
// pinned_arena through cccl_pinned_resource, and a CCCL 3.0 async resource backing a
// device_buffer through cccl_device_resource.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE 1  // before any CCCL header

#include <support/backends.hpp>
#include <transfer/transfer_support.hpp>

#include <ferry/interop/cccl.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <optional>
#include <type_traits>
#include <vector>

namespace {

// An engine's own stream-ordered pool: remembers every live block, its size and the stream of
// each call. Its memory comes from a ferry buffer, so the test covers both backends.
template <class B>
class engine_pool {
 public:
  explicit engine_pool(std::size_t bytes) : arena_(bytes / 8) {}
  void* allocate(ferry::stream_ref<B> s, std::size_t bytes, std::size_t alignment) {
    last_stream = s;
    const std::size_t start = (used_ + alignment - 1) / alignment * alignment;
    if (start + bytes > arena_.span().size_bytes()) throw std::bad_alloc();
    used_ = start + bytes;
    void* p = reinterpret_cast<std::byte*>(arena_.span().data()) + start;
    live[p] = bytes;
    return p;
  }
  void deallocate(ferry::stream_ref<B> s, void* p, std::size_t bytes, std::size_t) {
    last_stream = s;
    if (live.at(p) == bytes) live.erase(p);
  }
  std::map<void*, std::size_t> live;
  std::optional<ferry::stream_ref<B>> last_stream;

 private:
  ferry::device_buffer<std::uint64_t, B> arena_;
  std::size_t used_ = 0;
};

// An engine's pinned pool: ferry's pinned buffer carved up, synchronously.
template <class B>
class pinned_pool {
 public:
  explicit pinned_pool(std::size_t bytes) : block_(bytes / 8) {}
  void* allocate_sync(std::size_t bytes, std::size_t) {
    if (bytes > block_.host().size_bytes() || taken) throw std::bad_alloc();
    taken = true;
    return block_.host().data();
  }
  void deallocate_sync(void* p, std::size_t, std::size_t) {
    if (p == block_.host().data()) taken = false;
  }
  bool taken = false;

 private:
  ferry::pinned_buffer<std::uint64_t, B> block_;
};

}  // namespace

// Shapes for the concept checks only (declared, never called).
namespace probe {
struct wrong_signature {  // CCCL 3.0's experimental member names: not ferry's contract
  void* allocate_async(std::size_t, std::size_t, ferry::stream_ref<ferry::backend::host>);
  void deallocate_async(void*, std::size_t, std::size_t, ferry::stream_ref<ferry::backend::host>);
};
}  // namespace probe

using host_b = ferry::backend::host;
static_assert(ferry::device_memory_resource<engine_pool<host_b>, host_b>);
static_assert(!ferry::device_memory_resource<probe::wrong_signature, host_b>);
static_assert(!ferry::device_memory_resource<pinned_pool<host_b>, host_b>);
static_assert(ferry::pinned_memory_resource<pinned_pool<host_b>>);
static_assert(!ferry::pinned_memory_resource<engine_pool<host_b>>);
static_assert(std::is_trivially_copyable_v<ferry::device_resource_ref<host_b>>);
static_assert(std::is_trivially_copyable_v<ferry::pinned_resource_ref>);
// A reference binds to lvalues only (a temporary would dangle), and never to a const resource.
static_assert(std::is_constructible_v<ferry::device_resource_ref<host_b>, engine_pool<host_b>&>);
static_assert(!std::is_constructible_v<ferry::device_resource_ref<host_b>, engine_pool<host_b>&&>);
static_assert(!std::is_constructible_v<ferry::device_resource_ref<host_b>, const engine_pool<host_b>&>);
static_assert(!std::is_constructible_v<ferry::pinned_resource_ref, pinned_pool<host_b>&&>);
static_assert(ferry::device_memory_resource<ferry::device_resource_ref<host_b>, host_b>);

TEMPLATE_TEST_CASE("resource refs forward to an engine's pool, whose memory ferry's transfers use",
                   "[interop][cccl]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  engine_pool<B> pool(1 << 16);
  ferry::device_resource_ref<B> ref = pool;
  ferry::device_resource_ref<B> copy = ref;
  CHECK(copy == ref);

  const auto values = ferry_test::random_values<std::int32_t>(1000, 21);
  void* p = copy.allocate(s, values.size() * sizeof(std::int32_t), 256);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
  CHECK(pool.live.at(p) == values.size() * sizeof(std::int32_t));
  CHECK(pool.last_stream == ferry::stream_ref<B>(s));
  ferry::device_span<std::int32_t> d(static_cast<std::int32_t*>(p), values.size());
  ferry::async_h2d(values, d, s);
  CHECK(ferry_test::read_back(d, s) == values);
  ref.deallocate(s, p, values.size() * sizeof(std::int32_t), 256);
  CHECK(pool.live.empty());

  pinned_pool<B> pinned(4096);
  ferry::pinned_resource_ref pref = pinned;
  void* h = pref.allocate_sync(4096, 256);
  CHECK(pinned.taken);
  auto host = ferry::assume_pinned(std::span<std::int32_t>(static_cast<std::int32_t*>(h), 1024));
  const auto more = ferry_test::random_values<std::int32_t>(1024, 22);
  std::copy(more.begin(), more.end(), host.begin());
  ferry::device_buffer<std::int32_t, B> out(1024);
  ferry::async_h2d(ferry::pinned_span<const std::int32_t>(host), out.span(), s);
  CHECK(ferry_test::read_back(out.span(), s) == more);
  pref.deallocate_sync(h, 4096, 256);
  CHECK(!pinned.taken);
}

TEMPLATE_TEST_CASE("a pinned_arena on an engine's pinned pool serves ferry's transfers",
                   "[interop][cccl]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  pinned_pool<B> pinned(1 << 16);
  {
    ferry::pinned_arena<B> arena(pinned);  // one block: the pool hands out one at a time
    const auto values = ferry_test::random_values<std::int32_t>(4000, 25);
    ferry::device_buffer<std::int32_t, B> out(values.size());
    for (int round = 0; round < 3; ++round) {
      ferry::async_h2d(values, out.span(), s, arena);  // staged in the pool's block
      CHECK(ferry_test::read_back(out.span(), s) == values);
    }
    CHECK(pinned.taken);
    CHECK(arena.stats().allocations == 1);
  }
  CHECK(!pinned.taken);  // given back by the arena's destructor
}

#if FERRY_HAS_CCCL_MEMORY_RESOURCE
// A named namespace: in an unnamed one nvcc reports the members that only cuda::mr's concepts
// use as never referenced (#177-D).
namespace cccl_resources {
// A CCCL 3.0 synchronous resource of pinned, mapped memory: cuda::mr's member names and
// properties; its memory is one ferry pinned buffer (cudaHostAlloc, mapped, on CUDA).
template <class B>
class cccl_pool {
 public:
  explicit cccl_pool(std::size_t bytes) : slab_(bytes / 8) {}
  void* allocate(std::size_t bytes, std::size_t alignment) {
    const std::size_t start = (used_ + alignment - 1) / alignment * alignment;
    if (start + bytes > slab_.host().size_bytes()) throw std::bad_alloc();
    used_ = start + bytes;
    ++live;
    return reinterpret_cast<std::byte*>(slab_.host().data()) + start;
  }
  void deallocate(void*, std::size_t, std::size_t) { --live; }
  bool operator==(const cccl_pool& o) const noexcept { return this == &o; }
  bool operator!=(const cccl_pool& o) const noexcept { return this != &o; }
  friend constexpr void get_property(const cccl_pool&, cuda::mr::host_accessible) noexcept {}
  friend constexpr void get_property(const cccl_pool&, cuda::mr::device_accessible) noexcept {}
  int live = 0;

 private:
  ferry::pinned_buffer<std::uint64_t, B> slab_;
  std::size_t used_ = 0;
};
}  // namespace cccl_resources
using cccl_resources::cccl_pool;

static_assert(cuda::mr::resource_with<cccl_pool<host_b>, cuda::mr::host_accessible,
                                      cuda::mr::device_accessible>);
static_assert(!ferry::pinned_memory_resource<cccl_pool<host_b>>);  // CCCL 3.0's names
static_assert(ferry::pinned_memory_resource<ferry::cccl_pinned_resource<cccl_pool<host_b>>>);

TEMPLATE_TEST_CASE("a CCCL cuda::mr resource backs a pinned_arena through cccl_pinned_resource",
                   "[interop][cccl]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  cccl_pool<B> pool(1 << 20);
  ferry::cccl_pinned_resource<cccl_pool<B>> adapted(pool);
  {
    ferry::pinned_arena<B> arena(adapted);
    const auto values = ferry_test::random_values<std::uint16_t>(20000, 26);
    ferry::device_buffer<std::uint16_t, B> out(values.size());
    ferry::async_h2d(values, out.span(), s, arena);
    CHECK(ferry_test::read_back(out.span(), s) == values);
    CHECK(pool.live == static_cast<int>(arena.stats().allocations));
    CHECK(pool.live >= 1);
  }
  CHECK(pool.live == 0);
}

namespace cccl_resources {
// A CCCL 3.0 stream-ordered resource of device memory (cudaMallocAsync / cudaFreeAsync on the
// stream it is given), counting its live blocks and remembering the stream of each call.
class cccl_device_pool {
 public:
  void* allocate(std::size_t, std::size_t) { throw std::bad_alloc(); }  // ferry never calls it
  void deallocate(void*, std::size_t, std::size_t) {}
  void* allocate_async(std::size_t bytes, std::size_t, cuda::stream_ref s) {
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes, s.get()) != cudaSuccess) throw std::bad_alloc();
    live[p] = bytes;
    last_stream = s.get();
    return p;
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t, cuda::stream_ref s) {
    if (live.at(p) == bytes && cudaFreeAsync(p, s.get()) == cudaSuccess) live.erase(p);
    last_stream = s.get();
  }
  bool operator==(const cccl_device_pool& o) const noexcept { return this == &o; }
  bool operator!=(const cccl_device_pool& o) const noexcept { return this != &o; }
  friend constexpr void get_property(const cccl_device_pool&,
                                     cuda::mr::device_accessible) noexcept {}
  std::map<void*, std::size_t> live;
  cudaStream_t last_stream = nullptr;
};
}  // namespace cccl_resources
using cccl_resources::cccl_device_pool;

static_assert(cuda::mr::async_resource_with<cccl_device_pool, cuda::mr::device_accessible>);
// CCCL 3.0's member names: not ferry's contract, until adapted.
static_assert(!ferry::device_memory_resource<cccl_device_pool, ferry::backend::cuda>);
static_assert(ferry::device_memory_resource<ferry::cccl_device_resource<cccl_device_pool>,
                                            ferry::backend::cuda>);

TEST_CASE("a CCCL cuda::mr async resource backs a device_buffer through cccl_device_resource",
          "[interop][cccl]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  using B = ferry::backend::cuda;
  ferry::stream<B> s;
  cccl_device_pool pool;
  ferry::cccl_device_resource<cccl_device_pool> adapted(pool);
  {
    const auto values = ferry_test::random_values<std::int64_t>(50000, 27);
    ferry::device_buffer<std::int64_t, B> buf(values.size(), s, adapted);
    REQUIRE(pool.live.count(buf.data()) == 1);
    CHECK(pool.live.at(buf.data()) == values.size() * sizeof(std::int64_t));
    CHECK(pool.last_stream == s.get());
    ferry::async_h2d(values, buf.span(), s);
    CHECK(ferry_test::read_back(buf.span(), s) == values);
  }
  CHECK(pool.live.empty());  // given back on s
  CHECK(pool.last_stream == s.get());
  s.synchronize();
}
#endif

#if FERRY_HAS_CCCL_SPAN
static_assert(!std::is_convertible_v<ferry::device_span<float>, cuda::std::span<float>>);  // explicit
static_assert(std::is_constructible_v<cuda::std::span<const float>, ferry::device_span<float>>);
static_assert(!std::is_constructible_v<cuda::std::span<float>, ferry::device_span<const float>>);

TEST_CASE("device_span converts to cuda::std::span", "[interop][cccl]") {
  std::vector<float> v = ferry_test::random_values<float>(9, 23);
  const ferry::device_span<float> d(v.data(), v.size());
  const auto s = static_cast<cuda::std::span<const float>>(d.subspan(2, 5));
  CHECK(s.data() == v.data() + 2);
  CHECK(s.size() == 5);
}
#endif

#if FERRY_HAS_CCCL_STREAM_REF
using cuda_b = ferry::backend::cuda;
static_assert(std::is_convertible_v<ferry::stream_ref<cuda_b>, cuda::stream_ref>);
static_assert(std::is_convertible_v<ferry::stream<cuda_b>&, cuda::stream_ref>);
static_assert(std::is_constructible_v<ferry::stream_ref<cuda_b>, cuda::stream_ref>);
static_assert(!std::is_convertible_v<cuda::stream_ref, ferry::stream_ref<cuda_b>>);  // explicit
// 0 and nullptr: one static_assert, "ferry has no default stream" (tests/compile_fail/).

namespace probe {
// A resource in CCCL's (3.1+) shape, taking cuda::stream_ref: ferry's stream converts to it.
struct cccl_shaped_resource {
  void* allocate(cuda::stream_ref, std::size_t, std::size_t);
  void deallocate(cuda::stream_ref, void*, std::size_t, std::size_t);
};
}  // namespace probe
static_assert(ferry::device_memory_resource<probe::cccl_shaped_resource, cuda_b>);

#if defined(__CUDACC__)
namespace {
__global__ void double_each(cuda::std::span<std::uint32_t> s) {
  const auto i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < s.size()) s[i] *= 2;
}
}  // namespace
#endif

TEST_CASE("stream_ref<cuda> and cuda::stream_ref name the same stream", "[interop][cccl]") {
  FERRY_REQUIRE_BACKEND(cuda_b);
  ferry::stream<cuda_b> s;
  const cuda::stream_ref c = s;
  CHECK(c.get() == s.get());
  const ferry::stream_ref<cuda_b> back(c);
  CHECK(back == s);
  CHECK(c == s);
  // The legacy default stream's null handle arrives under its explicit name, a usable stream.
  const cudaStream_t null_handle = nullptr;
  const ferry::stream_ref<cuda_b> legacy{cuda::stream_ref(null_handle)};
  CHECK(legacy.get() == cudaStreamLegacy);
  CHECK_NOTHROW(legacy.synchronize());
#if defined(__CUDACC__)
  // A kernel that takes cuda::std::span reads and writes a ferry device_span's memory.
  const auto values = ferry_test::random_values<std::uint32_t>(3000, 24);
  ferry::device_buffer<std::uint32_t, cuda_b> buf(values.size());
  ferry::async_h2d(values, buf.span(), s);
  double_each<<<(values.size() + 255) / 256, 256, 0, cuda::stream_ref(s).get()>>>(
      static_cast<cuda::std::span<std::uint32_t>>(buf.span()));
  REQUIRE(cudaPeekAtLastError() == cudaSuccess);
  auto expected = values;
  for (auto& x : expected) x *= 2u;
  CHECK(ferry_test::read_back(buf.span(), s) == expected);
#endif
}
#endif
