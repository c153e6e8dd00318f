// expect: launch::capture records one launch of the step kernel into the engine's graph
// A step_batch recorded into an engine's capture that may grow is rejected (the recording fixes
// the kernel's grid and the tables' size); the twin gives it fixed growth.
#include <ferry/step/step_batch.hpp>

using namespace ferry;
#ifdef FERRY_EXPECT_FAIL
using batch = step_batch<backend::host, launch::capture, growth::pow2>;
#else
using batch = step_batch<backend::host, launch::capture, growth::fixed>;
#endif
batch b(2);
int main() {}
