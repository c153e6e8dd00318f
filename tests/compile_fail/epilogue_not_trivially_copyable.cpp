// expect: epilogue::functor<F>: F must be a trivially copyable class type
// An epilogue holding a member that cannot travel as a kernel parameter (a std::vector) is
// rejected; the twin holds a pointer.
#include <ferry/policies/epilogue.hpp>

#include <vector>

struct derive {
#ifdef FERRY_EXPECT_FAIL
  std::vector<int> rows;
#else
  const int* rows;
#endif
};
using policy = ferry::epilogue::functor<derive>;
static_assert(sizeof(policy::functor_type) > 0);
int main() {}
