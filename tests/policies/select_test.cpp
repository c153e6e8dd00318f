// Tests for policies/ferry/policies/: the family concepts and ferry's own models of them, and the
// policy preamble (detail/select.hpp): one policy per family from an unordered pack, defaults,
// presets and overrides. (The rejected cases are compile-fail tests.)
#include <ferry/policies.hpp>
#include <ferry/policies/detail/select.hpp>

#include <ferry/error.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace {
using namespace ferry;
template <class... Ps>
using set = detail::policies<detail::all_families, Ps...>;

// ---- concepts -------------------------------------------------------------------------------

static_assert(growth_policy<growth::pow2> && growth_policy<growth::fixed>);
static_assert(reuse_policy<reuse::event_fenced> && reuse_policy<reuse::caller_fenced>);
static_assert(staging_policy<staging::by_target> && staging_policy<staging::uva_direct> &&
              staging_policy<staging::h2d_copy> && staging_policy<staging::threshold<4096>>);
static_assert(pin_policy<pin::stage> && pin_policy<pin::require> && pin_policy<pin::allow_sync>);
static_assert(ferry::target_kind<target::device> && ferry::target_kind<target::uva>);
static_assert(backend_tag<backend::cuda> && backend_tag<backend::host>);
static_assert(launch_policy<launch::kernel> && launch_policy<launch::graph>);

// A concept holds only for its own family, with every member.
static_assert(!growth_policy<reuse::event_fenced> && !reuse_policy<growth::pow2>);
static_assert(!backend_tag<reuse::caller_fenced> && !backend_tag<int>);
struct growth_without_stability {
  using ferry_policy_family = families::growth;
  static std::size_t capacity_for(std::size_t n, std::size_t) { return n; }
};
static_assert(!growth_policy<growth_without_stability>);
struct growth_with_runtime_stability {  // stable_addresses must be a constant
  using ferry_policy_family = families::growth;
  static std::size_t capacity_for(std::size_t n, std::size_t) { return n; }
  static inline bool stable_addresses = false;
};
static_assert(!growth_policy<growth_with_runtime_stability>);
struct fences_without_family {
  static constexpr bool ferry_fences = true;
};
static_assert(!reuse_policy<fences_without_family>);

// ---- what ferry's models carry ----------------------------------------------------------------

static_assert(!growth::pow2::stable_addresses && growth::fixed::stable_addresses);
static_assert(reuse::event_fenced::ferry_fences && !reuse::caller_fenced::ferry_fences);
static_assert(target::device::memory == memory_kind::device && target::uva::memory == memory_kind::uva);
static_assert(pin::stage::pageable == pageable_source::stage &&
              pin::require::pageable == pageable_source::reject &&
              pin::allow_sync::pageable == pageable_source::copy_blocking);
static_assert(!launch::kernel::replays_graph && launch::graph::replays_graph);
static_assert(backend::host::available && backend::cuda::available == bool{FERRY_HAS_CUDA});

constexpr std::size_t all = std::numeric_limits<std::size_t>::max();
static_assert(staging::by_target::in_place_max_bytes(memory_kind::uva) == all);
static_assert(staging::by_target::in_place_max_bytes(memory_kind::device) == 0);
static_assert(staging::uva_direct::in_place_max_bytes(memory_kind::device) == all);
static_assert(staging::h2d_copy::in_place_max_bytes(memory_kind::uva) == 0);
static_assert(staging::threshold<4096>::in_place_max_bytes(memory_kind::uva) == 4096);
static_assert(staging::threshold<4096>::in_place_max_bytes(memory_kind::device) == 4096);

// ---- the preamble ------------------------------------------------------------------------------

// Defaults.
static_assert(std::is_same_v<set<>::target, target::device>);
static_assert(std::is_same_v<set<>::staging, staging::by_target>);
static_assert(std::is_same_v<set<>::growth, growth::pow2>);
static_assert(std::is_same_v<set<>::pin, pin::stage>);
static_assert(std::is_same_v<set<>::reuse, reuse::event_fenced>);
static_assert(std::is_same_v<set<>::backend, default_backend>);
static_assert(std::is_same_v<set<>::launch, launch::kernel>);

