// Tests for include/ferry/memory/resource.hpp as pinned_arena and device_buffer use it: an
// engine's pinned pool behind a pinned_resource_ref is the source of the arena's blocks (counted,
// in its range, all given back), ferry's transfers staged through such an arena move the right
// data, and a failing or unfit resource leaves the arena unchanged; an engine's device resource
// behind a device_resource_ref backs a device_buffer in stream order (given back on its stream
// with its size and alignment), and its failures are ferry::out_of_memory with nothing leaked.
#include <support/backends.hpp>
#include <support/device_resource.hpp>
#include <transfer/transfer_support.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <stdexcept>
#include <vector>

namespace {

// An engine's pinned pool: a bump allocator over one ferry pinned buffer (pinned and mapped on
// CUDA), counting its calls and remembering every live block. `fail` makes it run out of memory.
template <class B>
class counting_pinned_pool {
 public:
  enum class failure { none, null, bad_alloc, misaligned };

  explicit counting_pinned_pool(std::size_t bytes) : slab_(bytes) {}

  void* allocate_sync(std::size_t bytes, std::size_t alignment) {
    ++allocations;
    if (fail == failure::null) return nullptr;
    if (fail == failure::bad_alloc) throw std::bad_alloc();
    const std::size_t start = (used_ + alignment - 1) / alignment * alignment + (fail == failure::misaligned ? 8 : 0);
    if (start + bytes > slab_.host().size()) throw std::bad_alloc();
    used_ = start + bytes;
    std::byte* p = base() + start;
    p[0] = std::byte{0x5a};  // the arena must zero-fill the block
    live[p] = bytes;
    last_alignment = alignment;
    return p;
  }
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment) {
    ++deallocations;
    if (live.at(p) == bytes && alignment == last_alignment) live.erase(p);
  }
  bool owns(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= base() && b < base() + slab_.host().size();
  }

  failure fail = failure::none;
  std::uint64_t allocations = 0;
  std::uint64_t deallocations = 0;
  std::size_t last_alignment = 0;
  std::map<void*, std::size_t> live;

 private:
  std::byte* base() const { return reinterpret_cast<std::byte*>(slab_.host().data()); }
  ferry::pinned_buffer<std::uint8_t, B> slab_;
  std::size_t used_ = 0;
};

}  // namespace

static_assert(ferry::pinned_memory_resource<counting_pinned_pool<ferry::backend::host>>);
static_assert(std::is_constructible_v<ferry::pinned_arena<ferry::backend::host>,
                                      counting_pinned_pool<ferry::backend::host>&>);
static_assert(!std::is_convertible_v<counting_pinned_pool<ferry::backend::host>&,
                                     ferry::pinned_arena<ferry::backend::host>>);  // explicit

TEMPLATE_TEST_CASE("an arena on an upstream resource takes every block from it and gives all back",
                   "[arena][resource]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  counting_pinned_pool<TestType> pool(1 << 20);
  ferry::stream<TestType> s;
  const auto backend_before = ferry::backend_stats_of<TestType>();
  std::uint64_t arena_allocations = 0;
  {
    ferry::pinned_arena<TestType> arena(pool);
    REQUIRE(arena.upstream().has_value());
    CHECK(*arena.upstream() == ferry::pinned_resource_ref(pool));
    CHECK_FALSE(ferry::pinned_arena<TestType>().upstream().has_value());

    std::vector<ferry::pinned_block> held;
    for (const std::size_t n : {1, 300, 4096, 5000, 65536}) {
      const auto b = arena.acquire(n);
      REQUIRE(b.capacity >= n);
      CHECK(pool.owns(b.data));
      CHECK(pool.owns(b.data + b.capacity - 1));
      CHECK(reinterpret_cast<std::uintptr_t>(b.data) % 256 == 0);
      CHECK(b.data[0] == std::byte{0});  // zero-filled, as the arena's own blocks
      CHECK(pool.live.at(b.data) == b.capacity);
      held.push_back(b);
    }
    CHECK(pool.allocations == 5);
    CHECK(pool.last_alignment == ferry::pinned_arena<TestType>::min_block);
    arena.reserve(1000, 3);
    CHECK(pool.allocations == 8);
    for (auto& b : held) arena.release(b, s);
    s.synchronize();
    for (int i = 0; i < 10; ++i) arena.release(arena.acquire(4096), s);  // reuse: no allocation
    CHECK(pool.allocations == 8);
    arena_allocations = arena.stats().allocations;
    CHECK(arena_allocations == pool.allocations);
    // The resource's blocks are not the backend's allocations.
    CHECK(ferry::backend_stats_of<TestType>().pinned_allocations == backend_before.pinned_allocations);
    CHECK(pool.deallocations == 0);
  }
  CHECK(pool.deallocations == pool.allocations);
  CHECK(pool.live.empty());
  CHECK(ferry::backend_stats_of<TestType>().pinned_frees == backend_before.pinned_frees);

  // trim() gives the free blocks back too.
  ferry::pinned_arena<TestType> arena(pool);
  const auto before = pool.deallocations;
  arena.reserve(256, 2);
  arena.trim();
  CHECK(pool.deallocations == before + 2);
  CHECK(arena.stats().bytes_reserved == 0);
  CHECK(pool.live.empty());
}

