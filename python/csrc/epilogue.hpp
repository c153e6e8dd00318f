// The epilogues ferry_vllm's StepBatch ships (Python cannot write a device functor): one functor
// type, compiled into the package for both backends, that runs the epilogue the batch chose at
// plan time, or nothing. Includes no torch header (nvcc builds it in apply.cu).
#pragma once

#include "prep_epilogue.hpp"

#include <ferry/config.hpp>
#include <ferry/step/step_context.hpp>

#include <cstddef>
#include <cstdint>

namespace ferry_vllm {

/// The decode step's derived inputs, as vLLM's model runner computes them after asynchronous
/// scheduling (examples/async_decode): for each row i of the step (request slot r = rows[i]),
///
///   pos             = base[i] + drafts[i]   (drafts: the accepted draft tokens; 0 without them)
///   positions[i]    = pos                                  (int64)
///   seq_lens[i]     = pos + 1                              (int32)
///   slot_mapping[i] = block_table[r][pos / block_size] * block_size + pos % block_size  (int64)
///   num_computed[r] = pos + 1                              (int32: the request's state advanced)
///
/// rows, base and drafts are int32 views of the step (uploads or gathers); each output is
/// optional (null: not written). A row whose slot or position falls outside the block table (or
/// num_computed) gets slot_mapping -1 (vLLM's PAD_SLOT_ID) and leaves num_computed alone: the
/// epilogue never reads or writes outside the tensors it was given. Rows: the fewest of the
/// step's rows, base and drafts.
struct decode_epilogue {
  ferry::step_ref<std::int32_t> rows, base, drafts;
  bool has_drafts = false;
  const std::int32_t* block_table = nullptr;  ///< [table_rows x table_cols], row-major
  std::int64_t table_rows = 0, table_cols = 0;
  std::int64_t block_size = 16;
  std::int32_t* num_computed = nullptr;  ///< [num_requests]
  std::int64_t num_requests = 0;
  std::int64_t* positions = nullptr;
  std::int32_t* seq_lens = nullptr;
  std::int64_t* slot_mapping = nullptr;

  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    const ferry::device_span<std::int32_t> r = ctx.view(rows), b = ctx.view(base);
    std::size_t n = r.size() < b.size() ? r.size() : b.size();
    ferry::device_span<std::int32_t> d;
    if (has_drafts) {
      d = ctx.view(drafts);
      if (d.size() < n) n = d.size();
    }
    for (std::size_t i = ctx.rank(); i < n; i += ctx.threads()) {
      const std::int64_t slot = r[i];
      const std::int64_t pos = std::int64_t{b[i]} + (has_drafts ? std::int64_t{d[i]} : 0);
      if (positions != nullptr) positions[i] = pos;
      if (seq_lens != nullptr) seq_lens[i] = static_cast<std::int32_t>(pos + 1);
      if (slot_mapping != nullptr) {
        const std::int64_t block = pos >= 0 ? pos / block_size : -1;
        const bool inside = slot >= 0 && slot < table_rows && block >= 0 && block < table_cols;
        slot_mapping[i] = inside ? std::int64_t{block_table[slot * table_cols + block]} * block_size + pos % block_size
                                 : std::int64_t{-1};
      }
      // Rows hold distinct requests, so no two threads write one element.
      if (num_computed != nullptr && slot >= 0 && slot < num_requests)
        num_computed[slot] = static_cast<std::int32_t>(pos + 1);
    }
  }
};

/// The functor of every step_batch of the package: the epilogue chosen at plan time
/// (StepBatch.set_decode_epilogue, or VllmStepPrep's), or none. Trivially copyable;
/// value-initialized it does nothing.
struct step_epilogue {
  enum class kind : std::uint32_t { none, decode, prep };
  kind which = kind::none;
  decode_epilogue decode;
  prep_epilogue prep;

  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    if (which == kind::decode) decode(ctx);
    else if (which == kind::prep) prep(ctx);
  }
};

}  // namespace ferry_vllm
