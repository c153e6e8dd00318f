// Tests for include/ferry/element.hpp: element types, the dtype and scalar rules, ferry::cast.
#include <support/backends.hpp>

#include <cstdint>
#include <list>
#include <ranges>
#include <vector>

using ferry::element;
using ferry::same_element_v;
using ferry::value_preserving_v;

static_assert(element<std::int8_t> && element<std::uint16_t> && element<int> && element<long long>);
static_assert(element<float> && element<double> && element<const int>);
static_assert(!element<bool>);
static_assert(!element<long double>);
static_assert(!element<int*>);
struct pod { int x; };
static_assert(!element<pod>);
#if FERRY_HAS_HALF
static_assert(element<__half> && element<__nv_bfloat16>);
#endif

static_assert(same_element_v<int, int>);
static_assert(same_element_v<long, long long>);                    // same size and signedness
static_assert(same_element_v<unsigned long, unsigned long long>);
static_assert(!same_element_v<long, unsigned long long>);          // signedness differs
static_assert(!same_element_v<int, long>);                         // size differs
static_assert(!same_element_v<int, float>);
static_assert(!same_element_v<float, double>);

static_assert(value_preserving_v<int, long long>);
static_assert(value_preserving_v<std::uint8_t, std::uint32_t>);
static_assert(value_preserving_v<float, double>);
static_assert(!value_preserving_v<long long, int>);   // narrowing
static_assert(!value_preserving_v<int, unsigned>);    // signedness
static_assert(!value_preserving_v<int, float>);       // integer to floating point
static_assert(!value_preserving_v<double, float>);
static_assert(!value_preserving_v<float, int>);
#if FERRY_HAS_HALF
static_assert(value_preserving_v<__half, float>);
static_assert(!value_preserving_v<float, __half>);
static_assert(!value_preserving_v<__half, __nv_bfloat16>);
#endif

TEST_CASE("ferry::cast converts element by element and lazily", "[element]") {
  std::list<double> src{1.5, -2.25, 3.0};
  auto v = ferry::cast<float>(src);
  static_assert(std::is_same_v<std::ranges::range_value_t<decltype(v)>, float>);
  std::vector<float> out(v.begin(), v.end());
  CHECK(out == std::vector<float>{1.5f, -2.25f, 3.0f});
  std::vector<long long> wide{1, -5, 1LL << 40};
  auto n = ferry::cast<int>(wide);
  CHECK(std::vector<int>(n.begin(), n.end()) == std::vector<int>{1, -5, 0});
}