TEMPLATE_TEST_CASE("async_h2d and uva_pool staged through an arena on an upstream resource",
                   "[arena][resource]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  counting_pinned_pool<TestType> pool(1 << 22);
  ferry::stream<TestType> s;
  {
    ferry::pinned_arena<TestType> arena(pool);
    const auto values = ferry_test::random_values<std::int32_t>(10000, 41);
    ferry::device_buffer<std::int32_t, TestType> out(values.size());
    ferry::async_h2d(values, out.span(), s, arena);  // pageable: staged in an arena block
    CHECK(ferry_test::read_back(out.span(), s) == values);
    CHECK(pool.allocations >= 1);

    ferry::uva_pool<std::int64_t, TestType> uva(16, 2, 2, arena);
    for (std::uint64_t round = 0; round < 4; ++round) {
      const auto more = ferry_test::random_values<std::int64_t>(3000 + round * 500, 42 + round);
      const auto v = uva.copy_to_uva(more, s);
      CHECK(pool.owns(v.data()));  // kernels read the resource's memory in place
      CHECK(ferry_test::read_back(v, s) == more);
    }
    CHECK(arena.stats().allocations == pool.allocations);
  }
  s.synchronize();
  CHECK(pool.deallocations == pool.allocations);
  CHECK(pool.live.empty());
}

TEMPLATE_TEST_CASE("an upstream resource that fails leaves the arena unchanged",
                   "[arena][resource]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using failure = typename counting_pinned_pool<TestType>::failure;
  counting_pinned_pool<TestType> pool(1 << 16);
  ferry::pinned_arena<TestType> arena(pool);
  arena.release(arena.acquire(256));  // one free 256-byte block
  const auto before = arena.stats();

  SECTION("null is out of memory") {
    pool.fail = failure::null;
    CHECK_THROWS_AS(arena.acquire(1000), ferry::out_of_memory);
    CHECK_THROWS_AS(arena.reserve(256, 2), ferry::out_of_memory);
  }
  SECTION("std::bad_alloc is out of memory") {
    pool.fail = failure::bad_alloc;
    CHECK_THROWS_AS(arena.acquire(1000), ferry::out_of_memory);
    CHECK_THROWS_AS(arena.reserve(256, 2), ferry::out_of_memory);
  }
  SECTION("a block below the arena's alignment is given back: ferry::error") {
    pool.fail = failure::misaligned;
    CHECK_THROWS_AS(arena.acquire(1000), ferry::error);
    CHECK(pool.deallocations == 1);
    CHECK(pool.live.size() == 1);  // the arena's free block only
  }
  CHECK(ferry_test::same_stats(arena.stats(), before));
  pool.fail = failure::none;
  const auto b = arena.acquire(256);  // the free block, reused
  CHECK(arena.stats().reuses == before.reuses + 1);
  arena.release(b);
  const auto c = arena.acquire(1000);  // a new one from the recovered resource
  CHECK(pool.owns(c.data));
  arena.release(c);
}

using host_device_pool = ferry_test::counting_device_resource<ferry::backend::host>;
static_assert(ferry::device_memory_resource<host_device_pool, ferry::backend::host>);
static_assert(std::is_constructible_v<ferry::device_buffer<int, ferry::backend::host>, std::size_t,
                                      ferry::stream_ref<ferry::backend::host>, host_device_pool&>);

