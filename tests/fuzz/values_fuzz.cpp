// Fuzz target: ferry_vllm's value conversion core (python/csrc/exact.hpp), the one rule by which
// every Python entry point turns a source element into an int32, int64 or float32 element. Drives
// single values (booleans, integers, unsigned integers, doubles at the edges of each target's range,
// NaN and infinities), Python buffer formats (NumPy's struct strings, byte orders, wrong item
// sizes) and whole strided arrays of random bytes (any encoding, 0 to 3 dimensions, negative and
// zero strides), and checks each against a reference written differently: integer ranges in
// 128-bit arithmetic, float32's exact integers by their significant bits, float32's range by its
// rounding threshold (2^128 - 2^103), IEEE half decoded from its fields. A disagreement, a message
// without the "ferry: " prefix or without the value and its position, and every sanitizer report
// is a finding.
#include "fuzz_input.hpp"

#include <exact.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace ferry_fuzz;
namespace ex = ferry_vllm::exact;

// ---- the reference ------------------------------------------------------------------------------

/// Whether the integer v (|v| <= 2^64) is a float32: its significant bits fit in 24.
bool float_holds(u128 magnitude) {
  if (magnitude == 0) return true;
  while ((magnitude & 1) == 0) magnitude >>= 1;
  return magnitude < (u128{1} << 24);
}

/// What convert<T> must do with v: the refusal, and the element when it converts.
template <class T>
ex::refusal expected(const ex::value& v, T& out) {
  using tag = ex::value::tag;
  if constexpr (std::is_integral_v<T>) {
    __extension__ using i128 = __int128;
    const i128 lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    i128 x = 0;
    switch (v.t) {
      case tag::boolean:
      case tag::signed_int: x = v.i; break;
      case tag::unsigned_int: x = static_cast<i128>(v.u); break;
      case tag::floating: {
        const long double d = v.d;
        if (std::isnan(d) || std::isinf(d)) return ex::refusal::not_finite;
        if (std::floor(d) != d) return ex::refusal::not_integer;
        if (d < static_cast<long double>(lo) || d > static_cast<long double>(hi)) return ex::refusal::out_of_range;
        x = static_cast<i128>(d);
        break;
      }
    }
    if (x < lo || x > hi) return ex::refusal::out_of_range;
    out = static_cast<T>(x);
    return ex::refusal::none;
  } else {
    switch (v.t) {
      case tag::boolean: out = static_cast<float>(v.i); return ex::refusal::none;
      case tag::signed_int: {
        // |v| without overflow: the two's-complement negation of its 64 bits, as unsigned.
        const u128 m = v.i < 0 ? u128(std::uint64_t{0} - static_cast<std::uint64_t>(v.i)) : static_cast<u128>(v.i);
        if (!float_holds(m)) return ex::refusal::inexact;
        out = static_cast<float>(v.i);
        return ex::refusal::none;
      }
      case tag::unsigned_int:
        if (!float_holds(v.u)) return ex::refusal::inexact;
        out = static_cast<float>(v.u);
        return ex::refusal::none;
      case tag::floating: {
        // Round to nearest even overflows from FLT_MAX + half an ulp: 2^128 - 2^103.
        const long double threshold = std::ldexp(1.0L, 128) - std::ldexp(1.0L, 103);
        if (std::isfinite(v.d) && std::fabs(static_cast<long double>(v.d)) >= threshold) return ex::refusal::out_of_range;
        out = static_cast<float>(v.d);
        return ex::refusal::none;
      }
    }
    return ex::refusal::none;
  }
}

/// Two elements are the same: bit for bit (a NaN is a NaN; -0.0 is not 0.0 for float32).
template <class T>
bool same(T a, T b) {
  if constexpr (std::is_same_v<T, float>) return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
  else return a == b;
}

