// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// enqueue_host(0, f): the same one line (not an ambiguity between the backends' overloads); the
// twin names a stream.
#include <ferry/ferry.hpp>

int main() {
  ferry::stream<ferry::backend::host> s;
#ifdef FERRY_EXPECT_FAIL
  ferry::enqueue_host(0, [] {});
#else
  ferry::enqueue_host(s, [] {});
#endif
  s.synchronize();
}
