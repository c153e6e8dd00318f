// Tests for include/ferry/transfer/async_h2d.hpp: contents against a host reference for every
// source kind (vector, span, list, filter view, single-pass range, pinned_span), every element
// size and the sizes 0, 1, odd, 4 KiB, 1 MiB (64 MiB on the GPU); the allocating form; PinPolicy
// behaviours; every bad input enqueues nothing; sources are consumed on return; steady state
// allocates and synchronizes nothing.
#include "transfer_support.hpp"

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <list>
#include <ranges>
#include <span>
#include <thread>
#include <vector>

namespace {

using ferry_test::read_back;

enum class kind { vector, span, list, filter, single_pass, pinned };

const char* name(kind k) {
  switch (k) {
    case kind::vector: return "vector";
    case kind::span: return "span";
    case kind::list: return "list";
    case kind::filter: return "filter";
    case kind::single_pass: return "single_pass";
    case kind::pinned: return "pinned_span";
  }
  return "?";
}

// Uploads `values` (as source kind k) into a device span of n + 3 elements whose contents are
// random beforehand, and checks the written prefix against the reference and the tail unchanged.
template <class T, class B>
void check_upload(kind k, std::size_t n, std::uint64_t seed, ferry::stream<B>& s) {
  CAPTURE(name(k), n, sizeof(T), std::is_floating_point_v<T>);
  const auto values = ferry_test::random_values<T>(n, seed);
  std::vector<T> expected;
  auto keep = [](const T& x) { return (static_cast<long long>(x) & 2) == 0; };
  if (k == kind::filter) {
    for (auto x : values)
      if (keep(x)) expected.push_back(x);
  } else {
    expected = values;
  }
  ferry::device_buffer<T, B> out(n + 3);
  const auto before = ferry_test::random_values<T>(n + 3, seed + 1);
  ferry_test::fill_device(out.span(), before, s);

  ferry::device_span<T> got;
  switch (k) {
    case kind::vector: {
      auto copy = values;
      got = ferry::async_h2d(copy, out.span(), s);
      std::fill(copy.begin(), copy.end(), T{});  // consumed on return: rewriting is allowed
      break;
    }
    case kind::span:
      got = ferry::async_h2d(std::span<const T>(values), out.span(), s);
      break;
    case kind::list: {
      std::list<T> l(values.begin(), values.end());
      got = ferry::async_h2d(l, out.span(), s);
      break;
    }
    case kind::filter:
      got = ferry::async_h2d(values | std::views::filter(keep), out.span(), s);
      break;
    case kind::single_pass:
      got = ferry::async_h2d(ferry_test::single_pass<T>(values), out.span(), s);
      break;
    case kind::pinned: {
      ferry::pinned_buffer<T, B> pinned(n);
      std::copy(values.begin(), values.end(), pinned.host().begin());
      got = ferry::async_h2d(pinned.host(), out.span(), s);
      s.synchronize();  // a pinned source must outlive the copy
      break;
    }
  }
  CHECK(got.data() == out.data());
  REQUIRE(got.size() == expected.size());
  auto all = read_back(out.span(), s);
  CHECK(std::equal(expected.begin(), expected.end(), all.begin()));
  CHECK(std::equal(all.begin() + static_cast<std::ptrdiff_t>(expected.size()), all.end(),
                   before.begin() + static_cast<std::ptrdiff_t>(expected.size())));
}

}  // namespace

TEMPLATE_TEST_CASE("async_h2d copies every source kind of every element type against a reference",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::uint64_t seed = 1;
  ferry_test::for_each_element_type([&]<class T>() {
    const std::size_t sizes[] = {0, 1, 1001, 4096 / sizeof(T)};
    for (auto n : sizes)
      for (auto k : {kind::vector, kind::span, kind::list, kind::filter, kind::single_pass,
                     kind::pinned})
        check_upload<T>(k, n, seed++, s);
    // 1 MiB: every element type from contiguous and pinned sources, the gathering paths once.
    for (auto k : {kind::vector, kind::span, kind::pinned}) check_upload<T>(k, (1u << 20) / sizeof(T), seed++, s);
    if constexpr (sizeof(T) == 4 && std::is_integral_v<T>)
      for (auto k : {kind::list, kind::filter, kind::single_pass})
        check_upload<T>(k, (1u << 20) / sizeof(T), seed++, s);
  });
}

