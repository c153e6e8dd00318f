// expect: this component does not use the GrowthPolicy policy family
// async_h2d reads only PinPolicy: a growth tag is rejected; the twin leaves it out.
#include <ferry/transfer/async_h2d.hpp>

#include <vector>

void upload(ferry::stream_ref<ferry::backend::host> s, ferry::device_span<int> out) {
  std::vector<int> v{1, 2};
#ifdef FERRY_EXPECT_FAIL
  ferry::async_h2d<ferry::growth::fixed, ferry::pin::stage>(v, out, s);
#else
  ferry::async_h2d<ferry::pin::stage>(v, out, s);
#endif
}
int main() {}
