// The epilogue of ferry_vllm.VllmStepPrep: what vLLM's model runner v2 derives on the GPU to
// prepare a step (vLLM 0.26.0, vllm/v1/worker/gpu: input_batch.py's prepare_prefill_inputs,
// prepare_pos_seq_lens, combine_sampled_and_draft_tokens and expand_idx_mapping, block_table.py's
// gather_block_tables and compute_slot_mappings), computed in the step's one launch after its
// uploads and block-table writes have landed. Includes no torch header (nvcc builds it in
// apply.cu).
//
// It runs on the one block of the launch that finishes last (docs/step_batch.md): its loops give
// each thread a few independent items at a time, their loads issued before their stores, so that
// one block keeps enough memory requests in flight; the block tables are copied in chunks of 4
// elements (16 bytes where the rows allow), over exactly the chunks the step has.
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

/// Elements of a block-table chunk (one 16-byte copy).
inline constexpr std::int64_t table_chunk = 4;

/// The per-step values of the aux upload that are not sizes of a view.
enum prep_meta : std::size_t {
  meta_reqs_padded,   ///< rows of the gathered block tables: [num_reqs, this) are zeroed
  meta_slot_pad_end,  ///< slot_mappings[g][num_tokens, this) = PAD_SLOT_ID (past it they are already)
  meta_size
};

/// The aux upload's arrays after its meta, each of n (the step's rows) elements, then per group
/// the copy plan of its block table (prep_layout::group_at).
struct prep_layout {
  std::int64_t n, padded;
  /// row_info[i] >= 0: row i is a prefill row whose tokens are prefill[row_info[i] + j]; -1: a
  /// decode row (its last sampled token and drafts come from the device).
  [[nodiscard]] FERRY_HOST_DEVICE std::int64_t row_info() const { return meta_size; }
  /// has_next[i]: a prefill row whose prefill goes on after this step; next[i]: the token it goes
  /// on with (prepare_prefill_inputs's next_prefill_tokens[r]).
  [[nodiscard]] FERRY_HOST_DEVICE std::int64_t has_next() const { return meta_size + n; }
  [[nodiscard]] FERRY_HOST_DEVICE std::int64_t next() const { return meta_size + 2 * n; }
  /// Group g: num_blocks (n: each row's blocks, after this step's appends), then chunk_start
  /// (padded + 1: the first chunk of each gathered row in the group's flat list of chunks to copy
  /// or zero; rows [n, padded) are zeroed whole).
  [[nodiscard]] FERRY_HOST_DEVICE std::int64_t group_at(std::int64_t g) const {
    return meta_size + 3 * n + g * (n + padded + 1);
  }
  [[nodiscard]] FERRY_HOST_DEVICE std::int64_t size(std::int64_t groups) const { return group_at(groups); }
};

/// One KV-cache group: its persistent block table (written by the step's staged writes), the
/// gathered table the model reads, and the kernel block size.
struct prep_group {
  const std::int32_t* table = nullptr;  ///< [max_num_reqs x cols]
  std::int32_t* gathered = nullptr;     ///< [max_num_reqs x cols]
  std::int64_t cols = 0;
  std::int64_t block_size = 16;
  bool vector = false;  ///< rows start 16-byte aligned: whole chunks move as one 16-byte copy
};

