// ferry/policies/backend.hpp: Backend, the runtime that executes streams, copies and kernels.
#pragma once

#include <ferry/config.hpp>
#include <ferry/policies/detail/families.hpp>

#include <concepts>
#include <type_traits>

namespace ferry {

/// A Backend tag: declares `using ferry_policy_family = ferry::families::backend;` and provides
/// `static constexpr bool available`, whether this build of ferry implements it. ferry's backend
/// layer implements backend::cuda and backend::host.
template <class B>
concept backend_tag = detail::models_family<B, families::backend>;

}  // namespace ferry

namespace ferry::backend {

/// The CUDA runtime: pinned memory from cudaHostAlloc (mapped, portable), device memory from
/// cudaMalloc, streams are CUDA streams, kernels are CUDA kernels.
struct cuda {
  using ferry_policy_family = families::backend;  ///< Names the Backend family.
  static constexpr bool available = FERRY_HAS_CUDA;  ///< Only where ferry found the CUDA toolkit.
};

/// The same API without a GPU: device memory is host memory, a stream is an in-order work queue
/// run by its own worker thread, kernels are host loops with the same semantics.
struct host {
  using ferry_policy_family = families::backend;  ///< Names the Backend family.
  static constexpr bool available = true;          ///< Always.
};

}  // namespace ferry::backend

namespace ferry {
/// The backend chosen for the whole build by FERRY_DEFAULT_BACKEND.
using default_backend = backend::FERRY_DEFAULT_BACKEND;
}  // namespace ferry

namespace ferry::families {
/// The Backend policy family: what a tag of it names in `ferry_policy_family`.
struct backend {
  /// The tag used when none of this family is given (ferry::default_backend).
  using default_policy = ferry::default_backend;
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = requires {
    requires std::same_as<std::remove_cv_t<decltype(P::available)>, bool>;
    typename std::bool_constant<P::available>;
  };
  /// Names, in a static_assert, what a type declaring this family lacks, and an unavailable one.
  template <class P>
  static constexpr bool check() {
    static_assert(has_members<P>,
                  "ferry: a type declares the Backend family but does not model "
                  "ferry::backend_tag: it lacks `static constexpr bool available`.");
    if constexpr (backend_tag<P>)
      static_assert(P::available,
                    "ferry: backend::cuda is not available because ferry was configured without "
                    "the CUDA toolkit; use backend::host or configure with CUDA.");
    return backend_tag<P>;
  }
};
}  // namespace ferry::families

namespace ferry::detail {

/// The check of a backend position (the B of device_buffer<T, B>, pinned_arena<B>, ...).
template <class B>
constexpr void check_backend() {
  static_assert(declares_family<B, families::backend>,
                "ferry: a backend position was given a type that is not a backend tag; give "
                "ferry::backend::cuda or ferry::backend::host there, and policies of other "
                "families in a component's policy list (e.g. ferry::cpu_gpu_buffer<T, "
                "ferry::reuse::caller_fenced>).");
  if constexpr (declares_family<B, families::backend>) families::backend::check<B>();
}

}  // namespace ferry::detail
