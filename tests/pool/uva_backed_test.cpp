// Tests for include/ferry/pool/uva_backed.hpp (SPEC §6): the host owns the truth, publish(n)
// snapshots a prefix into the next slot (a new address each time), out-of-range n changes
// nothing, and a held reader keeps its own snapshot while the host moves on.
#include <pool/pool_support.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using pool_test::generation;
using pool_test::read;

TEMPLATE_TEST_CASE("uva_backed publishes a snapshot of the host prefix at a new address",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_backed<std::int64_t, TestType> state(256);
  CHECK(state.size() == 256);
  REQUIRE(state.host().size() == 256);
  CHECK(std::all_of(state.host().begin(), state.host().end(), [](auto x) { return x == 0; }));

  const auto g1 = generation<std::int64_t>(1, 256);
  std::copy(g1.begin(), g1.end(), state.host().begin());
  const auto v1 = state.publish(100, s);
  // The host may rewrite its state at once: the snapshot is taken.
  const auto g2 = generation<std::int64_t>(2, 256);
  std::copy(g2.begin(), g2.end(), state.host().begin());
  CHECK(v1.size() == 100);
  CHECK(read(v1) == std::vector<std::int64_t>(g1.begin(), g1.begin() + 100));
  s.synchronize();

  const auto v2 = state.publish(256, s);
  CHECK(v2.data() != v1.data());  // a new address on every publish
  CHECK(read(v2) == g2);
  s.synchronize();

  const auto before = state.stats();
  CHECK_THROWS_AS(state.publish(257, s), std::out_of_range);
  CHECK(pool_test::same(state.stats(), before));
  const auto v3 = state.publish(1, s);  // the slot the failed publish would have used
  CHECK(v3.data() == v1.data());
  CHECK(read(v3) == std::vector<std::int64_t>{g2[0]});
  CHECK(state.publish(0, s).size() == 0);
  CHECK(state.stats().grows == 0);  // every slot holds `size` elements from the start
  s.synchronize();
}

TEMPLATE_TEST_CASE("uva_backed keeps a held reader's snapshot while the host publishes on",
                   "[pool]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_backed<float, TestType> state(64, 2);
  std::vector<float> seen[4];
  {
    ferry_test::gate<TestType> g(s);
    for (std::size_t k = 0; k < 4; ++k) {
      const auto gk = generation<float>(k, 64);
      std::copy(gk.begin(), gk.end(), state.host().begin());
      const auto v = state.publish(64, s);
      pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), v, &seen[k]);
    }
    CHECK(state.stats().inserted == 2);  // two slots were still read: two were inserted
  }
  s.synchronize();
  for (std::size_t k = 0; k < 4; ++k) CHECK(seen[k] == generation<float>(k, 64));
}

TEMPLATE_TEST_CASE("uva_backed under growth::fixed keeps its addresses", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_backed<std::int32_t, ferry::growth::fixed, TestType> state(1000, 2);
  std::set<const std::int32_t*> addresses;
  for (std::size_t k = 0; k < 6; ++k) {
    const auto gk = generation<std::int32_t>(k, 1000);
    std::copy(gk.begin(), gk.end(), state.host().begin());
    const auto v = state.publish(1000 - k, s);
    CHECK(read(v) == std::vector<std::int32_t>(gk.begin(), gk.end() - static_cast<long>(k)));
    addresses.insert(v.data());
    s.synchronize();
  }
  CHECK(addresses.size() == 2);
}

TEMPLATE_TEST_CASE("uva_backed destroyed under a held reader waits for it", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto src = ferry_test::random_values<std::int64_t>(32, 5);
  std::vector<std::int64_t> seen;
  {
    ferry_test::gate<TestType> g(s);
    auto state = std::make_unique<ferry::uva_backed<std::int64_t, TestType>>(32, 2, 8, arena);
    std::copy(src.begin(), src.end(), state->host().begin());
    pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), state->publish(32, s), &seen);
    CHECK_FALSE(pool_test::returns_before_open(g, [&] { state.reset(); }));
  }
  // Another user of the arena takes the blocks now, and overwrites them: the reader has run.
  std::vector<ferry::pinned_block> taken;
  for (int k = 0; k < 2; ++k) {
    taken.push_back(arena.acquire(32 * sizeof(std::int64_t)));
    std::fill_n(reinterpret_cast<std::int64_t*>(taken.back().data), 32, 9);
  }
  s.synchronize();
  CHECK(seen == src);
  for (const auto& b : taken) arena.release(b);
}

