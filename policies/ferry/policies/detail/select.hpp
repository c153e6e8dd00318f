// ferry/policies/detail/select.hpp: the policy preamble every component shares. From an
// unordered pack of policies and presets it chooses one policy per family and makes the
// compile-time checks: known types, each family at most once, only families the component uses,
// and each chosen policy models its family's concept (a backend is also available).
#pragma once

#include <ferry/policies/backend.hpp>
#include <ferry/policies/detail/families.hpp>
#include <ferry/policies/epilogue.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/launch.hpp>
#include <ferry/policies/pin.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/policies/staging.hpp>
#include <ferry/policies/target.hpp>

#include <cstddef>
#include <type_traits>

namespace ferry::detail {

// ---- type-list plumbing --------------------------------------------------------------------

template <class... Lists>
struct concat;
template <>
struct concat<> {
  using type = type_list<>;
};
template <class... A>
struct concat<type_list<A...>> {
  using type = type_list<A...>;
};
template <class... A, class... B, class... Rest>
struct concat<type_list<A...>, type_list<B...>, Rest...> {
  using type = typename concat<type_list<A..., B...>, Rest...>::type;
};

template <class P>
struct explicit_tags_of {
  using type = std::conditional_t<policy_tag<P>, type_list<P>, type_list<>>;
};
template <class P>
struct bundle_tags_of {
  using type = type_list<>;
};
template <policy_bundle P>
struct bundle_tags_of<P> {
  using type = typename P::ferry_policy_bundle;
};

template <class Family, class List>
struct count_in;
template <class Family, class... Ps>
struct count_in<Family, type_list<Ps...>> {
  static constexpr std::size_t value = (std::size_t{0} + ... + std::size_t{is_tag_of<Family, Ps>});
};

template <class Family, class List>
struct first_in {
  using type = void;
};
template <class Family, class P, class... Ps>
struct first_in<Family, type_list<P, Ps...>> {
  using type = std::conditional_t<is_tag_of<Family, P>, P,
                                  typename first_in<Family, type_list<Ps...>>::type>;
};

template <class Family, class List>
inline constexpr bool contains_family = false;
template <class Family, class... Fs>
inline constexpr bool contains_family<Family, type_list<Fs...>> = (__is_same(Family, Fs) || ...);

// ---- per-argument checks --------------------------------------------------------------------

template <class P>
struct known_policy {
  static_assert(policy_tag<P> || policy_bundle<P>,
                "ferry: a template argument given as a policy is neither a ferry policy tag nor a "
                "ferry preset; policies are the tags of ferry::target, ferry::staging, "
                "ferry::growth, ferry::pin, ferry::reuse, ferry::backend, ferry::launch, the "
                "bundles of ferry::presets, and types that model a family's concept.");
  static constexpr bool value = true;
};

template <class T>
inline constexpr bool of_known_family = false;
template <policy_tag T>
inline constexpr bool of_known_family<T> =
    contains_family<typename T::ferry_policy_family, all_families>;

template <class List>
inline constexpr bool names_known_families = true;
template <class... Ts>
inline constexpr bool names_known_families<type_list<Ts...>> = (of_known_family<Ts> && ...);

// ---- the preamble ---------------------------------------------------------------------------

/// The policies of one component: `Used` lists the families the component reads; `Ps` is what
/// the user wrote, in any order. `get<Family>` is the chosen policy: an explicit tag, else the
/// presets' member, else the family's default.
template <class Used, class... Ps>
struct policies;

template <class... Used, class... Ps>
struct policies<type_list<Used...>, Ps...> {
  static_assert((known_policy<Ps>::value && ... && true));

  using explicit_tags = typename concat<typename explicit_tags_of<Ps>::type...>::type;
  using bundle_tags = typename concat<typename bundle_tags_of<Ps>::type...>::type;

  static_assert(names_known_families<explicit_tags> && names_known_families<bundle_tags>,
                "ferry: a policy's `ferry_policy_family` names no ferry policy family; name one "
                "of ferry::families::target_kind, staging, growth, pin, reuse, backend, "
                "launch or epilogue.");

