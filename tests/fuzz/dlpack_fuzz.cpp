// Fuzz target: from_dlpack / from_dlpack_pinned / from_dlpack_host and to_dlpack (host backend),
// and the tensor checker behind them, against a reference of the documented rules.
//
// from_*: a DLTensor with fuzzed dtype, device, ndim, shape, strides, byte_offset and data (into
// a real heap buffer, null, or any address). The reference decides accept or reject from the
// documented rules, in exact (128-bit) arithmetic; an accepted view must be exactly
// data + byte_offset with the shape's element count (an address that wraps past 2^64 must be
// rejected), and when that range lies inside the buffer every element is read and written back
// (ASan checks the view is in bounds). A rejection must be std::invalid_argument ("ferry: ...").
// A tensor whose end (one past its last byte) would reach or pass 2^64 may be accepted or
// rejected.
//
// to_dlpack: a span (a real buffer, or a huge size at an address never dereferenced) and a
// fuzzed shape; accepted iff every extent is >= 0 and their product is the span's size and fits
// int64 (DLPack's shape and strides are int64). An accepted tensor must carry the span's address,
// the shape, compact row-major strides, byte_offset 0, kDLCPU/0 and T's dtype, keep its addresses
// when moved, and read back through from_dlpack as the same span.
#include "fuzz_input.hpp"

#include <ferry/interop/dlpack.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace {

using namespace ferry_fuzz;
using host = ferry::backend::host;
constexpr u128 int64_max = static_cast<u128>(INT64_MAX);
constexpr u128 two64 = static_cast<u128>(1) << 64;

template <class T>
DLDataType dtype_of() {
  constexpr auto d = ferry::detail::dl::dtype_of<T>();
  return {d.code, d.bits, d.lanes};
}

std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string describe(const DLTensor& t, int api) {
  std::string s = "api " + std::to_string(api) + " data " + hex(reinterpret_cast<std::uintptr_t>(t.data)) +
                  " byte_offset " + hex(t.byte_offset) + " dtype " + std::to_string(t.dtype.code) + "/" +
                  std::to_string(t.dtype.bits) + "/" + std::to_string(t.dtype.lanes) + " device " +
                  std::to_string(t.device.device_type) + "/" + std::to_string(t.device.device_id) + " ndim " +
                  std::to_string(t.ndim) + " shape";
  for (int i = 0; i < t.ndim && t.shape != nullptr && i < 8; ++i) s += " " + std::to_string(t.shape[i]);
  s += t.strides == nullptr ? " strides null" : " strides";
  for (int i = 0; i < t.ndim && t.strides != nullptr && i < 8; ++i) s += " " + std::to_string(t.strides[i]);
  return s;
}

std::int64_t extent(input& in) {
  const std::uint8_t how = in.byte();
  if (how < 200) return static_cast<std::int64_t>(in.below(9));
  if (how < 240) return static_cast<std::int64_t>(in.edge());  // may be negative
  return static_cast<std::int64_t>(in.raw());
}

