// launch_tap_check: known launch calls, for the test of liblaunch_tap.so (support/launch_tap.cpp;
// launch_tap_report.py --self-test runs this under it and reads what it wrote):
//  - row "one", regime "bursts": 30 cudaLaunchKernel calls of alpha over 4 blocks, 20 of beta over
//    2 x 3 blocks;
//  - row "two", regime "GPU idle": 10 calls of alpha over 1 to 10 blocks, 5 cudaGraphLaunch calls;
//  - untagged: 7 calls of alpha, before the first row and after a null row.
// Without a GPU every call fails (no driver); the tap times and counts it all the same.
#include <support/launch_tap.hpp>

#include <cuda_runtime_api.h>

namespace {
void launch(void (*f)(), dim3 grid) { (void)cudaLaunchKernel(reinterpret_cast<const void*>(f), grid, dim3(256), nullptr, 0, nullptr); }
}  // namespace

void alpha() {}
void beta() {}

int main() {
  for (int k = 0; k < 3; ++k) launch(alpha, dim3(1));
  ferry_bench::tap_row("one", "bursts");
  for (int k = 0; k < 30; ++k) launch(alpha, dim3(4));
  for (int k = 0; k < 20; ++k) launch(beta, dim3(2, 3));
  ferry_bench::tap_row("two", "GPU idle");
  for (unsigned k = 1; k <= 10; ++k) launch(alpha, dim3(k));
  for (int k = 0; k < 5; ++k) (void)cudaGraphLaunch(nullptr, nullptr);
  ferry_bench::tap_row(nullptr, nullptr);
  for (int k = 0; k < 4; ++k) launch(alpha, dim3(1));
  return 0;
}
