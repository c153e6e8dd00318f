// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// async_h2d_packed(out, 0, ...): the same one line; the twin names a stream.
#include <ferry/ferry.hpp>

#include <vector>

int main() {
  ferry::stream<ferry::backend::host> s;
  std::vector<int> a{1, 2}, b{3};
  ferry::device_buffer<int, ferry::backend::host> out(64);
#ifdef FERRY_EXPECT_FAIL
  auto spans = ferry::async_h2d_packed(out.span(), 0, a, b);
#else
  auto spans = ferry::async_h2d_packed(out.span(), s, a, b);
#endif
  static_cast<void>(spans);
}
