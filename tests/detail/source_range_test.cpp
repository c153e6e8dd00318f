// Tests of include/ferry/detail/source_range.hpp, ferry-internal: counting a source and writing
// its elements, with small contiguous copies made inline.
#include <ferry/detail/source_range.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <cstdint>
#include <list>
#include <random>
#include <vector>

using ferry::detail::copy_bytes;

TEST_CASE("copy_bytes copies exactly n bytes at every size and alignment", "[source_range]") {
  std::mt19937 gen(7);
  std::vector<unsigned char> src(256), dst(256 + 32);
  for (auto& b : src) b = static_cast<unsigned char>(gen());
  for (std::size_t n = 0; n <= 130; ++n) {
    for (std::size_t at = 0; at < 16; ++at) {
      for (auto& b : dst) b = 0xa5;
      copy_bytes(dst.data() + 8 + at, src.data() + at, n);
      std::size_t wrong = 0;  // bytes inside [8 + at, 8 + at + n) copied, every other one kept
      for (std::size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= 8 + at && i < 8 + at + n;
        wrong += dst[i] != (inside ? src[i - 8] : 0xa5);
      }
      INFO("n = " << n << ", offset " << at);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("fill writes a contiguous source by copy and a list by gathering", "[source_range]") {
  const std::vector<std::int32_t> v{5, -1, 7, 9, 11, 13, 15, 17, 19};
  std::vector<std::int32_t> out(v.size(), 0);
  ferry::detail::fill(v, out.data(), v.size());
  CHECK(out == v);

  const std::list<std::int32_t> l(v.begin(), v.end());
  CHECK(ferry::detail::count_of(l) == v.size());
  std::vector<std::int32_t> out2(v.size() + 1, 0);
  ferry::detail::fill(l, out2.data(), 3);  // the first n elements only
  CHECK(out2 == std::vector<std::int32_t>{5, -1, 7, 0, 0, 0, 0, 0, 0, 0});
}
