// expect: does not model ferry::growth_policy: it lacks .static constexpr bool stable_addresses.
// A user growth policy without stable_addresses, given to uva_pool, names the concept and the
// missing member; the twin declares it.
#include <ferry/pool/uva_pool.hpp>

#include <cstddef>

struct geometric {
  using ferry_policy_family = ferry::families::growth;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    return needed > current + current / 2 ? needed : current + current / 2;
  }
#ifndef FERRY_EXPECT_FAIL
  static constexpr bool stable_addresses = false;
#endif
};
static_assert(sizeof(ferry::uva_pool<int, geometric, ferry::backend::host>) > 0);
int main() {}
