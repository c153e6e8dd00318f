// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// to_host(span, NULL): the same one line, before any use of the result; the twin names a stream.
#include <ferry/ferry.hpp>

#include <cstddef>

int main() {
  ferry::stream<ferry::backend::host> s;
  ferry::device_buffer<int, ferry::backend::host> d(4);
#ifdef FERRY_EXPECT_FAIL
  auto v = ferry::to_host(d.span(), NULL);
#else
  auto v = ferry::to_host(d.span(), s);
#endif
  return static_cast<int>(v.size());
}
