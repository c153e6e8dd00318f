// Spans, buffers and the pinned staging arena (docs/memory.md).
#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

using B = ferry::backend::host;  // ferry::backend::cuda on a GPU

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

int main() {
  ferry::stream<B> s;

  // Pinned, mapped, zero-filled host memory: host() for the host, device() for kernels (UVA).
  ferry::pinned_buffer<float, B> in(1024);
  ferry::pinned_span<float> h = in.host();
  check(h[17] == 0.0f, "pinned_buffer is zero-filled");
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = 0.5f * static_cast<float>(i);
  ferry::device_span<float> uva = in.device();  // the same bytes, as kernels see them
  check(uva.size() == 1024 && uva[17] == 8.5f, "one view per buffer");  // host-accessible: UVA

  // Device memory (uninitialized). Spans are pointer + size, trivially copyable.
  ferry::device_buffer<float, B> dev(1024);
  ferry::device_span<float> all = dev.span();
  ferry::device_span<const float> tail = all.subspan(1000);  // converts to const
  check(tail.size() == 24 && all.first(8).size() == 8, "subspan and first");

  // Device memory is not host-accessible on the CUDA backend: copy in, and read back into pinned
  // memory.
  ferry::async_h2d(h, all, s);  // a pinned_span source is DMA'd in place: keep it unmodified...
  ferry::pinned_buffer<float, B> out(24);
  ferry::async_d2h(tail, out.host(), s);
  s.synchronize();  // ...until the stream has passed the copy
  check(out.host()[0] == 500.0f && out.host()[23] == 511.5f, "round trip");

  // The arena: power-of-two blocks (>= 256 bytes, 256-byte aligned), reused only after the
  // stream they were released with has passed that point; a byte cap instead of unbounded growth.
  ferry::pinned_arena<B> arena(1 << 20);
  arena.reserve(4096, 2);  // steady state starts here: no allocation below
  const std::uint64_t allocations = arena.stats().allocations;
  ferry::pinned_block block = arena.acquire(3000);
  check(block.capacity == 4096, "rounded up to a power of two");
  check(reinterpret_cast<std::uintptr_t>(block.data) % 256 == 0, "256-byte aligned");
  arena.release(block, s);  // fenced on s: handed out again once s has passed this point
  ferry::pinned_block again = arena.acquire(4096);
  arena.release(again);  // given back unused: reusable at once
  check(arena.stats().allocations == allocations && arena.stats().reuses == 2, "no allocation");

  bool capped = false;
  try {
    (void)arena.acquire(2 << 20);  // beyond the 1 MiB cap
  } catch (const ferry::capacity_error&) {
    capped = true;
  }
  check(capped, "the cap throws ferry::capacity_error");
}
