// staged_write_tensor and fused_staged_writer: scattered row writes applied by one launch
// (docs/staged_writes.md).
#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

using B = ferry::backend::host;  // ferry::backend::cuda on a GPU (apply needs nvcc + ferry.cuh)

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

int main() {
  ferry::stream<B> s;
  constexpr std::size_t rows = 8, cols = 16;
  std::vector<std::int32_t> expect(rows * cols, 0);  // the host reference

  // A block table: device target, contents read in place (UVA), pow2 growth, event-fenced.
  ferry::staged_write_tensor<std::int32_t, ferry::presets::block_table, B> table(rows, cols);
  std::vector<std::int32_t> blocks{7, 8, 9, 10};
  table.stage_write(3, 0, blocks);  // [3][0, 4): recorded on the host, no copy enqueued yet
  table.stage_write(5, 14, {1, 2});  // [5][14, 16)
  table.stage_write_elem(6, std::int16_t{-4});  // [6][0]; widening is value-preserving
  // Overlapping writes in one apply: the one staged later wins.
  table.stage_write(3, 2, {90, 100});  // [3][2, 4) overrides 9, 10
  const std::vector<std::pair<std::size_t, std::int32_t>> cells{
      {3 * cols + 0, 7}, {3 * cols + 1, 8}, {3 * cols + 2, 90}, {3 * cols + 3, 100},
      {5 * cols + 14, 1}, {5 * cols + 15, 2}, {6 * cols + 0, -4}};
  for (auto [i, v] : cells) expect[i] = v;

  // Bounds are checked for every write, even an empty one: nothing is recorded.
  bool rejected = false;
  try {
    table.stage_write(2, 15, {1, 2});  // 15 + 2 > cols
  } catch (const std::out_of_range&) {
    rejected = true;
  }
  check(rejected && table.pending() == 4 && table.pending_elements() == 9, "4 writes staged");

  table.apply_write(s);  // one launch for all of them; the host does not wait
  check(table.pending() == 0, "apply clears the staged writes");
  check(ferry::to_host(table.span(), s) == expect, "the target matches the host reference");

  // Several tensors of one element type: one launch for all of them.
  ferry::staged_write_tensor<std::int32_t, B> seq_lens(1, 4);
  ferry::fused_staged_writer<std::int32_t, B> writer(2);
  table.stage_write(0, 0, {42});
  seq_lens.stage_write(0, 0, {16, 17, 18, 19});
  writer.apply(s, table, seq_lens);
  expect[0] = 42;
  check(ferry::to_host(table.span(), s) == expect, "fused apply: table");
  check(ferry::to_host(seq_lens.span(), s) == std::vector<std::int32_t>{16, 17, 18, 19}, "fused: lens");

  // Memory you own as the target (an engine's buffer, a torch tensor's storage): adopted as it
  // is, never zero-filled nor freed by the tensor; it must outlive the tensor.
  ferry::device_buffer<std::int32_t, B> owned(2 * 3);
  ferry::async_h2d(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, owned.span(), s);
  {
    ferry::staged_write_tensor<std::int32_t, B> lens(owned.span(), 2, 3);
    check(lens.span().data() == owned.data(), "the target is the caller's memory");
    lens.stage_write(1, 1, {50, 60});
    lens.apply_write(s);
  }  // waits for its apply; `owned` stays
  check(ferry::to_host(owned.span(), s) == std::vector<std::int32_t>{1, 2, 3, 4, 50, 60},
        "the caller's contents, with the write applied");

  // For CUDA graphs that read the target: fixed growth (nothing reallocates after reserve),
  // apply before replay. Beyond the reserved capacity: ferry::capacity_error, nothing recorded.
  ferry::staged_write_tensor<std::int32_t, ferry::presets::graph_safe, B> g(rows, cols);
  g.reserve(2, 8);
  const std::int32_t* address = g.span().data();
  g.stage_write(1, 0, {1, 2, 3, 4, 5, 6, 7, 8});
  bool full = false;
  try {
    g.stage_write(2, 0, {9});
  } catch (const ferry::capacity_error&) {
    full = true;
  }
  g.apply_write(s);
  check(full && g.span().data() == address, "stable address, fixed capacity");
}
