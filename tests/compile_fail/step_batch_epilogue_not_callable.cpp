// expect: step_batch's epilogue functor must be callable as .f\(const ferry::step_context&\).
// An epilogue whose call operator takes something else than the step's context is rejected; the
// twin takes the context.
#include <ferry/step/step_batch.hpp>

struct derive {
  int* out;
#ifdef FERRY_EXPECT_FAIL
  void operator()(int) const {}
#else
  void operator()(const ferry::step_context&) const {}
#endif
};
using batch = ferry::step_batch<ferry::backend::host, ferry::epilogue::functor<derive>>;
batch b(2);
int main() {}
