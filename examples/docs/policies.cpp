// Policies of your own (docs/policies.md): a type that declares a family and models its concept
// works in every component that uses the family, exactly like ferry's own tags.
#include <ferry/ferry.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

using B = ferry::backend::host;  // ferry::backend::cuda on a GPU

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

// GrowthPolicy: grow by half (less memory than pow2 for large sizes, more regrowths).
struct grow_by_half {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    return std::max(needed, current + current / 2);
  }
};
static_assert(ferry::growth_policy<grow_by_half>);

// ReusePolicy: the engine synchronizes once per step, so ferry need not fence.
struct engine_fences {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = false;
};
static_assert(ferry::reuse_policy<engine_fences>);

int main() {
  ferry::stream<B> s;

  // A pool of one slot of 100 elements: 101 elements grow it to 150 (pow2 would give 128).
  ferry::uva_pool<std::int32_t, grow_by_half, engine_fences, B> pool(100, 1);
  const std::vector<std::int32_t> lens(101, 7);
  const auto view = pool.copy_to_uva(lens, s);
  check(view.size() == 101 && pool.capacity(0) == 150, "grown by half");
  s.synchronize();  // the engine's fence: every reader of the slot is done

  // The same reuse policy in cpu_gpu_buffer: host() is copied in place (no snapshot), so it must
  // not be rewritten before the stream has passed the copy.
  ferry::cpu_gpu_buffer<float, engine_fences, B> buf(4);
  std::fill(buf.host().begin(), buf.host().end(), 2.5f);
  buf.copy_to_device(4, s);
  s.synchronize();
  std::fill(buf.host().begin(), buf.host().end(), 0.0f);
  buf.copy_to_host(4, s).synchronize();
  check(std::all_of(buf.host().begin(), buf.host().end(), [](float x) { return x == 2.5f; }),
        "round trip");
  return 0;
}
