// expect: ignoring return value of .*step_upload<Batch, T>::span
// The span a step_batch upload's span(n) returns is [[nodiscard]]: it is where this step's n
// elements must be written, and dropping it would upload uninitialized memory; here the warning
// is made an error so that the check sees it. The twin fills the span.
#include <ferry/step/step_batch.hpp>

#include <algorithm>

#pragma GCC diagnostic error "-Wunused-result"

void fill(ferry::step_batch<ferry::backend::host>::upload<int>& tokens) {
#ifdef FERRY_EXPECT_FAIL
  tokens.span(4);
#else
  std::ranges::fill(tokens.span(4), 7);
#endif
}
