// ferry/policies/detail/families.hpp: the seven policy families and how a tag names its family.
#pragma once

#include <cstddef>

namespace ferry::families {

// A family names its default tag and its name in diagnostics. Tags say which family they belong
// to through a nested `ferry_policy_family` type.
struct target_kind;
struct staging;
struct growth;
struct pin;
struct reuse;
struct backend;
struct launch;

}  // namespace ferry::families

namespace ferry::detail {

template <class... Ts>
struct type_list {};

template <class T>
concept policy_tag = requires { typename T::ferry_policy_family; };

template <class T>
concept policy_bundle = requires { typename T::ferry_policy_bundle; };

template <class Family, class P>
inline constexpr bool is_tag_of = false;
template <class Family, policy_tag P>
inline constexpr bool is_tag_of<Family, P> = __is_same(typename P::ferry_policy_family, Family);

}  // namespace ferry::detail
