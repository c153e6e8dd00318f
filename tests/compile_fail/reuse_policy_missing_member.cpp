// expect: does not model ferry::reuse_policy: it lacks .static constexpr bool ferry_fences.
// A type that declares the ReusePolicy family but does not say whether ferry fences names the
// concept and the member; the twin says it.
#include <ferry/transfer/cpu_gpu_buffer.hpp>

struct engine_fenced {
  using ferry_policy_family = ferry::families::reuse;
#ifndef FERRY_EXPECT_FAIL
  static constexpr bool ferry_fences = false;
#endif
};
static_assert(sizeof(ferry::cpu_gpu_buffer<float, engine_fenced, ferry::backend::host>) > 0);
int main() {}
