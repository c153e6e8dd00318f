// Tests for include/ferry/pool/uva_pool.hpp (SPEC §6): rotation before use, per-slot pow2 growth
// with the other slots untouched, exact prefix views, growth::fixed, max_slots, throwing calls that
// change nothing, empty sources, copy_to_device, record_use on another stream, fence_hits, a steady
// state without allocation or synchronization, and pools on several threads. The in-flight reader
// tests are in uva_pool_inflight_test.cu.
#include <pool/pool_support.hpp>

#include <ferry/sync/host_sync_guard.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <ranges>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using pool_test::generation;
using pool_test::read;

namespace {

template <class Pool, class B>
void check_rotation(ferry::stream<B>& s) {
  Pool pool(16, 3);
  CHECK(pool.current_slot() == 0);
  CHECK(pool.slots() == 3);
  std::vector<const std::int32_t*> addr;
  for (std::size_t k = 0; k < 9; ++k) {
    const auto src = generation<std::int32_t>(k, 3 + k);
    const auto v = pool.copy_to_uva(src, s);
    CHECK(pool.current_slot() == (k + 1) % 3);  // advanced before use: 1, 2, 0, 1, ...
    REQUIRE(v.size() == src.size());
    CHECK(read(v) == src);
    addr.push_back(v.data());
    s.synchronize();  // every reader done: the ring never needs to insert
  }
  CHECK(std::set<const std::int32_t*>(addr.begin(), addr.end()).size() == 3);
  for (std::size_t k = 3; k < addr.size(); ++k) CHECK(addr[k] == addr[k - 3]);
  CHECK(pool.stats().slots == 3);
  CHECK(pool.stats().inserted == 0);
  CHECK(pool.stats().calls == 9);
}

}  // namespace

TEMPLATE_TEST_CASE("uva_pool advances before use and the first call uses slot 1", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  SECTION("event_fenced") { check_rotation<ferry::uva_pool<std::int32_t, TestType>>(s); }
  SECTION("caller_fenced") {
    check_rotation<ferry::uva_pool<std::int32_t, ferry::reuse::caller_fenced, TestType>>(s);
  }
  SECTION("one slot: 1 % 1 is slot 0 every time") {
    ferry::uva_pool<std::int32_t, TestType, ferry::reuse::caller_fenced> pool(4, 1);
    const auto a = pool.copy_to_uva(generation<std::int32_t>(1, 4), s);
    CHECK(pool.current_slot() == 0);
    s.synchronize();
    const auto b = pool.copy_to_uva(generation<std::int32_t>(2, 2), s);
    CHECK(pool.current_slot() == 0);
    CHECK(b.data() == a.data());
    CHECK(read(b) == generation<std::int32_t>(2, 2));
  }
}

TEMPLATE_TEST_CASE("uva_pool grows one slot by powers of two and leaves the other untouched",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, TestType> pool(1, 2);
  const std::span<const std::int32_t> none;

  // 1 → 1: the first call uses slot 1 and fits its initial capacity.
  const auto first = generation<std::int32_t>(0, 1);
  CHECK(read(pool.copy_to_uva(first, s)) == first);
  CHECK(pool.current_slot() == 1);
  CHECK(pool.capacity(1) == 1);
  CHECK(pool.stats().grows == 0);
  s.synchronize();
  // Slot 0 gets its own contents, kept for the rest of the test.
  const auto zero = generation<std::int32_t>(1, 1);
  const auto v0 = pool.copy_to_uva(zero, s);
  REQUIRE(pool.current_slot() == 0);
  s.synchronize();

  const std::array<std::pair<std::size_t, std::size_t>, 3> sequence{{{5, 8}, {1024, 1024}, {1025, 2048}}};
  std::uint64_t grows = 0;
  ferry::device_span<const std::int32_t> last;
  std::vector<std::int32_t> last_src;
  for (const auto& [n, cap] : sequence) {
    last_src = generation<std::int32_t>(n, n);
    last = pool.copy_to_uva(last_src, s);
    REQUIRE(pool.current_slot() == 1);
    CHECK(pool.capacity(1) == cap);
    CHECK(pool.stats().grows == ++grows);
    REQUIRE(last.size() == n);
    CHECK(read(last) == last_src);
    // The other slot: same capacity, same address, same contents.
    CHECK(pool.capacity(0) == 1);
    CHECK(read(v0) == zero);
    s.synchronize();
    // An empty call rotates onto slot 0 without writing it.
    const auto e = pool.copy_to_uva(none, s);
    CHECK(pool.current_slot() == 0);
    CHECK(e.size() == 0);
    CHECK(e.data() == v0.data());
    CHECK(read(v0) == zero);
  }
  CHECK(pool.stats().slots == 2);
  CHECK(pool.stats().inserted == 0);

  // Now slot 0 grows alone (1 → 8): slot 1 keeps its capacity, address and contents.
  (void)pool.copy_to_uva(none, s);  // rotate onto slot 1 without writing
  const auto five = generation<std::int32_t>(77, 5);
  const auto w = pool.copy_to_uva(five, s);
  REQUIRE(pool.current_slot() == 0);
  CHECK(pool.capacity(0) == 8);
  CHECK(read(w) == five);
  CHECK(pool.capacity(1) == 2048);
  CHECK(read(last) == last_src);
  CHECK(pool.stats().grows == 4);
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool exposes exactly the new prefix after a smaller request", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int64_t, TestType> pool(4, 2);
  const auto big = generation<std::int64_t>(1, 100);
  const auto a = pool.copy_to_uva(big, s);
  CHECK(pool.capacity(1) == 128);
  s.synchronize();
  (void)pool.copy_to_uva(generation<std::int64_t>(2, 2), s);
  s.synchronize();
  const auto small = generation<std::int64_t>(3, 3);
  const auto b = pool.copy_to_uva(small, s);
  CHECK(b.data() == a.data());     // the same slot, not reallocated
  CHECK(pool.capacity(1) == 128);  // never shrinks
  CHECK(b.size() == 3);            // the stale 97 elements beyond are not part of the view
  CHECK(read(b) == small);
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool under growth::fixed throws capacity_error and changes nothing",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, ferry::growth::fixed, ferry::reuse::throw_when_full, TestType> pool(8, 2);
  const auto a = pool.copy_to_uva(generation<std::int32_t>(1, 8), s);
  REQUIRE(pool.current_slot() == 1);
  s.synchronize();
  const auto before = pool.stats();
  CHECK_THROWS_AS(pool.copy_to_uva(generation<std::int32_t>(2, 9), s), ferry::capacity_error);
  CHECK(pool.current_slot() == 1);  // rotation included
  CHECK(pool_test::same(pool.stats(), before));
  CHECK(pool.capacity(0) == 8);
  CHECK(read(a) == generation<std::int32_t>(1, 8));
  // The next call uses the slot the failed call would have used.
  const auto b = pool.copy_to_uva(generation<std::int32_t>(3, 8), s);
  CHECK(pool.current_slot() == 0);
  CHECK(b.data() != a.data());
  s.synchronize();

  SECTION("a busy slot is never replaced under growth::fixed: capacity_error") {
    std::vector<std::int32_t> seen;
    const auto c = pool.copy_to_uva(generation<std::int32_t>(4, 6), s);  // slot 1
    {
      // Held from here: slot 0's earlier fence lies before the gate, slot 1's next one behind it.
      ferry_test::gate<TestType> g(s);
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), c, &seen);  // held by the gate
      (void)pool.copy_to_uva(generation<std::int32_t>(5, 6), s);            // slot 0
      auto held = pool.stats();
      CHECK_THROWS_AS(pool.copy_to_uva(generation<std::int32_t>(6, 6), s), ferry::capacity_error);
      CHECK(pool.current_slot() == 0);
      CHECK(pool.stats().slots == 2);
      ++held.fence_hits;  // the busy slot it found; nothing else changed
      CHECK(pool_test::same(pool.stats(), held));
    }
    s.synchronize();
    CHECK(seen == generation<std::int32_t>(4, 6));
    const auto d = pool.copy_to_uva(generation<std::int32_t>(7, 6), s);  // slot 1 is free now
    CHECK(d.data() == a.data());  // stable addresses
    s.synchronize();
  }
}

