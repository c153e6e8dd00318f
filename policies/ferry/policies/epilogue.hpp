// ferry/policies/epilogue.hpp: EpiloguePolicy, what a step batch runs after a step's data has
// landed, in the same launch.
#pragma once

#include <ferry/policies/detail/families.hpp>

#include <concepts>
#include <type_traits>

namespace ferry {

/// An EpiloguePolicy: declares `using ferry_policy_family = ferry::families::epilogue;` and names
/// `functor_type`: void for none, else a trivially copyable functor type whose call operator a
/// step batch runs once every copy, write, gather and fill of a step has landed (its signature is
/// step_batch's to check: `void operator()(const ferry::step_context&) const`).
template <class P>
concept epilogue_policy = detail::models_family<P, families::epilogue>;

}  // namespace ferry

namespace ferry::epilogue {

/// No epilogue (the default): a step only moves data.
struct none {
  using ferry_policy_family = families::epilogue;  ///< Names the EpiloguePolicy family.
  using functor_type = void;                       ///< No functor.
};

/// The epilogue `F`: a trivially copyable functor whose `operator()(const ferry::step_context&)`
/// runs in the step's launch after the step's data has landed (docs/step_batch.md, "The
/// epilogue"). Its state is set once at plan time (step_batch::set_epilogue).
template <class F>
struct functor {
  static_assert(std::is_trivially_copyable_v<F> && std::is_class_v<F>,
                "ferry: epilogue::functor<F>: F must be a trivially copyable class type (it travels "
                "to the device as a kernel parameter and into the step's table)");
  using ferry_policy_family = families::epilogue;  ///< Names the EpiloguePolicy family.
  using functor_type = F;                          ///< The functor a step runs.
};

}  // namespace ferry::epilogue

namespace ferry::families {
/// The EpiloguePolicy policy family: what a policy of it names in `ferry_policy_family`.
struct epilogue {
  /// The policy used when none of this family is given (epilogue::none).
  using default_policy = ferry::epilogue::none;
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = requires { typename P::functor_type; };
  /// Names, in a static_assert, each member a type declaring this family lacks.
  template <class P>
  static constexpr bool check() {
    static_assert(has_members<P>,
                  "ferry: a type declares the EpiloguePolicy family but does not model "
                  "ferry::epilogue_policy: it lacks `using functor_type = ...;`.");
    return epilogue_policy<P>;
  }
};
}  // namespace ferry::families
