// expect: this component does not use the TargetKind policy family
// A family the component does not use is rejected; the twin leaves it out.
#include <ferry/policies/detail/select.hpp>

using namespace ferry;
using used = detail::type_list<families::growth, families::reuse>;
#ifdef FERRY_EXPECT_FAIL
using set = detail::policies<used, growth::pow2, target::uva>;
#else
using set = detail::policies<used, growth::pow2>;
#endif
static_assert(sizeof(set) > 0);
int main() {}