TEMPLATE_TEST_CASE("uva_pool inserts slots for busy ones up to max_slots then capacity_error",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, ferry::reuse::throw_when_full, TestType> pool(16, 2, 3);
  std::vector<std::int32_t> seen[3];
  ferry::device_span<const std::int32_t> v[3];
  {
    ferry_test::gate<TestType> g(s);
    for (std::size_t k = 0; k < 3; ++k) {
      v[k] = pool.copy_to_uva(generation<std::int32_t>(k, 10 + k), s);
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), v[k], &seen[k]);
    }
    // Call 2 found slot 1 still read (the gate holds its reader) and inserted a slot instead:
    // without blocking (the gate is still closed).
    CHECK(pool.slots() == 3);
    CHECK(pool.stats().inserted == 1);
    CHECK(pool.stats().fence_hits == 1);
    CHECK(pool.current_slot() == 1);  // the inserted slot sits after the previous one
    CHECK(std::set<const std::int32_t*>{v[0].data(), v[1].data(), v[2].data()}.size() == 3);
    auto before = pool.stats();
    CHECK_THROWS_AS(pool.copy_to_uva(generation<std::int32_t>(3, 5), s), ferry::capacity_error);
    CHECK(pool.current_slot() == 1);
    ++before.fence_hits;  // the busy slot it found; nothing else changed
    CHECK(pool_test::same(pool.stats(), before));
  }
  s.synchronize();
  for (std::size_t k = 0; k < 3; ++k) CHECK(seen[k] == generation<std::int32_t>(k, 10 + k));
  // The readers are done: the same call now reuses the old slot 1, the first call's slot.
  const auto w = pool.copy_to_uva(generation<std::int32_t>(3, 5), s);
  CHECK(w.data() == v[0].data());
  CHECK(pool.current_slot() == 2);
  CHECK(pool.slots() == 3);
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool fence_hits counts every call that found its slot still read",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::vector<std::vector<std::int32_t>> src;
  for (std::uint64_t k = 0; k < 6; ++k) src.push_back(ferry_test::random_values<std::int32_t>(8, 300 + k));
  std::vector<std::int32_t> seen[3];
  SECTION("inserted, then max_slots reached") {
    ferry::uva_pool<std::int32_t, ferry::reuse::throw_when_full, TestType> pool(8, 1, 2);
    {
      ferry_test::gate<TestType> g(s);
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), pool.copy_to_uva(src[0], s), &seen[0]);
      CHECK(pool.stats().fence_hits == 0);  // a slot never read is free
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), pool.copy_to_uva(src[1], s), &seen[1]);
      CHECK(pool.stats().fence_hits == 1);
      CHECK(pool.stats().inserted == 1);
      // Both slots are read behind the gate: each call finds its slot busy and throws.
      CHECK_THROWS_AS(pool.copy_to_uva(src[2], s), ferry::capacity_error);
      CHECK_THROWS_AS(pool.copy_to_uva(src[3], s), ferry::capacity_error);
      CHECK(pool.stats().fence_hits == 3);
      CHECK(pool.stats().inserted == 1);
      CHECK(pool.stats().calls == 2);
    }
    s.synchronize();
    CHECK(read(pool.copy_to_uva(src[4], s)) == src[4]);  // the readers are done: no hit
    CHECK(pool.stats().fence_hits == 3);
    CHECK(seen[0] == src[0]);
    CHECK(seen[1] == src[1]);
  }
  SECTION("growth::fixed never inserts: every hit throws") {
    ferry::uva_pool<std::int32_t, ferry::growth::fixed, ferry::reuse::throw_when_full, TestType> pool(8, 2);
    {
      ferry_test::gate<TestType> g(s);
      for (std::size_t k = 0; k < 2; ++k)
        pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), pool.copy_to_uva(src[k], s), &seen[k]);
      CHECK(pool.stats().fence_hits == 0);
      CHECK_THROWS_AS(pool.copy_to_uva(src[2], s), ferry::capacity_error);
      CHECK(pool.stats().fence_hits == 1);
      CHECK(pool.stats().inserted == 0);
    }
    s.synchronize();
    CHECK(seen[0] == src[0]);
    CHECK(seen[1] == src[1]);
  }
  SECTION("caller_fenced never checks") {
    ferry::uva_pool<std::int32_t, ferry::reuse::caller_fenced, TestType> pool(8, 2);
    for (std::size_t k = 0; k < 4; ++k) CHECK(read(pool.copy_to_uva(src[k], s)) == src[k]);
    CHECK(pool.stats().fence_hits == 0);
    CHECK(pool.stats().fences == 0);
  }
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool rejects zero slots and more slots than max_slots", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using pool = ferry::uva_pool<float, TestType>;
  CHECK_THROWS_AS(pool(16, 0), std::invalid_argument);
  CHECK_THROWS_AS(pool(16, 9), std::invalid_argument);  // default max_slots is 8
  CHECK_THROWS_AS(pool(16, 3, 2), std::invalid_argument);
  CHECK_NOTHROW(pool(16, 8));
  CHECK_NOTHROW(pool(0, 1, 1));
}

