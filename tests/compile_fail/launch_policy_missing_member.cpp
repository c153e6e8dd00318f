// expect: does not model ferry::launch_policy: it lacks .static constexpr bool replays_graph.
// A launch policy that does not say how a step is submitted names the member; the twin says it.
#include <ferry/policies/detail/select.hpp>

struct replay {
  using ferry_policy_family = ferry::families::launch;
#ifndef FERRY_EXPECT_FAIL
  static constexpr bool replays_graph = true;
#endif
};
using used = ferry::detail::type_list<ferry::families::launch, ferry::families::growth>;
static_assert(sizeof(ferry::detail::policies<used, replay>) > 0);
int main() {}
