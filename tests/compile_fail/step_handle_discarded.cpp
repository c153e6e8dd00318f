// expect: ignoring return value of .*add_upload
// The handles step_batch::add_upload (add_publish, add_writes) returns are [[nodiscard]]: the
// handle is the only way to fill what was declared, so dropping it warns; here the warning is
// made an error so that the check sees it. The twin keeps the handle.
#include <ferry/step/step_batch.hpp>

#pragma GCC diagnostic error "-Wunused-result"

void plan(ferry::step_batch<ferry::backend::host>& batch, ferry::device_span<int> dst) {
#ifdef FERRY_EXPECT_FAIL
  batch.add_upload(dst, dst.size());
#else
  auto tokens = batch.add_upload(dst, dst.size());
  static_cast<void>(tokens.destination());
#endif
}
