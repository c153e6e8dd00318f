// expect: element type
// A pool source must have the pool's element type: a std::vector<double> into a uva_pool<float>
// does not compile (no silent casts); ferry::cast<float>(range) converts explicitly.
#include <ferry/pool/uva_pool.hpp>

#include <vector>

void publish(ferry::uva_pool<float, ferry::backend::host>& pool,
             ferry::stream_ref<ferry::backend::host> s, const std::vector<double>& values) {
#ifdef FERRY_EXPECT_FAIL
  (void)pool.copy_to_uva(values, s);
#else
  (void)pool.copy_to_uva(ferry::cast<float>(values), s);
#endif
}
