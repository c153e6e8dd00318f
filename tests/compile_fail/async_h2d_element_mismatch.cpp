// expect: the source's element type differs from the destination's element type
// async_h2d never converts element types silently (float into int); the twin converts explicitly
// with ferry::cast<int>.
#include <ferry/transfer/async_h2d.hpp>

#include <vector>

void upload(ferry::stream_ref<ferry::backend::host> s, ferry::device_span<int> out) {
  std::vector<float> v{1.5f, 2.5f};
#ifdef FERRY_EXPECT_FAIL
  ferry::async_h2d(v, out, s);
#else
  ferry::async_h2d(ferry::cast<int>(v), out, s);
#endif
}
int main() {}