TEMPLATE_TEST_CASE("uva_pool takes any max_slots and inserts slots up to it", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, TestType> pool(4, 1, std::numeric_limits<std::size_t>::max());
  CHECK(pool.max_slots() == std::numeric_limits<std::size_t>::max());
  constexpr std::size_t calls = 12;
  std::vector<std::int32_t> seen[calls];
  std::vector<std::vector<std::int32_t>> src;
  {
    ferry_test::gate<TestType> g(s);
    for (std::size_t k = 0; k < calls; ++k) {
      src.push_back(ferry_test::random_values<std::int32_t>(4, 100 + k));
      const auto v = pool.copy_to_uva(src.back(), s);
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), v, &seen[k]);
    }
    CHECK(pool.slots() == calls);  // every reader is held: each call after the first inserted
  }
  s.synchronize();
  for (std::size_t k = 0; k < calls; ++k) CHECK(seen[k] == src[k]);
}

TEMPLATE_TEST_CASE("uva_pool leaves everything unchanged when the source throws midway", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::uva_pool<std::int32_t, TestType> pool(4, 2, 8, arena);
  const auto a = pool.copy_to_uva(generation<std::int32_t>(1, 4), s);
  s.synchronize();
  auto failing_at = [](int n, int bad) {
    return std::views::iota(0, n) | std::views::transform([bad](int i) {
             if (i == bad) throw std::runtime_error("the source failed");
             return i + 1;
           });
  };
  const auto before = pool.stats();
  const auto arena_before = arena.stats();
  // Would grow slot 0 (4 → 128): the fresh block goes back to the arena.
  CHECK_THROWS_AS(pool.copy_to_uva(failing_at(100, 50), s), std::runtime_error);
  // Would write slot 0 in place.
  CHECK_THROWS_AS(pool.copy_to_uva(failing_at(3, 1), s), std::runtime_error);
  CHECK(pool.current_slot() == 1);
  CHECK(pool.capacity(0) == 4);
  CHECK(pool_test::same(pool.stats(), before));
  CHECK(arena.stats().bytes_in_use == arena_before.bytes_in_use);
  CHECK(read(a) == generation<std::int32_t>(1, 4));
  // The same source without the failure goes where the failed calls would have gone.
  const auto b = pool.copy_to_uva(failing_at(100, -1), s);
  CHECK(pool.current_slot() == 0);
  CHECK(pool.capacity(0) == 128);
  std::vector<std::int32_t> expect(100);
  for (int i = 0; i < 100; ++i) expect[static_cast<std::size_t>(i)] = i + 1;
  CHECK(read(b) == expect);
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool rotates on an empty source but writes grows and fences nothing",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, TestType> pool(8, 2);
  std::vector<std::int32_t> seen;
  ferry::device_span<const std::int32_t> v1;
  {
    ferry_test::gate<TestType> g(s);
    v1 = pool.copy_to_uva(generation<std::int32_t>(1, 6), s);  // slot 1
    pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), v1, &seen);
    const auto before = pool.stats();
    const auto e = pool.copy_to_uva(std::vector<std::int32_t>{}, s);  // slot 0: nothing written
    CHECK(pool.current_slot() == 0);
    CHECK(e.size() == 0);
    CHECK(pool.stats().fences == before.fences + 1);  // slot 1 (the last view), not slot 0
    CHECK(pool.stats().grows == before.grows);
    CHECK(pool.capacity(0) == 8);
    // The view of call 1 is still being read: the next call finds slot 1 busy and inserts a slot
    // instead of overwriting it.
    const auto v3 = pool.copy_to_uva(generation<std::int32_t>(3, 6), s);
    CHECK(v3.data() != v1.data());
    CHECK(pool.stats().inserted == 1);
  }
  s.synchronize();
  CHECK(seen == generation<std::int32_t>(1, 6));
}

TEMPLATE_TEST_CASE("uva_pool keeps the last view fenced across an empty call, on any stream",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using ref = ferry::stream_ref<TestType>;
  ferry::stream<TestType> s0;
  ferry::stream<TestType> s1;
  ferry::stream<TestType> s2;
  ferry::uva_pool<std::int32_t, TestType> pool(4, 2);
  const auto src = ferry_test::random_values<std::int32_t>(4, 11);
  const std::vector<std::int32_t> nines(4, 9);
  const std::span<const std::int32_t> empty;
  std::vector<std::int32_t> seen;
  {
    ferry_test::gate<TestType> g0(s0);
    ferry_test::gate<TestType> g2(s2);
    const auto v1 = pool.copy_to_uva(src, s0);  // slot 1
    SECTION("read on the empty call's stream") {
      pool_test::enqueue_reader(ref(s0), v1, &seen);
      (void)pool.copy_to_uva(empty, s0);  // slot 0
    }
    SECTION("read on the empty call's stream, record_use there after the empty call") {
      pool_test::enqueue_reader(ref(s0), v1, &seen);
      (void)pool.copy_to_uva(empty, s0);
      pool.record_use(s0);
    }
    SECTION("read on a third stream after the empty call, declared with record_use") {
      (void)pool.copy_to_uva(empty, s0);
      pool_test::enqueue_reader(ref(s2), v1, &seen);
      pool.record_use(s2);
    }
    const auto v3 = pool.copy_to_uva(nines, s1);  // slot 1 is still read: a slot is inserted
    CHECK(v3.data() != v1.data());
    CHECK(pool.stats().inserted == 1);
  }
  s0.synchronize();
  s2.synchronize();
  CHECK(seen == src);
}

TEMPLATE_TEST_CASE("uva_pool waits for the last view's readers before giving its blocks back",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_arena<TestType> arena;
  using pool_type = ferry::uva_pool<std::int32_t, TestType>;
  const auto src = ferry_test::random_values<std::int32_t>(16, 21);
  std::vector<std::int32_t> seen;
  auto s = std::make_unique<ferry::stream<TestType>>();
  ferry_test::gate<TestType> g(*s);
  auto pool = std::make_unique<pool_type>(16, 2, 8, arena);
  pool_test::enqueue_reader(ferry::stream_ref<TestType>(*s), pool->copy_to_uva(src, *s), &seen);
  SECTION("destroyed, its stream destroyed first") {
    // The reader's stream may be gone (destroying a stream does not wait on CUDA; under
    // compute-sanitizer it may, so it is destroyed where the gate opens after a while): the pool
    // still waits for the reader, without touching that stream.
    CHECK_FALSE(pool_test::returns_before_open(g, [&] {
      if constexpr (!std::is_same_v<TestType, ferry::backend::host>) s.reset();
      pool.reset();
    }));
  }
  SECTION("moved over") {
    CHECK_FALSE(pool_test::returns_before_open(g, [&] { *pool = pool_type(16, 1, 8, arena); }));
  }
  // Another user of the arena takes the blocks now, and overwrites them: the reader has run.
  std::vector<ferry::pinned_block> taken;
  for (int k = 0; k < 3; ++k) {
    taken.push_back(arena.acquire(16 * sizeof(std::int32_t)));
    std::fill_n(reinterpret_cast<std::int32_t*>(taken.back().data), 16, 9);
  }
  if (s) s->synchronize();
  CHECK(seen == src);
  for (const auto& b : taken) arena.release(b);
}

