// ferry/interop/detail/tensor_check.hpp: the one checker behind every view of a foreign tensor
// (DLPack, torch): dtype, device, row-major contiguity, offset and alignment, each mismatch named.
// It speaks DLPack's numbering (stable ABI values) but needs no DLPack header.
#pragma once

#include <ferry/backend/detail/memory_kind.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/element.hpp>
#include <ferry/policies/backend.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace ferry::detail::dl {

// DLDataTypeCode and DLDeviceType values used by ferry.
inline constexpr std::uint8_t int_code = 0;
inline constexpr std::uint8_t uint_code = 1;
inline constexpr std::uint8_t float_code = 2;
inline constexpr std::uint8_t bfloat_code = 4;
inline constexpr int cpu = dl_device::cpu;
inline constexpr int cuda = dl_device::cuda;
inline constexpr int cuda_host = dl_device::cuda_host;

struct dtype {
  std::uint8_t code = 0;
  std::uint8_t bits = 0;
  std::uint16_t lanes = 0;
  friend constexpr bool operator==(dtype, dtype) = default;
};

template <class T>
inline constexpr std::uint8_t half_code = 0;
#if FERRY_HAS_HALF
template <>
inline constexpr std::uint8_t half_code<__half> = float_code;
template <>
inline constexpr std::uint8_t half_code<__nv_bfloat16> = bfloat_code;
#endif

/// The DLPack dtype of ferry element type T.
template <class T>
constexpr dtype dtype_of() {
  using U = std::remove_cv_t<T>;
  check_element<U>();
  constexpr auto bits = static_cast<std::uint8_t>(sizeof(U) * 8);
  if constexpr (is_half_type<U>)
    return {half_code<U>, bits, 1};
  else if constexpr (std::is_floating_point_v<U>)
    return {float_code, bits, 1};
  else if constexpr (std::is_signed_v<U>)
    return {int_code, bits, 1};
  else
    return {uint_code, bits, 1};
}

inline std::string describe(dtype d) {
  std::string name;
  switch (d.code) {
    case int_code: name = "int"; break;
    case uint_code: name = "uint"; break;
    case float_code: name = "float"; break;
    case bfloat_code: name = "bfloat"; break;
    default: name = "dtype"; break;
  }
  name += std::to_string(d.bits);
  if (d.lanes != 1) name += "x" + std::to_string(d.lanes);
  return name + " (code " + std::to_string(d.code) + ", bits " + std::to_string(d.bits) + ", lanes " +
         std::to_string(d.lanes) + ")";
}

inline std::string device_name(int type) {
  switch (type) {
    case cpu: return "kDLCPU";
    case cuda: return "kDLCUDA";
    case cuda_host: return "kDLCUDAHost";
    default: return "device type " + std::to_string(type);
  }
}

/// A foreign tensor as the checker sees it.
struct tensor {
  const char* api;  ///< The calling function, for messages ("from_dlpack").
  void* data;       ///< Base address; the first element is at data + byte_offset.
  std::uint64_t byte_offset;
  dtype type;
  std::string_view type_name;  ///< The source's own name for a dtype DLPack cannot code; or empty.
  int device_type;
  int device_id;
  int ndim;
  const std::int64_t* shape;
  const std::int64_t* strides;  ///< In elements; null means compact row-major.
};

/// What the destination view accepts: device types, and the device id that kDLCUDA and kDLCPU
/// must carry (kDLCUDAHost's id is not checked: pinned memory is reachable from every device).
struct accepts {
  std::array<int, 2> device_types;  ///< 0: no second type (DLPack device types start at 1).
  int device_id;
};

// Device memory of backend B: the device's own memory, and pinned memory where the device reads
// it in place (CUDA, through UVA).
template <class B>
accepts device_memory(int device) {
  using kind = memory_kind<B>;
  return {{kind::device, kind::device_reads_pinned ? kind::pinned : 0}, device};
}
// Pinned memory of backend B (on the host backend all memory is).
template <class B>
accepts pinned_memory() {
  return {{memory_kind<B>::pinned, 0}, 0};
}

// Memory the host reads and writes (pinned or pageable), on every backend.
inline accepts host_memory() { return {{cpu, cuda_host}, 0}; }

template <class T>
struct checked_view {
  T* data;
  std::size_t size;
};