/// The step's inputs, derived on the device. The views (the step's uploads):
///   idx   idx_mapping[0, n): each row's request slot (an output itself)
///   qsl   query_start_loc[0, n + 1) (an output; this epilogue pads [n + 1, max_num_reqs + 1)
///         with num_tokens = qsl[n], as vLLM's upload does)
///   cu    cu_num_logits[0, n + 1) (an output)
///   aux   [meta (prep_meta) | the arrays of prep_layout]
///   prefill  the prefill rows' tokens, packed in row order
/// For every token t of row i (j = t - qsl[i], r = idx[i], nc = num_computed[r]):
///   positions[t] = nc + j; slot_mappings[g][t] = table_g[r][p / bs] * bs + p % bs, p = nc + j
///   input_ids[t] = prefill token (prefill row), or for a decode row with d = cu[i+1]-cu[i]-1
///   drafts: last_sampled[r] at qsl[i+1]-d-1, draft_tokens[r][k] at qsl[i+1]-d+k
/// and for every row: seq_lens[i] = nc + q_i (seq_lens[n, max_num_reqs) = 0); next_prefill_tokens[r]
/// = next[i] where has_next[i] (when the tensor is given); for k < num_logits_i:
/// logits_indices[cu[i]+k] = qsl[i+1]-num_logits_i+k, expanded_idx_mapping[cu[i]+k] = r,
/// expanded_local_pos[cu[i]+k] = k; each group's gathered[i][0, num_blocks) = table[r][0,
/// num_blocks), rows [n, reqs_padded) zero. Nothing else is written: elements vLLM leaves as they
/// were stay as they were.
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
  std::int32_t* next_prefill_tokens = nullptr;  ///< [max_num_reqs], or none
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

  /// Items a thread takes at once: their loads are issued before their stores.
  static constexpr int batch = 4;

  /// The last i in [0, n) with starts[i] <= t (starts increasing, starts[0] = 0 <= t).
  FERRY_HOST_DEVICE static std::int64_t find(const std::int32_t* starts, std::int64_t n, std::int64_t t) {
    std::int64_t lo = 0, hi = n;
    while (hi - lo > 1) {
      const std::int64_t mid = (lo + hi) / 2;
      if (starts[mid] <= t) lo = mid;
      else hi = mid;
    }
    return lo;
  }

  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    const ferry::device_span<std::int32_t> rows = ctx.view(idx), starts = ctx.view(qsl), logits = ctx.view(cu),
                                           a = ctx.view(aux), host_tokens = ctx.view(prefill);
    const std::int64_t n = static_cast<std::int64_t>(rows.size());
    const std::int64_t tokens = starts[n];
    const std::int32_t* meta = a.data();
    const prep_layout at{n, meta[meta_reqs_padded]};
    const std::int32_t* row_info = meta + at.row_info();
    const std::int64_t rank = ctx.rank(), threads = ctx.threads();

    // Tokens: positions, input ids, slot mappings (prepare_pos_seq_lens, prepare_prefill_inputs,
    // combine_sampled_and_draft_tokens, compute_slot_mappings).
    for (std::int64_t first = rank; first < tokens; first += threads * batch) {
      std::int64_t t[batch], i[batch], r[batch], pos[batch];
      std::int32_t id[batch], block_id[batch][max_kv_groups];
      bool write_id[batch], inside[batch][max_kv_groups];
      for (int u = 0; u < batch; ++u) {
        t[u] = first + u * threads;
        i[u] = t[u] < tokens ? find(starts.data(), n, t[u]) : -1;
        r[u] = i[u] >= 0 ? rows[i[u]] : 0;
      }
      for (int u = 0; u < batch; ++u) {
        if (i[u] < 0) continue;
        const std::int64_t j = t[u] - starts[i[u]];
        pos[u] = std::int64_t{num_computed[r[u]]} + j;
        if (row_info[i[u]] >= 0) {
          write_id[u] = true;
          id[u] = host_tokens[row_info[i[u]] + j];
        } else {  // a decode row: its last sampled token, then its drafts, end its tokens
          const std::int64_t first_draft = starts[i[u] + 1] - (logits[i[u] + 1] - logits[i[u]] - 1);
          write_id[u] = t[u] >= first_draft - 1;
          if (t[u] == first_draft - 1) id[u] = static_cast<std::int32_t>(last_sampled[r[u]]);
          else if (write_id[u]) id[u] = static_cast<std::int32_t>(draft_tokens[r[u] * draft_cols + (t[u] - first_draft)]);
        }
      }
      for (int u = 0; u < batch; ++u) {
        if (i[u] < 0) continue;
        for (std::uint32_t g = 0; g < groups; ++g) {
          const std::int64_t block = pos[u] / group[g].block_size;
          inside[u][g] = block < group[g].cols;
          if (inside[u][g]) block_id[u][g] = group[g].table[r[u] * group[g].cols + block];
        }
      }
      for (int u = 0; u < batch; ++u) {
        if (i[u] < 0) continue;
        positions[t[u]] = pos[u];
        if (write_id[u]) input_ids[t[u]] = id[u];
        for (std::uint32_t g = 0; g < groups; ++g) {
          // block * block_size in 32 bits, as vLLM's kernel computes it (int32 operands), then
          // the offset in 64
          const std::int64_t bs = group[g].block_size;
          const auto base = static_cast<std::int32_t>(static_cast<std::uint32_t>(block_id[u][g]) *
                                                      static_cast<std::uint32_t>(bs));
          slot_mappings[g * slot_cols + t[u]] = inside[u][g] ? std::int64_t{base} + pos[u] % bs : pad_slot_id;
        }
      }
    }
    for (std::uint32_t g = 0; g < groups; ++g)
      for (std::int64_t t = tokens + rank; t < meta[meta_slot_pad_end]; t += threads)
        slot_mappings[g * slot_cols + t] = pad_slot_id;

    // Rows: sequence lengths, logits indices, the expanded mapping (prepare_pos_seq_lens,
    // combine_sampled_and_draft_tokens, expand_idx_mapping), next prefill tokens, and the
    // padding of seq_lens and query_start_loc.
    const std::int32_t* has_next = meta + at.has_next();
    const std::int32_t* next = meta + at.next();
    for (std::int64_t i = rank; i < n; i += threads) {
      const std::int64_t r = rows[i], end = starts[i + 1], from = logits[i], count = logits[i + 1] - from;
      seq_lens[i] = static_cast<std::int32_t>(num_computed[r] + (end - starts[i]));
      if (next_prefill_tokens != nullptr && has_next[i]) next_prefill_tokens[r] = next[i];
      for (std::int64_t k = 0; k < count; ++k) {
        logits_indices[from + k] = end - count + k;
        expanded_idx_mapping[from + k] = static_cast<std::int32_t>(r);
        expanded_local_pos[from + k] = static_cast<std::int32_t>(k);
      }
    }
    for (std::int64_t i = n + rank; i < max_num_reqs; i += threads) seq_lens[i] = 0;
    for (std::int64_t i = n + 1 + rank; i <= max_num_reqs; i += threads)
      query_start_loc[i] = static_cast<std::int32_t>(tokens);

    // Block tables (gather_block_tables): each group's chunks of 4 elements, numbered row by row.
    for (std::uint32_t g = 0; g < groups; ++g) {
      const prep_group& grp = group[g];
      const std::int32_t* num_blocks = meta + at.group_at(g);
      const std::int32_t* chunk_start = num_blocks + n;
      const std::int64_t chunks = chunk_start[at.padded];
      for (std::int64_t first = rank; first < chunks; first += threads * batch) {
        std::int64_t row[batch], col[batch], count[batch];
        std::int32_t v[batch][table_chunk];
        for (int u = 0; u < batch; ++u) {
          const std::int64_t c = first + u * threads;
          row[u] = c < chunks ? find(chunk_start, at.padded, c) : -1;
          col[u] = row[u] >= 0 ? (c - chunk_start[row[u]]) * table_chunk : 0;
          count[u] = 0;
          if (row[u] >= 0) {
            const std::int64_t end = row[u] < n ? num_blocks[row[u]] : grp.cols;
            count[u] = end - col[u] < table_chunk ? end - col[u] : table_chunk;
          }
        }
        for (int u = 0; u < batch; ++u) {
          if (row[u] < 0 || row[u] >= n) {
            for (int e = 0; e < table_chunk; ++e) v[u][e] = 0;
            continue;
          }
          const std::int32_t* src = grp.table + std::int64_t{rows[row[u]]} * grp.cols + col[u];
#if defined(__CUDA_ARCH__)
          if (grp.vector && count[u] == table_chunk) {
            const int4 x = *reinterpret_cast<const int4*>(src);
            v[u][0] = x.x, v[u][1] = x.y, v[u][2] = x.z, v[u][3] = x.w;
            continue;
          }
#endif
          for (int e = 0; e < table_chunk; ++e) v[u][e] = e < count[u] ? src[e] : 0;
        }
        for (int u = 0; u < batch; ++u) {
          if (row[u] < 0) continue;
          std::int32_t* dst = grp.gathered + row[u] * grp.cols + col[u];
#if defined(__CUDA_ARCH__)
          if (grp.vector && count[u] == table_chunk) {
            *reinterpret_cast<int4*>(dst) = int4{v[u][0], v[u][1], v[u][2], v[u][3]};
            continue;
          }
#endif
          for (int e = 0; e < count[u]; ++e) dst[e] = v[u][e];
        }
      }
    }
  }
};

}  // namespace ferry_vllm
