// expect: ignoring return value of .*copy_to_host
// The event cpu_gpu_buffer::copy_to_host returns is [[nodiscard]]: it is the only sign of when
// host() may be read, so dropping it warns; here the warning is made an error so that the check
// sees it. The twin keeps the event and waits for it.
#include <ferry/transfer/cpu_gpu_buffer.hpp>

#pragma GCC diagnostic error "-Wunused-result"

void read_back(ferry::cpu_gpu_buffer<float, ferry::backend::host>& buf, ferry::stream_ref<ferry::backend::host> s) {
#ifdef FERRY_EXPECT_FAIL
  buf.copy_to_host(4, s);
#else
  const ferry::event<ferry::backend::host> done = buf.copy_to_host(4, s);
  done.synchronize();
#endif
}
