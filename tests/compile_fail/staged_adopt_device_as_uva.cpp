// expect: a staged_write_tensor with target::uva adopts pinned, mapped host memory as a pinned_span<T>
// A UVA-target tensor given device memory to adopt is rejected; the twin adopts it with a device
// target.
#include <ferry/ferry.hpp>

#include <cstdint>

int main() {
  ferry::device_buffer<std::int32_t, ferry::backend::host> memory(8);
#ifdef FERRY_EXPECT_FAIL
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host, ferry::target::uva> t(memory.span(), 2, 4);
#else
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host> t(memory.span(), 2, 4);
#endif
  return static_cast<int>(t.size()) - 8;
}
