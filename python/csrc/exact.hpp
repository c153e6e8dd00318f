// ferry_vllm's one rule for turning a source value into a tensor element: a value converts only
// when the element holds it exactly, whatever the source (a Python number, a NumPy array of any
// dtype, a torch tensor of another dtype). Depends on neither Python nor torch, so that a fuzz
// target drives it (tests/fuzz/values_fuzz.cpp); python/csrc/values.cpp reads Python objects,
// buffers and tensors through it. docs/python.md states the rule:
//
//   target int32 / int64   an integer (or an integral float) inside the target's range; a float
//                          with a fraction, NaN and +-inf are refused
//   target float32         an integer that float32 holds exactly (every |v| <= 2^24, and wider
//                          ones whose low bits are zero); a float rounded to the nearest float32
//                          (as torch and NumPy do: the one rounding ferry_vllm makes), refused
//                          when it is finite and beyond float32's range; NaN and +-inf kept
//   bool                   0 or 1 into any target
#pragma once

#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace ferry_vllm::exact {

/// How a source element is encoded in memory.
enum class kind : std::uint8_t { boolean, signed_int, unsigned_int, floating, bfloat16 };

/// A source element's encoding: its kind, its size in bytes (boolean 1; integers 1, 2, 4, 8;
/// floating 2 = IEEE half, 4, 8; bfloat16 2) and whether its bytes are in the other order than
/// the host's.
struct format {
  kind k = kind::signed_int;
  std::uint8_t size = 0;
  bool swapped = false;
};

/// Whether `f` is an encoding decode() reads.
constexpr bool valid(format f) noexcept {
  switch (f.k) {
    case kind::boolean: return f.size == 1;
    case kind::signed_int:
    case kind::unsigned_int: return f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8;
    case kind::floating: return f.size == 2 || f.size == 4 || f.size == 8;
    case kind::bfloat16: return f.size == 2;
  }
  return false;
}

/// A source value, decoded without loss (every float of the encodings above is a double).
struct value {
  enum class tag : std::uint8_t { boolean, signed_int, unsigned_int, floating };
  tag t = tag::signed_int;
  std::uint8_t float_bytes = 8;  ///< floating: the source's precision (2, 4 or 8), for messages
  std::int64_t i = 0;            ///< boolean (0 or 1) and signed_int
  std::uint64_t u = 0;           ///< unsigned_int
  double d = 0;                  ///< floating

  static constexpr value of_bool(bool b) noexcept { return {tag::boolean, 8, b ? 1 : 0, 0, 0}; }
  static constexpr value of_signed(std::int64_t v) noexcept { return {tag::signed_int, 8, v, 0, 0}; }
  static constexpr value of_unsigned(std::uint64_t v) noexcept { return {tag::unsigned_int, 8, 0, v, 0}; }
  static constexpr value of_double(double v, std::uint8_t bytes = 8) noexcept {
    return {tag::floating, bytes, 0, 0, v};
  }
};

/// Why a value does not convert.
enum class refusal : std::uint8_t {
  none,          ///< it converts
  out_of_range,  ///< beyond the target's range (an integer target's, or float32's finite range)
  not_integer,   ///< a finite float with a fraction, into an integer target
  not_finite,    ///< NaN or +-inf, into an integer target
  inexact,       ///< an integer that float32 does not hold exactly
};

/// The element types ferry_vllm's targets hold.
template <class T>
concept element = std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> || std::is_same_v<T, float>;

/// torch's name of T.
template <element T>
constexpr std::string_view name() noexcept {
  if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else return "float32";
}

// ---- decoding -----------------------------------------------------------------------------------

