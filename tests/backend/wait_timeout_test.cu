// Tests for include/ferry/backend/wait_timeout.hpp: every wait ferry makes is bounded. A stream
// held behind a gate: past the bound, an event's wait, a full ring's back-pressure (uva_pool,
// step_batch), an arena's trim and a blocking copy throw ferry::timeout_error naming what they
// waited for, with nothing changed (the same call after the gate opens works); destructors return
// at the bound, leaking (never freeing or reusing) what the held work may still read. Both
// backends; the CUDA cases skip without a GPU.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::MessageMatches;
using Catch::Matchers::StartsWith;

namespace {

using wait_clock = std::chrono::steady_clock;

template <class T>
std::vector<T> values(T first, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(first + static_cast<T>(i));
  return v;
}

/// A reader in stream order (a host task on both backends): copies `v`'s elements into `*out`
/// when the stream reaches it. Pool slots and step publishes are pinned, mapped host memory.
template <class T, class B>
void enqueue_reader(ferry::stream_ref<B> s, ferry::device_span<const T> v, std::vector<T>* out) {
  ferry::enqueue_host(s, [v, out] { out->assign(v.data(), v.data() + v.size()); });
}

/// A view's elements read on the host (pool slots are pinned, mapped host memory).
template <class T>
std::vector<T> read(ferry::device_span<const T> v) {
  return std::vector<T>(v.data(), v.data() + v.size());
}

/// The stream point a mark of `s` gives now ("(line L, seq S)" is what the messages name).
template <class B>
std::string line_of(ferry::stream_ref<B> s) {
  return std::to_string(ferry::detail::shared_timeline<B>().mark(s).line);
}

/// How long `f` takes.
template <class F>
std::chrono::nanoseconds timed(F&& f) {
  const auto t0 = wait_clock::now();
  f();
  return wait_clock::now() - t0;
}

/// A ReusePolicy that fences and bounds its own waits (a user's type, as docs/policies.md shows).
struct fenced_within_80ms {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = true;
  static std::chrono::milliseconds wait_timeout() { return 80ms; }
};
struct bound_not_positive {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = true;
  static std::chrono::milliseconds wait_timeout() { return 0ms; }
};

}  // namespace

TEST_CASE("set_wait_timeout and FERRY_WAIT_TIMEOUT take a positive bound, else std::invalid_argument, nothing changed",
          "[backend][wait_timeout]") {
  const auto before = ferry::wait_timeout();
  CHECK(before > 0ns);
  CHECK_THROWS_MATCHES(ferry::set_wait_timeout(0ns), std::invalid_argument,
                       MessageMatches(StartsWith("ferry: set_wait_timeout(0 ns): the bound must be positive")));
  CHECK_THROWS_AS(ferry::set_wait_timeout(-1s), std::invalid_argument);
  CHECK(ferry::wait_timeout() == before);
  {
    ferry_test::wait_bound bound(2500ms);
    CHECK(ferry::wait_timeout() == 2500ms);
  }
  CHECK(ferry::wait_timeout() == before);

  using ferry::detail::wait_bound_from_env;
  CHECK(wait_bound_from_env(nullptr) == std::chrono::minutes(5));
  CHECK(wait_bound_from_env("300") == 300s);
  CHECK(wait_bound_from_env("2.5") == 2500ms);
  CHECK(wait_bound_from_env("0.001") == 1ms);
  for (const char* bad : {"", " ", "abc", "0", "-1", "inf", "nan", "5s", "1e10", "2.5 "}) {
    INFO("FERRY_WAIT_TIMEOUT=\"" << bad << "\"");
    CHECK_THROWS_MATCHES(wait_bound_from_env(bad), std::invalid_argument,
                         MessageMatches(StartsWith(std::string("ferry: FERRY_WAIT_TIMEOUT=\"") + bad +
                                                   "\" is not a number of seconds")));
  }
}

