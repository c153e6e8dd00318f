// expect: launch::graph replays a graph over fixed slot addresses and needs growth::fixed
// A graph-replayed step_batch that may grow is rejected; the twin gives it fixed growth.
#include <ferry/step/step_batch.hpp>

using namespace ferry;
#ifdef FERRY_EXPECT_FAIL
using batch = step_batch<backend::host, launch::graph>;
#else
using batch = step_batch<backend::host, launch::graph, growth::fixed>;
#endif
batch b(2);
int main() {}