/// IEEE half from its fields.
long double half_reference(std::uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 31;
  const int m = h & 1023;
  if (e == 31) return m ? std::numeric_limits<long double>::quiet_NaN() : sign * std::numeric_limits<long double>::infinity();
  if (e == 0) return sign * std::ldexp(static_cast<long double>(m), -24);
  return sign * std::ldexp(1.0L + m / 1024.0L, e - 15);
}

/// The element `f` encodes at p, read byte by byte (the reference of decode()).
ex::value decode_reference(const std::uint8_t* p, ex::format f) {
  std::uint64_t bits = 0;
  for (unsigned b = 0; b < f.size; ++b) {
    const unsigned shift = f.swapped == (std::endian::native == std::endian::little) ? 8 * (f.size - 1 - b) : 8 * b;
    bits |= std::uint64_t{p[b]} << shift;
  }
  const unsigned width = 8u * f.size;
  switch (f.k) {
    case ex::kind::boolean: return ex::value::of_bool(bits != 0);
    case ex::kind::signed_int: {
      const std::uint64_t sign = std::uint64_t{1} << (width - 1);
      const auto v = width == 64 ? static_cast<std::int64_t>(bits)
                                 : static_cast<std::int64_t>(bits ^ sign) - static_cast<std::int64_t>(sign);
      return ex::value::of_signed(v);
    }
    case ex::kind::unsigned_int: return ex::value::of_unsigned(bits);
    case ex::kind::floating:
      if (f.size == 2) return ex::value::of_double(static_cast<double>(half_reference(static_cast<std::uint16_t>(bits))), 2);
      if (f.size == 4) return ex::value::of_double(std::bit_cast<float>(static_cast<std::uint32_t>(bits)), 4);
      return ex::value::of_double(std::bit_cast<double>(bits), 8);
    case ex::kind::bfloat16: return ex::value::of_double(std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16), 2);
  }
  return {};
}

bool same_value(const ex::value& a, const ex::value& b) {
  if (a.t != b.t) return false;
  switch (a.t) {
    case ex::value::tag::boolean:
    case ex::value::tag::signed_int: return a.i == b.i;
    case ex::value::tag::unsigned_int: return a.u == b.u;
    case ex::value::tag::floating:
      return (std::isnan(a.d) && std::isnan(b.d)) || std::bit_cast<std::uint64_t>(a.d) == std::bit_cast<std::uint64_t>(b.d);
  }
  return false;
}

// ---- inputs -------------------------------------------------------------------------------------

/// A double near the edges that matter: each target's range, float32's range and its exact
/// integers, fractions, NaN, infinities, subnormals; or any bit pattern.
double edge_double(input& in) {
  static constexpr std::array<double, 18> edges = {
      0x1p31, 0x1p63, 0x1p24, 0x1p53, 0x1p64, 0x1p127, 0x1p128, 3.4028234663852886e38, 0x1p-149, 0.5, 2.7, 1.0, 0.0,
      std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 0x1p128 - 0x1p103,
      0x1p128 - 0x1p104, std::numeric_limits<double>::max()};
  const std::uint8_t how = in.byte();
  if (how >= 128) return std::bit_cast<double>(in.raw());
  double d = edges[how % edges.size()];
  switch ((how / edges.size()) % 4) {
    case 1: d = std::nextafter(d, std::numeric_limits<double>::infinity()); break;
    case 2: d = std::nextafter(d, -std::numeric_limits<double>::infinity()); break;
    case 3: d = d + static_cast<double>(in.below(5)) - 2; break;
    default: break;
  }
  return in.flag() ? -d : d;
}

ex::value any_value(input& in) {
  switch (in.below(4)) {
    case 0: return ex::value::of_bool(in.flag());
    case 1: {
      std::uint64_t x = in.flag() ? in.edge() : in.raw();
      if (in.flag()) x = 0 - x;  // negative edges too
      return ex::value::of_signed(static_cast<std::int64_t>(x));
    }
    case 2: return ex::value::of_unsigned(in.flag() ? in.edge() : in.raw());
    default: return ex::value::of_double(edge_double(in));
  }
}

