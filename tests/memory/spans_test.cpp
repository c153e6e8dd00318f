// Tests for include/ferry/memory/device_span.hpp and pinned_span.hpp.
#include <support/backends.hpp>

#include <array>
#include <span>
#include <stdexcept>
#include <type_traits>

static_assert(std::is_trivially_copyable_v<ferry::device_span<int>>);
static_assert(std::is_convertible_v<ferry::device_span<int>, ferry::device_span<const int>>);
static_assert(!std::is_convertible_v<ferry::device_span<const int>, ferry::device_span<int>>);
static_assert(std::is_convertible_v<ferry::pinned_span<int>, ferry::pinned_span<const int>>);
static_assert(!std::is_convertible_v<ferry::pinned_span<const int>, ferry::pinned_span<int>>);
// A pinned_span is pinned by type: no construction from arbitrary host memory.
static_assert(!std::is_constructible_v<ferry::pinned_span<int>, int*, std::size_t>);
static_assert(!std::is_constructible_v<ferry::pinned_span<int>, std::span<int>>);

TEST_CASE("device_span first and subspan view the right elements and check bounds", "[span]") {
  std::array<int, 10> a{};
  ferry::device_span<int> s(a.data(), a.size());
  CHECK(s.size() == 10);
  CHECK(s.size_bytes() == 40);
  CHECK(s.first(3).data() == a.data());
  CHECK(s.first(3).size() == 3);
  CHECK(s.subspan(4).data() == a.data() + 4);
  CHECK(s.subspan(4).size() == 6);
  CHECK(s.subspan(4, 2).size() == 2);
  CHECK(s.subspan(10).empty());
  CHECK_THROWS_AS(s.first(11), std::out_of_range);
  CHECK_THROWS_AS(s.subspan(11), std::out_of_range);
  CHECK_THROWS_AS(s.subspan(5, 6), std::out_of_range);
  // offset + count past SIZE_MAX does not wrap into range.
  const std::size_t npos = ferry::device_span<int>::npos;
  CHECK_THROWS_AS(s.subspan(4, npos - 1), std::out_of_range);
  CHECK_THROWS_AS(s.subspan(npos, 1), std::out_of_range);
  CHECK_THROWS_AS(s.first(npos - 1), std::out_of_range);
  ferry::device_span<const int> c = s;
  CHECK(c.data() == a.data());
}

TEST_CASE("assume_pinned makes a pinned_span with host element access", "[span]") {
  std::array<int, 4> a{1, 2, 3, 4};
  auto p = ferry::assume_pinned(std::span(a));
  CHECK(p.size() == 4);
  p[2] = 30;
  CHECK(a[2] == 30);
  int sum = 0;
  for (int x : p) sum += x;
  CHECK(sum == 1 + 2 + 30 + 4);
  CHECK(p.subspan(1, 2)[0] == 2);
  CHECK(p.first(2).size() == 2);
  CHECK_THROWS_AS(p.first(5), std::out_of_range);
  CHECK_THROWS_AS(p.subspan(3, 2), std::out_of_range);
  CHECK_THROWS_AS(p.subspan(2, static_cast<std::size_t>(-2)), std::out_of_range);
  CHECK_THROWS_AS(p.subspan(static_cast<std::size_t>(-1), 1), std::out_of_range);
  CHECK(p.mapped().data() == a.data());
}
