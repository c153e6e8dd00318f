// expect: the TargetKind policy family is given more than once
// A staged-write tensor given two TargetKind tags is rejected; the twin gives one.
#include <ferry/ferry.hpp>

#include <cstdint>

int main() {
#ifdef FERRY_EXPECT_FAIL
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host, ferry::target::uva, ferry::target::device> t(2, 4);
#else
  ferry::staged_write_tensor<std::int32_t, ferry::backend::host, ferry::target::uva> t(2, 4);
#endif
  return static_cast<int>(t.size()) - 8;
}
