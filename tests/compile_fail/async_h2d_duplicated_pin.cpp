// expect: the PinPolicy policy family is given more than once
// async_h2d takes each policy family at most once; the twin gives PinPolicy once.
#include <ferry/transfer/async_h2d.hpp>

#include <vector>

void upload(ferry::stream_ref<ferry::backend::host> s, ferry::device_span<int> out) {
  std::vector<int> v{1, 2};
#ifdef FERRY_EXPECT_FAIL
  ferry::async_h2d<ferry::pin::stage, ferry::pin::require>(v, out, s);
#else
  ferry::async_h2d<ferry::pin::stage>(v, out, s);
#endif
}
int main() {}
