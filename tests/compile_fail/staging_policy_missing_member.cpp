// expect: does not model ferry::staging_policy: it lacks .static constexpr std::size_t in_place_max_bytes.ferry::memory_kind target.
// A staging policy whose threshold is not a constant expression (the component needs to know at
// compile time whether it ever copies) names the member; the twin makes it constexpr.
#include <ferry/staged/staged_write_tensor.hpp>

#include <cstddef>

struct small_in_place {
  using ferry_policy_family = ferry::families::staging;
#ifdef FERRY_EXPECT_FAIL
  static std::size_t in_place_max_bytes(ferry::memory_kind) { return 1024; }
#else
  static constexpr std::size_t in_place_max_bytes(ferry::memory_kind) { return 1024; }
#endif
};
static_assert(sizeof(ferry::staged_write_tensor<int, small_in_place, ferry::backend::host>) > 0);
int main() {}
