// expect: does not model ferry::pin_policy: it lacks .static constexpr ferry::pageable_source pageable.
// A pin policy that does not say what a pageable source does names the member; the twin says it.
#include <ferry/transfer/async_h2d.hpp>

#include <vector>

struct pinned_only {
  using ferry_policy_family = ferry::families::pin;
#ifndef FERRY_EXPECT_FAIL
  static constexpr ferry::pageable_source pageable = ferry::pageable_source::reject;
#endif
};
void upload(ferry::stream_ref<ferry::backend::host> s, ferry::device_span<int> out,
            ferry::pinned_span<const int> src) {
  ferry::async_h2d<pinned_only>(src, out, s);
}
int main() {}