template <class T>
void check_message(const ex::value& v, ex::refusal why, std::size_t position, std::span<const std::int64_t> shape) {
  const std::string where = ex::position_text(position, shape);
  const std::string m = ex::message<T>("values_fuzz", ex::text(v), where, why);
  expect(m.starts_with("ferry: "), "a message without the \"ferry: \" prefix: " + m);
  expect(m.find(ex::text(v)) != std::string::npos && m.find("position " + std::to_string(position)) != std::string::npos,
         "a message that does not name the value and its position: " + m);
  expect(m.find(ex::name<T>()) != std::string::npos, "a message that does not name the dtype: " + m);
}

template <class T>
void one_value(input& in) {
  const ex::value v = any_value(in);
  T got{}, want{};
  const ex::refusal g = ex::convert<T>(v, got), w = expected<T>(v, want);
  const std::string what = std::string(ex::name<T>()) + " from " + ex::text(v);
  trace(what);
  expect(g == w, what + ": refusal " + std::to_string(static_cast<int>(g)) + ", the reference's " +
                     std::to_string(static_cast<int>(w)));
  if (g == ex::refusal::none) expect(same(got, want), what + ": converted to another element than the reference's");
  else check_message<T>(v, g, 0, {});
}

/// Buffer formats: valid ones parse to what their letter says; anything else is refused.
void one_format(input& in) {
  static constexpr std::array<const char*, 32> formats = {
      "?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "n", "N", "e", "f", "d", "g", "Zf", "Zd", "O",
      "s", "3s", "w", "x", "c", "P", "<i", ">q", "=l", "!H", "@d", "T{i:a:}"};
  std::string fmt = formats[in.below(formats.size())];
  if (in.below(8) == 0) fmt.push_back(static_cast<char>(in.byte()));  // trailing junk
  if (in.below(8) == 0) fmt = std::string(1, static_cast<char>(in.byte()));
  const std::size_t itemsize = in.below(8) == 0 ? in.below(20) : std::size_t{1} << in.below(4);
  const auto f = ex::parse_format(fmt, itemsize);
  trace("parse_format(\"" + fmt + "\", " + std::to_string(itemsize) + ")");
  if (!f) return;
  expect(ex::valid(*f), "parse_format(" + fmt + ") gave an encoding decode() does not read");
  expect(f->size == itemsize, "parse_format(" + fmt + ") gave a size other than the item size");
  const char letter = fmt.back();
  const bool is_float = letter == 'e' || letter == 'f' || letter == 'd';
  const bool is_unsigned = letter == 'B' || letter == 'H' || letter == 'I' || letter == 'L' || letter == 'Q' || letter == 'N';
  expect(is_float == (f->k == ex::kind::floating) && is_unsigned == (f->k == ex::kind::unsigned_int) &&
             (letter == '?') == (f->k == ex::kind::boolean),
         "parse_format(" + fmt + ") gave another kind than its letter's");
  const bool big = fmt.front() == '>' || fmt.front() == '!';
  const bool little = fmt.front() == '<';
  if (f->size > 1 && (big || little))
    expect(f->swapped == (big == (std::endian::native == std::endian::little)), "parse_format(" + fmt + "): byte order");
  if (f->size > 1 && !big && !little) expect(!f->swapped, "parse_format(" + fmt + "): a native format swapped");
}

