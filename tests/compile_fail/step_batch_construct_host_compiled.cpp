// expect: construct it in a translation unit built with nvcc that includes <ferry/ferry.cuh>
// needs: cuda
// A CUDA-backend step_batch constructed in a translation unit the host compiler builds: its
// constructor could not load the step kernel (CUDA loads modules lazily, and a first submit behind
// a held stream would hang), so it does not compile. The twin gets its batch from a factory
// defined in a .cu and plans a publish.
#include <ferry/ferry.hpp>

#include <cstdint>

using batch_t = ferry::step_batch<ferry::backend::cuda>;
batch_t make_batch();  // defined in a .cu with <ferry/ferry.cuh>

int main() {
#ifdef FERRY_EXPECT_FAIL
  batch_t batch(2, 8);
#else
  batch_t batch = make_batch();
#endif
  auto positions = batch.add_publish<std::int64_t>(256);
  return static_cast<int>(positions.view().size() + batch.slots());
}
