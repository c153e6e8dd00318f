// expect: is neither a ferry policy tag nor a ferry preset
// A type that is no policy is rejected; the twin passes a real tag.
#include <ferry/policies/detail/select.hpp>

using namespace ferry;
using used = detail::type_list<families::growth, families::reuse>;
struct not_a_policy {};
#ifdef FERRY_EXPECT_FAIL
using set = detail::policies<used, growth::pow2, not_a_policy>;
#else
using set = detail::policies<used, growth::pow2, reuse::event_fenced>;
#endif
static_assert(sizeof(set) > 0);
int main() {}