[[noreturn]] inline void mismatch(const tensor& t, const std::string& what) {
  throw std::invalid_argument(std::string("ferry: ") + t.api + ": " + what);
}

inline std::string dims(const std::int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

inline std::string compact_strides(const std::int64_t* shape, int n) {
  std::string s = "]";
  std::int64_t stride = 1;
  for (int i = n - 1; i >= 0; --i) {
    s.insert(0, (i ? ", " : "") + std::to_string(stride));
    stride *= shape[i];
  }
  return "[" + s;
}

/// The elements of `t` as a flat T view, or std::invalid_argument naming the first mismatch
/// (expected vs got).
template <class T>
checked_view<T> check(const tensor& t, const accepts& a) {
  bool device_ok = false;
  std::string expected_devices;
  for (int d : a.device_types) {
    if (d == 0) continue;
    device_ok = device_ok || d == t.device_type;
    expected_devices += (expected_devices.empty() ? "" : " or ") + device_name(d);
  }
  if (!device_ok)
    mismatch(t, "device type mismatch: expected " + expected_devices + ", got " + device_name(t.device_type));
  if (t.device_type != cuda_host && t.device_id != a.device_id)
    mismatch(t, "device id mismatch: expected " + std::to_string(a.device_id) + ", got " +
                    std::to_string(t.device_id));

  constexpr dtype want = dtype_of<T>();
  if (t.type != want)
    mismatch(t, "dtype mismatch: expected " + describe(want) + ", got " +
                    (t.type_name.empty() ? describe(t.type) : std::string(t.type_name)));

  if (t.ndim < 0) mismatch(t, "ndim mismatch: expected >= 0, got " + std::to_string(t.ndim));
  if (t.ndim > 0 && t.shape == nullptr) mismatch(t, "shape is null for ndim " + std::to_string(t.ndim));
  std::size_t count = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0)
      mismatch(t, "negative extent " + std::to_string(t.shape[i]) + " in dimension " + std::to_string(i));
    if (!mul_fits(count, static_cast<std::size_t>(t.shape[i]), count) ||
        count > static_cast<std::size_t>(INT64_MAX))
      mismatch(t, "the element count of shape " + dims(t.shape, t.ndim) + " overflows");
  }
  const std::size_t bytes = checked_bytes(count, sizeof(T), "a tensor");

  // Row-major compact: each stride is the product of the extents after it; a dimension of extent
  // 1 may carry any stride, and an empty tensor has no layout to check.
  if (t.strides != nullptr && count != 0) {
    std::int64_t want_stride = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != want_stride)
        mismatch(t, "not row-major contiguous: shape " + dims(t.shape, t.ndim) + ", expected strides " +
                        compact_strides(t.shape, t.ndim) + " (or null), got " + dims(t.strides, t.ndim));
      want_stride *= t.shape[i];
    }
  }

  if (t.data == nullptr && count != 0) mismatch(t, "data is null for " + std::to_string(count) + " elements");
  // The elements lie at [data + byte_offset, data + byte_offset + bytes): neither end may wrap
  // round the address space (a byte_offset near 2^64 would put them before the data).
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  std::uintptr_t address = 0, end = 0;
  if (t.byte_offset > std::numeric_limits<std::uintptr_t>::max() ||
      __builtin_add_overflow(base, static_cast<std::uintptr_t>(t.byte_offset), &address))
    mismatch(t, "byte_offset " + std::to_string(t.byte_offset) + " wraps the address: data (" +
                    std::to_string(base) + ") + byte_offset overflows the address space");
  if (__builtin_add_overflow(address, bytes, &end))
    mismatch(t, "byte_offset " + std::to_string(t.byte_offset) + ": the tensor's " + std::to_string(bytes) +
                    " bytes at data (" + std::to_string(base) +
                    ") + byte_offset wrap past the end of the address space");
  if (address % alignof(T) != 0)
    mismatch(t, "misaligned: data + byte_offset (byte_offset " + std::to_string(t.byte_offset) +
                    ") expected aligned to alignof(element) = " + std::to_string(alignof(T)) +
                    " bytes, got address % " + std::to_string(alignof(T)) + " = " +
                    std::to_string(address % alignof(T)));
  return {reinterpret_cast<T*>(address), count};
}

}  // namespace ferry::detail::dl
