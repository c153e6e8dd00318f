// ferry/backend/detail/memory_kind.hpp: where each backend's memory lives, as DLPack names it
// (DLDeviceType values). Interop describes tensors with these; the backend differences stay here.
#pragma once

#include <ferry/policies/backend.hpp>

namespace ferry::detail {

/// DLDeviceType values (dlpack.h) that ferry's backends use.
namespace dl_device {
inline constexpr int cpu = 1;        ///< kDLCPU
inline constexpr int cuda = 2;       ///< kDLCUDA
inline constexpr int cuda_host = 3;  ///< kDLCUDAHost: pinned host memory
}  // namespace dl_device

/// Backend B's memory in DLPack's terms: `device` (what its device spans point to), `pinned` (its
/// pinned spans), whether its device reads pinned memory in place (UVA), and whether it has one
/// device only (id 0).
template <class B>
struct memory_kind;

template <>
struct memory_kind<backend::host> {
  static constexpr int device = dl_device::cpu;
  static constexpr int pinned = dl_device::cpu;  // all of the host backend's memory is the host's
  static constexpr bool device_reads_pinned = false;  // nothing apart from `device` to read
  static constexpr bool one_device = true;
};

template <>
struct memory_kind<backend::cuda> {
  static constexpr int device = dl_device::cuda;
  static constexpr int pinned = dl_device::cuda_host;
  static constexpr bool device_reads_pinned = true;  // through UVA
  static constexpr bool one_device = false;
};

}  // namespace ferry::detail
