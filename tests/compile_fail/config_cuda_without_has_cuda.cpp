// expect: error: #error "FERRY_DEFAULT_BACKEND is cuda but FERRY_HAS_CUDA is 0
// FERRY_DEFAULT_BACKEND=cuda with FERRY_HAS_CUDA=0: one #error naming both macros (not an
// incomplete stream_ref<backend::cuda>); the twin, host with FERRY_HAS_CUDA=0, compiles.
#undef FERRY_DEFAULT_BACKEND
#undef FERRY_HAS_CUDA
#ifdef FERRY_EXPECT_FAIL
#define FERRY_DEFAULT_BACKEND cuda
#else
#define FERRY_DEFAULT_BACKEND host
#endif
#define FERRY_HAS_CUDA 0
#include <ferry/ferry.hpp>

int main() {
  ferry::stream<ferry::backend::host> s;
  s.synchronize();
}
