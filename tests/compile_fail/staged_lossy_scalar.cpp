// expect: this scalar conversion to the element type could lose value
// stage_write_elem of a double into an int32 tensor is rejected; the twin widens an int16.
#include <ferry/ferry.hpp>

#include <cstdint>

int main() {
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host> t(2, 4);
#ifdef FERRY_EXPECT_FAIL
  t.stage_write_elem(1, 2.5);
#else
  t.stage_write_elem(1, std::int16_t{2});
#endif
  return static_cast<int>(t.pending()) - 1;
}
