// expect: the source's element type differs from the destination's element type
// stage_write of float values into an int32 tensor is rejected; the twin converts explicitly.
#include <ferry/ferry.hpp>

#include <cstdint>
#include <vector>

int main() {
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host> t(2, 4);
  std::vector<float> v{1.0f, 2.0f};
#ifdef FERRY_EXPECT_FAIL
  t.stage_write(0, 0, v);
#else
  t.stage_write(0, 0, ferry::cast<std::int32_t>(v));
#endif
  return static_cast<int>(t.pending()) - 1;
}
