// expect: this component does not use the LaunchPolicy policy family
// A launch policy given to a component that submits no steps is rejected; the twin leaves it out.
#include <ferry/pool/uva_pool.hpp>

#ifdef FERRY_EXPECT_FAIL
static_assert(sizeof(ferry::uva_pool<int, ferry::launch::graph, ferry::backend::host>) > 0);
#else
static_assert(sizeof(ferry::uva_pool<int, ferry::backend::host>) > 0);
#endif
int main() {}
