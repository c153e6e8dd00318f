// Tests for include/ferry/step/step_stats.hpp: step_batch::stats() counts steps, the slots
// inserted while the stream is behind, the waits of a full ring and the growth of slots (host
// backend: the counting is the same code on CUDA).
#include <support/backends.hpp>

#include <ferry/ferry.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {
using B = ferry::backend::host;

template <class Batch, class Upload>
void step(Batch& batch, Upload& u, std::size_t n, ferry::stream<B>& s) {
  batch.begin();
  auto span = u.span(n);
  for (std::size_t i = 0; i < n; ++i) span[i] = static_cast<std::int32_t>(i);
  batch.submit(s);
}
}  // namespace

TEST_CASE("step_batch::stats: steps, inserted slots, a full ring's wait, grown slots", "[step][stats]") {
  ferry::stream<B> s;
  ferry::device_buffer<std::int32_t, B> dst(1 << 16);
  ferry::step_batch<B> batch(2, 3);
  auto u = batch.add_upload(dst.span(), 1 << 16);
  CHECK(batch.stats().slots == 0);
  CHECK(batch.stats().max_slots == 3);

  step(batch, u, 4, s);
  step(batch, u, 4, s);
  s.synchronize();
  ferry::step_stats st = batch.stats();
  CHECK(st.steps == 2);
  CHECK(st.slots == 2);
  CHECK(st.inserted == 0);
  CHECK(st.full_waits == 0);
  CHECK(st.grows == 0);

  {
    ferry_test::gate<B> g(s);  // holds every step: the ring fills
    step(batch, u, 4, s);  // held
    step(batch, u, 4, s);  // the other slot: its step has run (it published nothing)
    CHECK(batch.stats().inserted == 0);
    step(batch, u, 4, s);
    CHECK(batch.stats().inserted == 1);  // the third slot, none being free
    CHECK(batch.stats().slots == 3);
    CHECK(ferry_test::returns_after_open(g, [&] { step(batch, u, 4, s); }));  // the ring full: a wait
    s.synchronize();
  }
  st = batch.stats();
  CHECK(st.steps == 6);
  CHECK(st.full_waits == 1);
  CHECK(st.inserted == 1);
  CHECK(st.slots == 3);

  // A step larger than its slot (writes declared without a bound: growth::pow2): the slot grows
  // while the step is written, and the next begin() fits a slot to the largest step so far.
  ferry::staged_write_tensor<std::int32_t, B> table(64, 4096, s);
  ferry::step_batch<B> grown;
  auto w = grown.add_writes(table);
  grown.begin();
  grown.submit(s);
  CHECK(grown.stats().grows == 0);
  const std::vector<std::int32_t> row(4096, 7);
  grown.begin();
  for (std::size_t r = 0; r < 64; ++r) w.stage_write(r, 0, row);
  grown.submit(s);
  s.synchronize();
  CHECK(grown.stats().grows > 0);
  CHECK(ferry::to_host(table.span(), s)[63 * 4096 + 4095] == 7);

  ferry::step_batch<B> moved = std::move(batch);
  CHECK(batch.stats().steps == 0);  // NOLINT(bugprone-use-after-move): a moved-from batch is empty
  CHECK(moved.stats().steps == 6);
}
