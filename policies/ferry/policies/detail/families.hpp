// ferry/policies/detail/families.hpp: the eight policy families and how a type names its family.
#pragma once

#include <cstddef>

namespace ferry::families {

// A family names its default policy and the members its policies have (`has_members<P>`), and
// checks that a type declaring it has them (`check<P>()`, a static_assert naming what is
// missing). A policy type says which family it belongs to through a nested `ferry_policy_family`
// type; the family's concept is models_family below.
struct target_kind;
struct staging;
struct growth;
struct pin;
struct reuse;
struct backend;
struct launch;
struct epilogue;

}  // namespace ferry::families

namespace ferry::detail {

template <class... Ts>
struct type_list {};

/// Every policy family, in the order diagnostics list them.
using all_families = type_list<families::target_kind, families::staging, families::growth,
                               families::pin, families::reuse, families::backend, families::launch,
                               families::epilogue>;

template <class T>
concept policy_tag = requires { typename T::ferry_policy_family; };

template <class T>
concept policy_bundle = requires { typename T::ferry_policy_bundle; };

template <class Family, class P>
inline constexpr bool is_tag_of = false;
template <class Family, policy_tag P>
inline constexpr bool is_tag_of<Family, P> = __is_same(typename P::ferry_policy_family, Family);

/// P declares `Family` as its family (the first half of every family's concept).
template <class P, class Family>
concept declares_family = is_tag_of<Family, P>;

/// Every family's concept: P declares `Family` and has the members `Family::has_members<P>` names.
template <class P, class Family>
concept models_family = declares_family<P, Family> && Family::template has_members<P>;

}  // namespace ferry::detail
