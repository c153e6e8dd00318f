// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// A member taking its component's stream (cpu_gpu_buffer::copy_to_device(n, 0)): the same one
// line, from stream_ref's constructor; the twin names a stream.
#include <ferry/ferry.hpp>

int main() {
  ferry::stream<ferry::backend::host> s;
  ferry::cpu_gpu_buffer<int, ferry::backend::host> b(8);
#ifdef FERRY_EXPECT_FAIL
  b.copy_to_device(8, 0);
#else
  b.copy_to_device(8, s);
#endif
  s.synchronize();
}
