// expect: pin::require accepts only pinned sources and this source is pageable; pass a ferry::pinned_span
// Under pin::require a pageable std::vector does not compile; the twin passes pinned sources (a
// pinned_buffer's host() and ferry::assume_pinned of memory the caller pinned).
#include <ferry/memory/pinned_buffer.hpp>
#include <ferry/transfer/async_h2d.hpp>

#include <span>
#include <vector>

void upload(ferry::stream_ref<ferry::backend::host> s, ferry::device_span<int> out,
            std::vector<int>& v, ferry::pinned_buffer<int, ferry::backend::host>& p) {
#ifdef FERRY_EXPECT_FAIL
  ferry::async_h2d<ferry::pin::require>(v, out, s);
  (void)p;
#else
  ferry::async_h2d<ferry::pin::require>(p.host(), out, s);
  ferry::async_h2d<ferry::pin::require>(ferry::assume_pinned(std::span<int>(v)), out, s);
#endif
}
int main() {}