namespace detail {
template <class U>
U load(const std::byte* p, bool swapped) noexcept {
  U v;
  std::memcpy(&v, p, sizeof(U));
  if (swapped) {
    if constexpr (sizeof(U) == 2) v = static_cast<U>((v >> 8) | (v << 8));
    else if constexpr (sizeof(U) == 4) v = __builtin_bswap32(v);
    else if constexpr (sizeof(U) == 8) v = __builtin_bswap64(v);
  }
  return v;
}

/// IEEE binary16 bits as the double they denote (exact).
inline double half_to_double(std::uint16_t h) noexcept {
  const bool negative = (h & 0x8000u) != 0;
  const int e = (h >> 10) & 0x1f;
  const unsigned m = h & 0x3ffu;
  double v;
  if (e == 0x1f) v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -24);  // subnormal (and zero)
  else v = std::ldexp(static_cast<double>(m | 0x400u), e - 25);
  return negative ? -v : v;
}
}  // namespace detail

/// The element at `p` (valid(f)), decoded without loss.
inline value decode(const std::byte* p, format f) noexcept {
  using detail::load;
  switch (f.k) {
    case kind::boolean: return value::of_bool(*reinterpret_cast<const unsigned char*>(p) != 0);
    case kind::signed_int:
      switch (f.size) {
        case 1: return value::of_signed(static_cast<std::int8_t>(load<std::uint8_t>(p, false)));
        case 2: return value::of_signed(static_cast<std::int16_t>(load<std::uint16_t>(p, f.swapped)));
        case 4: return value::of_signed(static_cast<std::int32_t>(load<std::uint32_t>(p, f.swapped)));
        default: return value::of_signed(static_cast<std::int64_t>(load<std::uint64_t>(p, f.swapped)));
      }
    case kind::unsigned_int:
      switch (f.size) {
        case 1: return value::of_unsigned(load<std::uint8_t>(p, false));
        case 2: return value::of_unsigned(load<std::uint16_t>(p, f.swapped));
        case 4: return value::of_unsigned(load<std::uint32_t>(p, f.swapped));
        default: return value::of_unsigned(load<std::uint64_t>(p, f.swapped));
      }
    case kind::floating:
      switch (f.size) {
        case 2: return value::of_double(detail::half_to_double(load<std::uint16_t>(p, f.swapped)), 2);
        case 4: return value::of_double(std::bit_cast<float>(load<std::uint32_t>(p, f.swapped)), 4);
        default: return value::of_double(std::bit_cast<double>(load<std::uint64_t>(p, f.swapped)), 8);
      }
    case kind::bfloat16: {
      const std::uint32_t bits = std::uint32_t{load<std::uint16_t>(p, f.swapped)} << 16;
      return value::of_double(std::bit_cast<float>(bits), 2);
    }
  }
  return {};
}

/// The encoding a Python buffer's struct `fmt` names for elements of `itemsize` bytes (NumPy's
/// "<i", "=q", "?", "e", ...), or nothing for one ferry_vllm does not read (complex, long double,
/// strings, objects, records, pointers).
inline std::optional<format> parse_format(std::string_view fmt, std::size_t itemsize) noexcept {
  bool native = true, swapped = false;
  if (!fmt.empty()) {
    switch (fmt.front()) {
      case '@': fmt.remove_prefix(1); break;
      case '=': native = false; fmt.remove_prefix(1); break;
      case '<': native = false; swapped = std::endian::native != std::endian::little; fmt.remove_prefix(1); break;
      case '>':
      case '!': native = false; swapped = std::endian::native != std::endian::big; fmt.remove_prefix(1); break;
      default: break;
    }
  }
  if (fmt.size() != 1) return std::nullopt;
  format f{kind::signed_int, 0, swapped};
  std::size_t size = 0;
  switch (fmt.front()) {
    case '?': f.k = kind::boolean; size = 1; break;
    case 'b': size = 1; break;
    case 'B': f.k = kind::unsigned_int; size = 1; break;
    case 'h': size = 2; break;
    case 'H': f.k = kind::unsigned_int; size = 2; break;
    case 'i': size = 4; break;
    case 'I': f.k = kind::unsigned_int; size = 4; break;
    case 'l': size = native ? sizeof(long) : 4; break;
    case 'L': f.k = kind::unsigned_int; size = native ? sizeof(long) : 4; break;
    case 'q': size = 8; break;
    case 'Q': f.k = kind::unsigned_int; size = 8; break;
    case 'n': if (!native) return std::nullopt; size = sizeof(std::ptrdiff_t); break;
    case 'N': if (!native) return std::nullopt; f.k = kind::unsigned_int; size = sizeof(std::size_t); break;
    case 'e': f.k = kind::floating; size = 2; break;
    case 'f': f.k = kind::floating; size = 4; break;
    case 'd': f.k = kind::floating; size = 8; break;
    default: return std::nullopt;
  }
  if (size != itemsize) return std::nullopt;
  f.size = static_cast<std::uint8_t>(size);
  if (f.size == 1) f.swapped = false;
  return f;
}

