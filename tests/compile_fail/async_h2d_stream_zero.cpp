// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// async_h2d(v, out, 0): one line saying there is no default stream, not a list of candidates; the
// twin names a stream.
#include <ferry/ferry.hpp>

#include <vector>

int main() {
  ferry::stream<ferry::backend::host> s;
  std::vector<int> v{1, 2, 3};
  ferry::device_buffer<int, ferry::backend::host> out(3);
#ifdef FERRY_EXPECT_FAIL
  ferry::async_h2d(v, out.span(), 0);
#else
  ferry::async_h2d(v, out.span(), s);
#endif
}
