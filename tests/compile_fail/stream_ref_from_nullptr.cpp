// expect: use of deleted function .*stream_ref<ferry::backend::host>::stream_ref\(std::nullptr_t\)
// There is no implicit default stream: stream_ref from nullptr is deleted; the twin names a stream.
#include <ferry/ferry.hpp>

int main() {
  ferry::stream<ferry::backend::host> s;
#ifdef FERRY_EXPECT_FAIL
  ferry::stream_ref<ferry::backend::host> r(nullptr);
#else
  ferry::stream_ref<ferry::backend::host> r(s);
#endif
  r.synchronize();
}
