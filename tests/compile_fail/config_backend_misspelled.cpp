// expect: error: #error "FERRY_DEFAULT_BACKEND must be cuda or host
// FERRY_DEFAULT_BACKEND=CUDA (any name but cuda or host): one #error saying which names it takes;
// the twin spells it host.
#undef FERRY_DEFAULT_BACKEND
#undef FERRY_HAS_CUDA
#ifdef FERRY_EXPECT_FAIL
#define FERRY_DEFAULT_BACKEND CUDA
#else
#define FERRY_DEFAULT_BACKEND host
#endif
#include <ferry/ferry.hpp>

int main() {
  ferry::stream<> s;
  s.synchronize();
}
