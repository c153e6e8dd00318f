// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// async_d2h(src, out, 0): the same one line; the twin names a stream.
#include <ferry/ferry.hpp>

int main() {
  ferry::stream<ferry::backend::host> s;
  ferry::device_buffer<int, ferry::backend::host> d(4);
  ferry::pinned_buffer<int, ferry::backend::host> h(4);
#ifdef FERRY_EXPECT_FAIL
  ferry::async_d2h(d.span(), h.host(), 0);
#else
  ferry::async_d2h(d.span(), h.host(), s);
#endif
}