TEMPLATE_TEST_CASE("uva_pool copy_to_device copies the exact prefix and rejects a small out",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<float, TestType> pool(4, 2);
  ferry::device_buffer<float, TestType> out(300);
  ferry::pinned_buffer<float, TestType> back(300);
  auto fetch = [&] {
    ferry::async_d2h(out.span(), back.host(), s);
    s.synchronize();
    return std::vector<float>(back.host().begin(), back.host().end());
  };
  const auto src = ferry_test::random_values<float>(300, 3);
  const auto d = pool.copy_to_device(src, out.span(), s);
  CHECK(d.data() == out.data());
  CHECK(d.size() == 300);
  CHECK(fetch() == src);

  // A gathered (non-contiguous) source, explicitly converted, shorter: only its prefix is written.
  const std::vector<std::int32_t> ints{7, -3, 11};
  const auto e = pool.copy_to_device(ferry::cast<float>(ints), out.span(), s);
  CHECK(e.size() == 3);
  auto expect = src;
  expect[0] = 7.0f;
  expect[1] = -3.0f;
  expect[2] = 11.0f;
  CHECK(fetch() == expect);

  const auto slot = pool.current_slot();
  const auto before = pool.stats();
  CHECK_THROWS_AS(pool.copy_to_device(src, out.span().first(10), s), std::out_of_range);
  CHECK(pool.current_slot() == slot);
  CHECK(pool_test::same(pool.stats(), before));
  CHECK(fetch() == expect);  // nothing enqueued
  CHECK(pool.copy_to_device(std::vector<float>{}, out.span(), s).size() == 0);
}

TEMPLATE_TEST_CASE("uva_pool record_use keeps a slot read on another stream from reuse", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s1;
  ferry::stream<TestType> s2;
  ferry::uva_pool<std::int64_t, TestType> pool(32, 2);
  std::vector<std::int64_t> seen;
  ferry::device_span<const std::int64_t> v1;
  {
    ferry_test::gate<TestType> g(s2);
    v1 = pool.copy_to_uva(generation<std::int64_t>(1, 20), s1);
    pool_test::enqueue_reader(ferry::stream_ref<TestType>(s2), v1, &seen);  // read on s2
    pool.record_use(s2);
    (void)pool.copy_to_uva(generation<std::int64_t>(2, 20), s1);
    s1.synchronize();  // s1 has passed everything: only the fence on s2 holds slot 1
    const auto v3 = pool.copy_to_uva(generation<std::int64_t>(3, 20), s1);
    CHECK(v3.data() != v1.data());
    CHECK(pool.stats().fence_hits == 1);
    CHECK(pool.stats().inserted == 1);
  }
  s2.synchronize();
  CHECK(seen == generation<std::int64_t>(1, 20));
  // Once s2 has passed, the slot comes back into use.
  s1.synchronize();
  const auto v4 = pool.copy_to_uva(generation<std::int64_t>(4, 20), s1);
  CHECK(v4.data() == v1.data());
  s1.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool keeps views valid across a move", "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, TestType> a(8, 2);
  const auto v = a.copy_to_uva(generation<std::int32_t>(1, 8), s);
  ferry::uva_pool<std::int32_t, TestType> b(std::move(a));
  CHECK(read(v) == generation<std::int32_t>(1, 8));
  CHECK(b.current_slot() == 1);
  CHECK(a.slots() == 0);  // NOLINT: moved-from is empty
  CHECK_THROWS_AS(a.copy_to_uva(generation<std::int32_t>(2, 1), s), ferry::error);
  s.synchronize();
  const auto w = b.copy_to_uva(generation<std::int32_t>(2, 8), s);
  CHECK(b.current_slot() == 0);
  CHECK(w.data() != v.data());
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool steady state allocates nothing and never synchronizes", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, TestType> pool(16, 3);
  const std::size_t sizes[] = {3, 4090, 17, 1500};
  std::vector<std::vector<std::int32_t>> srcs;
  for (std::size_t k = 0; k < 4; ++k) srcs.push_back(generation<std::int32_t>(k, sizes[k]));
  // Step k's reader runs on the stream; before call k the host waits (by polling, not by a
  // synchronizing call) for reader k-2, so that at most one reader is in flight during a call
  // and the three slots always suffice: the ring never needs to insert.
  std::vector<ferry::event<TestType>> done(4);
  std::atomic<std::uint64_t> bad{0};
  auto step = [&](std::size_t k) {
    if (k >= 2)
      while (!done[(k - 2) % 4].ready()) std::this_thread::yield();
    const auto& src = srcs[k % 4];
    const auto v = pool.copy_to_uva(src, s);
    ferry::enqueue_host(s, [v, &src, &bad] {
      if (v.size() != src.size() || v.data()[0] != src[0] || v.data()[v.size() - 1] != src.back())
        bad.fetch_add(1);
    });
    done[k % 4].record(s);
  };
  std::size_t k = 0;
  for (; k < 16; ++k) step(k);  // warm-up: every slot reaches its largest size
  const auto before = ferry::backend_stats_of<TestType>();
  const auto pool_before = pool.stats();
  for (; k < 1016; ++k) step(k);
  const auto after = ferry::backend_stats_of<TestType>();
  const auto pool_after = pool.stats();
  CHECK(after.pinned_allocations == before.pinned_allocations);
  CHECK(after.device_allocations == before.device_allocations);
  CHECK(after.synchronizations == before.synchronizations);
  CHECK(pool_after.grows == pool_before.grows);
  CHECK(pool_after.inserted == pool_before.inserted);
  CHECK(pool_after.calls == pool_before.calls + 1000);
  CHECK(pool_after.fences == pool_before.fences + 1000);
  s.synchronize();
  CHECK(bad == 0);
}