// from_dlpack and its siblings.
template <class T>
void from_case(input& in) {
  const std::size_t buf_bytes = in.below(1025);
  const auto buf = std::make_unique<std::byte[]>(buf_bytes);  // exactly buf_bytes: ASan guards the ends
  for (std::size_t i = 0; i < buf_bytes; ++i) buf[i] = static_cast<std::byte>(i * 131 + 7);
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(buf.get());

  DLTensor t{};
  switch (in.below(5)) {
    case 0:
    case 1:
    case 2: t.data = buf.get() + in.below(buf_bytes + 1); break;
    case 3: t.data = nullptr; break;
    default: t.data = reinterpret_cast<void*>(in.raw()); break;  // never dereferenced by this harness
  }
  switch (in.below(4)) {
    case 0:
    case 1: t.byte_offset = in.size(buf_bytes + 16); break;
    case 2: t.byte_offset = 0 - in.below(4096); break;  // data + byte_offset wraps to before data
    default: t.byte_offset = in.raw(); break;
  }
  t.dtype = dtype_of<T>();
  if (in.below(8) == 0) t.dtype = {in.byte(), in.byte(), static_cast<std::uint16_t>(in.raw(2))};
  t.device = {kDLCPU, 0};
  if (in.below(8) == 0) {
    t.device.device_type = static_cast<DLDeviceType>(in.below(16));  // the enum's value range
    t.device.device_id = in.flag() ? static_cast<int>(in.between(0, 3)) - 1 : static_cast<int>(in.raw(4));
  }
  std::array<std::int64_t, 8> shape{}, strides{};
  t.ndim = static_cast<int>(in.below(7));
  if (in.below(16) == 0) t.ndim = in.flag() ? -1 : INT_MIN + static_cast<int>(in.below(4));
  t.shape = shape.data();
  for (int i = 0; i < t.ndim; ++i) shape[i] = extent(in);
  if (t.ndim > 0 && in.below(16) == 0) t.shape = nullptr;
  switch (in.below(4)) {
    case 0: t.strides = nullptr; break;
    case 1:
    case 2: {  // compact, then maybe one stride changed
      std::uint64_t s = 1;
      for (int i = std::max(t.ndim, 0) - 1; i >= 0; --i) {
        strides[i] = static_cast<std::int64_t>(s);
        s *= static_cast<std::uint64_t>(shape[i]);  // unsigned: wraps without UB
      }
      if (t.ndim > 0 && in.flag()) {
        const auto i = in.below(static_cast<std::uint64_t>(t.ndim));
        strides[i] = extent(in);
      }
      t.strides = strides.data();
      break;
    }
    default:
      for (int i = 0; i < t.ndim; ++i) strides[i] = extent(in);
      t.strides = strides.data();
  }
  const int api = static_cast<int>(in.below(4));
  const int device_arg = in.below(4) == 0 ? static_cast<int>(in.between(0, 3)) - 1 : 0;

  // The reference: every documented rule, in exact arithmetic.
  bool reject = false, either = false;
  const int dt = t.device.device_type;
  if (api == 3) {
    reject |= !(dt == kDLCPU || dt == kDLCUDAHost) || (dt == kDLCPU && t.device.device_id != 0);
  } else {
    reject |= dt != kDLCPU || t.device.device_id != (api == 0 ? device_arg : 0);
  }
  const DLDataType want = dtype_of<T>();
  reject |= t.dtype.code != want.code || t.dtype.bits != want.bits || t.dtype.lanes != want.lanes;
  reject |= t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr);
  u128 count = 1;
  bool prefix_overflow = false;  // a running product of the extents past int64, before a 0
  if (!reject) {
    for (int i = 0; i < t.ndim; ++i) reject |= t.shape[i] < 0;
    for (int i = 0; i < t.ndim && !reject; ++i) {
      count *= static_cast<u128>(t.shape[i]);
      if (count > int64_max) prefix_overflow = true, count = int64_max + 1;  // saturate
    }
  }
  // The element count must fit int64. An empty tensor whose extents before the 0 multiply past
  // int64 may be rejected or accepted.
  reject |= count > int64_max;
  if (!reject && count == 0 && prefix_overflow) either = true;
  const u128 bytes = count * sizeof(T);
  reject |= bytes >= two64;
  if (!reject && t.strides != nullptr && count != 0) {
    u128 s = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && (t.strides[i] < 0 || static_cast<u128>(t.strides[i]) != s)) reject = true;
      s *= static_cast<u128>(t.shape[i]);
    }
  }
  reject |= t.data == nullptr && count != 0;
  const u128 address = static_cast<u128>(reinterpret_cast<std::uintptr_t>(t.data)) + t.byte_offset;
  reject |= address >= two64;  // data + byte_offset past 2^64: the view would start before data
  reject |= address % alignof(T) != 0;
  if (!reject && address + bytes >= two64) either = true;  // the end (one past the last byte) wraps

  const std::string what = "from_dlpack " + describe(t, api);
  T* got = nullptr;
  std::size_t got_size = 0;
  const outcome o = attempt(what, [&] {
    switch (api) {
      case 0: {
        const auto v = ferry::from_dlpack<T, host>(t, device_arg);
        got = v.data(), got_size = v.size();
        break;
      }
      case 1: {
        const auto v = ferry::from_dlpack<T, host>(t);
        got = v.data(), got_size = v.size();
        break;
      }
      case 2: {
        const auto v = ferry::from_dlpack_pinned<T, host>(t);
        got = v.data(), got_size = v.size();
        break;
      }
      default: {
        const auto v = ferry::from_dlpack_host<T>(t);
        got = v.data(), got_size = v.size();
        break;
      }
    }
  });
  if (o != outcome::ok) {
    expect(o == outcome::invalid_argument, what + ": rejected with " + name(o) + ", not std::invalid_argument");
    expect(reject || either, what + ": rejected a tensor the documented rules accept");
    return;
  }
  expect(!reject, what + ": accepted a tensor the documented rules reject (view at " +
                      hex(reinterpret_cast<std::uintptr_t>(got)) + ")");
  expect(static_cast<u128>(reinterpret_cast<std::uintptr_t>(got)) == address && got_size == count,
         what + ": the view is not data + byte_offset with the shape's element count");
  // Described inside the buffer: the view must be too (ASan checks every byte of it).
  if (address >= base && address + bytes <= static_cast<u128>(base) + buf_bytes && got_size != 0) {
    std::vector<T> copy(got_size);
    std::memcpy(copy.data(), got, got_size * sizeof(T));
    std::memcpy(got, copy.data(), got_size * sizeof(T));
  }
}