  template <class F>
  static constexpr std::size_t given = count_in<F, explicit_tags>::value;
  template <class F>
  static constexpr bool usable = given<F> == 0 || (__is_same(F, Used) || ...);

  static_assert(given<families::target_kind> <= 1,
                "ferry: the TargetKind policy family is given more than once; give each policy "
                "family at most once.");
  static_assert(given<families::staging> <= 1,
                "ferry: the StagingPolicy policy family is given more than once; give each policy "
                "family at most once.");
  static_assert(given<families::growth> <= 1,
                "ferry: the GrowthPolicy policy family is given more than once; give each policy "
                "family at most once.");
  static_assert(given<families::pin> <= 1,
                "ferry: the PinPolicy policy family is given more than once; give each policy "
                "family at most once.");
  static_assert(given<families::reuse> <= 1,
                "ferry: the ReusePolicy policy family is given more than once; give each policy "
                "family at most once.");
  static_assert(given<families::backend> <= 1,
                "ferry: the Backend policy family is given more than once; give each policy "
                "family at most once.");
  static_assert(given<families::launch> <= 1,
                "ferry: the LaunchPolicy policy family is given more than once; give each policy "
                "family at most once.");
  static_assert(given<families::epilogue> <= 1,
                "ferry: the EpiloguePolicy policy family is given more than once; give each policy "
                "family at most once.");

  static_assert(usable<families::target_kind>,
                "ferry: this component does not use the TargetKind policy family; remove the "
                "ferry::target tag (TargetKind is for staged_write_tensor and fused_staged_writer).");
  static_assert(usable<families::staging>,
                "ferry: this component does not use the StagingPolicy policy family; remove the "
                "ferry::staging tag (StagingPolicy is for staged_write_tensor and "
                "fused_staged_writer).");
  static_assert(usable<families::growth>,
                "ferry: this component does not use the GrowthPolicy policy family; remove the "
                "ferry::growth tag (GrowthPolicy is for uva_pool, uva_backed and staged writes).");
  static_assert(usable<families::pin>,
                "ferry: this component does not use the PinPolicy policy family; remove the "
                "ferry::pin tag (PinPolicy is for async_h2d and async_h2d_packed).");
  static_assert(usable<families::reuse>,
                "ferry: this component does not use the ReusePolicy policy family; remove the "
                "ferry::reuse tag (ReusePolicy is for cpu_gpu_buffer, pools and staged writes).");
  static_assert(usable<families::backend>,
                "ferry: this component does not use the Backend policy family; remove the "
                "ferry::backend tag (the backend of a transfer comes from its stream).");
  static_assert(usable<families::launch>,
                "ferry: this component does not use the LaunchPolicy policy family; remove the "
                "ferry::launch tag (LaunchPolicy is for step_batch).");
  static_assert(usable<families::epilogue>,
                "ferry: this component does not use the EpiloguePolicy policy family; remove the "
                "ferry::epilogue tag (EpiloguePolicy is for step_batch).");

  template <class F>
  struct pick {
    using from_tags = typename first_in<F, explicit_tags>::type;
    using from_bundles = typename first_in<F, bundle_tags>::type;
    using type = std::conditional_t<
        !std::is_void_v<from_tags>, from_tags,
        std::conditional_t<!std::is_void_v<from_bundles>, from_bundles,
                           typename F::default_policy>>;
  };

  template <class F>
  using get = typename pick<F>::type;

  // Every family the component uses: its policy models the family's concept (a static_assert
  // naming the missing member otherwise).
  static_assert(((void)Used::template check<get<Used>>(), ..., true));

  using target = get<families::target_kind>;
  using staging = get<families::staging>;
  using growth = get<families::growth>;
  using pin = get<families::pin>;
  using reuse = get<families::reuse>;
  using backend = get<families::backend>;
  using launch = get<families::launch>;
  using epilogue = get<families::epilogue>;
};

}  // namespace ferry::detail