TEMPLATE_TEST_CASE("a wait for a stream point past the bound throws timeout_error naming the point; the same wait "
                   "after the gate opens returns",
                   "[backend][wait_timeout]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  auto& core = ferry::detail::shared_timeline<B>();
  ferry_test::gate<B> g(s);
  const ferry::detail::stamp p = core.mark(s);
  const std::string point = "stream point (line " + std::to_string(p.line) + ", seq " + std::to_string(p.seq) + ")";

  SECTION("the reuse core's wait") {
    const auto took = timed([&] {
      CHECK_THROWS_MATCHES(core.wait(p), ferry::timeout_error,
                           MessageMatches(StartsWith("ferry: the wait for " + point + " waited ") &&
                                          ContainsSubstring("past the wait bound of 100 ms") &&
                                          ContainsSubstring("nothing was changed")));
    });
    CHECK(took >= 100ms);
    CHECK_FALSE(core.passed(p));
    g.open();
    CHECK_NOTHROW(core.wait(p));
    CHECK(core.passed(p));
  }
  SECTION("event::synchronize: the event is unchanged and synchronizes once the stream passes it") {
    ferry::event<B> e;
    e.record(s);
    const auto took = timed([&] {
      CHECK_THROWS_MATCHES(e.synchronize(), ferry::timeout_error,
                           MessageMatches(StartsWith("ferry: the wait for stream point (line " + std::to_string(p.line)) &&
                                          ContainsSubstring("past the wait bound of 100 ms")));
    });
    CHECK(took >= 100ms);
    CHECK_FALSE(e.ready());
    g.open();
    CHECK_NOTHROW(e.synchronize());
    CHECK(e.ready());
  }
  SECTION("a later bound applies to the next wait") {
    ferry::set_wait_timeout(30ms);
    CHECK_THROWS_MATCHES(core.wait(p), ferry::timeout_error, MessageMatches(ContainsSubstring("wait bound of 30 ms")));
  }
}

TEMPLATE_TEST_CASE("uva_pool's full ring past the bound throws timeout_error naming the slot and the stream point; "
                   "nothing changed, the next call after the gate opens writes that slot",
                   "[backend][wait_timeout][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  ferry::uva_pool<std::int32_t, B> pool(8, 2, 2);  // reuse::event_fenced: a full ring waits
  std::vector<std::int32_t> seen[2];
  ferry::device_span<const std::int32_t> v[2];
  ferry_test::gate<B> g(s);
  for (std::size_t k = 0; k < 2; ++k) {
    v[k] = pool.copy_to_uva(values<std::int32_t>(100 * static_cast<std::int32_t>(k + 1), 8), s);
    enqueue_reader(ferry::stream_ref<B>(s), v[k], &seen[k]);
  }
  const std::size_t next = (pool.current_slot() + 1) % 2;
  const std::string line = line_of<B>(s);
  const auto before = pool.stats();
  const auto took = timed([&] {
    CHECK_THROWS_MATCHES(
        pool.copy_to_uva(values<std::int32_t>(300, 8), s), ferry::timeout_error,
        MessageMatches(StartsWith("ferry: uva_pool: no slot is free and the ring already holds max_slots (2)") &&
                       ContainsSubstring("; the wait for slot " + std::to_string(next) + " (stream point (line " +
                                         line + ", seq ") &&
                       ContainsSubstring("past the wait bound of 100 ms") && ContainsSubstring("nothing was changed")));
  });
  CHECK(took >= 100ms);
  // Nothing changed but the busy slot it found (as reuse::throw_when_full's capacity_error).
  auto expected = before;
  ++expected.fence_hits;
  CHECK(pool.stats().calls == expected.calls);
  CHECK(pool.stats().fence_hits == expected.fence_hits);
  CHECK(pool.stats().full_waits == expected.full_waits);
  CHECK(pool.stats().slots == 2);
  CHECK(pool.current_slot() == (next + 1) % 2);
  CHECK(read(v[0]) == values<std::int32_t>(100, 8));
  CHECK(read(v[1]) == values<std::int32_t>(200, 8));
  g.open();
  const auto w = pool.copy_to_uva(values<std::int32_t>(300, 8), s);
  CHECK(pool.current_slot() == next);
  CHECK(read(w) == values<std::int32_t>(300, 8));
  s.synchronize();
  CHECK(seen[0] == values<std::int32_t>(100, 8));  // the readers saw their data, never the rewrite
  CHECK(seen[1] == values<std::int32_t>(200, 8));
}

