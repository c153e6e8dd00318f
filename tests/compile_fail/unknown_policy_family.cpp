// expect: a policy's .ferry_policy_family. names no ferry policy family
// A type whose ferry_policy_family is not one of ferry's families is rejected (it would otherwise
// be ignored); the twin names a family.
#include <ferry/pool/uva_pool.hpp>

struct my_family {};
struct fenced_by_me {
#ifdef FERRY_EXPECT_FAIL
  using ferry_policy_family = my_family;
#else
  using ferry_policy_family = ferry::families::reuse;
#endif
  static constexpr bool ferry_fences = false;
};
static_assert(sizeof(ferry::uva_pool<int, fenced_by_me, ferry::backend::host>) > 0);
int main() {}
