// Tests for FERRY_CHECKED_VIEWS (include/ferry/detail/view_generation.hpp, device_span,
// staged_view): built with the mode on, a view of a rotating slot (uva_pool::copy_to_uva and
// copy_rows_to_uva, uva_backed::publish and publish_rows, step_batch's publish::view) reads
// normally while its slot is not handed out again, and a host read through it afterwards throws
// ferry::error naming the component, instead of returning the new step's data. Built without the
// mode, each REQUIRE_THROWS below fails (the stale read returns other data). A .cu: its CUDA cases
// submit step_batch kernels; without nvcc it builds as C++ for the host backend.
#include <pool/pool_support.hpp>

#include <ferry/pool/uva_backed.hpp>
#include <ferry/pool/uva_pool.hpp>
#include <ferry/step/step_batch.hpp>
#if FERRY_HAS_CUDA && defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#if !FERRY_CHECKED_VIEWS
#error "checked_views_test is built with FERRY_CHECKED_VIEWS=1 (tests/pool/CMakeLists.txt)"
#endif

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::MessageMatches;

namespace {

template <class T>
std::vector<T> read_each(ferry::device_span<const T> v) {  // through the checked accessor
  std::vector<T> out;
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(v[i]);
  return out;
}

auto stale(const char* owner) {
  return MessageMatches(
      ContainsSubstring(std::string("ferry: a stale view: its ") + owner + " slot has been handed out again"));
}

}  // namespace

// The unchecked view is a pointer and a size; the checked one carries its slot's counter and count.
static_assert(sizeof(ferry::device_span<int>) ==
              sizeof(int*) + sizeof(std::size_t) + sizeof(void*) + sizeof(std::uint64_t));

TEMPLATE_TEST_CASE("checked views: a uva_pool view throws once its slot is handed out again", "[pool][checked]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::uva_pool<std::int32_t, B> pool(64, 2);
  const auto a = ferry_test::random_values<std::int32_t>(40, 11);
  const auto b = ferry_test::random_values<std::int32_t>(40, 12);
  const auto c = ferry_test::random_values<std::int32_t>(40, 13);

  const auto va = pool.copy_to_uva(a, s);
  const auto part = va.subspan(5, 10);                  // same slot, same generation
  const ferry::device_span<const std::int32_t> first = va.first(3);
  CHECK(read_each(va) == a);
  s.synchronize();  // every reader done: the ring reuses slots instead of inserting

  const auto vb = pool.copy_to_uva(b, s);  // the other slot: va is still valid
  CHECK(read_each(va) == a);
  CHECK(read_each(vb) == b);
  CHECK(part[0] == a[5]);
  s.synchronize();

  const auto vc = pool.copy_to_uva(c, s);  // va's slot again
  REQUIRE(vc.data() == va.data());
  REQUIRE(pool.slots() == 2);
  REQUIRE_THROWS_MATCHES(va[0], ferry::error, stale("uva_pool"));
  REQUIRE_THROWS_MATCHES(part[0], ferry::error, stale("uva_pool"));
  REQUIRE_THROWS_MATCHES(first[2], ferry::error, stale("uva_pool"));
  CHECK(read_each(vb) == b);  // the slot not handed out again still reads
  CHECK(read_each(vc) == c);
  // Bounds are still checked first; a view that is not a slot's is never stale.
  CHECK_THROWS_AS(vc[40], std::out_of_range);
  std::vector<std::int32_t> mine(a);
  const ferry::device_span<const std::int32_t> plain(mine.data(), mine.size());
  CHECK(read_each(plain) == a);
}

TEMPLATE_TEST_CASE("checked views: a view stays valid while its readers hold the slot", "[pool][checked]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::uva_pool<std::int32_t, B> pool(64, 2, 8);
  const auto a = ferry_test::random_values<std::int32_t>(33, 21);
  std::optional<ferry::device_span<const std::int32_t>> va;
  {
    ferry_test::gate<B> g(s);  // holds every reader: the ring inserts slots, never reuses va's
    va = pool.copy_to_uva(a, s);
    for (std::uint64_t k = 0; k < 4; ++k) {
      const auto v = ferry_test::random_values<std::int32_t>(33, 30 + k);
      CHECK(read_each(pool.copy_to_uva(v, s)) == v);
    }
    CHECK(pool.slots() > 2);
    CHECK(read_each(*va) == a);
  }
  s.synchronize();
  CHECK(read_each(*va) == a);
}

TEMPLATE_TEST_CASE("checked views: growing a slot, and destroying the pool, end its views", "[pool][checked]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  auto pool = std::make_unique<ferry::uva_pool<float, B>>(8, 1);  // one slot: every call reuses it
  const auto a = ferry_test::random_values<float>(8, 41);
  const auto big = ferry_test::random_values<float>(100, 42);
  const auto va = pool->copy_to_uva(a, s);
  s.synchronize();
  const auto vbig = pool->copy_to_uva(big, s);  // grows the slot: a new block
  REQUIRE(pool->capacity(0) >= 100);
  REQUIRE_THROWS_MATCHES(va[0], ferry::error, stale("uva_pool"));
  CHECK(read_each(vbig) == big);
  s.synchronize();
  pool.reset();
  REQUIRE_THROWS_MATCHES(vbig[0], ferry::error, stale("uva_pool"));  // never a read of a returned block
}

