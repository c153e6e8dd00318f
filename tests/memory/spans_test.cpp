// Tests for include/ferry/memory/device_span.hpp and pinned_span.hpp.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

static_assert(std::is_trivially_copyable_v<ferry::device_span<int>>);
#if !FERRY_CHECKED_VIEWS
// Unchecked (the default), a view is a pointer and a size: FERRY_CHECKED_VIEWS adds nothing.
static_assert(sizeof(ferry::device_span<int>) == sizeof(int*) + sizeof(std::size_t));
#endif
static_assert(std::is_convertible_v<ferry::device_span<int>, ferry::device_span<const int>>);
static_assert(!std::is_convertible_v<ferry::device_span<const int>, ferry::device_span<int>>);
// Element access in host-compiled code too (nvcc's view of the type has the same members), const kept.
static_assert(std::is_same_v<decltype(std::declval<ferry::device_span<int>>()[0]), int&>);
static_assert(std::is_same_v<decltype(std::declval<ferry::device_span<const int>>()[0]), const int&>);
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

TEST_CASE("device_span element access on the host reads and writes in place and checks bounds", "[span]") {
  std::array<int, 6> a{10, 11, 12, 13, 14, 15};
  const ferry::device_span<int> s(a.data(), a.size());  // a const span of mutable elements
  CHECK(s[0] == 10);
  CHECK(s[5] == 15);
  s[2] = 120;
  CHECK(a[2] == 120);
  CHECK(s.subspan(2)[0] == 120);
  const ferry::device_span<const int> c = s;
  CHECK(&c[4] == a.data() + 4);
  CHECK_THROWS_AS(s[6], std::out_of_range);
  CHECK_THROWS_AS(c[static_cast<std::size_t>(-1)], std::out_of_range);
  CHECK_THROWS_AS(ferry::device_span<int>()[0], std::out_of_range);
}

TEMPLATE_TEST_CASE("device_span element access on the host sees a pinned_buffer's bytes through UVA",
                   "[span]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::pinned_buffer<std::int64_t, TestType> buf(300);
  const auto value = [](std::size_t i) { return (std::int64_t{1} << 40) + static_cast<std::int64_t>(i); };
  const ferry::device_span<std::int64_t> uva = buf.device();
  for (std::size_t i = 0; i < uva.size(); ++i) uva[i] = value(i);
  for (std::size_t i = 0; i < buf.host().size(); ++i) {
    if (buf.host()[i] != value(i)) FAIL("element " << i);
  }
  buf.host()[299] = -7;
  CHECK(uva[299] == -7);
  CHECK_THROWS_AS(uva[300], std::out_of_range);
}

TEST_CASE("device_span element access on the host writes a host-backend device_buffer", "[span]") {
  using B = ferry::backend::host;
  ferry::stream<B> s;
  ferry::device_buffer<int, B> dev(64);
  const ferry::device_span<int> span = dev.span();
  for (std::size_t i = 0; i < span.size(); ++i) span[i] = 3 * static_cast<int>(i) - 50;
  ferry::pinned_buffer<int, B> back(64);
  ferry::async_d2h(span, back.host(), s);
  s.synchronize();
  for (std::size_t i = 0; i < back.host().size(); ++i) {
    if (back.host()[i] != 3 * static_cast<int>(i) - 50) FAIL("element " << i);
  }
  CHECK(span[63] == 3 * 63 - 50);
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
