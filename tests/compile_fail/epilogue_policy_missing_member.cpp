// expect: does not model ferry::epilogue_policy: it lacks .using functor_type = ...;.
// An epilogue policy that names no functor type names the member; the twin names it.
#include <ferry/policies/detail/select.hpp>
#include <ferry/policies/epilogue.hpp>

struct derive_inputs {
  using ferry_policy_family = ferry::families::epilogue;
#ifndef FERRY_EXPECT_FAIL
  using functor_type = void;
#endif
};
using used = ferry::detail::type_list<ferry::families::epilogue, ferry::families::growth>;
static_assert(sizeof(ferry::detail::policies<used, derive_inputs>) > 0);
int main() {}
