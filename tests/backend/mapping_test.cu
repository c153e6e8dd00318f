// Tests for include/ferry/backend/detail/mapping.hpp (and mapping_probe.cuh): the mapping of
// pinned memory is proven live once per device by a probe (the host's pattern read and written
// back by a kernel through the mapped address); where the probe finds it dead (forced here by its
// test hook, as on a machine under Confidential Computing or WSL2), every component whose kernels
// read pinned memory in place throws at construction naming the cause and the way out, while
// copies keep working. Both backends; the CUDA cases skip without a GPU.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

/// The current device of backend B (0 on the host backend).
template <class B>
int current_device() {
  return ferry::detail::backend_ops<B>::current_device();
}

/// The message of the ferry::error `make()` throws (empty when it throws none).
template <class F>
std::string error_of(F&& make) {
  try {
    (void)make();
  } catch (const ferry::error& e) {
    return e.what();
  }
  return {};
}

/// Whether `what` is what a component says where the mapping is dead: its name, the cause, the
/// way out.
bool names_dead_mapping(const std::string& what, const std::string& component) {
  for (const std::string& part :
       {"ferry: " + component + ": kernels on device ",
        std::string("do not see pinned memory through its mapped address (ferry's mapping probe: the host wrote 0x"),
        std::string("the mapping is not live (Confidential Computing, WSL2?)"),
        std::string("ferry::target::uva_or_device"), std::string("docs/troubleshooting.md")})
    if (what.find(part) == std::string::npos) return false;
  return what.rfind("ferry: " + component, 0) == 0;
}

}  // namespace

TEMPLATE_TEST_CASE("the mapping probe finds a device's mapping live once, and dead under its test hook",
                   "[backend][mapping]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  auto& verdicts = ferry::detail::mapping_verdicts<B>::instance();
  const int device = current_device<B>();
  verdicts.forget();
  CHECK(verdicts.known(device) == ferry::detail::mapping_state::unknown);
  CHECK(verdicts.state(device) == ferry::detail::mapping_state::live);  // probed
  CHECK(verdicts.known(device) == ferry::detail::mapping_state::live);  // remembered
  {
    ferry_test::dead_mapping<B> dead;
    CHECK(verdicts.known(device) == ferry::detail::mapping_state::unknown);
    CHECK(verdicts.state(device) == ferry::detail::mapping_state::dead);
    const auto f = verdicts.finding(device);
    CHECK_FALSE(f.live);
    CHECK(f.wrote == ferry::detail::mapping_pattern(0));
    CHECK(f.read == ~ferry::detail::mapping_pattern(0));  // the hook alters what the probe read back
  }
  CHECK(verdicts.state(device) == ferry::detail::mapping_state::live);
  CHECK(verdicts.state(-1) == ferry::detail::mapping_state::unknown);
}

TEMPLATE_TEST_CASE("where the mapping is dead, components whose kernels read pinned memory in place throw at "
                   "construction naming the cause and the way out",
                   "[backend][mapping]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::dead_mapping<B> dead;
  const auto check = [](const std::string& component, const std::string& what) {
    INFO(what);
    CHECK(names_dead_mapping(what, component));
  };
  check("pinned_buffer", error_of([] { return ferry::pinned_buffer<std::int32_t, B>(8); }));
  check("uva_pool", error_of([] { return ferry::uva_pool<std::int32_t, B>(8); }));
  check("uva_backed", error_of([] { return ferry::uva_backed<std::int32_t, B>(8); }));
  check("step_batch", error_of([] { return ferry::step_batch<B>(2); }));
  check("fused_staged_writer", error_of([] { return ferry::fused_staged_writer<std::int32_t, B>(2); }));
  check("staged_write_tensor (a target of pinned memory)",
        error_of([&] { return ferry::staged_write_tensor<std::int32_t, B, ferry::target::uva>(2, 8, s); }));
}

TEMPLATE_TEST_CASE("where the mapping is dead, copies keep working: copies_only pinned memory, cpu_gpu_buffer, "
                   "async_h2d, to_host, staged writes into device memory",
                   "[backend][mapping]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry_test::dead_mapping<B> dead;
  const std::vector<std::int32_t> v{1, 2, 3, 4, 5, 6, 7, 8};

  ferry::pinned_buffer<std::int32_t, B> pinned(8, ferry::copies_only);
  std::copy(v.begin(), v.end(), pinned.host().begin());
  ferry::device_buffer<std::int32_t, B> out(8);
  (void)ferry::async_h2d(ferry::pinned_span<const std::int32_t>(pinned.host()), out.span(), s);
  CHECK(ferry::to_host(ferry::device_span<const std::int32_t>(out.span()), s) == v);

  ferry::cpu_gpu_buffer<std::int32_t, B> buffer(8);
  std::copy(v.begin(), v.end(), buffer.host().begin());
  (void)buffer.copy_to_device(8, s);
  CHECK(ferry::to_host(ferry::device_span<const std::int32_t>(buffer.device()), s) == v);

  ferry::staged_write_tensor<std::int32_t, B> table(2, 8, s);  // target::device
  table.stage_write(0, 4, {9, 10});
  table.apply_write(s);
  const auto got = ferry::to_host(ferry::device_span<const std::int32_t>(table.span()), s);
  CHECK(got == std::vector<std::int32_t>{0, 0, 0, 0, 9, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
}
