// Tests for include/ferry/memory/pinned_arena.hpp: reuse only behind fences, the warmest passed
// block first, the byte cap, steady state without allocation (counted by the backend), reserve,
// trim, thread safety.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

TEMPLATE_TEST_CASE("a block is handed out again only after its stream passed its use",
                        "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_arena<TestType> arena;
  ferry::stream<TestType> s;
  auto a = arena.acquire(1000);
  REQUIRE(a.capacity == 1024);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data) % 256 == 0);
  std::byte* second = nullptr;
  {
    ferry_test::gate<TestType> g(s);
    arena.release(a, s);  // its use is behind the gate: in flight
    auto b = arena.acquire(1000);
    CHECK(b.data != a.data);  // never the in-flight block
    second = b.data;
    arena.release(b);
    auto c = arena.acquire(1000);
    CHECK(c.data == second);  // a block given back unused is reusable at once
    arena.release(c);
    CHECK(arena.stats().allocations == 2);
  }
  s.synchronize();
  auto x = arena.acquire(1000);
  auto y = arena.acquire(1000);
  CHECK(std::set<std::byte*>{x.data, y.data} == std::set<std::byte*>{a.data, second});
  const auto st = arena.stats();
  CHECK(st.allocations == 2);
  CHECK(st.reuses == 3);
  CHECK(st.bytes_reserved == 2048);
  CHECK(st.bytes_in_use == 2048);
  arena.release(x);
  arena.release(y);
  CHECK(arena.stats().bytes_in_use == 0);
}

TEMPLATE_TEST_CASE("under the byte cap an in-flight block is never handed out: capacity_error",
                        "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_arena<TestType> arena(4096);
  ferry::stream<TestType> s;
  auto a = arena.acquire(4096);
  {
    ferry_test::gate<TestType> g(s);
    arena.release(a, s);
    CHECK_THROWS_AS(arena.acquire(4096), ferry::capacity_error);
    CHECK_THROWS_AS(arena.acquire(100), ferry::capacity_error);  // no room for another class
    CHECK(arena.stats().bytes_in_use == 0);
  }
  s.synchronize();
  auto b = arena.acquire(4096);
  CHECK(b.data == a.data);
  arena.release(b, s);
}

TEMPLATE_TEST_CASE("a free block is found behind the in-flight blocks of many streams",
                   "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  constexpr std::size_t n = 6;
  ferry::pinned_arena<TestType> arena(n * 256);
  std::vector<std::unique_ptr<ferry::stream<TestType>>> streams;
  std::vector<std::unique_ptr<ferry_test::gate<TestType>>> gates;  // opened before the streams go
  std::vector<ferry::pinned_block> blocks;
  for (std::size_t k = 0; k < n; ++k) blocks.push_back(arena.acquire(256));
  for (std::size_t k = 0; k + 1 < n; ++k) {
    streams.push_back(std::make_unique<ferry::stream<TestType>>());
    gates.push_back(std::make_unique<ferry_test::gate<TestType>>(*streams.back()));
    arena.release(blocks[k], *streams.back());  // in flight behind its gate
  }
  arena.release(blocks[n - 1]);  // unused: free at once
  const auto b = arena.acquire(256);
  CHECK(b.data == blocks[n - 1].data);
  CHECK_THROWS_AS(arena.acquire(256), ferry::capacity_error);  // the others are all in flight
  arena.release(b);
  gates.clear();
  for (auto& s : streams) s->synchronize();
}

TEMPLATE_TEST_CASE("of the blocks known passed, the one given back last is handed out first",
                   "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_arena<TestType> arena;
  ferry::stream<TestType> s;
  arena.reserve(4096, 16);  // a deep class, as an engine reserves for its bursts
  std::set<std::byte*> used;
  for (int i = 0; i < 64; ++i) {
    const auto b = arena.acquire(4096);
    used.insert(b.data);
    arena.release(b, s);
    ferry::event<TestType> e;
    e.record(s);
    e.synchronize();  // the reuse core now knows that every use so far has passed
  }
  // Cycled oldest first, the class would have gone through all 16 blocks: every upload into
  // memory that left the host's caches 15 uploads ago.
  CHECK(used.size() == 1);
  CHECK(arena.stats().allocations == 16);
  CHECK(arena.stats().reuses == 64);
}

