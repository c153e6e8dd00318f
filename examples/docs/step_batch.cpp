// step_batch: a whole step in one launch (docs/step_batch.md): the plan, the steps, an epilogue.
// Runs on the host backend; with ferry::backend::cuda and <ferry/ferry.cuh> under nvcc the same
// code submits one kernel launch per step.
#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

using B = ferry::backend::host;

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

// [epilogue]
struct derive {                                    // trivially copyable; its state set once
  ferry::step_ref<std::int32_t> rows;              // an upload: each row's request slot
  const std::int32_t* block_table;                 // device memory the engine owns
  std::int32_t* computed;                          // per-request state, advanced here
  const std::int32_t* accepted;                    // written by the last step's sampler
  std::int64_t* positions;
  std::int64_t* slot_mapping;
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    const auto r = ctx.view(rows);                 // this step's n rows
    for (std::size_t i = ctx.rank(); i < r.size(); i += ctx.threads()) {
      const std::int32_t req = r[i];
      const std::int64_t pos = computed[req];
      positions[i] = pos;
      slot_mapping[i] = std::int64_t{block_table[req * 512 + pos / 16]} * 16 + pos % 16;
    }
    ctx.sync();
    for (std::size_t i = ctx.rank(); i < r.size(); i += ctx.threads()) computed[r[i]] += accepted[i];
  }
};
// [/epilogue]

// The engine's own parts, stand-ins here: the host data of a step and the model that reads it.
static void fill_tokens(std::span<std::int32_t> t, int step) {
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>(step * 1000 + i);
}
static void fill_lens(std::span<std::int32_t> l, int step) {
  for (std::size_t i = 0; i < l.size(); ++i) l[i] = static_cast<std::int32_t>(step + i);
}

int main() {
  ferry::stream<B> stream;
  ferry::device_buffer<std::int32_t, B> tokens_dev(256), logits_idx(256);
  ferry::staged_write_tensor<std::int32_t, B> block_table(24, 528);
  std::vector<std::int32_t> seen_lens(256);
  const std::size_t row = 3, col = 7;
  const std::vector<std::int32_t> ids{11, 12, 13};
  auto model = [&](ferry::stream_ref<B> s, ferry::device_span<std::int32_t> tokens,
                   ferry::device_span<const std::int32_t> lens) {
    ferry::enqueue_host(s, [&seen_lens, tokens, lens] {  // reads the step's data in stream order
      check(tokens[5] == tokens[0] + 5, "tokens landed");
      for (std::size_t i = 0; i < lens.size(); ++i) seen_lens[i] = lens[i];
    });
  };
  {
    // [overview]
    ferry::step_batch<B> batch;                      // pow2 growth, event-fenced, one kernel per step
    auto tokens = batch.add_upload(tokens_dev.span(), 256);        // device_span<int32_t>
    auto lens   = batch.add_publish<std::int32_t>(256);            // read in place through UVA
    auto table  = batch.add_writes(block_table, 24, 528);          // a staged_write_tensor or a view
    batch.add_fill(logits_idx.span().subspan(255, 1), lens, 255);  // logits_idx[255] = lens[255]
    batch.reserve();                                               // slots now, not on the hot path

    for (int step = 0; step < 4; ++step) {           // every step
      batch.begin();                                 // the next free slot
      fill_tokens(tokens.span(256), step);           // std::span<int32_t> into pinned slot memory
      fill_lens(lens.span(256), step);
      table.stage_write(row, col, ids);              // as staged_write_tensor::stage_write
      batch.submit(stream);                          // ONE launch
      model(stream, tokens_dev.span(), lens.view()); // lens.view(): device_span<const int32_t>
    }
    // [/overview]
    stream.synchronize();
    check(batch.steps() == 4, "four steps");
  }
  check(ferry::to_host(tokens_dev.span(), stream)[9] == 3009, "the last step's tokens");
  check(seen_lens[0] == 3 && seen_lens[255] == 258, "the model read the last step's lengths");
  check(ferry::to_host(logits_idx.span(), stream)[255] == 258, "the fill");
  const auto t = ferry::to_host(block_table.span(), stream);
  check(t[row * 528 + col] == 11 && t[row * 528 + col + 2] == 13, "the block-table write");

  // The epilogue: positions and slot mappings derived on the device from what landed.
  constexpr std::size_t requests = 4, n = 2;
  ferry::device_buffer<std::int32_t, B> rows_dev(256), table_dev(requests * 512), computed(requests),
      accepted(n);
  ferry::device_buffer<std::int64_t, B> positions(n), slots(n);  // this step's n rows
  std::vector<std::int32_t> blocks(requests * 512);
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<std::int32_t>(i);
  ferry::async_h2d(blocks, table_dev.span(), stream);
  ferry::async_h2d(std::vector<std::int32_t>{20, 33, 0, 5}, computed.span(), stream);
  ferry::async_h2d(std::vector<std::int32_t>{1, 2}, accepted.span(), stream);
  const std::int32_t* table = table_dev.data();
  {
    // [epilogue_plan]
    ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::graph, ferry::epilogue::functor<derive>> batch;
    auto rows = batch.add_upload(rows_dev.span(), 256);
    batch.set_epilogue(derive{rows.ref(), table, computed.data(), accepted.data(), positions.data(), slots.data()});
    // [/epilogue_plan]
    batch.begin();
    auto r = rows.span(n);
    r[0] = 1;  // requests 1 and 3
    r[1] = 3;
    batch.submit(stream);
    stream.synchronize();
  }
  check(ferry::to_host(positions.span(), stream) == std::vector<std::int64_t>{33, 5}, "positions");
  check(ferry::to_host(slots.span(), stream) == std::vector<std::int64_t>{(512 + 2) * 16 + 1, (3 * 512) * 16 + 5},
        "slot mappings");
  check(ferry::to_host(computed.span(), stream) == std::vector<std::int32_t>{20, 34, 0, 7}, "computed advanced");
}
