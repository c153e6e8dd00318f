// expect: error: static assertion failed: ferry has no default stream: pass a ferry::stream
// async_h2d(v, nullptr), the form that allocates its output: the same one line; the twin names a
// stream.
#include <ferry/ferry.hpp>

#include <vector>

int main() {
  ferry::stream<ferry::backend::host> s;
  std::vector<float> v{1.0f, 2.0f};
#ifdef FERRY_EXPECT_FAIL
  auto d = ferry::async_h2d(v, nullptr);
#else
  auto d = ferry::async_h2d(v, s);
#endif
  static_cast<void>(d);
}
