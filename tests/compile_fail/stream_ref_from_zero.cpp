// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// There is no implicit default stream: stream_ref from 0 is rejected with one line; the twin names a stream.
#include <ferry/ferry.hpp>

int main() {
  ferry::stream<ferry::backend::host> s;
#ifdef FERRY_EXPECT_FAIL
  ferry::stream_ref<ferry::backend::host> r(0);
#else
  ferry::stream_ref<ferry::backend::host> r(s);
#endif
  r.synchronize();
}
