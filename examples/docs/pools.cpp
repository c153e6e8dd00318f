// uva_pool and uva_backed: per-step arrays that kernels read in place (docs/pools.md).
#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <future>
#include <stdexcept>
#include <vector>

using B = ferry::backend::host;  // ferry::backend::cuda on a GPU

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

// A stand-in for a kernel: on the host backend, kernels are host work in stream order.
static void sum_kernel(ferry::stream<B>& s, ferry::device_span<const std::int32_t> v,
                       std::int64_t& out) {
  ferry::enqueue_host(s, [v, &out] {
    out = 0;
    for (std::size_t i = 0; i < v.size(); ++i) out += v.data()[i];
  });
}

int main() {
  ferry::stream<B> s;

  // A ring of 2 pinned, mapped slots of 256 elements each (growth::pow2, reuse::event_fenced).
  ferry::uva_pool<std::int32_t, B> lens(256);
  std::promise<void> gate;  // holds the stream, as a long kernel would
  ferry::enqueue_host(s, [f = gate.get_future().share()] { f.wait(); });
  std::vector<std::int32_t> step0(100, 1), step1(100, 2);
  std::int64_t sum0 = 0, sum1 = 0;
  ferry::device_span<const std::int32_t> v0 = lens.copy_to_uva(step0, s);  // slot 1
  sum_kernel(s, v0, sum0);
  ferry::device_span<const std::int32_t> v1 = lens.copy_to_uva(step1, s);  // slot 0
  sum_kernel(s, v1, sum1);
  check(v0.data() != v1.data() && v1.size() == 100, "each call writes the next slot");

  // A slot still being read is never rewritten: the third call finds its slot busy (the first
  // reader has not run) and inserts a new slot from the arena instead, without blocking.
  std::int64_t sum2 = 0;
  sum_kernel(s, lens.copy_to_uva({5, 5, 5}, s), sum2);
  check(lens.stats().fence_hits == 1 && lens.slots() == 3, "a slot was inserted");
  gate.set_value();
  s.synchronize();
  check(sum0 == 100 && sum1 == 200 && sum2 == 15, "every reader saw its own step's data");

  // Growth: a larger source grows the slot to the next power of two (contents not preserved).
  std::vector<std::int32_t> big(1000, 3);
  (void)lens.copy_to_uva(big, s);
  check(lens.capacity(lens.current_slot()) == 1024 && lens.stats().grows == 1, "pow2 growth");

  // uva_backed: the host owns the truth in ordinary memory; publish snapshots a prefix into the
  // next slot (a new address each time: pass it as a kernel argument, never bake it into a graph).
  ferry::uva_backed<std::int32_t, B> positions(256);
  std::int64_t a = 0, b = 0;
  for (std::size_t i = 0; i < 256; ++i) positions.host()[i] = static_cast<std::int32_t>(i);
  sum_kernel(s, positions.publish(256, s), a);
  for (auto& p : positions.host()) ++p;  // safe at once: publish took a snapshot
  sum_kernel(s, positions.publish(256, s), b);
  s.synchronize();
  check(a == 255 * 256 / 2 && b == a + 256, "each step read its own snapshot");

  // Readers on another stream declare themselves before the pool's next call.
  ferry::stream<B> other;
  std::int64_t c = 0;
  sum_kernel(other, positions.publish(10, s), c);
  positions.record_use(other);
  other.synchronize();
  check(c == 55, "read on another stream");
}