TEMPLATE_TEST_CASE("a ReusePolicy's wait_timeout() bounds its ring's waits, whatever the process-wide bound",
                   "[backend][wait_timeout][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(1h);
  SECTION("its bound") {
    ferry::uva_pool<std::int32_t, fenced_within_80ms, B> pool(8, 1, 1);
    ferry_test::gate<B> g(s);
    (void)pool.copy_to_uva(values<std::int32_t>(1, 8), s);
    const auto took = timed([&] {
      CHECK_THROWS_MATCHES(pool.copy_to_uva(values<std::int32_t>(9, 8), s), ferry::timeout_error,
                           MessageMatches(ContainsSubstring("past the wait bound of 80 ms")));
    });
    CHECK(took >= 80ms);
    CHECK(took < 1h);
    g.open();
    CHECK(pool.copy_to_uva(values<std::int32_t>(9, 8), s).size() == 8);
    s.synchronize();
  }
  SECTION("a bound that is not positive: std::invalid_argument at the wait, nothing changed") {
    ferry::uva_pool<std::int32_t, bound_not_positive, B> pool(8, 1, 1);
    ferry_test::gate<B> g(s);
    (void)pool.copy_to_uva(values<std::int32_t>(1, 8), s);
    CHECK_THROWS_MATCHES(pool.copy_to_uva(values<std::int32_t>(9, 8), s), std::invalid_argument,
                         MessageMatches(StartsWith("ferry: the ReusePolicy's wait_timeout() is 0 ns")));
    g.open();
    s.synchronize();  // the slot is free: no wait, so no bound is asked for
    CHECK(pool.copy_to_uva(values<std::int32_t>(9, 8), s).size() == 8);
    s.synchronize();
  }
}

TEMPLATE_TEST_CASE("step_batch's full ring past the bound throws timeout_error naming the slot and the stream point; "
                   "the step after the gate opens runs",
                   "[backend][wait_timeout][step]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  constexpr std::size_t n = 16;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  ferry::step_batch<B> batch(2, 2);  // event_fenced, max_slots == slots
  auto p = batch.template add_publish<std::uint32_t>(n);
  std::vector<std::uint32_t> seen[3];
  auto step = [&](std::uint32_t first, std::vector<std::uint32_t>* out) {
    batch.begin();
    auto span = p.span(n);
    const auto v = values<std::uint32_t>(first, n);
    std::copy(v.begin(), v.end(), span.begin());
    batch.submit(s);
    enqueue_reader(ferry::stream_ref<B>(s), p.view(), out);
  };
  ferry_test::gate<B> g(s);
  step(100, &seen[0]);
  step(200, &seen[1]);
  const std::string line = line_of<B>(s);
  const auto took = timed([&] {
    CHECK_THROWS_MATCHES(batch.begin(), ferry::timeout_error,
                         MessageMatches(StartsWith("ferry: step_batch: the next slot (slot ") &&
                                        ContainsSubstring("is still in use") &&
                                        ContainsSubstring("; the wait for slot ") &&
                                        ContainsSubstring("(stream point (line " + line + ", seq ") &&
                                        ContainsSubstring("past the wait bound of 100 ms") &&
                                        ContainsSubstring("nothing was changed")));
  });
  CHECK(took >= 100ms);
  CHECK_FALSE(batch.in_step());
  CHECK(batch.slots() == 2);
  g.open();
  step(300, &seen[2]);
  s.synchronize();
  CHECK(seen[0] == values<std::uint32_t>(100, n));
  CHECK(seen[1] == values<std::uint32_t>(200, n));
  CHECK(seen[2] == values<std::uint32_t>(300, n));
}