// to_dlpack, and its tensor read back by from_dlpack.
template <class T>
void to_case(input& in) {
  std::vector<T> owned;
  T* data = nullptr;
  std::size_t n = 0;
  if (in.below(4) != 0) {
    n = in.below(65);
    owned.resize(n);
    data = owned.data();
  } else {
    n = in.size(1u << 16);
    data = reinterpret_cast<T*>(in.raw(6) * alignof(T));  // never dereferenced
  }
  const ferry::device_span<T> s(data, n);
  std::vector<std::int64_t> shape(in.below(6));
  for (auto& e : shape) e = extent(in);
  if (!shape.empty() && in.flag()) {  // make the last extent complete the count when it can
    u128 rest = 1;
    for (std::size_t i = 0; i + 1 < shape.size(); ++i) rest *= shape[i] >= 0 ? static_cast<u128>(shape[i]) : 0;
    if (rest != 0 && rest < two64 && n % static_cast<std::uint64_t>(rest) == 0 &&
        n / static_cast<std::uint64_t>(rest) <= static_cast<std::uint64_t>(INT64_MAX))
      shape.back() = static_cast<std::int64_t>(n / static_cast<std::uint64_t>(rest));
  }
  const bool with_device = in.flag();
  const int device_arg = in.below(4) == 0 ? static_cast<int>(in.between(0, 3)) - 1 : 0;

  // The reference.
  bool reject = with_device && device_arg != 0, either = false;
  std::vector<std::int64_t> dims = shape;
  if (dims.empty()) {
    if (n > static_cast<std::uint64_t>(INT64_MAX)) reject = true;
    dims = {static_cast<std::int64_t>(n)};
  }
  u128 count = 1;
  bool prefix_overflow = false;
  for (auto e : dims) {
    reject |= e < 0;
    if (e >= 0) count *= static_cast<u128>(e);
    if (count >= two64) prefix_overflow = true, count = two64;  // saturate (no 128-bit wrap)
  }
  reject |= prefix_overflow || count != n || count > int64_max;
  // An empty span whose shape has an extent 0 in front of extents whose product (a stride)
  // exceeds int64: no exact strides exist; rejecting or accepting (strides then unchecked) pass.
  u128 suffix = 1;
  bool stride_fits = true;
  for (std::size_t i = dims.size(); i-- > 0;) {
    if (suffix > int64_max) stride_fits = false;
    suffix *= dims[i] > 0 ? static_cast<u128>(dims[i]) : 1;
    if (suffix >= two64) suffix = two64;
  }
  if (!reject && !stride_fits) either = true;
  u128 running = 1;
  bool running_overflow = false;  // from_dlpack may reject such an empty tensor (see from_case)
  for (auto e : dims) {
    running *= e > 0 ? static_cast<u128>(e) : 0;
    if (running > int64_max) running_overflow = true, running = int64_max;
  }

  std::string what = "to_dlpack of " + std::to_string(n) + " elements (sizeof " + std::to_string(sizeof(T)) +
                     ") shape [";
  for (auto e : shape) what += std::to_string(e) + " ";
  what += "] device " + (with_device ? std::to_string(device_arg) : std::string("current"));

  std::optional<ferry::dlpack_tensor> dl;
  const std::span<const std::int64_t> shape_arg(shape);
  const outcome o = attempt(what, [&] {
    dl.emplace(with_device ? ferry::to_dlpack<host>(s, device_arg, shape_arg) : ferry::to_dlpack<host>(s, shape_arg));
  });
  if (o != outcome::ok) {
    expect(o == outcome::invalid_argument, what + ": rejected with " + name(o) + ", not std::invalid_argument");
    expect(reject || either, what + ": rejected a span and shape the documented rules accept");
    return;
  }
  expect(!reject, what + ": accepted a span and shape the documented rules reject");
  const DLTensor& t = dl->get();
  expect(t.data == data && t.byte_offset == 0 && t.device.device_type == kDLCPU && t.device.device_id == 0,
         what + ": wrong data, byte_offset or device");
  const DLDataType want = dtype_of<T>();
  expect(t.dtype.code == want.code && t.dtype.bits == want.bits && t.dtype.lanes == want.lanes,
         what + ": wrong dtype");
  expect(t.ndim == static_cast<int>(dims.size()) && t.shape != nullptr && t.strides != nullptr,
         what + ": wrong ndim, or null shape or strides");
  u128 stride = 1;
  for (std::size_t i = dims.size(); i-- > 0;) {
    expect(t.shape[i] == dims[i], what + ": wrong extent in dimension " + std::to_string(i));
    if (stride_fits)
      expect(static_cast<u128>(t.strides[i]) == stride && t.strides[i] >= 0,
             what + ": not the compact stride in dimension " + std::to_string(i));
    stride *= static_cast<u128>(dims[i]);
  }
  // Moving keeps the DLTensor and its shape where they were.
  const DLTensor* at = &t;
  const std::int64_t* shape_at = t.shape;
  ferry::dlpack_tensor moved = std::move(*dl);
  dl.reset();
  expect(&moved.get() == at && moved.get().shape == shape_at, what + ": moving changed the tensor's addresses");
  // Read back.
  if (stride_fits && (data != nullptr || n == 0) &&
      static_cast<u128>(reinterpret_cast<std::uintptr_t>(data)) + static_cast<u128>(n) * sizeof(T) < two64) {
    ferry::device_span<T> back;
    const outcome r = attempt(what + " read back", [&] { back = ferry::from_dlpack<T, host>(moved.get()); });
    expect(r == outcome::ok || (running_overflow && r == outcome::invalid_argument),
           what + ": from_dlpack rejected to_dlpack's tensor with " + name(r));
    expect(r != outcome::ok || (back.data() == data && back.size() == n), what + ": from_dlpack(to_dlpack(s)) is not s");
  }
}

template <class F>
void with_element(std::uint8_t k, F&& f) {
  switch (k % 6) {
    case 0: f(std::int8_t{}); break;
    case 1: f(std::uint16_t{}); break;
    case 2: f(std::int32_t{}); break;
    case 3: f(float{}); break;
    case 4: f(double{}); break;
    default: f(std::uint64_t{}); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  // Several cases per input, each decoding its own fields.
  for (int cases = 0; cases < 8 && !in.empty(); ++cases) {
    const std::uint8_t what = in.byte();
    with_element(what >> 1, [&](auto tag) {
      using T = decltype(tag);
      if (what & 1)
        to_case<T>(in);
      else
        from_case<T>(in);
    });
  }
  return 0;
}