#if FERRY_HAS_CUDA
TEST_CASE("uva_pool asks the backend once per ring while the GPU keeps up", "[pool]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  // Each call checks the slot it comes back to, whose fence the previous call recorded; with the
  // stream drained in between (a stream's synchronize tells the reuse core nothing), that fence
  // has passed but is above the watermark. The core asks about the newest event, so one answer
  // covers the next slots - 1 calls' checks as well.
  auto queries_per_call = [&](std::size_t slots) {
    ferry::uva_pool<std::int32_t, B> pool(1024, slots);
    for (std::size_t k = 0; k < 2 * slots; ++k) {
      (void)pool.copy_to_uva(generation<std::int32_t>(k, 1024), s);
      s.synchronize();
    }
    constexpr std::uint64_t calls = 140;
    const auto before = ferry::backend_stats_of<B>().completion_queries;
    for (std::uint64_t k = 0; k < calls; ++k) {
      const auto v = pool.copy_to_uva(generation<std::int32_t>(k, 1024), s);
      CHECK(read(v) == generation<std::int32_t>(k, 1024));
      s.synchronize();
    }
    CHECK(pool.stats().inserted == 0);
    return static_cast<double>(ferry::backend_stats_of<B>().completion_queries - before) / calls;
  };
  CHECK(queries_per_call(2) == 1.0);  // the slot's fence is the newest event: asked every call
  const double deep = queries_per_call(8);
  CHECK(deep >= 1.0 / 7 - 0.01);
  CHECK(deep <= 1.0 / 7 + 0.01);  // asked about its own fence, each call would ask
}
#endif

TEMPLATE_TEST_CASE("uva_pools on several threads share the reuse core", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  // Every pool stamps and asks the one process-wide timeline: pools used at once from several
  // threads (each its own pool and stream) must still never rewrite a slot under its reader.
  constexpr std::size_t threads = 4;
  constexpr std::size_t calls = 200;
  std::atomic<std::uint64_t> bad{0};
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([t, &bad] {
      ferry::stream<TestType> s;
      ferry::uva_pool<std::int64_t, TestType> pool(16, 2);
      std::vector<std::vector<std::int64_t>> srcs;
      for (std::size_t k = 0; k < 4; ++k)
        srcs.push_back(ferry_test::random_values<std::int64_t>(16 + 5 * k, 1000 * t + k));
      std::vector<ferry::event<TestType>> done(4);
      for (std::size_t k = 0; k < calls; ++k) {
        if (k >= 4) done[k % 4].synchronize();  // at most 3 readers in flight: no capacity_error
        const auto& src = srcs[k % 4];
        const auto v = pool.copy_to_uva(src, s);
        ferry::enqueue_host(s, [v, &src, &bad] {
          if (pool_test::read(v) != src) bad.fetch_add(1);
        });
        done[k % 4].record(s);
      }
      s.synchronize();
    });
  }
  for (auto& w : workers) w.join();
  CHECK(bad == 0);
}

