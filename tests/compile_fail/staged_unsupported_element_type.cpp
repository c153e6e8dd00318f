// expect: ferry: unsupported element type
// bool is no element type of a staged-write tensor; the twin uses a 1-byte integer.
#include <ferry/ferry.hpp>

#include <cstdint>

int main() {
#ifdef FERRY_EXPECT_FAIL
  ferry::staged_write_tensor<bool, ferry::backend::host> t(2, 4);
#else
  ferry::staged_write_tensor<std::uint8_t, ferry::backend::host> t(2, 4);
#endif
  return static_cast<int>(t.size()) - 8;
}