#if FERRY_HAS_CUDA
// 64 MiB uploads run on the CUDA backend only (the pipeline has its own host-backend test).
TEST_CASE("async_h2d of 64 MiB goes through the pipeline on the GPU", "[transfer][async_h2d]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  auto& pool = ferry::default_copy_pool();
  const auto before = pool.stats();
  check_upload<std::int32_t>(kind::vector, (64u << 20) / 4, 101, s);
  check_upload<double>(kind::span, (64u << 20) / 8 + 7, 102, s);
  const auto after = pool.stats();
  // Both contiguous pageable sources were pipelined, each cut into chunk_bytes() chunks (the
  // default pool measures its chunk size on the host it runs on: 4-32 MiB).
  const std::size_t chunk = pool.chunk_bytes();
  CHECK(after.copies == before.copies + 2);
  CHECK(after.chunks - before.chunks ==
        ferry::detail::ceil_div(std::size_t{64} << 20, chunk) + ferry::detail::ceil_div((std::size_t{64} << 20) + 56, chunk));
  CHECK(after.bytes - before.bytes == (std::size_t{64} << 20) * 2 + 56);
  // A pinned source is one DMA copy, not the pipeline's.
  check_upload<std::int32_t>(kind::pinned, (64u << 20) / 4, 103, s);
  CHECK(pool.stats().copies == after.copies);
  check_upload<std::int32_t>(kind::filter, (64u << 20) / 4, 104, s);
}
#endif

TEMPLATE_TEST_CASE("async_h2d follows the dtype rule: same-size integers and ferry::cast",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::vector<long> l = {1, -2, 3, 1L << 40};
  ferry::device_buffer<long long, TestType> out(4);
  ferry::async_h2d(l, out.span(), s);
  CHECK(read_back(out.span(), s) == std::vector<long long>{1, -2, 3, 1LL << 40});

  std::vector<float> f = {1.5f, -2.25f, 7.0f};
  ferry::device_buffer<int, TestType> ints(3);
  auto got = ferry::async_h2d(ferry::cast<int>(f), ints.span(), s);
  CHECK(got.size() == 3);
  CHECK(read_back(ints.span(), s) == std::vector<int>{1, -2, 7});
}

TEMPLATE_TEST_CASE("async_h2d allocating form returns a buffer of exactly the source",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{777}, std::size_t{1} << 18}) {
    CAPTURE(n);
    const auto v = ferry_test::random_values<std::int32_t>(n, 7 + n);
    auto a = ferry::async_h2d(v, s);
    static_assert(std::is_same_v<decltype(a), ferry::device_buffer<std::int32_t, TestType>>);
    REQUIRE(a.size() == n);
    CHECK(read_back(a.span(), s) == v);

    auto b = ferry::async_h2d(ferry_test::single_pass<std::int32_t>(v), s, arena);
    REQUIRE(b.size() == n);
    CHECK(read_back(b.span(), s) == v);

    std::list<std::int32_t> l(v.begin(), v.end());
    auto c = ferry::async_h2d<ferry::pin::allow_sync>(l, s, arena);
    REQUIRE(c.size() == n);
    CHECK(read_back(c.span(), s) == v);
    s.synchronize();
  }
  CHECK(arena.stats().bytes_in_use == 0);
}