namespace {

// The rows of a 2-D view, read on the host (pool slots are pinned, mapped host memory).
template <class View>
std::vector<std::vector<std::int32_t>> rows_of(const View& v) {
  std::vector<std::vector<std::int32_t>> r(v.extent(0));
  for (std::size_t i = 0; i < v.extent(0); ++i)
    r[i].assign(v.data_handle() + i * v.extent(1), v.data_handle() + (i + 1) * v.extent(1));
  return r;
}
std::vector<std::vector<std::int32_t>> rows_of(const std::vector<std::int32_t>& flat, std::size_t width) {
  std::vector<std::vector<std::int32_t>> r(flat.size() / width);
  for (std::size_t i = 0; i < r.size(); ++i)
    r[i].assign(flat.begin() + static_cast<std::ptrdiff_t>(i * width),
                flat.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE("uva_pool over rows of a fixed width grows the row count and views n rows",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  constexpr std::size_t width = 3;  // not a power of two: rows, not elements, are rounded
  ferry::uva_pool<std::int32_t, TestType> pool(ferry::row_width{width}, 2, 2);
  CHECK(pool.width() == width);
  CHECK(pool.capacity(0) == 2);

  const auto five = ferry_test::random_values<std::int32_t>(5 * width, 41);
  const auto v = pool.copy_rows_to_uva(five, s);  // slot 1: 2 -> 8 rows (1 << bit_width(4))
  CHECK(pool.current_slot() == 1);
  CHECK(pool.capacity(1) == 8);
  CHECK(pool.capacity(0) == 2);
  CHECK(pool.stats().grows == 1);
  REQUIRE(v.extent(0) == 5);
  REQUIRE(v.extent(1) == width);
  CHECK(rows_of(v) == rows_of(five, width));
  s.synchronize();

  // Rows that fit: no growth; 8 rows fit the grown slot exactly, 9 grow it to 16.
  const auto two = ferry_test::random_values<std::int32_t>(2 * width, 42);
  CHECK(rows_of(pool.copy_rows_to_uva(two, s)) == rows_of(two, width));  // slot 0
  CHECK(pool.stats().grows == 1);
  s.synchronize();
  const auto eight = ferry_test::random_values<std::int32_t>(8 * width, 43);
  const auto w8 = pool.copy_rows_to_uva(eight, s);  // slot 1 again
  CHECK(w8.data_handle() == v.data_handle());
  CHECK(pool.capacity(1) == 8);
  CHECK(rows_of(w8) == rows_of(eight, width));
  s.synchronize();
  const auto nine = ferry_test::random_values<std::int32_t>(9 * width, 44);
  CHECK(rows_of(pool.copy_rows_to_uva(nine, s)) == rows_of(nine, width));  // slot 0: 2 -> 16
  CHECK(pool.capacity(0) == 16);
  s.synchronize();

  // The element view of the same call: n * width elements.
  const auto one = ferry_test::random_values<std::int32_t>(width, 45);
  const auto e = pool.copy_to_uva(one, s);
  CHECK(e.size() == width);
  CHECK(read(e) == one);
  s.synchronize();

  // Not whole rows: std::invalid_argument, and nothing changes.
  const auto slot = pool.current_slot();
  const auto before = pool.stats();
  const auto seven = ferry_test::random_values<std::int32_t>(7, 46);
  CHECK_THROWS_AS(pool.copy_to_uva(seven, s), std::invalid_argument);
  CHECK_THROWS_AS(pool.copy_rows_to_uva(seven, s), std::invalid_argument);
  CHECK(pool.current_slot() == slot);
  CHECK(pool_test::same(pool.stats(), before));
  const auto empty = pool.copy_rows_to_uva(std::vector<std::int32_t>{}, s);
  CHECK(empty.extent(0) == 0);
  CHECK(empty.extent(1) == width);
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool slot_memory spans each slot's rows at the address its views use",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  constexpr std::size_t width = 3;
  ferry::uva_pool<std::int32_t, TestType> pool(ferry::row_width{width}, 2, 2);
  REQUIRE(pool.slot_memory(0).size() == 2 * width);
  REQUIRE(pool.slot_memory(1).size() == 2 * width);
  CHECK(pool.slot_memory(0).data() != pool.slot_memory(1).data());

  // Slot 1 (the first call's), written within its capacity: the whole slot is the view's rows.
  const auto two = ferry_test::random_values<std::int32_t>(2 * width, 51);
  const auto v = pool.copy_to_uva(two, s);
  REQUIRE(pool.current_slot() == 1);
  const auto m1 = pool.slot_memory(1);
  CHECK(m1.data() == v.data());
  CHECK(read(m1) == two);
  s.synchronize();

  // Slot 0 grows from 2 to 8 rows: its memory follows, the view's rows first; slot 1 is untouched.
  const auto five = ferry_test::random_values<std::int32_t>(5 * width, 52);
  const auto w = pool.copy_to_uva(five, s);
  REQUIRE(pool.current_slot() == 0);
  const auto m0 = pool.slot_memory(0);
  CHECK(m0.data() == w.data());
  CHECK(m0.size() == 8 * width);
  CHECK(std::vector<std::int32_t>(m0.data(), m0.data() + five.size()) == five);
  CHECK(pool.slot_memory(1).data() == m1.data());
  CHECK(read(pool.slot_memory(1)) == two);
  CHECK_THROWS_AS(pool.slot_memory(2), std::out_of_range);
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool over rows: growth::fixed, busy slots, and a zero width", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  constexpr std::size_t width = 5;
  CHECK_THROWS_AS((ferry::uva_pool<std::int32_t, TestType>(ferry::row_width{0}, 4)), std::invalid_argument);
  SECTION("growth::fixed: the row count never changes") {
    ferry::uva_pool<std::int32_t, ferry::growth::fixed, TestType> pool(ferry::row_width{width}, 4, 2);
    const auto four = ferry_test::random_values<std::int32_t>(4 * width, 51);
    CHECK(rows_of(pool.copy_rows_to_uva(four, s)) == rows_of(four, width));
    s.synchronize();
    const auto before = pool.stats();
    CHECK_THROWS_AS(pool.copy_rows_to_uva(ferry_test::random_values<std::int32_t>(5 * width, 52), s),
                    ferry::capacity_error);
    CHECK(pool_test::same(pool.stats(), before));
    CHECK(pool.capacity(0) == 4);
  }
  SECTION("a busy slot is replaced by an inserted one, its rows grown per pow2") {
    ferry::uva_pool<std::int32_t, TestType> pool(ferry::row_width{width}, 4, 1);
    std::vector<std::int32_t> seen;
    const auto three = ferry_test::random_values<std::int32_t>(3 * width, 53);
    {
      ferry_test::gate<TestType> g(s);
      const auto v = pool.copy_to_uva(three, s);
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), v, &seen);
      const auto six = ferry_test::random_values<std::int32_t>(6 * width, 54);
      const auto w = pool.copy_rows_to_uva(six, s);
      CHECK(w.data_handle() != v.data());
      CHECK(pool.stats().inserted == 1);
      CHECK(pool.capacity(pool.current_slot()) == 8);  // 6 rows > 4 initial: pow2 of the rows
      CHECK(rows_of(w) == rows_of(six, width));
    }
    s.synchronize();
    CHECK(seen == three);
  }
}

namespace {

// A legal GrowthPolicy (its answer is at least `needed`) that answers with 2^62 elements or rows:
// a slot of that many int32 is 2^64 bytes, which size_t cannot hold.
struct huge_growth {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t /*current*/) {
    return std::max<std::size_t>(needed, std::size_t{1} << 62);
  }
};

bool same_arena(const ferry::arena_stats& a, const ferry::arena_stats& b) {
  return a.allocations == b.allocations && a.reuses == b.reuses &&
         a.bytes_reserved == b.bytes_reserved && a.bytes_in_use == b.bytes_in_use;
}

}  // namespace

