// expect: does not model ferry::growth_policy: it lacks .static std::size_t capacity_for.std::size_t needed, std::size_t current.
// A growth policy whose capacity_for takes only the request (not the current capacity) names
// the member it lacks; the twin takes both.
#include <ferry/staged/staged_write_tensor.hpp>

#include <cstddef>

struct doubling {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
#ifdef FERRY_EXPECT_FAIL
  static std::size_t capacity_for(std::size_t needed) { return 2 * needed; }
#else
  static std::size_t capacity_for(std::size_t needed, std::size_t) { return 2 * needed; }
#endif
};
static_assert(sizeof(ferry::staged_write_tensor<int, doubling, ferry::backend::host>) > 0);
int main() {}
