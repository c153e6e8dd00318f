// expect: ignoring return value
// The views a pool call returns are [[nodiscard]]: dropping one (the only way to reach what was
// written) warns; here the warning is made an error so that the check sees it.
#include <ferry/pool/uva_backed.hpp>

#include <vector>

#pragma GCC diagnostic error "-Wunused-result"

void step(ferry::uva_pool<float, ferry::backend::host>& pool, ferry::uva_backed<float, ferry::backend::host>& state,
          ferry::stream_ref<ferry::backend::host> s, const std::vector<float>& values) {
#ifdef FERRY_EXPECT_FAIL
  pool.copy_to_uva(values, s);
  state.publish(1, s);
#else
  (void)pool.copy_to_uva(values, s);
  (void)state.publish(1, s);
#endif
}