TEMPLATE_TEST_CASE("uva_pool rejects a growth policy's capacity whose bytes overflow, changing nothing",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto first = ferry_test::random_values<std::int32_t>(64, 401);
  const auto big = ferry_test::random_values<std::int32_t>(100, 402);
  const auto small = ferry_test::random_values<std::int32_t>(10, 403);
  const std::string answer = std::to_string(std::size_t{1} << 62);

  SECTION("growing a slot") {
    ferry::uva_pool<std::int32_t, huge_growth, TestType> pool(64, 2, 8, arena);
    const auto v = pool.copy_to_uva(first, s);  // slot 1
    s.synchronize();
    const auto before = pool.stats();
    const auto arena_before = arena.stats();
    CHECK_THROWS_MATCHES(pool.copy_to_uva(big, s), ferry::capacity_error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("ferry: uva_pool: ") &&
                                                         ContainsSubstring(answer)));
    CHECK(pool.current_slot() == 1);
    CHECK(pool_test::same(pool.stats(), before));
    CHECK(pool.capacity(0) == 64);
    CHECK(pool.capacity(1) == 64);
    CHECK(same_arena(arena.stats(), arena_before));
    CHECK(read(v) == first);
    // The next call that fits uses the slot the failed call would have used.
    const auto w = pool.copy_to_uva(small, s);
    CHECK(pool.current_slot() == 0);
    CHECK(read(w) == small);
    CHECK(read(v) == first);
  }
  SECTION("inserting a slot in front of a busy one") {
    ferry::uva_pool<std::int32_t, huge_growth, TestType> pool(64, 1, 8, arena);
    std::vector<std::int32_t> seen;
    {
      ferry_test::gate<TestType> g(s);
      const auto v = pool.copy_to_uva(first, s);  // slot 0, read behind the gate
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), v, &seen);
      auto before = pool.stats();
      const auto arena_before = arena.stats();
      CHECK_THROWS_MATCHES(pool.copy_to_uva(big, s), ferry::capacity_error,
                           Catch::Matchers::MessageMatches(ContainsSubstring(answer)));
      CHECK(pool.current_slot() == 0);
      CHECK(pool.slots() == 1);
      ++before.fence_hits;  // the busy slot it found; nothing else changed
      CHECK(pool_test::same(pool.stats(), before));
      CHECK(same_arena(arena.stats(), arena_before));
      CHECK(read(v) == first);
    }
    s.synchronize();
    CHECK(seen == first);
  }
  SECTION("rows of a fixed width") {
    ferry::uva_pool<std::int32_t, huge_growth, TestType> pool(ferry::row_width{3}, 4, 2, 8, arena);
    const auto rows4 = ferry_test::random_values<std::int32_t>(12, 404);
    const auto v = pool.copy_to_uva(rows4, s);
    s.synchronize();
    const auto before = pool.stats();
    CHECK_THROWS_AS(pool.copy_to_uva(ferry_test::random_values<std::int32_t>(15, 405), s),
                    ferry::capacity_error);
    CHECK(pool.current_slot() == 1);
    CHECK(pool_test::same(pool.stats(), before));
    CHECK(pool.capacity(0) == 4);
    CHECK(read(v) == rows4);
  }
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_pool with one reader held uses the free slots, never inserting while one is free",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;  // the pool's calls
  ferry::stream<TestType> r;  // the held reader
  const auto held_src = ferry_test::random_values<std::int32_t>(16, 501);
  std::vector<std::int32_t> seen;

  SECTION("a full ring (slots == max_slots): the held slot is passed over, never the call") {
    ferry::uva_pool<std::int32_t, TestType> pool(16, 4, 4);
    {
      ferry_test::gate<TestType> g(r);
      const auto held = pool.copy_to_uva(held_src, s);  // slot 1
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(r), held, &seen);
      pool.record_use(r);
      std::uint64_t hits = 0;
      for (std::size_t k = 0; k < 12; ++k) {
        const std::size_t prev = pool.current_slot();
        const auto src = ferry_test::random_values<std::int32_t>(16, 510 + k);
        const auto v = pool.copy_to_uva(src, s);
        // The held slot 1 is skipped: after slot 0 comes slot 2.
        const std::size_t want = prev == 0 ? 2 : (prev + 1) % 4;
        hits += prev == 0 ? 1 : 0;
        CHECK(pool.current_slot() == want);
        CHECK(v.data() != held.data());
        CHECK(read(v) == src);
        CHECK(read(held) == held_src);
        s.synchronize();  // the pool's own readers are done: only the reader on r holds a slot
      }
      CHECK(pool.slots() == 4);
      CHECK(pool.stats().inserted == 0);
      CHECK(pool.stats().fence_hits == hits);
      CHECK(pool.stats().calls == 13);
    }
    r.synchronize();
    CHECK(seen == held_src);
    // The reader is done: slot 1 comes back into the rotation.
    while (pool.current_slot() != 0) (void)pool.copy_to_uva(held_src, s);
    (void)pool.copy_to_uva(held_src, s);
    CHECK(pool.current_slot() == 1);
  }
  SECTION("two slots: one is inserted, then the ring turns round the held slot") {
    ferry::uva_pool<std::int32_t, TestType> pool(16, 2);  // max_slots 8
    {
      ferry_test::gate<TestType> g(r);
      const auto held = pool.copy_to_uva(held_src, s);  // slot 1
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(r), held, &seen);
      pool.record_use(r);
      for (std::size_t k = 0; k < 20; ++k) {
        const auto src = ferry_test::random_values<std::int32_t>(16, 530 + k);
        const auto v = pool.copy_to_uva(src, s);
        CHECK(v.data() != held.data());
        CHECK(read(v) == src);
        s.synchronize();
      }
      // The slot of the call before is never taken again at once: one slot was inserted (the
      // ring then holds the held slot and two that take turns), and no more.
      CHECK(pool.slots() == 3);
      CHECK(pool.stats().inserted == 1);
      CHECK(read(held) == held_src);
    }
    r.synchronize();
    CHECK(seen == held_src);
  }
}

TEMPLATE_TEST_CASE("uva_pool's capacity_error at max_slots names each held slot and its stream point",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, ferry::reuse::throw_when_full, TestType> pool(8, 2, 2);
  std::vector<std::int32_t> seen[2];
  {
    ferry_test::gate<TestType> g(s);
    for (std::size_t k = 0; k < 2; ++k)
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s),
                                pool.copy_to_uva(generation<std::int32_t>(k, 8), s), &seen[k]);
    // The stream's line in the reuse core (a mark enqueues nothing).
    const auto line = std::to_string(ferry::detail::shared_timeline<TestType>().mark(s).line);
    std::string what;
    try {
      (void)pool.copy_to_uva(generation<std::int32_t>(2, 8), s);
    } catch (const ferry::capacity_error& e) {
      what = e.what();
    }
    INFO(what);
    CHECK_THAT(what, ContainsSubstring("ferry: uva_pool: ") && ContainsSubstring("max_slots (2)") &&
                         ContainsSubstring("slot 1 is held until stream point (line " + line + ", seq ") &&
                         ContainsSubstring("slot 0 is held until stream point (line " + line + ", seq "));
  }
  s.synchronize();
  CHECK(seen[0] == generation<std::int32_t>(0, 8));
  CHECK(seen[1] == generation<std::int32_t>(1, 8));
}

TEMPLATE_TEST_CASE("uva_pool at max_slots of two with one reader held: the message names the held slot",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  ferry::stream<TestType> s;
  ferry::stream<TestType> r;
  ferry::uva_pool<std::int32_t, ferry::reuse::throw_when_full, TestType> pool(8, 2, 2);
  std::vector<std::int32_t> seen;
  {
    ferry_test::gate<TestType> g(r);
    const auto held = pool.copy_to_uva(generation<std::int32_t>(0, 8), s);  // slot 1
    pool_test::enqueue_reader(ferry::stream_ref<TestType>(r), held, &seen);
    pool.record_use(r);
    (void)pool.copy_to_uva(generation<std::int32_t>(1, 8), s);  // slot 0
    s.synchronize();
    // Slot 1 is held on r; slot 0 is the last call's, and is not written twice in a row.
    const auto line = std::to_string(ferry::detail::shared_timeline<TestType>().mark(r).line);
    const auto before = pool.stats();
    std::string what;
    try {
      (void)pool.copy_to_uva(generation<std::int32_t>(2, 8), s);
    } catch (const ferry::capacity_error& e) {
      what = e.what();
    }
    INFO(what);
    CHECK_THAT(what, ContainsSubstring("ferry: uva_pool: no slot is free") &&
                         ContainsSubstring("slot 1 is held until stream point (line " + line + ", seq "));
    CHECK((what.find("slot 0 was written by the call before") != std::string::npos ||
           what.find("slot 0 is held until stream point") != std::string::npos));
    CHECK(pool.current_slot() == 0);
    CHECK(pool.stats().fence_hits == before.fence_hits + 1);
    CHECK(pool.stats().calls == before.calls);
    CHECK(read(held) == generation<std::int32_t>(0, 8));
  }
  r.synchronize();
  CHECK(seen == generation<std::int32_t>(0, 8));
  CHECK(pool.copy_to_uva(generation<std::int32_t>(3, 8), s).size() == 8);  // slot 1, free again
  CHECK(pool.current_slot() == 1);
  s.synchronize();
}