TEMPLATE_TEST_CASE("a source that does not fit in out throws out_of_range and enqueues nothing",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  arena.reserve(4096, 2);
  const std::size_t n = 300;
  const auto values = ferry_test::random_values<std::int16_t>(n, 11);
  ferry::device_buffer<std::int16_t, TestType> out(n - 1);
  const auto before = ferry_test::random_values<std::int16_t>(n - 1, 12);
  ferry_test::fill_device(out.span(), before, s);
  ferry::pinned_buffer<std::int16_t, TestType> pinned(n);
  std::copy(values.begin(), values.end(), pinned.host().begin());
  std::list<std::int16_t> l(values.begin(), values.end());
  auto all = [](std::int16_t) { return true; };

  const auto stats = arena.stats();
  const auto queued = ferry_test::enqueued<TestType>(s);
  CHECK_THROWS_AS(ferry::async_h2d(values, out.span(), s, arena), std::out_of_range);
  CHECK_THROWS_AS(ferry::async_h2d(std::span(values), out.span(), s, arena), std::out_of_range);
  CHECK_THROWS_AS(ferry::async_h2d(l, out.span(), s, arena), std::out_of_range);
  CHECK_THROWS_AS(ferry::async_h2d(values | std::views::filter(all), out.span(), s, arena),
                  std::out_of_range);
  CHECK_THROWS_AS(ferry::async_h2d(pinned.host(), out.span(), s, arena), std::out_of_range);
  CHECK_THROWS_AS(ferry::async_h2d<ferry::pin::allow_sync>(values, out.span(), s, arena),
                  std::out_of_range);
  CHECK_THROWS_AS(ferry::async_h2d<ferry::pin::require>(pinned.host(), out.span(), s, arena),
                  std::out_of_range);
  CHECK(ferry_test::same_stats(arena.stats(), stats));  // no block was even acquired
  // A single-pass source is read before it can be rejected: its block goes back unused.
  CHECK_THROWS_AS(ferry::async_h2d(ferry_test::single_pass<std::int16_t>(values), out.span(), s, arena),
                  std::out_of_range);
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(arena.stats().allocations == stats.allocations);
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  CHECK(read_back(out.span(), s) == before);
}

TEMPLATE_TEST_CASE("a source whose bytes overflow size_t is rejected before any staging",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::device_buffer<std::uint64_t, TestType> out(4);
  const auto before = ferry_test::random_values<std::uint64_t>(4, 13);
  ferry_test::fill_device(out.span(), before, s);
  const auto stats = arena.stats();
  const auto queued = ferry_test::enqueued<TestType>(s);
  const auto backend = ferry::backend_stats_of<TestType>();
  const auto huge = ferry_test::huge_source(ferry_test::wrapping_count);
  CHECK_THROWS_AS(ferry::async_h2d(huge, out.span(), s, arena), std::out_of_range);
  // The allocating form: no buffer of the wrapped size (8 bytes) is allocated and overrun.
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::StartsWith;
  CHECK_THROWS_MATCHES(ferry::async_h2d(huge, s, arena), std::invalid_argument,
                       Catch::Matchers::MessageMatches(
                           StartsWith("ferry: ") &&
                           ContainsSubstring(std::to_string(ferry_test::wrapping_count))));
  CHECK(ferry::backend_stats_of<TestType>().device_allocations == backend.device_allocations);
  CHECK(ferry_test::same_stats(arena.stats(), stats));
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  CHECK(read_back(out.span(), s) == before);
}