TEMPLATE_TEST_CASE("behind a block still in flight, the warmest passed block is handed out (the warm-reuse rule)",
                   "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_arena<TestType> arena;
  ferry::stream<TestType> held, s;
  const auto a = arena.acquire(4096);
  const auto b = arena.acquire(4096);
  const auto c = arena.acquire(4096);
  {
    ferry_test::gate<TestType> g(held);
    arena.release(a, held);  // the oldest, in flight behind the gate
    arena.release(b, s);
    arena.release(c, s);  // given back last: the warmest
    ferry::event<TestType> e;
    e.record(s);
    e.synchronize();  // the core knows b and c passed; a is still held
    // Oldest first, b would be handed out: memory used before c, colder in the host's caches.
    const auto d = arena.acquire(4096);
    CHECK(d.data == c.data);
    CHECK(arena.stats().allocations == 3);
    const auto e2 = arena.acquire(4096);
    CHECK(e2.data == b.data);  // then the other passed one, never the held a
    arena.release(d);
    arena.release(e2);
  }
  held.synchronize();
}

TEMPLATE_TEST_CASE("a class whose stream passes unobserved cycles through 256 KiB of blocks, "
                   "not through every block it holds", "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  constexpr std::size_t block = 32 << 10;
  ferry::pinned_arena<TestType> arena;
  ferry::stream<TestType> s;
  arena.reserve(block, 64);
  std::set<std::byte*> used;
  for (int i = 0; i < 256; ++i) {
    const auto b = arena.acquire(block);
    used.insert(b.data);
    arena.release(b, s);
    // The stream passes the use, but nothing tells the reuse core: it knows only what it asks.
    ferry_test::bare_synchronize<TestType>(s);
  }
  // 8 blocks of 32 KiB given back unasked, then one question retires them all: at most the 8 and
  // the one taken before the answer. Cycled until no block is left, the class would use all 64.
  CHECK(used.size() <= 9);
  CHECK(arena.stats().allocations == 64);
}

TEMPLATE_TEST_CASE("after warm-up staging allocates nothing (counted by the backend)",
                        "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_arena<TestType> arena;
  ferry::stream<TestType> s;
  const std::size_t sizes[] = {1, 255, 256, 4096, 5000, 65536, 1 << 20};
  auto step = [&] {
    for (auto n : sizes) {
      auto b = arena.acquire(n);
      REQUIRE(b.capacity >= n);
      b.data[n - 1] = std::byte{1};
      ferry::enqueue_host(s, [] {});  // a use on the stream
      arena.release(b, s);
    }
  };
  // Warm-up with the worst case: one step behind a closed gate keeps every block of the step in
  // flight (1, 255 and 256 bytes share the 256-byte class: three blocks there), so later steps,
  // however the worker thread is scheduled, never need more blocks than the arena then holds.
  {
    ferry_test::gate<TestType> g(s);
    step();
  }
  s.synchronize();
  const auto before = ferry::backend_stats_of<TestType>();
  const auto arena_before = arena.stats();
  for (int i = 0; i < 200; ++i) {
    step();
    s.synchronize();
  }
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.pinned_allocations == before.pinned_allocations);
  CHECK(arena.stats().allocations == arena_before.allocations);
  CHECK(arena.stats().reuses == arena_before.reuses + 200 * std::size(sizes));
}

TEMPLATE_TEST_CASE("reserve allocates up front and trim returns free blocks to the backend",
                        "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_arena<TestType> arena;
  ferry::stream<TestType> s;
  arena.reserve(3000, 4);
  CHECK(arena.stats().allocations == 4);
  CHECK(arena.stats().bytes_reserved == 4 * 4096);
  const auto before = ferry::backend_stats_of<TestType>();
  std::vector<ferry::pinned_block> held;
  for (int i = 0; i < 4; ++i) held.push_back(arena.acquire(4096));
  CHECK(ferry::backend_stats_of<TestType>().pinned_allocations == before.pinned_allocations);
  for (auto& b : held) arena.release(b, s);
  arena.trim();
  CHECK(arena.stats().bytes_reserved == 0);
  CHECK(ferry::backend_stats_of<TestType>().pinned_frees == before.pinned_frees + 4);
}

TEMPLATE_TEST_CASE("the arena is safe to use from several threads", "[arena]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  auto& arena = ferry::default_arena<TestType>();
  CHECK(&arena == &ferry::default_arena<TestType>());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ferry::stream<TestType> s;
      for (int i = 0; i < 200; ++i) {
        auto b = arena.acquire(static_cast<std::size_t>(64 << (i % 5)));
        auto* p = reinterpret_cast<int*>(b.data);
        p[0] = t;
        ferry::enqueue_host(s, [p, t, &failures] {
          if (p[0] != t) ++failures;
        });
        arena.release(b, s);
      }
      s.synchronize();
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);  // no block was handed to another thread while its reader was pending
}