// User ReusePolicies (outside an anonymous namespace, as a user's would be): one without
// when_full (a full ring waits) and one whose when_full records what it was given, then waits.
namespace pool_test_policies {
struct fences_only {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = true;
};
struct records_full {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = true;
  static inline int calls = 0;
  static inline std::string described;
  template <class Wait, class Describe>
  static void when_full(Wait&& wait, Describe&& describe) {
    ++calls;
    described = describe();
    wait();
  }
};
// A when_full that neither waits nor throws: the ring stays full, so ferry throws.
struct ignores_full {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = true;
  template <class Wait, class Describe>
  static void when_full(Wait&& /*wait*/, Describe&& /*describe*/) {}
};
}  // namespace pool_test_policies

namespace {

// A ring of two slots, both read behind a gate that a helper thread opens after 50 ms: the third
// call waits for the slot coming into use (slot 1, the first call's), then writes it. The readers
// saw their data unchanged; the wait is counted in stats().full_waits, as a synchronization of
// the backend and in ferry's ring waits (what sync_guard adds to its syncs()).
template <class Pool, class B>
void check_full_ring_waits(ferry::stream<B>& s, Pool& pool) {
  std::vector<std::int32_t> seen[2];
  ferry::device_span<const std::int32_t> v[2];
  ferry_test::gate<B> g(s);
  for (std::size_t k = 0; k < 2; ++k) {
    v[k] = pool.copy_to_uva(generation<std::int32_t>(k, 8), s);
    pool_test::enqueue_reader(ferry::stream_ref<B>(s), v[k], &seen[k]);
  }
  REQUIRE(pool.slots() == 2);
  REQUIRE(pool.current_slot() == 0);
  const auto before = pool.stats();
  const auto syncs = ferry::backend_stats_of<B>().synchronizations;
  const auto waits = ferry::detail::ring_waits;
  ferry::device_span<const std::int32_t> w;
  CHECK(ferry_test::returns_after_open(g, [&] { w = pool.copy_to_uva(generation<std::int32_t>(2, 8), s); }));
  CHECK(w.data() == v[0].data());  // the slot used longest ago
  CHECK(pool.current_slot() == 1);
  CHECK(pool.slots() == 2);
  CHECK(pool.stats().full_waits == 1);
  CHECK(pool.stats().fence_hits == before.fence_hits + 1);
  CHECK(pool.stats().calls == before.calls + 1);
  CHECK(pool.stats().inserted == 0);
  CHECK(ferry::detail::ring_waits == waits + 1);
  CHECK(ferry::backend_stats_of<B>().synchronizations > syncs);
  CHECK(read(w) == generation<std::int32_t>(2, 8));
  s.synchronize();
  CHECK(seen[0] == generation<std::int32_t>(0, 8));  // read before the slot was written again
  CHECK(seen[1] == generation<std::int32_t>(1, 8));
  CHECK(read(v[1]) == generation<std::int32_t>(1, 8));
  // Readers done: the next call takes its slot without waiting.
  (void)pool.copy_to_uva(generation<std::int32_t>(3, 8), s);
  CHECK(pool.stats().full_waits == 1);
  s.synchronize();
}

}  // namespace

TEMPLATE_TEST_CASE("uva_pool with a full ring waits for the slot coming into use (event_fenced, the default)",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  SECTION("max_slots reached") {
    ferry::uva_pool<std::int32_t, TestType> pool(8, 2, 2);
    check_full_ring_waits(s, pool);
  }
  SECTION("growth::fixed, which never inserts") {
    ferry::uva_pool<std::int32_t, ferry::growth::fixed, TestType> pool(8, 2);
    check_full_ring_waits(s, pool);
  }
}

TEST_CASE("uva_pool's full-ring wait is a synchronization that host_sync_guard sees", "[pool]") {
  ferry::stream<ferry::backend::host> s;
  ferry::uva_pool<std::int32_t, ferry::backend::host> pool(8, 2, 2);
  ferry::host_sync_guard guard;
  check_full_ring_waits(s, pool);
  CHECK(guard.syncs() >= 1);
  CHECK_THAT(guard.report(), Catch::Matchers::ContainsSubstring("synchronizations"));
}

TEMPLATE_TEST_CASE("uva_pool with a user ReusePolicy: without when_full a full ring waits; its own when_full is called",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  ferry::stream<TestType> s;
  SECTION("no when_full: waits") {
    ferry::uva_pool<std::int32_t, pool_test_policies::fences_only, TestType> pool(8, 2, 2);
    check_full_ring_waits(s, pool);
  }
  SECTION("its own when_full: called once, with a description naming the pool and the held slots") {
    pool_test_policies::records_full::calls = 0;
    pool_test_policies::records_full::described.clear();
    ferry::uva_pool<std::int32_t, pool_test_policies::records_full, TestType> pool(8, 2, 2);
    check_full_ring_waits(s, pool);
    CHECK(pool_test_policies::records_full::calls == 1);
    CHECK_THAT(pool_test_policies::records_full::described,
               ContainsSubstring("ferry: uva_pool: ") && ContainsSubstring("max_slots (2)") &&
                   ContainsSubstring("slot 1 is held until stream point"));
  }
}

TEMPLATE_TEST_CASE("uva_pool with a when_full that neither waits nor throws: capacity_error, never a slot beyond max_slots",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, pool_test_policies::ignores_full, TestType> pool(8, 2, 2);
  std::vector<std::int32_t> seen[2];
  {
    ferry_test::gate<TestType> g(s);
    for (std::size_t k = 0; k < 2; ++k)
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s),
                                pool.copy_to_uva(generation<std::int32_t>(k, 8), s), &seen[k]);
    auto before = pool.stats();
    CHECK_THROWS_WITH(pool.copy_to_uva(generation<std::int32_t>(2, 8), s),
                      ContainsSubstring("ferry: uva_pool: no slot is free") &&
                          ContainsSubstring("when_full returned without waiting"));
    CHECK(pool.slots() == 2);
    CHECK(pool.current_slot() == 0);
    ++before.fence_hits;  // the busy slot it found; nothing else changed
    CHECK(pool_test::same(pool.stats(), before));
  }
  s.synchronize();
  CHECK(seen[0] == generation<std::int32_t>(0, 8));
  CHECK(seen[1] == generation<std::int32_t>(1, 8));
}
