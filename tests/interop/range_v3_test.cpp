// range-v3 interop: ferry takes any std::ranges input range as a source, and range-v3 0.12's
// views model the std::ranges concepts, so they go straight into ferry's transfers, pools and
// staged writes. range-v3 does not compile under nvcc 13: this test is built by the host compiler
// only (ferry's own headers never include range-v3).
#include <support/backends.hpp>
#include <transfer/transfer_support.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <range/v3/view/filter.hpp>
#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>

#include <cstdint>
#include <ranges>
#include <tuple>
#include <vector>

namespace {
auto scaled(int n, int k) {
  return ranges::views::iota(0, n) | ranges::views::transform([k](int x) { return x * k + 7; });
}
auto odd(int n) {
  return ranges::views::iota(0, n) | ranges::views::filter([](int x) { return x % 2 != 0; });
}
template <class R>
std::vector<int> to_vector(R&& r) {
  std::vector<int> v;
  for (int x : r) v.push_back(x);
  return v;
}
}  // namespace

static_assert(std::ranges::input_range<decltype(scaled(3, 2))>);
static_assert(std::ranges::sized_range<decltype(scaled(3, 2))>);
static_assert(std::ranges::forward_range<decltype(odd(3))>);
static_assert(!std::ranges::sized_range<decltype(odd(3))>);

TEMPLATE_TEST_CASE("range-v3 views are sources of async_h2d and async_h2d_packed", "[interop]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::device_buffer<int, B> out(5000);

  auto a = scaled(4099, 3);  // sized, not contiguous: gathered into pinned staging
  CHECK(ferry_test::read_back(ferry::async_h2d(a, out.span(), s), s) == to_vector(a));
  auto b = odd(3001);  // neither sized nor contiguous: counted, then gathered
  CHECK(ferry_test::read_back(ferry::async_h2d(b, out.span(), s), s) == to_vector(b));

  auto [pa, pb] = ferry::async_h2d_packed(out.span(), s, scaled(100, 5), odd(41));
  CHECK(ferry_test::read_back(pa, s) == to_vector(scaled(100, 5)));
  CHECK(ferry_test::read_back(pb, s) == to_vector(odd(41)));
  CHECK(pb.data() == pa.data() + 100);  // typed parts are contiguous
}

TEMPLATE_TEST_CASE("range-v3 views are sources of uva_pool copies", "[interop]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::uva_pool<int, B> pool(16);
  const auto v = pool.copy_to_uva(scaled(1500, 2), s);  // grows the slot, then writes
  REQUIRE(v.size() == 1500);
  CHECK(ferry_test::read_back(v, s) == to_vector(scaled(1500, 2)));
  const auto w = pool.copy_to_uva(odd(99), s);
  CHECK(ferry_test::read_back(w, s) == to_vector(odd(99)));
}

TEST_CASE("range-v3 views are sources of staged writes", "[interop]") {
  using B = ferry::backend::host;  // apply_write on CUDA needs nvcc, which range-v3 does not build under
  ferry::stream<B> s;
  ferry::staged_write_tensor<int, B> t(4, 64, s);
  t.stage_write(1, 3, scaled(20, 4));
  t.stage_write(2, 0, odd(9));
  t.apply_write(s);
  const auto all = ferry_test::read_back(t.span(), s);
  const auto row1 = to_vector(scaled(20, 4));
  const auto row2 = to_vector(odd(9));
  for (std::size_t c = 0; c < 64; ++c) {
    CHECK(all[64 + c] == (c >= 3 && c < 23 ? row1[c - 3] : 0));
    CHECK(all[128 + c] == (c < row2.size() ? row2[c] : 0));
  }
}
