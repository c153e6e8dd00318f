// expect: a staged_write_tensor with target::device adopts device memory as a device_span<T>
// A device-target tensor given pinned host memory to adopt is rejected; the twin adopts it with
// a UVA target.
#include <ferry/ferry.hpp>

#include <cstdint>

int main() {
  ferry::pinned_buffer<std::int32_t, ferry::backend::host> memory(8);
#ifdef FERRY_EXPECT_FAIL
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host> t(memory.host(), 2, 4);
#else
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host, ferry::target::uva> t(memory.host(), 2, 4);
#endif
  return static_cast<int>(t.size()) - 8;
}
