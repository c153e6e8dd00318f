// Choosing the backend at run time (docs/consuming.md): the engine is a template over the backend,
// instantiated for both; the CUDA one runs where a device is usable.
#include <ferry/ferry.hpp>

#include <vector>

template <class B>
int run() {
  ferry::stream<B> s;
  // ... the engine, with ferry::backend B everywhere ...
  ferry::device_buffer<int, B> ids(4);
  ferry::async_h2d(std::vector<int>{1, 2, 3, 4}, ids.span(), s);
  return ferry::to_host(ids.span(), s) == std::vector<int>{1, 2, 3, 4} ? 0 : 1;
}

int main() {
#if FERRY_HAS_CUDA
  if (ferry::cuda_device_available()) return run<ferry::backend::cuda>();
#endif
  return run<ferry::backend::host>();
}
