// The program that tests/consumer/without_cmake.cmake builds with docs/consuming.md's "Without
// CMake" lines (copied to app.cpp and app.cu): the start-up pattern of choosing the backend at run
// time, an upload and a read-back. Prints which backend ran; exits 1 when the round trip differs.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#else
#include <ferry/ferry.hpp>
#endif

#include <cstdio>
#include <vector>

template <class B>
int run(const char* backend) {
  ferry::stream<B> s;
  const std::vector<int> v{3, 1, 4, 1, 5, 9, 2, 6};
  ferry::device_buffer<int, B> d(v.size());
  ferry::async_h2d(v, d.span(), s);
  const bool same = ferry::to_host(d.span(), s) == v;
  std::printf("without-cmake app: %s backend, round trip %s\n", backend, same ? "equal" : "DIFFERENT");
  return same ? 0 : 1;
}

int main() {
#if FERRY_HAS_CUDA
  if (ferry::cuda_device_available()) return run<ferry::backend::cuda>("cuda");
#endif
  return run<ferry::backend::host>("host");
}
