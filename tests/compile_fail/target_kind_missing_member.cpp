// expect: does not model ferry::target_kind: it lacks .static constexpr ferry::memory_kind memory.
// A target kind that does not say where the target lives names the member; the twin says it.
#include <ferry/staged/staged_write_tensor.hpp>

struct mapped {
  using ferry_policy_family = ferry::families::target_kind;
#ifndef FERRY_EXPECT_FAIL
  static constexpr ferry::memory_kind memory = ferry::memory_kind::uva;
#endif
};
static_assert(sizeof(ferry::staged_write_tensor<int, mapped, ferry::backend::host>) > 0);
int main() {}
