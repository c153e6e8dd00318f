// Tests for include/ferry/transfer/copy_pool.hpp and the large pageable pipeline of async_h2d
// (its job protocol, ferry-internal, is tested in copy_pool_session_test.cpp): 1 to 64
// chunks with partial last chunks under 1, 3 and 8 threads,
// many chunks against a reference (including a last partial chunk), no wait on a busy stream when
// the arena cap allows (the source is consumed on return), waits on the oldest chunk under a cap
// (counted by the pool), a cap too small for one chunk, concurrent users, the default pool.
#include "transfer_support.hpp"

#include <catch2/catch_template_test_macros.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <span>
#include <string>
#include <stdexcept>
#include <list>
#include <thread>
#include <vector>

using ferry_test::read_back;

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
}

// The pipeline's job protocol is internal to ferry: copy_pool exposes no session.
template <class P>
concept has_session = requires { typename P::session; };
static_assert(!has_session<ferry::copy_pool>);

TEST_CASE("copy_pool validates its arguments and the default pool is shared", "[transfer][pool]") {
  CHECK_THROWS_AS(ferry::copy_pool(0), std::invalid_argument);
  CHECK_THROWS_AS(ferry::copy_pool(2, 0), std::invalid_argument);
  ferry::copy_pool p(3, 2 * MiB, 5 * MiB);
  CHECK(p.threads() == 3);
  CHECK(p.chunk_bytes() == 2 * MiB);
  CHECK(p.threshold_bytes() == 5 * MiB);
  CHECK(p.stats().copies == 0);
  auto& d = ferry::default_copy_pool();
  CHECK(&d == &ferry::default_copy_pool());
  CHECK(d.threshold_bytes() == ferry::large_copy_threshold);
  // Its structure: the environment's where set, else chosen from this host's measured copy rates
  // (copy_tuning_test.cpp tests the choice): a measured team size (1 .. hardware threads - 1) and
  // a power-of-two chunk within the tuning bounds.
  const char* threads_env = std::getenv("FERRY_COPY_THREADS");
  const char* chunk_env = std::getenv("FERRY_COPY_CHUNK_MIB");
  if (threads_env != nullptr) {
    CHECK(d.threads() == std::stoul(threads_env));
  } else {
    const std::size_t hw = ferry::detail::available_cpus();
    CHECK(d.threads() >= 1);
    CHECK(d.threads() <= std::max<std::size_t>(1, hw > 1 ? hw - 1 : 1));
  }
  if (chunk_env != nullptr) {
    CHECK(d.chunk_bytes() == std::stoul(chunk_env) * MiB);
  } else {
    CHECK(std::has_single_bit(d.chunk_bytes()));
    CHECK(d.chunk_bytes() >= ferry::detail::copy_chunk_min);
    CHECK(d.chunk_bytes() <= ferry::detail::copy_chunk_max);
  }
}

TEMPLATE_TEST_CASE("a 64 MiB pageable source goes through many chunks against the reference",
                   "[transfer][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::copy_pool pool(4, 1 * MiB);
  const auto v = ferry_test::random_values<std::int32_t>(64 * MiB / 4, 1);
  ferry::device_buffer<std::int32_t, TestType> out(v.size());
  auto got = ferry::async_h2d(v, out.span(), s, arena, pool);
  CHECK(got.size() == v.size());
  CHECK(pool.stats().copies == 1);
  CHECK(pool.stats().chunks == 64);
  CHECK(pool.stats().bytes == 64 * MiB);
  CHECK(pool.stats().waits == 0);
  CHECK(read_back(out.span(), s) == v);
  CHECK(arena.stats().bytes_in_use == 0);

  // Not a multiple of the chunk size; just above the threshold; at the threshold (not pipelined).
  for (std::size_t bytes : {5 * MiB + 3, 4 * MiB + 1, 4 * MiB}) {
    CAPTURE(bytes);
    const auto w = ferry_test::random_values<std::int8_t>(bytes, bytes);
    ferry::device_buffer<std::int8_t, TestType> o(bytes);
    const auto chunks = pool.stats().chunks;
    ferry::async_h2d(std::span(w), o.span(), s, arena, pool);
    CHECK(pool.stats().chunks == chunks + (bytes > 4 * MiB ? (bytes + MiB - 1) / MiB : 0));
    CHECK(read_back(o.span(), s) == w);
  }
  // Non-contiguous large sources are gathered into one block, never pipelined.
  std::list<std::int32_t> l(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(2 * MiB));
  const auto chunks = pool.stats().chunks;
  ferry::async_h2d(l, out.span(), s, arena, pool);
  CHECK(pool.stats().chunks == chunks);
  CHECK(read_back(out.span(), s) == v);
}

TEMPLATE_TEST_CASE("with room in the arena the pipeline never waits for a busy stream",
                   "[transfer][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::copy_pool pool(3, 1 * MiB);
  auto v = ferry_test::random_values<std::uint64_t>(12 * MiB / 8 + 5, 2);
  const auto old_values = v;
  ferry::device_buffer<std::uint64_t, TestType> out(v.size());
  const auto syncs = ferry::backend_stats_of<TestType>().synchronizations;
  {
    ferry_test::gate<TestType> g(s);  // the stream cannot run anything until the end of scope
    ferry::async_h2d(v, out.span(), s, arena, pool);  // returns although nothing ran
    std::fill(v.begin(), v.end(), 0);                  // consumed: may be rewritten at once
    CHECK(pool.stats().waits == 0);
    CHECK(pool.stats().reused == 0);  // nothing passed: one arena block per chunk
    CHECK(arena.stats().bytes_in_use == 0);
    CHECK(arena.stats().bytes_reserved >= 12 * MiB);
    CHECK(ferry::backend_stats_of<TestType>().synchronizations == syncs);
  }
  CHECK(read_back(out.span(), s) == old_values);
}