/// A whole strided array of random bytes, converted by convert_all, against the reference
/// element by element.
template <class T>
void one_array(input& in) {
  static constexpr std::array<ex::format, 14> encodings = {{
      {ex::kind::boolean, 1, false}, {ex::kind::signed_int, 1, false}, {ex::kind::unsigned_int, 1, false},
      {ex::kind::signed_int, 2, false}, {ex::kind::unsigned_int, 2, true}, {ex::kind::signed_int, 4, false},
      {ex::kind::unsigned_int, 4, false}, {ex::kind::signed_int, 8, true}, {ex::kind::unsigned_int, 8, false},
      {ex::kind::floating, 2, false}, {ex::kind::floating, 4, false}, {ex::kind::floating, 8, false},
      {ex::kind::floating, 8, true}, {ex::kind::bfloat16, 2, false}}};
  ex::format f = encodings[in.below(encodings.size())];
  if (f.size > 1 && in.below(4) == 0) f.swapped = !f.swapped;
  const std::size_t dims = in.below(4);
  std::int64_t shape[3] = {}, strides[3] = {};
  std::size_t n = 1;
  for (std::size_t d = 0; d < dims; ++d) {
    shape[d] = static_cast<std::int64_t>(in.below(6));
    n *= static_cast<std::size_t>(shape[d]);
  }
  // Strides: C order, or each a multiple of the item size in [-3, 3] (zero and negative too).
  const bool compact = in.flag();
  std::int64_t next = f.size;
  for (std::size_t d = dims; d-- > 0;) {
    strides[d] = compact ? next : (static_cast<std::int64_t>(in.below(7)) - 3) * f.size;
    next *= shape[d];
  }
  // The lowest and highest byte any element reaches, so that every access is inside the buffer.
  std::int64_t low = 0, high = 0;
  for (std::size_t d = 0; d < dims; ++d) {
    if (shape[d] == 0) continue;
    const std::int64_t span = (shape[d] - 1) * strides[d];
    (span < 0 ? low : high) += span;
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(high - low) + f.size);
  for (auto& b : bytes) b = in.byte();
  const std::byte* base = reinterpret_cast<const std::byte*>(bytes.data()) - low;
  const std::span<const std::int64_t> sh(shape, dims), st(strides, dims);

  std::vector<T> out(n);
  trace(std::string(ex::name<T>()) + " from " + std::to_string(n) + " elements of " + std::to_string(f.size) +
        " bytes in " + std::to_string(dims) + " dimensions");
  const auto fail = ex::convert_all<T>(base, f, sh, st, out.data());
  // The reference: each element in C order, until the first refusal.
  std::size_t k = 0;
  std::int64_t idx[3] = {};
  for (; k < n; ++k) {
    std::int64_t offset = 0;
    std::size_t rest = k;
    for (std::size_t d = dims; d-- > 0;) {
      idx[d] = static_cast<std::int64_t>(rest % static_cast<std::size_t>(shape[d]));
      rest /= static_cast<std::size_t>(shape[d]);
      offset += idx[d] * strides[d];
    }
    const ex::value v = decode_reference(bytes.data() + (offset - low), f);
    T want{};
    const ex::refusal why = expected<T>(v, want);
    const std::string at = "element " + std::to_string(k) + " (" + ex::text(v) + ")";
    if (why != ex::refusal::none) {
      expect(fail.has_value() && fail->position == k, at + ": refused by the reference, not where convert_all stopped");
      expect(fail->why == why && same_value(fail->v, v), at + ": convert_all reports another refusal or value");
      check_message<T>(fail->v, fail->why, k, sh);
      return;
    }
    expect(!fail || fail->position > k, at + ": convert_all refused an element the reference converts");
    expect(same(out[k], want), at + ": converted to another element than the reference's");
  }
  expect(!fail, "convert_all refused past the end of the source");
}

template <class T>
void one_case(input& in) {
  switch (in.below(3)) {
    case 0: return one_value<T>(in);
    case 1: return one_format(in);
    default: return one_array<T>(in);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  for (int c = 0; c < 64 && !in.empty(); ++c) {
    switch (in.below(3)) {
      case 0: one_case<std::int32_t>(in); break;
      case 1: one_case<std::int64_t>(in); break;
      default: one_case<float>(in); break;
    }
  }
  return 0;
}
