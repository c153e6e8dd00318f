// ferry/policies/backend.hpp: Backend, the runtime that executes streams, copies and kernels.
#pragma once

#include <ferry/config.hpp>
#include <ferry/policies/detail/families.hpp>

namespace ferry::backend {

/// The CUDA runtime: pinned memory from cudaHostAlloc (mapped, portable), device memory from
/// cudaMalloc, streams are CUDA streams, kernels are CUDA kernels.
struct cuda {
  using ferry_policy_family = families::backend;  ///< Names the Backend family.
};

/// The same API without a GPU: device memory is host memory, a stream is an in-order work queue
/// run by its own worker thread, kernels are host loops with the same semantics.
struct host {
  using ferry_policy_family = families::backend;  ///< Names the Backend family.
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
};
}  // namespace ferry::families