TEMPLATE_TEST_CASE("under the arena cap the pipeline waits for the oldest chunk and counts it",
                   "[transfer][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::copy_pool pool(2, 1 * MiB);
  ferry::pinned_arena<TestType> arena(2 * MiB);  // room for two chunks in flight
  const auto v = ferry_test::random_values<std::int16_t>(9 * MiB / 2, 3);
  ferry::device_buffer<std::int16_t, TestType> out(v.size());
  {
    ferry_test::gate<TestType> g(s);
    std::thread opener([&] {
      while (pool.stats().waits == 0) std::this_thread::yield();  // the pipeline is blocked
      g.open();
    });
    ferry::async_h2d(v, out.span(), s, arena, pool);
    opener.join();
  }
  CHECK(pool.stats().waits >= 1);
  CHECK(pool.stats().reused >= 1);  // the waited-for block staged a later chunk
  CHECK(pool.stats().chunks == 9);
  CHECK(arena.stats().bytes_reserved <= 2 * MiB);
  CHECK(read_back(out.span(), s) == v);
}

TEMPLATE_TEST_CASE("an arena cap below one chunk throws capacity_error and enqueues nothing",
                   "[transfer][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::copy_pool pool(2, 1 * MiB);
  ferry::pinned_arena<TestType> arena(MiB / 2);
  const auto v = ferry_test::random_values<std::int32_t>(5 * MiB / 4, 4);
  ferry::device_buffer<std::int32_t, TestType> out(v.size());
  const auto queued = ferry_test::enqueued<TestType>(s);
  CHECK_THROWS_AS(ferry::async_h2d(v, out.span(), s, arena, pool), ferry::capacity_error);
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(pool.stats().copies == 0);
  // The pool is usable again afterwards.
  ferry::pinned_arena<TestType> big;
  ferry::async_h2d(v, out.span(), s, big, pool);
  CHECK(read_back(out.span(), s) == v);
}

TEMPLATE_TEST_CASE("several threads share one copy_pool", "[transfer][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::copy_pool pool(2, 1 * MiB);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      ferry::stream<TestType> s;
      const auto v = ferry_test::random_values<float>(5 * MiB / 4 + static_cast<std::size_t>(t), 10u + static_cast<unsigned>(t));
      ferry::device_buffer<float, TestType> out(v.size());
      for (int r = 0; r < 2; ++r) {
        ferry::async_h2d(v, out.span(), s, ferry::default_arena<TestType>(), pool);
        if (read_back(out.span(), s) == v) ++good;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(good == 6);
  CHECK(pool.stats().copies == 6);
}

TEMPLATE_TEST_CASE("pipelined uploads stay correct for 1 to 64 chunks and partial last chunks",
                   "[transfer][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  // Chunks of one slice (not a power of two: 2 MiB blocks) with 1 to 64 chunks, and chunks of
  // three slices (2 MiB, 2 MiB, 4 KiB) where a partial last chunk has empty slices.
  const std::size_t small = MiB + 4096;
  const std::size_t large = 2 * ferry::copy_slice_bytes + 4096;
  struct shape {
    std::size_t chunk, bytes;
  };
  const shape shapes[] = {{small, small},          {small, 2 * small},      {small, 3 * small},
                          {small, 64 * small},     {small, small / 3},      {small, 2 * small + 1},
                          {small, 3 * small - 1},  {small, 7 * small + 4093}, {large, large},
                          {large, 2 * large},      {large, 3 * large},      {large, large + 5},
                          {large, 2 * large + 3 * MiB}, {large, 3 * large - 4095}};
  for (std::size_t threads : {std::size_t{1}, std::size_t{3}, std::size_t{8}}) {
    for (const auto [chunk, bytes] : shapes) {
      ferry::copy_pool pool(threads, chunk, 0);  // every non-empty contiguous source is pipelined
      CAPTURE(threads, chunk, bytes);
      const auto v = ferry_test::random_values<std::uint8_t>(bytes, static_cast<unsigned>(bytes + threads));
      ferry::device_buffer<std::uint8_t, TestType> out(bytes + 64);
      const auto before = pool.stats();
      const auto got = ferry::async_h2d(std::span(v), out.span(), s, arena, pool);
      CHECK(got.size() == bytes);
      const auto after = pool.stats();
      CHECK(after.copies == before.copies + 1);
      CHECK(after.chunks == before.chunks + (bytes + chunk - 1) / chunk);
      CHECK(after.bytes == before.bytes + bytes);
      CHECK(after.waits == before.waits);
      CHECK(read_back(got, s) == v);
      CHECK(arena.stats().bytes_in_use == 0);
    }
  }
}

TEMPLATE_TEST_CASE("a chunk size near SIZE_MAX pipelines the source as one chunk",
                   "[transfer][pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  for (std::size_t chunk : {SIZE_MAX, SIZE_MAX / 2 + 1, SIZE_MAX - 4094}) {
    CAPTURE(chunk);
    ferry::copy_pool pool(2, chunk, 0);  // every non-empty contiguous source is pipelined
    const auto v = ferry_test::random_values<std::uint32_t>(5000, chunk % 1000);
    ferry::device_buffer<std::uint32_t, TestType> out(v.size());
    CHECK(ferry::async_h2d(v, out.span(), s, arena, pool).size() == v.size());
    CHECK(pool.stats().chunks == 1);
    CHECK(pool.stats().bytes == v.size() * sizeof(std::uint32_t));
    CHECK(read_back(out.span(), s) == v);
    CHECK(arena.stats().bytes_in_use == 0);
  }
}

