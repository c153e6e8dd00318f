// <ferry/interop/dlpack.hpp>: spans from DLPack tensors with every check (dtype, device type and
// id, contiguity, byte_offset and alignment), DLPack tensors over ferry spans, and round trips
// through which ferry's own transfers write and read.
#include <support/backends.hpp>
#include <transfer/transfer_support.hpp>

#include <ferry/interop/dlpack.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

using Catch::Matchers::ContainsSubstring;

namespace {

// A DLTensor over `v` with the host backend's device (kDLCPU, id 0) and the dtype `type`.
template <class T>
struct host_tensor {
  std::vector<T> v;
  std::vector<std::int64_t> shape;
  DLTensor t;
  host_tensor(std::vector<T> values, std::vector<std::int64_t> dims, DLDataType type)
      : v(std::move(values)), shape(std::move(dims)) {
    t = DLTensor{v.data(), DLDevice{kDLCPU, 0}, static_cast<int>(shape.size()), type, shape.data(), nullptr,
                 0};
  }
};

constexpr DLDataType dl_int32{kDLInt, 32, 1};
constexpr DLDataType dl_uint16{kDLUInt, 16, 1};
constexpr DLDataType dl_float32{kDLFloat, 32, 1};

// The dtype that to_dlpack gives T, after checking that from_dlpack takes it back as T.
template <class T>
std::tuple<int, int, int> dtype_of() {
  T x{};
  const auto t = ferry::to_dlpack<ferry::backend::host>(ferry::device_span<T>(&x, 1));
  REQUIRE(ferry::from_dlpack<T, ferry::backend::host>(t.get()).data() == &x);
  return {t.get().dtype.code, t.get().dtype.bits, t.get().dtype.lanes};
}

// The message of the std::invalid_argument that from_dlpack<T> (host backend) throws for `t`.
template <class T>
std::string rejection(const DLTensor& t) {
  try {
    (void)ferry::from_dlpack<T, ferry::backend::host>(t);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("DLPack dtypes of every ferry element type", "[interop][dlpack]") {
  using dt = std::tuple<int, int, int>;
  CHECK(dtype_of<std::int8_t>() == dt{kDLInt, 8, 1});
  CHECK(dtype_of<std::int16_t>() == dt{kDLInt, 16, 1});
  CHECK(dtype_of<std::int32_t>() == dt{kDLInt, 32, 1});
  CHECK(dtype_of<std::int64_t>() == dt{kDLInt, 64, 1});
  CHECK(dtype_of<long long>() == dt{kDLInt, 64, 1});
  CHECK(dtype_of<std::uint8_t>() == dt{kDLUInt, 8, 1});
  CHECK(dtype_of<std::uint16_t>() == dt{kDLUInt, 16, 1});
  CHECK(dtype_of<std::uint32_t>() == dt{kDLUInt, 32, 1});
  CHECK(dtype_of<const std::uint64_t>() == dt{kDLUInt, 64, 1});
  CHECK(dtype_of<float>() == dt{kDLFloat, 32, 1});
  CHECK(dtype_of<double>() == dt{kDLFloat, 64, 1});
#if FERRY_HAS_HALF
  CHECK(dtype_of<__half>() == dt{kDLFloat, 16, 1});
  CHECK(dtype_of<__nv_bfloat16>() == dt{kDLBfloat, 16, 1});
  // Same bits, another code: a float16 tensor is not bfloat16.
  __half h{};
  const auto t = ferry::to_dlpack<ferry::backend::host>(ferry::device_span<__half>(&h, 1));
  CHECK_THROWS_WITH(
      (ferry::from_dlpack<__nv_bfloat16, ferry::backend::host>(t.get())),
      ContainsSubstring(
          "expected bfloat16 (code 4, bits 16, lanes 1), got float16 (code 2, bits 16, lanes 1)"));
#endif
}

TEST_CASE("from_dlpack accepts compact host tensors and honours byte_offset", "[interop][dlpack]") {
  auto values = ferry_test::random_values<float>(24, 11);
  host_tensor<float> h(values, {2, 3, 4}, dl_float32);

  auto s = ferry::from_dlpack<float, ferry::backend::host>(h.t);
  CHECK(s.data() == h.v.data());
  CHECK(s.size() == 24);

  std::array<std::int64_t, 3> compact{12, 4, 1};
  h.t.strides = compact.data();
  CHECK(ferry::from_dlpack<float, ferry::backend::host>(h.t).size() == 24);

  // Extent-1 dimensions may carry any stride (as torch reports them).
  std::array<std::int64_t, 3> shape_1{1, 6, 4};
  std::array<std::int64_t, 3> odd_strides{99, 4, 1};
  h.t.shape = shape_1.data();
  h.t.strides = odd_strides.data();
  CHECK(ferry::from_dlpack<float, ferry::backend::host>(h.t).size() == 24);

  // byte_offset moves the first element; the size comes from the shape.
  std::array<std::int64_t, 1> tail{20};
  h.t.ndim = 1;
  h.t.shape = tail.data();
  h.t.strides = nullptr;
  h.t.byte_offset = 4 * sizeof(float);
  auto t = ferry::from_dlpack<const float, ferry::backend::host>(h.t);
  CHECK(t.data() == h.v.data() + 4);
  CHECK(t.size() == 20);

  // A 0-d tensor is one element; an empty tensor has no layout to check.
  h.t.ndim = 0;
  h.t.byte_offset = 0;
  CHECK(ferry::from_dlpack<float, ferry::backend::host>(h.t).size() == 1);
  std::array<std::int64_t, 2> empty{0, 5};
  std::array<std::int64_t, 2> any{3, 7};
  h.t.ndim = 2;
  h.t.shape = empty.data();
  h.t.strides = any.data();
  CHECK(ferry::from_dlpack<float, ferry::backend::host>(h.t).empty());

  // The pinned view: on the host backend kDLCPU memory is what pinned_span means.
  h.t.shape = h.shape.data();
  h.t.ndim = 3;
  h.t.strides = nullptr;
  auto p = ferry::from_dlpack_pinned<float, ferry::backend::host>(h.t);
  CHECK(std::vector<float>(p.begin(), p.end()) == values);
}

TEST_CASE("from_dlpack_host views CPU and pinned tensors on the host", "[interop][dlpack]") {
  const auto values = ferry_test::random_values<std::uint16_t>(10, 14);
  host_tensor<std::uint16_t> h(values, {2, 5}, dl_uint16);
  auto s = ferry::from_dlpack_host<const std::uint16_t>(h.t);
  CHECK(std::vector<std::uint16_t>(s.begin(), s.end()) == values);
  h.t.device = DLDevice{kDLCUDAHost, 3};  // pinned: any device id
  CHECK(ferry::from_dlpack_host<std::uint16_t>(h.t).data() == h.v.data());
  h.t.device = DLDevice{kDLCUDA, 0};
  CHECK_THROWS_WITH(
      ferry::from_dlpack_host<std::uint16_t>(h.t),
      "ferry: from_dlpack_host: device type mismatch: expected kDLCPU or kDLCUDAHost, got kDLCUDA");
  h.t.device = DLDevice{kDLCPU, 1};
  CHECK_THROWS_WITH(ferry::from_dlpack_host<std::uint16_t>(h.t),
                    "ferry: from_dlpack_host: device id mismatch: expected 0, got 1");
}

TEST_CASE("from_dlpack names every mismatch, expected vs got", "[interop][dlpack]") {
  host_tensor<std::int32_t> h(ferry_test::random_values<std::int32_t>(12, 12), {3, 4}, dl_int32);

  SECTION("device type") {
    h.t.device.device_type = kDLCUDA;
    CHECK_THAT(rejection<std::int32_t>(h.t),
               ContainsSubstring("ferry: from_dlpack: device type mismatch: expected kDLCPU, got kDLCUDA"));
    CHECK_THROWS_WITH(
        (ferry::from_dlpack_pinned<std::int32_t, ferry::backend::host>(h.t)),
        ContainsSubstring("ferry: from_dlpack_pinned: device type mismatch: expected kDLCPU, got kDLCUDA"));
  }
  SECTION("a device type outside DLDeviceType") {
    // The integer a producer stored, not one of the enum's values: refused as a number, never
    // loaded as the enum (UndefinedBehaviorSanitizer once reported that load inside ferry).
    const int unknown = 1000;
    static_assert(sizeof(unknown) == sizeof(h.t.device.device_type));
    std::memcpy(&h.t.device.device_type, &unknown, sizeof(unknown));
    CHECK_THAT(rejection<std::int32_t>(h.t),
               ContainsSubstring("ferry: from_dlpack: device type mismatch: expected kDLCPU, got device type 1000"));
    CHECK_THROWS_AS(ferry::from_dlpack_host<std::int32_t>(h.t), std::invalid_argument);
  }
  SECTION("device id") {
    h.t.device.device_id = 1;
    CHECK_THAT(rejection<std::int32_t>(h.t), ContainsSubstring("device id mismatch: expected 0, got 1"));
    h.t.device.device_id = 0;
    CHECK_THROWS_WITH((ferry::from_dlpack<std::int32_t, ferry::backend::host>(h.t, 2)),
                      ContainsSubstring("device id mismatch: expected 2, got 0"));
  }
  SECTION("dtype code") {
    CHECK_THAT(rejection<float>(h.t), ContainsSubstring("dtype mismatch: expected float32 (code 2, bits 32, "
                                                        "lanes 1), got int32 (code 0, bits 32, lanes 1)"));
    CHECK_THAT(rejection<std::uint32_t>(h.t),
               ContainsSubstring(
                   "expected uint32 (code 1, bits 32, lanes 1), got int32 (code 0, bits 32, lanes 1)"));
  }
  SECTION("dtype bits") {
    CHECK_THAT(
        rejection<std::int64_t>(h.t),
        ContainsSubstring("expected int64 (code 0, bits 64, lanes 1), got int32 (code 0, bits 32, lanes 1)"));
    CHECK_THAT(rejection<std::int16_t>(h.t), ContainsSubstring("got int32"));
  }
  SECTION("dtype lanes") {
    h.t.dtype.lanes = 4;
    CHECK_THAT(rejection<std::int32_t>(h.t),
               ContainsSubstring(
                   "expected int32 (code 0, bits 32, lanes 1), got int32x4 (code 0, bits 32, lanes 4)"));
  }
  SECTION("non-contiguous strides") {
    std::array<std::int64_t, 2> transposed{1, 3};
    h.t.strides = transposed.data();
    CHECK_THAT(rejection<std::int32_t>(h.t),
               ContainsSubstring(
                   "not row-major contiguous: shape [3, 4], expected strides [4, 1] (or null), got [1, 3]"));
    std::array<std::int64_t, 2> padded{8, 1};  // a row pitch wider than the row
    h.t.strides = padded.data();
    CHECK_THAT(rejection<std::int32_t>(h.t), ContainsSubstring("got [8, 1]"));
  }
  SECTION("misaligned byte_offset") {
    h.t.byte_offset = 2;
    CHECK_THAT(rejection<std::int32_t>(h.t),
               ContainsSubstring("misaligned: data + byte_offset (byte_offset 2) expected aligned to "
                                 "alignof(element) = 4 bytes, got address % 4 = 2"));
  }
  SECTION("negative extent, bad ndim, null data") {
    h.shape[1] = -4;
    CHECK_THAT(rejection<std::int32_t>(h.t), ContainsSubstring("negative extent -4 in dimension 1"));
    h.shape[1] = 4;
    h.t.ndim = -1;
    CHECK_THAT(rejection<std::int32_t>(h.t), ContainsSubstring("ndim mismatch: expected >= 0, got -1"));
    h.t.ndim = 2;
    h.t.data = nullptr;
    CHECK_THAT(rejection<std::int32_t>(h.t), ContainsSubstring("data is null for 12 elements"));
  }
  SECTION("an element count that overflows") {
    h.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
    h.t.shape = h.shape.data();
    CHECK_THAT(rejection<std::int32_t>(h.t), ContainsSubstring("overflows"));
  }
}

TEST_CASE("to_dlpack describes a ferry span; shape storage is owned and stable", "[interop][dlpack]") {
  ferry::device_buffer<std::int16_t, ferry::backend::host> buf(12);
  const std::array<std::int64_t, 2> shape{3, 4};
  auto x = ferry::to_dlpack<ferry::backend::host>(buf.span(), shape);
  const DLTensor* before = &x.get();
  auto y = std::move(x);  // moving keeps the DLTensor and its shape where they were
  const DLTensor& t = y.get();
  CHECK(&t == before);
  // The moved-from object is empty: get() is a ferry::error, never a read through null.
  CHECK(x.empty());  // NOLINT(bugprone-use-after-move)
  CHECK_FALSE(y.empty());
  CHECK_THROWS_MATCHES(x.get(), ferry::error,  // NOLINT(bugprone-use-after-move)
                       Catch::Matchers::MessageMatches(ContainsSubstring("ferry: dlpack_tensor::get") &&
                                                       ContainsSubstring("moved from")));
  CHECK(t.data == buf.span().data());
  CHECK(t.device.device_type == kDLCPU);
  CHECK(t.device.device_id == 0);
  CHECK(t.ndim == 2);
  CHECK(t.shape[0] == 3);
  CHECK(t.shape[1] == 4);
  CHECK(t.strides[0] == 4);
  CHECK(t.strides[1] == 1);
  CHECK(t.byte_offset == 0);
  CHECK(t.dtype.code == kDLInt);
  CHECK(t.dtype.bits == 16);
  CHECK(t.dtype.lanes == 1);

  auto flat = ferry::to_dlpack<ferry::backend::host>(buf.span().subspan(5));
  CHECK(flat.get().ndim == 1);
  CHECK(flat.get().shape[0] == 7);
  CHECK(flat.get().strides[0] == 1);

  const std::array<std::int64_t, 2> wrong{5, 3};
  CHECK_THROWS_WITH(
      ferry::to_dlpack<ferry::backend::host>(buf.span(), wrong),
      "ferry: to_dlpack: shape mismatch: expected 12 elements (the span's size), got shape [5, 3] of 15");
  const std::array<std::int64_t, 2> negative{-3, -4};
  CHECK_THROWS_WITH(ferry::to_dlpack<ferry::backend::host>(buf.span(), negative),
                    ContainsSubstring("negative or overflowing extent"));
  CHECK_THROWS_WITH(ferry::to_dlpack<ferry::backend::host>(buf.span(), 1),
                    ContainsSubstring("device id mismatch: expected 0"));
}

TEMPLATE_TEST_CASE("to_dlpack: docs/interop.md's example, a DLPack-taking consumer of a device buffer",
                   "[interop][dlpack]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  const std::int64_t batch = 3, vocab = 5;
  const void* seen = nullptr;
  std::int64_t seen_elements = 0;
  auto consume = [&](const DLTensor& t) {
    seen = t.data;
    seen_elements = t.shape[0] * t.shape[1];
  };
  // [to_dlpack]
  ferry::device_buffer<float, B> logits(batch * vocab);
  const std::array<std::int64_t, 2> shape{batch, vocab};
  const auto dl = ferry::to_dlpack<B>(logits.span(), shape);
  consume(dl.get());  // e.g. a DLPack-taking sampler; dl and logits outlive the call's GPU work
  // [/to_dlpack]
  CHECK(seen == logits.data());
  CHECK(seen_elements == batch * vocab);
}

TEMPLATE_TEST_CASE("DLPack round trip: ferry writes and reads through the imported span", "[interop][dlpack]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::device_buffer<double, B> buf(6 * 7);
  const std::array<std::int64_t, 2> shape{6, 7};
  auto exported = ferry::to_dlpack<B>(buf.span(), shape);
  auto imported = ferry::from_dlpack<double, B>(exported.get());
  REQUIRE(imported.data() == buf.span().data());
  REQUIRE(imported.size() == buf.size());

  const auto values = ferry_test::random_values<double>(42, 13);
  ferry::async_h2d(values, imported, s);
  CHECK(ferry_test::read_back(buf.span(), s) == values);

  // Pinned memory: exported as pinned, imported both as pinned and as a device (UVA) view.
  ferry::pinned_buffer<double, B> pinned(42);
  auto ph = ferry::to_dlpack<B>(pinned.host());
  CHECK(ph.get().device.device_type == (std::is_same_v<B, ferry::backend::host> ? kDLCPU : kDLCUDAHost));
  auto host_view = ferry::from_dlpack_pinned<double, B>(ph.get());
  REQUIRE(host_view.data() == pinned.host().data());
  auto uva_view = ferry::from_dlpack<double, B>(ph.get());
  ferry::async_h2d(values, uva_view, s);
  s.synchronize();
  CHECK(std::vector<double>(host_view.begin(), host_view.end()) == values);
}

#if FERRY_HAS_CUDA
TEST_CASE("DLPack on the CUDA backend: kDLCUDA on the current device, kDLCUDAHost pinned",
          "[interop][dlpack]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  ferry::device_buffer<float, B> buf(16);
  auto dev = ferry::to_dlpack<B>(buf.span());
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(dev.get().device.device_type == kDLCUDA);
  CHECK(dev.get().device.device_id == current);

  // Another device id than the current one, and device memory where pinned memory is required.
  DLTensor other = dev.get();
  other.device.device_id = current + 1;
  CHECK_THROWS_WITH((ferry::from_dlpack<float, B>(other)),
                    ContainsSubstring("device id mismatch: expected " + std::to_string(current) + ", got " +
                                      std::to_string(current + 1)));
  CHECK((ferry::from_dlpack<float, B>(other, current + 1)).data() == buf.span().data());
  CHECK_THROWS_WITH((ferry::from_dlpack_pinned<float, B>(dev.get())),
                    ContainsSubstring("device type mismatch: expected kDLCUDAHost, got kDLCUDA"));

  // Plain CPU memory is neither device memory nor known to be pinned.
  DLTensor cpu = dev.get();
  cpu.device = DLDevice{kDLCPU, 0};
  CHECK_THROWS_WITH((ferry::from_dlpack<float, B>(cpu)),
                    ContainsSubstring("device type mismatch: expected kDLCUDA or kDLCUDAHost, got kDLCPU"));

  // Pinned memory's device id is not checked: every device reaches it through UVA.
  ferry::pinned_buffer<float, B> pinned(16);
  auto ph = ferry::to_dlpack<B>(pinned.host());
  DLTensor pinned_elsewhere = ph.get();
  pinned_elsewhere.device.device_id = current + 3;
  CHECK((ferry::from_dlpack<float, B>(pinned_elsewhere)).data() == pinned.host().data());
}
#endif

namespace {

// A DLTensor of `shape` int32 elements at `data` in the memory from_dlpack<int32_t, B> accepts
// on the device current now (kDLCPU on the host backend, kDLCUDA on CUDA). Never dereferenced.
template <class B>
DLTensor accepted_tensor(void* data, std::vector<std::int64_t>& shape) {
  const bool host = std::is_same_v<B, ferry::backend::host>;
  const int device = host ? 0 : ferry::detail::backend_ops<B>::current_device();
  return DLTensor{data, DLDevice{host ? kDLCPU : kDLCUDA, device}, static_cast<int>(shape.size()),
                  dl_int32, shape.data(), nullptr, 0};
}

template <class B>
std::string rejection_on(const DLTensor& t) {
  try {
    (void)ferry::from_dlpack<std::int32_t, B>(t);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEMPLATE_TEST_CASE("from_dlpack rejects a byte_offset that wraps the address, naming it",
                   "[interop][dlpack]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  alignas(16) std::int32_t storage[16] = {};
  std::vector<std::int64_t> shape{3, 4};
  DLTensor t = accepted_tensor<B>(storage, shape);
  const auto base = reinterpret_cast<std::uintptr_t>(storage);
  REQUIRE(ferry::from_dlpack<std::int32_t, B>(t).data() == storage);

  SECTION("the first element's address wraps to before the data") {
    t.byte_offset = ~std::uint64_t{0} - 15;  // data + byte_offset == data - 16 (aligned)
    CHECK_THAT(rejection_on<B>(t), ContainsSubstring("ferry: from_dlpack: byte_offset " +
                                                     std::to_string(t.byte_offset)) &&
                                       ContainsSubstring("wraps"));
    CHECK_THROWS_AS((ferry::from_dlpack_host<std::int32_t>(DLTensor{t.data, DLDevice{kDLCPU, 0}, t.ndim,
                                                                   t.dtype, t.shape, nullptr, t.byte_offset})),
                    std::invalid_argument);
  }
  SECTION("the last element's end wraps past the top of the address space") {
    // data + byte_offset is the last aligned address below 2^64 - 8: the 48 bytes of the tensor
    // run past the end.
    t.byte_offset = (~std::uint64_t{0} - 7 - base) & ~std::uint64_t{3};
    CHECK_THAT(rejection_on<B>(t), ContainsSubstring("byte_offset " + std::to_string(t.byte_offset)) &&
                                       ContainsSubstring("48 bytes") && ContainsSubstring("wrap"));
  }
  SECTION("an offset that does not wrap is still accepted") {
    t.byte_offset = 8;
    CHECK(ferry::from_dlpack<std::int32_t, B>(t).data() == storage + 2);
  }
}

TEMPLATE_TEST_CASE("to_dlpack rejects a span of 2^63 elements or more: DLPack shapes are int64",
                   "[interop][dlpack]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  const int device = std::is_same_v<B, ferry::backend::host> ? 0 : ferry::detail::backend_ops<B>::current_device();
  std::uint8_t byte = 0;
  constexpr std::size_t two_63 = std::size_t{1} << 63;
  const std::string named = "ferry: to_dlpack: a span of " + std::to_string(two_63) + " elements";
  // Views that are never dereferenced: to_dlpack only describes them.
  const ferry::device_span<std::uint8_t> huge(&byte, two_63);
  CHECK_THROWS_MATCHES(ferry::to_dlpack<B>(huge, device), std::invalid_argument,
                       Catch::Matchers::MessageMatches(ContainsSubstring(named)));
  // A shape that holds exactly the span's elements: its row stride (2^63) overflows int64.
  const std::array<std::int64_t, 2> split{std::int64_t{1} << 62, 2};
  CHECK_THROWS_MATCHES(ferry::to_dlpack<B>(huge, device, split), std::invalid_argument,
                       Catch::Matchers::MessageMatches(ContainsSubstring(named)));
  const ferry::device_span<const float> most(nullptr, ~std::size_t{0});
  CHECK_THROWS_AS(ferry::to_dlpack<B>(most, device), std::invalid_argument);
  const auto pinned = ferry::detail::make_pinned_span(&byte, two_63);
  CHECK_THROWS_MATCHES(ferry::to_dlpack<B>(pinned), std::invalid_argument,
                       Catch::Matchers::MessageMatches(ContainsSubstring(named)));
  // The largest span DLPack can describe: 2^63 - 1 elements, strides {1}.
  const auto largest = ferry::to_dlpack<B>(ferry::device_span<std::uint8_t>(&byte, two_63 - 1), device);
  CHECK(largest.get().shape[0] == INT64_MAX);
  CHECK(largest.get().strides[0] == 1);
}