TEMPLATE_TEST_CASE("pinned_arena::trim past the bound throws timeout_error and frees nothing; its destructor leaks "
                   "what is still read",
                   "[backend][wait_timeout][memory]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  SECTION("trim") {
    ferry::pinned_arena<B> arena;
    ferry_test::gate<B> g(s);
    arena.release(arena.acquire(1024), s);  // in flight behind the gate
    arena.release(arena.acquire(4096));     // free at once
    const auto before = arena.stats();
    CHECK_THROWS_MATCHES(arena.trim(), ferry::timeout_error,
                         MessageMatches(StartsWith("ferry: pinned_arena::trim: the wait for a block's stream point (line " +
                                                   line_of<B>(s)) &&
                                        ContainsSubstring("nothing was freed")));
    CHECK(arena.stats().bytes_reserved == before.bytes_reserved);
    g.open();
    arena.trim();
    CHECK(arena.stats().bytes_reserved == 0);
  }
  SECTION("destructor: returns at the bound, the block still read is not freed") {
    ferry_test::leaks_expected leaks;
    const auto swallowed = ferry::swallowed_errors();
    std::vector<std::int32_t> seen;
    ferry_test::gate<B> g(s);
    const auto took = timed([&] {
      ferry::pinned_arena<B> arena;
      const ferry::pinned_block b = arena.acquire(64);
      const auto v = values<std::int32_t>(7, 16);
      std::copy(v.begin(), v.end(), reinterpret_cast<std::int32_t*>(b.data));
      enqueue_reader(ferry::stream_ref<B>(s),
                     ferry::device_span<const std::int32_t>(reinterpret_cast<const std::int32_t*>(b.data), 16), &seen);
      arena.release(b, s);
    });
    CHECK(took >= 100ms);
    CHECK(ferry::swallowed_errors() == swallowed + 1);
    g.open();
    s.synchronize();
    CHECK(seen == values<std::int32_t>(7, 16));  // read after the destructor: leaked, not freed (ASan)
  }
}

TEMPLATE_TEST_CASE("uva_pool's destructor past the bound returns, leaking the slots still read",
                   "[backend][wait_timeout][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  ferry::pinned_arena<B> arena;
  std::vector<std::int32_t> seen[2];
  const auto swallowed = ferry::swallowed_errors();
  ferry_test::gate<B> g(s);
  ferry_test::leaks_expected leaks;
  std::optional<ferry::uva_pool<std::int32_t, B>> pool(std::in_place, 8, 2, 2, arena);
  for (std::size_t k = 0; k < 2; ++k)
    enqueue_reader(ferry::stream_ref<B>(s),
                   pool->copy_to_uva(values<std::int32_t>(10 * static_cast<std::int32_t>(k + 1), 8), s), &seen[k]);
  const std::size_t in_use = arena.stats().bytes_in_use;
  // The last view's readers carry no fence: the destructor synchronizes the device (bounded), then
  // waits for the slots' fences; one bound for all of it.
  const auto took = timed([&] { pool.reset(); });
  CHECK(took >= 100ms);
  CHECK(took < 10s);
  CHECK(ferry::swallowed_errors() > swallowed);
  CHECK(arena.stats().bytes_in_use == in_use);  // neither slot, both still read, went back to the arena
  g.open();
  s.synchronize();
  CHECK(seen[0] == values<std::int32_t>(10, 8));
  CHECK(seen[1] == values<std::int32_t>(20, 8));
}

