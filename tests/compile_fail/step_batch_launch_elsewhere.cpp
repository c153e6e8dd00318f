// expect: this component does not use the LaunchPolicy policy family
// A LaunchPolicy given to a component other than step_batch is rejected; the twin leaves it out.
#include <ferry/pool/uva_pool.hpp>

using namespace ferry;
#ifdef FERRY_EXPECT_FAIL
using pool = uva_pool<int, backend::host, launch::graph>;
#else
using pool = uva_pool<int, backend::host>;
#endif
static_assert(sizeof(pool) > 0);
int main() {}
