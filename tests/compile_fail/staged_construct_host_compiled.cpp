// expect: construct them in a translation unit built with nvcc that includes <ferry/ferry.cuh>
// needs: cuda
// A CUDA-backend staged_write_tensor constructed in a translation unit the host compiler builds:
// its constructor could not load the apply kernels (CUDA loads modules lazily, and a first apply
// behind a held stream would hang), so it does not compile. The twin gets its tensor from a
// factory defined in a .cu (declared here, as a .cpp of an engine would), and stages writes.
#include <ferry/ferry.hpp>

#include <cstddef>

using table_t = ferry::staged_write_tensor<int, ferry::presets::block_table, ferry::backend::cuda>;
table_t make_table(std::size_t rows, std::size_t cols);  // defined in a .cu with <ferry/ferry.cuh>

int main() {
#ifdef FERRY_EXPECT_FAIL
  table_t table(16, 8);
#else
  table_t table = make_table(16, 8);
#endif
  table.stage_write(1, 0, {4, 5, 6});
  return static_cast<int>(table.pending());
}