// Any order.
using a = set<reuse::caller_fenced, target::uva, growth::fixed, launch::graph>;
using b = set<launch::graph, growth::fixed, target::uva, reuse::caller_fenced>;
static_assert(std::is_same_v<a::target, target::uva> && std::is_same_v<b::target, target::uva>);
static_assert(std::is_same_v<a::growth, growth::fixed> && std::is_same_v<b::growth, growth::fixed>);
static_assert(std::is_same_v<a::reuse, reuse::caller_fenced> &&
              std::is_same_v<b::reuse, reuse::caller_fenced>);
static_assert(std::is_same_v<a::launch, launch::graph> && std::is_same_v<b::launch, launch::graph>);
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

// A preset's members of families a component does not use are ignored.
using growth_only = detail::policies<detail::type_list<families::growth, families::reuse>,
                                     presets::block_table>;
static_assert(std::is_same_v<growth_only::growth, growth::pow2>);

// A user type that models a concept is chosen like ferry's own, also from a user bundle.
struct halving_threshold {
  using ferry_policy_family = families::staging;
  static constexpr std::size_t in_place_max_bytes(memory_kind t) noexcept {
    return t == memory_kind::uva ? 8192 : 4096;
  }
};
struct user_bundle {
  using ferry_policy_bundle = detail::type_list<halving_threshold, target::uva>;
};
static_assert(std::is_same_v<set<halving_threshold>::staging, halving_threshold>);
static_assert(std::is_same_v<set<user_bundle>::staging, halving_threshold>);
static_assert(std::is_same_v<set<user_bundle, staging::h2d_copy>::staging, staging::h2d_copy>);

/// Over-grows by one: a correct user policy.
struct plus_one {
  using ferry_policy_family = families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t) { return needed + 1; }
};
/// Returns less than needed: a broken user policy.
struct shrinking {
  using ferry_policy_family = families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    return needed > 0 ? needed - 1 : current;
  }
};
}  // namespace

TEST_CASE("pow2 growth capacities", "[policies]") {
  CHECK(growth::pow2::capacity_for(0, 0) == 1);
  CHECK(growth::pow2::capacity_for(1, 0) == 1);
  CHECK(growth::pow2::capacity_for(5, 4) == 8);
  CHECK(growth::pow2::capacity_for(1024, 512) == 1024);
  CHECK(growth::pow2::capacity_for(1025, 1024) == 2048);
  CHECK(growth::pow2::capacity_for(1025, 0) == 2048);  // the current capacity does not matter
  constexpr std::size_t top = std::size_t{1} << 63;  // the largest power of two in size_t
  CHECK(growth::pow2::capacity_for(top - 1, 0) == top);
  CHECK(growth::pow2::capacity_for(top, 0) == top);
  CHECK_THROWS_AS(growth::pow2::capacity_for(top + 1, 0), ferry::capacity_error);
  CHECK_THROWS_AS(growth::pow2::capacity_for(SIZE_MAX, 0), ferry::capacity_error);
}

TEST_CASE("fixed growth gives exactly what is asked", "[policies]") {
  CHECK(growth::fixed::capacity_for(5, 0) == 5);
  CHECK(growth::fixed::capacity_for(1000, 64) == 1000);
}

TEST_CASE("a growth policy that returns less than needed is an error", "[policies]") {
  CHECK(detail::grown_capacity<plus_one>(9, 4) == 10);
  CHECK(detail::grown_capacity<shrinking>(0, 7) == 7);
  try {
    (void)detail::grown_capacity<shrinking>(9, 4);
    FAIL("no exception");
  } catch (const ferry::error& e) {
    CHECK(std::string(e.what()) ==
          "ferry: the GrowthPolicy's capacity_for(9, 4) returned 8, less than the capacity needed");
  }
}