TEMPLATE_TEST_CASE("a source larger than out is out_of_range even when the arena's cap is reached",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena(8192);
  ferry::copy_pool pool(1, 4096, 0);  // every non-empty contiguous source is pipelined
  const std::size_t n = 16;
  ferry::device_buffer<std::int32_t, TestType> out(n);
  const auto before = ferry_test::random_values<std::int32_t>(n, 61);
  ferry_test::fill_device(out.span(), before, s);
  const auto big = ferry_test::random_values<std::int32_t>(1024, 62);
  ferry::device_buffer<std::int32_t, TestType> sink(2 * big.size());
  ferry::pinned_buffer<std::int32_t, TestType> pinned(n + 3);
  const auto values = ferry_test::random_values<std::int32_t>(n + 3, 63);
  std::copy(values.begin(), values.end(), pinned.host().begin());
  std::list<std::int32_t> l(values.begin(), values.end());
  auto all = [](std::int32_t) { return true; };
  {
    ferry_test::gate<TestType> g(s);
    // The arena's whole cap in flight behind the gate: any staging now throws capacity_error.
    ferry::async_h2d(big, sink.span().first(big.size()), s, arena);
    ferry::async_h2d(big, sink.span().subspan(big.size()), s, arena);
    const auto stats = arena.stats();
    REQUIRE(stats.bytes_in_use == 0);
    REQUIRE(stats.bytes_reserved == 8192);
    const std::vector<std::int32_t> fits(values.begin(), values.begin() + n);
    CHECK_THROWS_AS(ferry::async_h2d(fits, out.span(), s, arena), ferry::capacity_error);
    CHECK_THROWS_AS(ferry::async_h2d(ferry_test::single_pass<std::int32_t>(fits), out.span(), s,
                                     arena),
                    ferry::capacity_error);
    const auto queued = ferry_test::enqueued<TestType>(s);

    CHECK_THROWS_AS(ferry::async_h2d(values, out.span(), s, arena), std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d(std::span(values), out.span(), s, arena), std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d(values, out.span(), s, arena, pool), std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d(l, out.span(), s, arena), std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d(values | std::views::filter(all), out.span(), s, arena),
                    std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d(ferry_test::single_pass<std::int32_t>(values), out.span(), s,
                                     arena),
                    std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d(pinned.host(), out.span(), s, arena), std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d<ferry::pin::allow_sync>(l, out.span(), s, arena),
                    std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d<ferry::pin::require>(pinned.host(), out.span(), s, arena),
                    std::out_of_range);
    CHECK(ferry_test::same_stats(arena.stats(), stats));
    CHECK(ferry_test::enqueued<TestType>(s) == queued);
  }
  CHECK(read_back(out.span(), s) == before);
  CHECK(read_back(sink.span().first(big.size()), s) == big);
}

TEMPLATE_TEST_CASE("an empty source returns out.first(0) and enqueues nothing",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::device_buffer<float, TestType> out(4);
  const std::vector<float> none;
  const auto queued = ferry_test::enqueued<TestType>(s);
  const auto stats = arena.stats();
  const auto syncs = ferry::backend_stats_of<TestType>().synchronizations;
  CHECK(ferry::async_h2d(none, out.span(), s, arena).data() == out.data());
  CHECK(ferry::async_h2d(none, out.span(), s, arena).size() == 0);
  CHECK(ferry::async_h2d(std::list<float>{}, out.span(), s, arena).size() == 0);
  CHECK(ferry::async_h2d(ferry_test::single_pass<float>(none), out.span(), s, arena).size() == 0);
  CHECK(ferry::async_h2d<ferry::pin::allow_sync>(none, out.span(), s, arena).size() == 0);
  CHECK(ferry::async_h2d(ferry::pinned_span<float>{}, out.span(), s, arena).size() == 0);
  CHECK(ferry::async_h2d(none, ferry::device_span<float>{}, s, arena).size() == 0);
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  CHECK(ferry_test::same_stats(arena.stats(), stats));
  CHECK(ferry::backend_stats_of<TestType>().synchronizations == syncs);
}

TEMPLATE_TEST_CASE("a pageable source is consumed when async_h2d returns", "[transfer][async_h2d]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  const auto old_values = ferry_test::random_values<std::int32_t>(1024, 21);
  ferry::device_buffer<std::int32_t, TestType> a(1024), b(1024), c(1024);
  {
    ferry_test::gate<TestType> g(s);
    auto v = old_values;
    std::list<std::int32_t> l(v.begin(), v.end());
    ferry::async_h2d(v, a.span(), s);
    ferry::async_h2d(l, b.span(), s);
    ferry::async_h2d(ferry_test::single_pass<std::int32_t>(v), c.span(), s);
    // Rewrite (and free) every source before the stream has run any copy.
    std::fill(v.begin(), v.end(), -1);
    l.clear();
  }
  CHECK(read_back(a.span(), s) == old_values);
  CHECK(read_back(b.span(), s) == old_values);
  CHECK(read_back(c.span(), s) == old_values);
}

