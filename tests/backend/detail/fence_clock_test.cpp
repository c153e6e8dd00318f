// Tests of include/ferry/backend/detail/fence_clock.hpp, ferry-internal: a fence records a point
// in a stream's work, and the clock's timelines outlive the streams they served.
#include <support/backends.hpp>

#include <ferry/backend/detail/fence_clock.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <vector>

TEMPLATE_TEST_CASE("a destroyed stream's fences read as passed when its timeline serves new streams",
                   "[fence_clock]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using ops = ferry::detail::backend_ops<TestType>;
  ferry::detail::fence_clock<TestType> clock;
  std::vector<ferry::detail::fence> old;
  for (int i = 0; i < 8; ++i) {
    ops::synchronize_device(ops::current_device());  // CUDA: destroying a stream does not wait
    ferry::stream<TestType> s;
    ferry_test::gate<TestType> g(s);
    const auto f = clock.record(s);  // may take over the timeline of a destroyed stream
    CHECK_FALSE(clock.passed(f));
    for (const auto o : old) CHECK(clock.passed(o));
    old.push_back(f);
  }  // the gate opens, then the stream is destroyed
  ops::synchronize_device(ops::current_device());
  for (const auto o : old) CHECK(clock.passed(o));
}
