// The epilogue of ferry_vllm.VllmStepPrep: what vLLM's model runner v2 derives on the GPU to
// prepare a step (vLLM 0.26.0, vllm/v1/worker/gpu: input_batch.py's prepare_prefill_inputs,
// prepare_pos_seq_lens, combine_sampled_and_draft_tokens and expand_idx_mapping, block_table.py's
// gather_block_tables and compute_slot_mappings), computed in the step's one launch after its
// uploads and block-table writes have landed. Includes no torch header (nvcc builds it in
// apply.cu).
#pragma once

#include <ferry/config.hpp>
#include <ferry/step/step_context.hpp>

#include <cstddef>
#include <cstdint>

namespace ferry_vllm {

/// The most KV-cache groups a VllmStepPrep serves.
inline constexpr std::size_t max_kv_groups = 4;

/// vLLM's PAD_SLOT_ID (vllm/v1/attention/backends/utils.py).
inline constexpr std::int64_t pad_slot_id = -1;

/// The per-step values of the aux upload that are not sizes of a view.
enum prep_meta : std::size_t {
  meta_reqs_padded,   ///< rows of the gathered block tables: [num_reqs, this) are zeroed
  meta_slot_pad_end,  ///< slot_mappings[g][num_tokens, this) = PAD_SLOT_ID (past it they are already)
  meta_size
};

/// One KV-cache group: its persistent block table (written by the step's staged writes), the
/// gathered table the model reads, and the kernel block size.
struct prep_group {
  const std::int32_t* table = nullptr;  ///< [max_num_reqs x cols]
  std::int32_t* gathered = nullptr;     ///< [max_num_reqs x cols]
  std::int64_t cols = 0;
  std::int64_t block_size = 16;
};

/// The step's inputs, derived on the device. The views (the step's uploads):
///   idx   idx_mapping[0, n): each row's request slot (an output itself)
///   qsl   query_start_loc[0, n + 1) (an output; this epilogue pads [n + 1, max_num_reqs + 1)
///         with num_tokens = qsl[n], as vLLM's upload does)
///   cu    cu_num_logits[0, n + 1) (an output)
///   aux   [meta (prep_meta) | row_info (n) | num_blocks of group 0 (n) | group 1 (n) | ...]:
///         row_info[i] >= 0: row i is a prefill row whose tokens are prefill[row_info[i] + j];
///         -1: a decode row (its last sampled token and drafts come from the device)
///   prefill  the prefill rows' tokens, packed in row order
/// For every token t of row i (j = t - qsl[i], r = idx[i], nc = num_computed[r]):
///   positions[t] = nc + j; slot_mappings[g][t] = table_g[r][p / bs] * bs + p % bs, p = nc + j
///   input_ids[t] = prefill token (prefill row), or for a decode row with d = cu[i+1]-cu[i]-1
///   drafts: last_sampled[r] at qsl[i+1]-d-1, draft_tokens[r][k] at qsl[i+1]-d+k
/// and for every row: seq_lens[i] = nc + q_i (seq_lens[n, max_num_reqs) = 0); for k < num_logits_i: logits_indices[cu[i]+k] =
/// qsl[i+1]-num_logits_i+k, expanded_idx_mapping[cu[i]+k] = r, expanded_local_pos[cu[i]+k] = k;
/// each group's gathered[i][0, num_blocks) = table[r][0, num_blocks), rows [n, reqs_padded) zero.
/// Nothing else is written: elements vLLM leaves as they were stay as they were.
struct prep_epilogue {
  ferry::step_ref<std::int32_t> idx, qsl, cu, aux, prefill;
  std::int32_t* query_start_loc = nullptr;  ///< [max_num_reqs + 1]
  std::int64_t max_num_reqs = 0;
  // the device state the host never reads
  const std::int32_t* num_computed = nullptr;  ///< [max_num_reqs]
  const std::int64_t* last_sampled = nullptr;  ///< [max_num_reqs] (vLLM: [max_num_reqs, 1])
  const std::int64_t* draft_tokens = nullptr;  ///< [max_num_reqs x draft_cols]
  std::int64_t draft_cols = 0;
  // outputs
  std::int32_t* input_ids = nullptr;
  std::int64_t* positions = nullptr;
  std::int32_t* seq_lens = nullptr;  ///< [max_num_reqs]
  std::int64_t* logits_indices = nullptr;
  std::int32_t* expanded_idx_mapping = nullptr;
  std::int32_t* expanded_local_pos = nullptr;
  std::int64_t* slot_mappings = nullptr;  ///< [groups x slot_cols]
  std::int64_t slot_cols = 0;
  std::uint32_t groups = 0;
  prep_group group[max_kv_groups] = {};

  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    const ferry::device_span<std::int32_t> rows = ctx.view(idx), starts = ctx.view(qsl), logits = ctx.view(cu),
                                           a = ctx.view(aux), host_tokens = ctx.view(prefill);
    const std::int64_t n = static_cast<std::int64_t>(rows.size());
    const std::int64_t tokens = starts[n];
    const std::int32_t* meta = a.data();
    const std::int32_t* row_info = meta + meta_size;
    const unsigned rank = ctx.rank(), threads = ctx.threads();