TEMPLATE_TEST_CASE("staged_write_tensor's destructor past the bound returns, leaking the staging slot its apply reads",
                   "[backend][wait_timeout][staged]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<std::int32_t, B> target(4 * 64);  // adopted: the tensor never frees it
  ferry::stream<B> fill;
  ferry::async_h2d(std::vector<std::int32_t>(4 * 64, 0), target.span(), fill, arena);
  fill.synchronize();
  const auto swallowed = ferry::swallowed_errors();
  const auto row = values<std::int32_t>(50, 64);
  {
    ferry_test::gate<B> g(s);
    ferry_test::leaks_expected leaks;
    const auto took = timed([&] {
      ferry::staged_write_tensor<std::int32_t, ferry::staging::h2d_copy, B> t(target.span(), 4, 64, 2,
                                                                                ferry::staging_memory<B>{&arena});
      t.stage_write(2, 0, row);
      t.apply_write(s);  // reads its staging slot (a copy) behind the gate
    });
    CHECK(took >= 100ms);
    CHECK(ferry::swallowed_errors() > swallowed);
    CHECK(arena.stats().bytes_in_use > 0);  // the slot the held copy reads was not given back
  }
  s.synchronize();
  const auto back = ferry::to_host(ferry::device_span<const std::int32_t>(target.span()), s);
  CHECK(std::vector<std::int32_t>(back.begin() + 2 * 64, back.begin() + 3 * 64) == row);
  CHECK(std::all_of(back.begin(), back.begin() + 2 * 64, [](std::int32_t x) { return x == 0; }));
}

TEMPLATE_TEST_CASE("a blocking copy (pin::allow_sync) past the bound throws timeout_error", "[backend][wait_timeout][transfer]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<std::int32_t, B> out(8);
  const auto v = values<std::int32_t>(5, 8);
  // Not contiguous: staged into an arena block, then copied from it (a pageable source would go to
  // the driver as it is, and the driver's own staging of it may wait for the held stream).
  const std::list<std::int32_t> src(v.begin(), v.end());
  {
    ferry_test::gate<B> g(s);
    CHECK_THROWS_MATCHES(ferry::async_h2d<ferry::pin::allow_sync>(src, out.span(), s, arena), ferry::timeout_error,
                         MessageMatches(StartsWith("ferry: a blocking copy (pin::allow_sync)") &&
                                        ContainsSubstring("past the wait bound of 100 ms")));
    CHECK(arena.stats().bytes_in_use == 0);  // the block went back behind the stream, not leaked
  }
  s.synchronize();
  CHECK(ferry::async_h2d<ferry::pin::allow_sync>(src, out.span(), s, arena).size() == 8);
  CHECK(arena.stats().reuses >= 1);
  CHECK(ferry::to_host(ferry::device_span<const std::int32_t>(out.span()), s) == v);
}

TEST_CASE("host backend: a free that waits for every stream leaks its memory past the bound", "[backend][wait_timeout]") {
  using B = ferry::backend::host;
  ferry::stream<B> s;
  ferry_test::wait_bound bound(100ms);
  const auto swallowed = ferry::swallowed_errors();
  const auto frees = ferry::backend_stats_of<B>().pinned_frees;
  std::vector<std::int32_t> seen;
  ferry_test::gate<B> g(s);
  ferry_test::leaks_expected leaks;
  const auto took = timed([&] {
    ferry::pinned_buffer<std::int32_t, B> buffer(8);
    const auto v = values<std::int32_t>(3, 8);
    std::copy(v.begin(), v.end(), buffer.host().begin());
    enqueue_reader(ferry::stream_ref<B>(s), ferry::device_span<const std::int32_t>(buffer.device()), &seen);
  });
  CHECK(took >= 100ms);
  CHECK(ferry::swallowed_errors() == swallowed + 1);
  CHECK(ferry::backend_stats_of<B>().pinned_frees == frees + 1);
  g.open();
  s.synchronize();
  CHECK(seen == values<std::int32_t>(3, 8));  // read after the destructor: leaked, not freed (ASan)
}
