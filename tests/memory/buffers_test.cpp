// Tests for include/ferry/memory/pinned_buffer.hpp and device_buffer.hpp.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// The sanitizers abort on an allocation they cannot serve unless told to return null, which is
// what a real allocator does and what ferry turns into ferry::out_of_memory.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "allocator_may_return_null=1"; }
#endif

TEMPLATE_TEST_CASE("pinned_buffer is zero-filled, mapped, and owned by RAII", "[memory]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  const auto before = ferry::backend_stats_of<TestType>();
  {
    ferry::pinned_buffer<std::int64_t, TestType> buf(1000);
    REQUIRE(buf.size() == 1000);
    auto h = buf.host();
    for (std::size_t i = 0; i < h.size(); ++i) REQUIRE(h[i] == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(h.data()) % 256 == 0);
    CHECK(buf.device().size() == 1000);
    CHECK(static_cast<void*>(buf.device().data()) == static_cast<void*>(h.data()));  // UVA
    // Moving keeps the memory (spans stay valid) and empties the source.
    h[7] = 7;
    ferry::pinned_buffer<std::int64_t, TestType> moved(std::move(buf));
    CHECK(moved.host().data() == h.data());
    CHECK(h[7] == 7);
    CHECK(buf.size() == 0);  // NOLINT: moved-from is empty
    CHECK(buf.host().data() == nullptr);
  }
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.pinned_allocations == before.pinned_allocations + 1);
  CHECK(after.pinned_frees == before.pinned_frees + 1);
}

TEMPLATE_TEST_CASE("device_buffer round-trips data through device memory", "[memory]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  const auto values = ferry_test::random_values<float>(4097, 11);
  ferry::pinned_buffer<float, TestType> in(values.size());
  ferry::pinned_buffer<float, TestType> out(values.size());
  std::copy(values.begin(), values.end(), in.host().begin());
  for (const bool ordered : {false, true}) {
    const auto before = ferry::backend_stats_of<TestType>();
    {
      auto dev = ordered ? ferry::device_buffer<float, TestType>(values.size(), s)
                         : ferry::device_buffer<float, TestType>(values.size());
      REQUIRE(dev.span().size() == values.size());
      ferry::async_h2d(in.host(), dev.span(), s);  // pinned: DMA'd in place, no staging
      ferry::async_d2h(dev.span(), out.host(), s);
      s.synchronize();
      CHECK(std::equal(values.begin(), values.end(), out.host().begin()));
    }
    s.synchronize();
    const auto after = ferry::backend_stats_of<TestType>();
    CHECK(after.device_allocations == before.device_allocations + 1);
    CHECK(after.device_frees == before.device_frees + 1);
  }
}

namespace {

// One way to allocate a buffer of n elements, named by the memory it takes.
struct allocation {
  std::string memory;  // "pinned" or "device"
  std::function<void(std::size_t)> allocate;
};

// The three ways to allocate a buffer of n elements of T: pinned, device, and device ordered on s.
template <class T, class B>
std::vector<allocation> every_allocation(ferry::stream<B>& s) {
  return {{"pinned", [](std::size_t n) { ferry::pinned_buffer<T, B> b(n); }},
          {"device", [](std::size_t n) { ferry::device_buffer<T, B> b(n); }},
          {"device", [&s](std::size_t n) { ferry::device_buffer<T, B> b(n, s); }}};
}

}  // namespace

TEMPLATE_TEST_CASE("buffers whose bytes overflow size_t throw invalid_argument and allocate nothing",
                   "[memory]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::MessageMatches;
  using Catch::Matchers::StartsWith;
  ferry::stream<TestType> s;
  const auto before = ferry::backend_stats_of<TestType>();
  // 2^61 int64 are 2^64 bytes (0 after a wrap); 2^61 + 1 are 8 after a wrap.
  for (std::size_t n : {std::size_t{1} << 61, (std::size_t{1} << 61) + 1}) {
    CAPTURE(n);
    for (const auto& a : every_allocation<std::int64_t>(s)) {
      CAPTURE(a.memory);
      CHECK_THROWS_MATCHES(a.allocate(n), std::invalid_argument,
                           MessageMatches(StartsWith("ferry: ") && ContainsSubstring(std::to_string(n))));
    }
  }
  s.synchronize();
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.pinned_allocations == before.pinned_allocations);
  CHECK(after.device_allocations == before.device_allocations);
}

// [no-sanitizer]: the failed allocations it provokes on purpose are API errors to compute-sanitizer.
TEMPLATE_TEST_CASE("running out of pinned or device memory throws ferry::out_of_memory, a bad_alloc",
                   "[memory][no-sanitizer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::MessageMatches;
  using Catch::Matchers::StartsWith;
  using B = TestType;
  STATIC_REQUIRE(std::is_base_of_v<std::bad_alloc, ferry::out_of_memory>);
  ferry::stream<B> s;
  // 2^50 bytes: a size that fits in size_t but that no device, and no host address space, holds.
  constexpr std::size_t n = std::size_t{1} << 48;
  const std::string bytes = std::to_string(n * sizeof(float));
  const auto before = ferry::backend_stats_of<B>();
  for (const auto& a : every_allocation<float>(s)) {
    CAPTURE(a.memory);
    CHECK_THROWS_MATCHES(a.allocate(n), ferry::out_of_memory,
                         MessageMatches(StartsWith("ferry: out of " + a.memory + " memory") &&
                                        ContainsSubstring(bytes)));
  }
  CHECK_THROWS_AS((ferry::device_buffer<float, B>(n)), std::bad_alloc);  // generic handlers see it
#if FERRY_HAS_CUDA
  if constexpr (std::is_same_v<B, ferry::backend::cuda>)
    CHECK(cudaPeekAtLastError() == cudaSuccess);  // consumed: no later check reports it again
#endif
  const auto after = ferry::backend_stats_of<B>();
  CHECK(after.pinned_allocations == before.pinned_allocations);
  CHECK(after.device_allocations == before.device_allocations);

  // Nothing is lost: the next allocations and copies work.
  const auto values = ferry_test::random_values<float>(513, 29);
  ferry::device_buffer<float, B> d(values.size(), s);
  ferry::pinned_buffer<float, B> back(values.size());
  ferry::async_h2d(values, d.span(), s);
  ferry::async_d2h(d.span(), back.host(), s);
  s.synchronize();
  CHECK(std::equal(values.begin(), values.end(), back.host().begin()));
}