    // Tokens: positions, input ids, slot mappings (prepare_pos_seq_lens, prepare_prefill_inputs,
    // combine_sampled_and_draft_tokens, compute_slot_mappings).
    for (std::int64_t t = rank; t < tokens; t += threads) {
      std::int64_t lo = 0, hi = n;  // the row: the last i with starts[i] <= t
      while (hi - lo > 1) {
        const std::int64_t mid = (lo + hi) / 2;
        if (starts[mid] <= t) lo = mid;
        else hi = mid;
      }
      const std::int64_t i = lo, r = rows[i], j = t - starts[i], end = starts[i + 1];
      const std::int64_t pos = std::int64_t{num_computed[r]} + j;
      positions[t] = pos;
      if (row_info[i] >= 0) {
        input_ids[t] = host_tokens[row_info[i] + j];
      } else {
        const std::int64_t drafts = logits[i + 1] - logits[i] - 1, first_draft = end - drafts;
        if (t == first_draft - 1) input_ids[t] = static_cast<std::int32_t>(last_sampled[r]);
        else if (t >= first_draft) input_ids[t] = static_cast<std::int32_t>(draft_tokens[r * draft_cols + (t - first_draft)]);
      }
      for (std::uint32_t g = 0; g < groups; ++g) {
        const prep_group& grp = group[g];
        const std::int64_t block = pos / grp.block_size;
        slot_mappings[g * slot_cols + t] =
            block < grp.cols ? std::int64_t{grp.table[r * grp.cols + block]} * grp.block_size + pos % grp.block_size
                             : pad_slot_id;
      }
    }
    for (std::uint32_t g = 0; g < groups; ++g)
      for (std::int64_t t = tokens + rank; t < meta[meta_slot_pad_end]; t += threads)
        slot_mappings[g * slot_cols + t] = pad_slot_id;

    // Rows: sequence lengths, logits indices, the expanded mapping (prepare_pos_seq_lens,
    // combine_sampled_and_draft_tokens, expand_idx_mapping), query_start_loc's padding.
    for (std::int64_t i = rank; i < n; i += threads) {
      const std::int64_t r = rows[i], end = starts[i + 1], first = logits[i], count = logits[i + 1] - first;
      seq_lens[i] = static_cast<std::int32_t>(num_computed[r] + (end - starts[i]));
      for (std::int64_t k = 0; k < count; ++k) {
        logits_indices[first + k] = end - count + k;
        expanded_idx_mapping[first + k] = static_cast<std::int32_t>(r);
        expanded_local_pos[first + k] = static_cast<std::int32_t>(k);
      }
    }
    for (std::int64_t i = n + rank; i < max_num_reqs; i += threads) seq_lens[i] = 0;
    for (std::int64_t i = n + 1 + rank; i <= max_num_reqs; i += threads)
      query_start_loc[i] = static_cast<std::int32_t>(tokens);

    // Block tables (gather_block_tables): a warp per row where there are warps.
    const unsigned lanes = threads >= 32 ? 32 : 1, warp = rank / lanes, lane = rank % lanes,
                   warps = threads / lanes;
    const std::int64_t padded = meta[meta_reqs_padded];
    for (std::uint32_t g = 0; g < groups; ++g) {
      const prep_group& grp = group[g];
      const std::int32_t* blocks = row_info + n * (1 + g);
      for (std::int64_t i = warp; i < padded; i += warps) {
        std::int32_t* dst = grp.gathered + i * grp.cols;
        if (i < n) {
          const std::int32_t* src = grp.table + std::int64_t{rows[i]} * grp.cols;
          for (std::int64_t c = lane; c < blocks[i]; c += lanes) dst[c] = src[c];
        } else {
          for (std::int64_t c = lane; c < grp.cols; c += lanes) dst[c] = 0;
        }
      }
    }
  }
};

}  // namespace ferry_vllm
