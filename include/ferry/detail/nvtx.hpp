#pragma once
// NVTX ranges around ferry's work, for Nsight Systems and other profilers: a step's submit, a
// staged apply, an upload. Off unless FERRY_NVTX is defined; then the toolkit's header-only NVTX v3
// (<nvtx3/nvtx3.hpp>, CMake's CUDA::nvtx3) names each range in the domain "ferry", with the
// message registered once per process.
#if defined(FERRY_NVTX)
#include <nvtx3/nvtx3.hpp>
#endif

namespace ferry::detail {

/// Whether this build emits ferry's NVTX ranges (FERRY_NVTX defined).
#if defined(FERRY_NVTX)
inline constexpr bool nvtx_enabled = true;
#else
inline constexpr bool nvtx_enabled = false;
#endif

/// The range names: each a type with a static `message`, as NVTX's registered strings take them.
namespace nvtx_names {
struct step_submit {
  static constexpr const char* message = "ferry: step_batch::submit";
};
struct step_commit {
  static constexpr const char* message = "ferry: step_batch::commit";
};
struct apply {
  static constexpr const char* message = "ferry: staged apply";
};
struct upload {
  static constexpr const char* message = "ferry: async_h2d";
};
}  // namespace nvtx_names

#if defined(FERRY_NVTX)
struct nvtx_domain {
  static constexpr const char* name = "ferry";
};
/// A range from construction to destruction, named by `Name`.
template <class Name>
struct nvtx_scope {
  nvtx3::scoped_range_in<nvtx_domain> range{nvtx3::registered_string_in<nvtx_domain>::get<Name>()};
};
#else
/// Nothing: ranges are off (define FERRY_NVTX).
template <class Name>
struct nvtx_scope {};
#endif

}  // namespace ferry::detail