TEMPLATE_TEST_CASE("a device_buffer from a device resource is allocated and given back in order",
                   "[device_buffer][resource]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry_test::counting_device_resource<B> pool;
  ferry::stream<B> s;
  const auto backend_before = ferry::backend_stats_of<B>();
  {
    std::vector<ferry::device_buffer<std::int32_t, B>> held;
    for (const std::size_t n : {1u, 1000u, 4097u, 65536u}) {
      const auto values = ferry_test::random_values<std::int32_t>(n, 50 + n);
      ferry::device_buffer<std::int32_t, B> buf(n, s, pool);
      REQUIRE(buf.size() == n);
      REQUIRE(pool.live.count(buf.data()) == 1);  // the resource's block itself
      CHECK(pool.live.at(buf.data()).bytes == n * sizeof(std::int32_t));
      CHECK(pool.live.at(buf.data()).alignment == ferry::device_alignment);
      CHECK(pool.allocation_streams.back() == ferry::stream_ref<B>(s));
      ferry::async_h2d(values, buf.span(), s);  // pageable: staged, then copied on s
      CHECK(ferry_test::read_back(buf.span(), s) == values);
      held.push_back(std::move(buf));  // moved: still given back once
    }
    CHECK(pool.allocations == 4);
    CHECK(pool.deallocations == 0);
    // A buffer whose copy is still queued on s when it goes: given back on s at once, without
    // waiting (the stream is held), so that the resource frees it after that copy.
    {
      ferry_test::gate<B> g(s);
      {
        const auto values = ferry_test::random_values<std::int64_t>(30000, 51);
        ferry::device_buffer<std::int64_t, B> last(values.size(), s, pool);
        ferry::async_h2d(values, last.span(), s);
      }
      CHECK(pool.deallocations == 1);
      CHECK(pool.deallocation_streams.back() == ferry::stream_ref<B>(s));
      g.open();
    }
    ferry::device_buffer<std::int32_t, B> empty(0, s, pool);  // nothing asked of the resource
    CHECK(empty.size() == 0);
    CHECK(pool.calls == 5);
  }
  s.synchronize();
  CHECK(pool.all_given_back());
  CHECK(pool.given_back_on({s}));
  // The resource's blocks are not ferry's allocations.
  CHECK(ferry::backend_stats_of<B>().device_allocations == backend_before.device_allocations);
}

TEMPLATE_TEST_CASE("a failing device resource: device_buffer throws ferry::out_of_memory, no leak",
                   "[device_buffer][resource]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using failure = typename ferry_test::counting_device_resource<B>::failure;
  using buffer = ferry::device_buffer<float, B>;
  using Catch::Matchers::MessageMatches, Catch::Matchers::StartsWith;
  ferry_test::counting_device_resource<B> pool;
  ferry::stream<B> s;
  SECTION("null") {
    pool.fail = failure::null;
    REQUIRE_THROWS_MATCHES(buffer(100, s, pool), ferry::out_of_memory,
                           MessageMatches(StartsWith("ferry: out of device memory: the "
                                                     "device_buffer's resource returned null for "
                                                     "400 bytes")));
  }
  SECTION("std::bad_alloc") {
    pool.fail = failure::bad_alloc;
    REQUIRE_THROWS_MATCHES(buffer(100, s, pool), ferry::out_of_memory,
                           MessageMatches(StartsWith("ferry: out of device memory: the "
                                                     "device_buffer's resource failed to allocate "
                                                     "400 bytes")));
  }
  SECTION("a block below device_alignment is given back: ferry::error") {
    pool.fail = failure::misaligned;
    REQUIRE_THROWS_AS(buffer(100, s, pool), ferry::error);
    CHECK(pool.deallocations == 1);
  }
  SECTION("a size that overflows size_t: std::invalid_argument, nothing asked") {
    constexpr std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
    REQUIRE_THROWS_AS(buffer(huge, s, pool), std::invalid_argument);
    CHECK(pool.calls == 0);
  }
  s.synchronize();
  CHECK(pool.all_given_back());
  // The resource recovered: the next buffer comes from it.
  pool.fail = failure::none;
  const auto values = ferry_test::random_values<float>(100, 52);
  buffer ok(values.size(), s, pool);
  ferry::async_h2d(values, ok.span(), s);
  CHECK(ferry_test::read_back(ok.span(), s) == values);
  CHECK(pool.live.count(ok.data()) == 1);
}

#if FERRY_HAS_CUDA
TEST_CASE("on CUDA an upstream block that is not pinned and mapped is given back: ferry::error",
          "[arena][resource]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  struct pageable_pool {
    std::vector<std::byte> memory = std::vector<std::byte>(1 << 14);
    int live = 0;
    void* allocate_sync(std::size_t, std::size_t) {
      ++live;
      return memory.data() + (256 - reinterpret_cast<std::uintptr_t>(memory.data()) % 256) % 256;
    }
    void deallocate_sync(void*, std::size_t, std::size_t) { --live; }
  } pool;
  ferry::pinned_arena<ferry::backend::cuda> arena(pool);
  CHECK_THROWS_AS(arena.acquire(1000), ferry::error);
  CHECK(pool.live == 0);
  CHECK(arena.stats().allocations == 0);
  CHECK(arena.stats().bytes_reserved == 0);
}
#endif
