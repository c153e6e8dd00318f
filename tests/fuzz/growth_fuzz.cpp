// Fuzz target: a user GrowthPolicy whose capacity_for answers come from the input
// (ferry_fuzz::input_growth: the capacity needed, a little more, a power of two, up to 2^64 - 1,
// or ferry::capacity_error), used by uva_pool, staged_write_tensor and step_batch (host backend).
// Every answer is legal, so each call must either work (checked against the same host models as
// the other targets) or throw ferry::capacity_error having lost nothing: a pool's last view keeps
// its contents, staged writes stay staged, a refused submit leaves the step open and enqueues
// nothing. Never a crash or a sanitizer report.
#include "staged_model.hpp"
#include "step_model.hpp"

namespace {

using namespace ferry_fuzz;

void run_pool(input& in, ferry::pinned_arena<host>& arena) {
  using pool_type = ferry::uva_pool<std::uint32_t, input_growth, host>;
  std::uint64_t counter = in.raw(2);
  const std::size_t width = 1 + in.below(4);
  std::size_t initial = in.size(9);
  if (initial > (1u << 16) && initial < (std::uint64_t{1} << 60)) initial %= 1u << 16;
  const std::size_t slots = 1 + in.below(3), max_slots = slots + in.below(4);
  const std::string pool_name = "uva_pool(row_width " + std::to_string(width) + ", " + std::to_string(initial) +
                           " rows, " + std::to_string(slots) + ", " + std::to_string(max_slots) + ")";
  ferry::stream<host> s;
  std::optional<pool_type> pool;
  const outcome made = attempt(pool_name, [&] { pool.emplace(ferry::row_width{width}, initial, slots, max_slots, arena); });
  if (made != outcome::ok) return expect(refused(made, true), pool_name + ": threw " + std::string(name(made)));

  ferry::device_span<const std::uint32_t> last;
  std::vector<std::uint32_t> last_values;
  for (int op = 0; op < 48 && !in.empty(); ++op) {
    const std::string at = pool_name + " op " + std::to_string(op);
    if (in.below(4) == 0) {
      s.synchronize();
      continue;
    }
    const std::size_t rows = in.below(8) == 0 ? in.below(4096) : in.below(40);
    const std::size_t extra = width > 1 && in.below(8) == 0 ? 1 + in.below(width - 1) : 0;  // not whole rows
    std::vector<std::uint32_t> src(rows * width + extra);
    for (auto& x : src) x = next_value<std::uint32_t>(counter);
    const std::string what = at + ": copy_to_uva of " + std::to_string(src.size()) + " elements";
    ferry::device_span<const std::uint32_t> view;
    const outcome o = attempt(what, [&] { view = pool->copy_to_uva(src, s); });
    if (extra != 0) {
      expect(o == outcome::invalid_argument, what + ": not whole rows, threw " + std::string(name(o)));
    } else if (o == outcome::ok) {
      expect(view.size() == src.size(), what + ": a view of the wrong size");
      expect_equal(view.data(), src, what + ": the view");
      last = view;
      last_values = src;
    } else {
      expect(refused(o, true), what + ": threw " + std::string(name(o)));
    }
    // A refused call changed nothing: the last view still holds its elements.
    if (o != outcome::ok) expect_equal(last.data(), last_values, what + ": refused, the last view");
  }
  s.synchronize();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  ferry::pinned_arena<host> arena(64u << 20);  // a request past 64 MiB is ferry::capacity_error
  const growth_scope answers(in);
  switch (in.below(3)) {
    case 0: run_pool(in, arena); break;
    case 1: run_staged<std::uint32_t, input_growth>(in, arena); break;
    default: run_step<input_growth>(in, arena); break;
  }
  return 0;
}