// ---- the rule -----------------------------------------------------------------------------------

/// Converts `v` into `out` when T holds it exactly (float32: a float rounded to nearest), else
/// says why not and leaves `out` alone.
template <element T>
refusal convert(const value& v, T& out) noexcept {
  using tag = value::tag;
  if constexpr (std::is_integral_v<T>) {
    constexpr std::int64_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    switch (v.t) {
      case tag::boolean:
      case tag::signed_int:
        if (v.i < lo || v.i > hi) return refusal::out_of_range;
        out = static_cast<T>(v.i);
        return refusal::none;
      case tag::unsigned_int:
        if (v.u > static_cast<std::uint64_t>(hi)) return refusal::out_of_range;
        out = static_cast<T>(v.u);
        return refusal::none;
      case tag::floating: {
        if (!std::isfinite(v.d)) return refusal::not_finite;
        if (std::trunc(v.d) != v.d) return refusal::not_integer;
        // [lo, hi + 1) in doubles: both bounds are powers of two (exact), so the comparison is.
        constexpr double bound = static_cast<double>(std::uint64_t{1} << (sizeof(T) * 8 - 1));
        if (v.d < -bound || v.d >= bound) return refusal::out_of_range;
        out = static_cast<T>(v.d);
        return refusal::none;
      }
    }
    return refusal::out_of_range;
  } else {
    switch (v.t) {
      case tag::boolean: out = static_cast<float>(v.i); return refusal::none;
      case tag::signed_int: {
        const float f = static_cast<float>(v.i);
        // 2^63 is the one float at or above INT64_MAX that the cast may give: no int64 equals it.
        if (f >= 0x1p63f || static_cast<std::int64_t>(f) != v.i) return refusal::inexact;
        out = f;
        return refusal::none;
      }
      case tag::unsigned_int: {
        const float f = static_cast<float>(v.u);
        if (f >= 0x1p64f || static_cast<std::uint64_t>(f) != v.u) return refusal::inexact;
        out = f;
        return refusal::none;
      }
      case tag::floating: {
        const float f = static_cast<float>(v.d);
        if (std::isinf(f) && std::isfinite(v.d)) return refusal::out_of_range;
        out = f;
        return refusal::none;
      }
    }
    return refusal::out_of_range;
  }
}

// ---- whole sources --------------------------------------------------------------------------------

/// The first element of a source that does not convert: its place (in C order) and value.
struct failure {
  std::size_t position = 0;
  refusal why = refusal::none;
  value v;
};

/// Most dimensions convert_all() walks (a source of more is refused by its reader).
inline constexpr std::size_t max_dims = 32;