TEMPLATE_TEST_CASE("uva_backed over rows publishes the first n rows as a 2-D view", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  constexpr std::size_t width = 6;
  ferry::uva_backed<std::int64_t, TestType> state(ferry::row_width{width}, 10);
  CHECK(state.rows() == 10);
  CHECK(state.width() == width);
  REQUIRE(state.size() == 10 * width);
  CHECK(std::all_of(state.host().begin(), state.host().end(), [](auto x) { return x == 0; }));
  const auto g = ferry_test::random_values<std::int64_t>(10 * width, 61);
  std::copy(g.begin(), g.end(), state.host().begin());

  const auto v = state.publish_rows(7, s);
  REQUIRE(v.extent(0) == 7);
  REQUIRE(v.extent(1) == width);
  CHECK(std::vector<std::int64_t>(v.data_handle(), v.data_handle() + 7 * width) ==
        std::vector<std::int64_t>(g.begin(), g.begin() + 7 * width));
  s.synchronize();

  const auto before = state.stats();
  CHECK_THROWS_AS(state.publish_rows(11, s), std::out_of_range);
  CHECK_THROWS_AS(state.publish(width + 1, s), std::invalid_argument);  // not whole rows
  CHECK(pool_test::same(state.stats(), before));
  const auto all = state.publish_rows(10, s);
  CHECK(all.extent(0) == 10);
  CHECK(std::vector<std::int64_t>(all.data_handle(), all.data_handle() + 10 * width) == g);
  CHECK(state.publish(2 * width, s).size() == 2 * width);
  CHECK(state.stats().grows == 0);
  s.synchronize();
}

namespace {

// The message of the E that `f` throws ("(nothing thrown)" when it returns).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEMPLATE_TEST_CASE("uva_backed's errors name uva_backed, the object the user made", "[pool]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::StartsWith;
  ferry::stream<TestType> s;
  SECTION("every slot held at max_slots") {
    ferry::uva_backed<std::int32_t, ferry::reuse::throw_when_full, TestType> state(8, 2, 2);
    std::vector<std::int32_t> seen[2];
    {
      ferry_test::gate<TestType> g(s);
      for (std::size_t k = 0; k < 2; ++k) {
        const auto gk = generation<std::int32_t>(k, 8);
        std::copy(gk.begin(), gk.end(), state.host().begin());
        pool_test::enqueue_reader(ferry::stream_ref<TestType>(s), state.publish(8, s), &seen[k]);
      }
      const auto what = message_of<ferry::capacity_error>([&] { (void)state.publish(8, s); });
      CHECK_THAT(what, StartsWith("ferry: uva_backed: ") && !ContainsSubstring("uva_pool") &&
                           ContainsSubstring("is held until stream point"));
    }
    s.synchronize();
    for (std::size_t k = 0; k < 2; ++k) CHECK(seen[k] == generation<std::int32_t>(k, 8));
  }
  SECTION("growth::fixed with every slot held") {
    ferry::uva_backed<std::int32_t, ferry::growth::fixed, ferry::reuse::throw_when_full, TestType> state(8, 1);
    {
      ferry_test::gate<TestType> g(s);
      (void)state.publish(8, s);
      const auto what = message_of<ferry::capacity_error>([&] { (void)state.publish(8, s); });
      CHECK_THAT(what, StartsWith("ferry: uva_backed") && !ContainsSubstring("uva_pool") &&
                           ContainsSubstring("is held until stream point"));
    }
    s.synchronize();
  }
  SECTION("a publish of elements that are not whole rows") {
    ferry::uva_backed<std::int32_t, TestType> state(ferry::row_width{3}, 4);
    const auto what = message_of<std::invalid_argument>([&] { (void)state.publish(4, s); });
    CHECK_THAT(what, StartsWith("ferry: uva_backed: ") && !ContainsSubstring("uva_pool"));
  }
  SECTION("construction") {
    const auto what = message_of<std::invalid_argument>(
        [&] { ferry::uva_backed<std::int32_t, TestType> state(8, 0); });
    CHECK_THAT(what, StartsWith("ferry: uva_backed") && !ContainsSubstring("uva_pool"));
  }
}