TEMPLATE_TEST_CASE("checked views: a uva_backed publish names uva_backed", "[pool][checked]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::uva_backed<std::int64_t, B> state(16, 2);
  const auto x = ferry_test::random_values<std::int64_t>(16, 51);
  std::copy(x.begin(), x.end(), state.host().begin());
  const auto v0 = state.publish(16, s);
  s.synchronize();
  const auto v1 = state.publish(16, s);
  CHECK(read_each(v0) == x);
  s.synchronize();
  const auto y = ferry_test::random_values<std::int64_t>(16, 52);
  std::copy(y.begin(), y.end(), state.host().begin());
  const auto v2 = state.publish(16, s);  // v0's slot, with y
  REQUIRE_THROWS_MATCHES(v0[3], ferry::error, stale("uva_backed"));
  CHECK(read_each(v1) == x);
  CHECK(read_each(v2) == y);
}

TEMPLATE_TEST_CASE("checked views: a step_batch publish view throws once its slot begins another step",
                   "[step][checked]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::step_batch<B> batch(2, 8);
  auto p = batch.template add_publish<std::uint32_t>(24);
  auto step = [&](const std::vector<std::uint32_t>& v) {
    batch.begin();
    const auto out = p.span(v.size());
    std::copy(v.begin(), v.end(), out.begin());
    batch.submit(s);
    s.synchronize();  // the step and its readers done: slots are reused, never inserted
    return p.view();
  };
  const auto a = ferry_test::random_values<std::uint32_t>(24, 61);
  const auto b = ferry_test::random_values<std::uint32_t>(24, 62);
  const auto c = ferry_test::random_values<std::uint32_t>(24, 63);
  const auto va = step(a);
  CHECK(read_each(va) == a);
  const auto vb = step(b);
  CHECK(read_each(va) == a);  // its slot has not begun another step
  CHECK(read_each(vb) == b);
  const auto vc = step(c);
  REQUIRE(batch.slots() == 2);
  REQUIRE(vc.data() == va.data());
  REQUIRE_THROWS_MATCHES(va[0], ferry::error, stale("step_batch"));
  CHECK(read_each(vb) == b);
  CHECK(read_each(vc) == c);
  // begin() hands a slot out again, even for a step then cancelled: here vb's slot (the step
  // before the last, free again), whose view is stale from then on.
  batch.begin();
  const auto out = p.span(24);
  REQUIRE(out.data() == vb.data());
  REQUIRE_THROWS_MATCHES(vb[0], ferry::error, stale("step_batch"));
  batch.cancel();
  CHECK(read_each(vc) == c);
}

TEMPLATE_TEST_CASE("checked views: the 2-D views of rows (copy_rows_to_uva, publish_rows) throw once stale",
                   "[pool][checked]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  constexpr std::size_t width = 6, rows = 5;
  ferry::uva_pool<std::int32_t, B> pool(ferry::row_width{width}, rows, 2);
  const auto a = ferry_test::random_values<std::int32_t>(rows * width, 71);
  const auto b = ferry_test::random_values<std::int32_t>(rows * width, 72);
  const auto c = ferry_test::random_values<std::int32_t>(rows * width, 73);
  auto read_rows = [](const ferry::staged_view<const std::int32_t>& v) {
    std::vector<std::int32_t> out;
    for (std::size_t r = 0; r < v.extent(0); ++r)
      for (std::size_t k = 0; k < v.extent(1); ++k) out.push_back(v(r, k));
    return out;
  };
  const auto va = pool.copy_rows_to_uva(a, s);
  s.synchronize();
  const auto vb = pool.copy_rows_to_uva(b, s);
  CHECK(read_rows(va) == a);
  s.synchronize();
  const auto vc = pool.copy_rows_to_uva(c, s);  // va's slot again
  REQUIRE(vc.data_handle() == va.data_handle());
  REQUIRE_THROWS_MATCHES(va(2, 3), ferry::error, stale("uva_pool"));
  CHECK(read_rows(vb) == b);
  CHECK(read_rows(vc) == c);

  ferry::uva_backed<float, B> state(ferry::row_width{width}, rows, 2);
  const auto x = ferry_test::random_values<float>(rows * width, 74);
  std::copy(x.begin(), x.end(), state.host().begin());
  const auto r0 = state.publish_rows(rows, s);
  s.synchronize();
  (void)state.publish_rows(1, s);
  s.synchronize();
  CHECK(r0(rows - 1, width - 1) == x.back());
  (void)state.publish_rows(1, s);  // r0's slot again
  REQUIRE_THROWS_MATCHES(r0(0, 0), ferry::error, stale("uva_backed"));
}