/// Converts every element of the strided array at `base` (`shape` elements per dimension, `strides`
/// in bytes, C order; no dimension: one element; at most max_dims) into out[0, n), n the product of
/// the shape.
/// Returns the first element that does not convert (out then holds garbage up to it: the caller
/// discards it, so that a refused source changes nothing).
template <element T>
std::optional<failure> convert_all(const std::byte* base, format f, std::span<const std::int64_t> shape,
                                   std::span<const std::int64_t> strides, T* out) noexcept {
  std::size_t n = 1;
  for (const std::int64_t e : shape) n *= static_cast<std::size_t>(e);
  if (n == 0) return std::nullopt;
  const std::size_t dims = shape.size();
  // The innermost dimension is a loop of its own; `index` counts the outer ones (C order).
  const std::int64_t inner = dims == 0 ? 1 : shape[dims - 1];
  const std::int64_t step = dims == 0 ? 0 : strides[dims - 1];
  std::int64_t index[max_dims] = {};
  std::size_t k = 0;
  for (;;) {
    std::ptrdiff_t offset = 0;
    for (std::size_t d = 0; d + 1 < dims; ++d) offset += static_cast<std::ptrdiff_t>(index[d] * strides[d]);
    const std::byte* row = base + offset;
    for (std::int64_t j = 0; j < inner; ++j, ++k) {
      const value v = decode(row + j * step, f);
      if (const refusal why = convert<T>(v, out[k]); why != refusal::none) return failure{k, why, v};
    }
    if (k == n) return std::nullopt;
    for (std::size_t d = dims - 1; d-- > 0;) {  // the next outer index, C order
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// ---- messages ------------------------------------------------------------------------------------

namespace detail {
/// x as Python's repr() prints a float (shortest round trip at the precision of F: "2.7", "2.0",
/// "1e+39", "9.223372036854776e+18", "1e-05"): scientific below 1e-4 and from 1e16, else fixed
/// with at least one decimal.
template <class F>
std::string float_text(F x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  const int exponent = std::stoi(s.substr(s.find('e') + 1));
  if (exponent < -4 || exponent >= 16) return s;
  r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  s.assign(buf, r.ptr);
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}
}  // namespace detail

/// `v` as Python prints it: an integer in decimal, a float as repr() prints it at its source's
/// precision, a bool as True or False.
inline std::string text(const value& v) {
  switch (v.t) {
    case value::tag::boolean: return v.i != 0 ? "True" : "False";
    case value::tag::signed_int: return std::to_string(v.i);
    case value::tag::unsigned_int: return std::to_string(v.u);
    case value::tag::floating:
      return v.float_bytes < 8 ? detail::float_text(static_cast<float>(v.d)) : detail::float_text(v.d);
  }
  return "?";
}

/// "position 5", or for a source of several dimensions "position 5 (index [1, 2])".
inline std::string position_text(std::size_t position, std::span<const std::int64_t> shape = {}) {
  std::string s = "position " + std::to_string(position);
  if (shape.size() < 2 || shape.size() > max_dims) return s;
  std::int64_t idx[max_dims] = {};
  std::size_t rest = position;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto e = static_cast<std::size_t>(shape[d]);
    idx[d] = e == 0 ? 0 : static_cast<std::int64_t>(rest % e);
    rest = e == 0 ? 0 : rest / e;
  }
  s += " (index [";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "])";
}

/// Why a value is refused, after "value V at P": "is out of int32's range [-2147483648,
/// 2147483647]", "is not an integer (int32 holds integers only)", ...
template <element T>
std::string reason(refusal why) {
  const std::string n(name<T>());
  switch (why) {
    case refusal::none: return "converts";
    case refusal::out_of_range:
      if constexpr (std::is_integral_v<T>)
        return "is out of " + n + "'s range [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
               std::to_string(std::numeric_limits<T>::max()) + "]";
      else
        return "is beyond float32's range (its largest finite value is 3.4028235e+38)";
    case refusal::not_integer: return "is not an integer (" + n + " holds integers only)";
    case refusal::not_finite: return "is not finite (" + n + " holds integers only)";
    case refusal::inexact:
      return "is an integer that float32 does not hold exactly (float32 holds every integer up to 2^24 "
             "= 16777216 in magnitude, wider ones only with their low bits zero)";
  }
  return "is refused";
}

/// The whole message: "ferry: {api}: value {value_text} at {where} {reason}" (without " at
/// {where}" when `where` is empty: a single value).
template <element T>
std::string message(std::string_view api, std::string_view value_text, std::string_view where, refusal why) {
  std::string s = "ferry: ";
  s.append(api).append(": value ").append(value_text);
  if (!where.empty()) s.append(" at ").append(where);
  return s.append(" ") + reason<T>(why);
}

}  // namespace ferry_vllm::exact
