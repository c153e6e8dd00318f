// expect: the GrowthPolicy policy family is given more than once
// A policy family given twice is rejected; the twin gives it once.
#include <ferry/policies/detail/select.hpp>

using namespace ferry;
using used = detail::type_list<families::growth, families::reuse>;
#ifdef FERRY_EXPECT_FAIL
using set = detail::policies<used, growth::pow2, reuse::caller_fenced, growth::fixed>;
#else
using set = detail::policies<used, growth::pow2, reuse::caller_fenced>;
#endif
static_assert(sizeof(set) > 0);
int main() {}