TEMPLATE_TEST_CASE("pin::stage stages pageable sources and copies pinned spans in place",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto v = ferry_test::random_values<std::uint64_t>(512, 31);
  ferry::device_buffer<std::uint64_t, TestType> out(512);
  ferry::async_h2d<ferry::pin::stage>(v, out.span(), s, arena);
  CHECK(arena.stats().allocations == 1);  // staged through one 4 KiB block
  CHECK(arena.stats().bytes_reserved == 4096);
  CHECK(read_back(out.span(), s) == v);

  ferry::pinned_buffer<std::uint64_t, TestType> p(512);
  const auto w = ferry_test::random_values<std::uint64_t>(512, 32);
  std::copy(w.begin(), w.end(), p.host().begin());
  const auto stats = arena.stats();
  for (auto f : {0, 1, 2}) {
    if (f == 0) ferry::async_h2d<ferry::pin::stage>(p.host(), out.span(), s, arena);
    if (f == 1) ferry::async_h2d<ferry::pin::require>(p.host(), out.span(), s, arena);
    if (f == 2) ferry::async_h2d<ferry::pin::allow_sync>(ferry::pinned_span<const std::uint64_t>(p.host()), out.span(), s, arena);
    CHECK(read_back(out.span(), s) == w);
  }
  CHECK(ferry_test::same_stats(arena.stats(), stats));  // pinned sources are never staged
  auto assumed = ferry::assume_pinned(std::span<std::uint64_t>(p.host().data(), 256));
  CHECK(ferry::async_h2d<ferry::pin::require>(assumed, out.span(), s, arena).size() == 256);
  s.synchronize();
}

TEMPLATE_TEST_CASE("pin::allow_sync copies with one host-blocking copy", "[transfer][async_h2d]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto v = ferry_test::random_values<double>(1000, 41);
  ferry::device_buffer<double, TestType> out(1000);
  const auto syncs = ferry::backend_stats_of<TestType>().synchronizations;
  ferry::async_h2d<ferry::pin::allow_sync>(v, out.span(), s, arena);
  CHECK(ferry::backend_stats_of<TestType>().synchronizations == syncs + 1);
  CHECK(arena.stats().allocations == 0);  // contiguous: copied from the source itself
  if constexpr (std::is_same_v<TestType, ferry::backend::host>) {
    // Blocking: the data is in place when the call returns, with no further wait.
    CHECK(std::equal(v.begin(), v.end(), out.data()));
  }
  CHECK(read_back(out.span(), s) == v);
  const auto w = ferry_test::random_values<double>(1000, 42);
  std::list<double> l(w.begin(), w.end());
  ferry::async_h2d<ferry::pin::allow_sync>(l, out.span(), s, arena);
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(read_back(out.span(), s) == w);
}

TEMPLATE_TEST_CASE("steady state: 1000 uploads allocate nothing and never synchronize",
                   "[transfer][async_h2d]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  arena.reserve(4096, 64);
  arena.reserve(256, 64);
  ferry::device_buffer<std::int32_t, TestType> out(1024);
  std::vector<std::int32_t> v = ferry_test::random_values<std::int32_t>(1024, 51);
  ferry::event<TestType> e;
  auto wait_quietly = [&] {  // polls ready(): not a synchronizing call
    e.record(s);
    while (!e.ready()) std::this_thread::yield();
  };
  for (int i = 0; i < 64; ++i) {  // warm-up
    ferry::async_h2d(v, out.span(), s, arena);
    ferry::async_h2d(std::span<const std::int32_t>(v).first(17), out.span(), s, arena);
  }
  wait_quietly();
  const auto backend = ferry::backend_stats_of<TestType>();
  const auto stats = arena.stats();
  for (int i = 0; i < 1000; ++i) {
    v[0] = i;
    ferry::async_h2d(v, out.span(), s, arena);
    ferry::async_h2d(std::span<const std::int32_t>(v).first(17), out.span(), s, arena);
    if (i % 16 == 15) wait_quietly();  // keeps at most 32 blocks in flight (64 reserved)
  }
  wait_quietly();
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.pinned_allocations == backend.pinned_allocations);
  CHECK(after.device_allocations == backend.device_allocations);
  CHECK(after.synchronizations == backend.synchronizations);
  CHECK(arena.stats().allocations == stats.allocations);
  CHECK(arena.stats().reuses == stats.reuses + 2000);
  v[0] = 999;
  ferry::async_h2d(v, out.span(), s, arena);
  CHECK(read_back(out.span(), s) == v);
}
