// Tests for policies/ferry/policies/detail/select.hpp: one tag per family from an unordered pack,
// defaults, presets and overrides. (The rejected cases are compile-fail tests.)
#include <ferry/policies/detail/select.hpp>
#include <ferry/policies/presets.hpp>

#include <ferry/error.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <type_traits>

namespace {
using namespace ferry;
using all_families = detail::type_list<families::target_kind, families::staging, families::growth,
                                       families::pin, families::reuse, families::backend>;
template <class... Ps>
using set = detail::policy_set<all_families, Ps...>;

// Defaults.
static_assert(std::is_same_v<set<>::target, target::device>);
static_assert(std::is_same_v<set<>::staging, staging::by_target>);
static_assert(std::is_same_v<set<>::growth, growth::pow2>);
static_assert(std::is_same_v<set<>::pin, pin::stage>);
static_assert(std::is_same_v<set<>::reuse, reuse::event_fenced>);
static_assert(std::is_same_v<set<>::backend, default_backend>);

// Any order.
using a = set<reuse::caller_fenced, target::uva, growth::fixed>;
using b = set<growth::fixed, target::uva, reuse::caller_fenced>;
static_assert(std::is_same_v<a::target, target::uva> && std::is_same_v<b::target, target::uva>);
static_assert(std::is_same_v<a::growth, growth::fixed> && std::is_same_v<b::growth, growth::fixed>);
static_assert(std::is_same_v<a::reuse, reuse::caller_fenced> &&
              std::is_same_v<b::reuse, reuse::caller_fenced>);
static_assert(std::is_same_v<a::staging, staging::by_target>);

// Presets, and a tag next to a preset overrides the preset's member.
static_assert(std::is_same_v<set<presets::block_table>::staging, staging::uva_direct>);
static_assert(std::is_same_v<set<presets::block_table>::target, target::device>);
static_assert(std::is_same_v<set<presets::block_table, staging::h2d_copy>::staging, staging::h2d_copy>);
static_assert(std::is_same_v<set<staging::h2d_copy, presets::block_table>::staging, staging::h2d_copy>);
static_assert(std::is_same_v<set<presets::uva_state>::target, target::uva>);
static_assert(std::is_same_v<set<presets::graph_safe>::growth, growth::fixed>);
static_assert(std::is_same_v<set<presets::graph_safe, presets::uva_state>::target, target::uva>);
static_assert(std::is_same_v<set<presets::graph_safe, presets::uva_state>::growth, growth::fixed>);
static_assert(std::is_same_v<set<staging::threshold<4096>>::staging, staging::threshold<4096>>);
static_assert(detail::is_threshold<staging::threshold<4096>>);
static_assert(!detail::is_threshold<staging::uva_direct>);

// A preset's members of families a component does not use are ignored.
using growth_only = detail::policy_set<detail::type_list<families::growth, families::reuse>,
                                       presets::block_table>;
static_assert(std::is_same_v<growth_only::growth, growth::pow2>);
}  // namespace

TEST_CASE("pow2 growth capacities", "[policies]") {
  CHECK(growth::pow2::capacity_for(0) == 1);
  CHECK(growth::pow2::capacity_for(1) == 1);
  CHECK(growth::pow2::capacity_for(5) == 8);
  CHECK(growth::pow2::capacity_for(1024) == 1024);
  CHECK(growth::pow2::capacity_for(1025) == 2048);
  constexpr std::size_t top = std::size_t{1} << 63;  // the largest power of two in size_t
  CHECK(growth::pow2::capacity_for(top - 1) == top);
  CHECK(growth::pow2::capacity_for(top) == top);
  CHECK_THROWS_AS(growth::pow2::capacity_for(top + 1), ferry::capacity_error);
  CHECK_THROWS_AS(growth::pow2::capacity_for(SIZE_MAX), ferry::capacity_error);
}
