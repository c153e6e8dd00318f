// expect: ferry: unsupported element type
// bool is no element type; the twin uses a 1-byte integer.
#include <ferry/ferry.hpp>

#include <cstdint>

int main() {
#ifdef FERRY_EXPECT_FAIL
  ferry::pinned_buffer<bool, ferry::backend::host> b(4);
#else
  ferry::pinned_buffer<std::uint8_t, ferry::backend::host> b(4);
#endif
  return static_cast<int>(b.size()) - 4;
}
