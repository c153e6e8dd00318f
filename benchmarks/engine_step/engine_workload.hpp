// benchmarks/engine_step/engine_workload.hpp: the engine-shaped step of SPEC §12.2/§12.3 that every
// row of bench.engine_step runs (ferry's step_batch, libtorch the way vLLM's model runner writes it,
// the hand-written floor): the host data of each step (one scheduler, the same for every row) and
// the host reference every row is checked against. Plain C++ (no ferry, no CUDA, no torch): the
// benchmark's .cu and its libtorch .cpp both include it.
//
// The engine: a table of 1024 requests whose state lives on the GPU: num_computed int32[1024]
// (tokens computed so far), a block table int32[1024 x 512] (block size 16) and sampled int32[1024]
// (the last sampled token, written by the sampler on the GPU). A step runs 256 of them:
//  - rows 0..7 are 8 requests admitted this step (requests (8s + k) % 1024: each is re-admitted
//    every 128 steps): a host token each (prefill rows), a new num_computed (prefill_computed: the
//    prompt, 1008-1023 tokens, ends in the last of its blocks), and their whole block list, 64 block
//    ids from column 0 (staged writes);
//  - rows 8..255 are 248 other requests, distinct, in an order that changes every step (decode
//    rows): token id = sampled[request] (gathered on the GPU, never read back), 1-4 accepted tokens
//    each (speculative decoding); a request whose position enters a block it has no id for yet gets
//    one appended (a staged write of one int32 at column nblocks);
//  - per row: temperature, top-p (float), top-k (int32), seed (int64).
// Derived on the GPU (vLLM's prepare_pos_seq_lens, compute_slot_mappings, post_update):
//   pos = row < 8 ? prefill_computed[row] : num_computed[req]; positions[row] = pos (int64);
//   seq_lens[row] = pos + 1; slot_mapping[row] = block_table[req][pos / 16] * 16 + pos % 16 (int64);
//   num_computed[req] = pos + accepted[row].
// A request crosses a block boundary every 6-7 of its decode steps (about 39 appends a step); its
// position stays below 1024 + 127 * 4, so it never needs more than 96 of its 512 blocks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace engine_step {

inline constexpr std::size_t requests = 1024;      ///< rows of the per-request state
inline constexpr std::size_t batch = 256;          ///< requests run per step
inline constexpr std::size_t block_size = 16;      ///< tokens per KV-cache block
inline constexpr std::size_t max_blocks = 512;     ///< block-table columns
inline constexpr std::size_t admitted = 8;         ///< prefill rows (admissions) per step
inline constexpr std::size_t admitted_blocks = 64;  ///< block ids an admission writes
inline constexpr std::size_t decode_rows = batch - admitted;
inline constexpr std::size_t max_appends = decode_rows;  ///< at most one per decode row
inline constexpr std::size_t max_writes = admitted + max_appends;
inline constexpr std::size_t max_write_elements = admitted * admitted_blocks + max_appends;
inline constexpr std::int32_t vocab = 32000;
inline constexpr std::int32_t from_host = -1;  ///< a gather index: the row takes its host token

/// Block id n (never 0, the table's initial fill).
constexpr std::int32_t block_id(std::int64_t n) noexcept {
  return static_cast<std::int32_t>(n % (std::int64_t{1} << 20)) + 1;
}

/// Where the scheduler writes a step's per-row host data (arrays of `batch`, prefill_computed of
/// `admitted`; host_tokens is written at the prefill rows only).
struct step_arrays {
  std::int32_t* req_idx;
  std::int32_t* gather_idx;  ///< the request (decode rows) or from_host (prefill rows)
  std::int32_t* host_tokens;
  std::int32_t* accepted;
  std::int32_t* prefill_computed;
  float* temperature;
  float* top_p;
  std::int32_t* top_k;
  std::int64_t* seed;
};

/// The engine's scheduler: decides each step's host data (see the file comment). Every row owns
/// one, constructed alike, so every row runs the same steps.
class scheduler {
 public:
  /// The state before step 0, the same for every row: num_computed, the block table (row-major
  /// requests x max_blocks; columns 0..63 of every request hold ids) and sampled.
  static void initial_state(std::int32_t* num_computed, std::int32_t* table, std::int32_t* sampled) {
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (std::size_t r = 0; r < requests; ++r) {
      num_computed[r] = static_cast<std::int32_t>(960 + next(x) % 64);  // within the 64 blocks below
      sampled[r] = static_cast<std::int32_t>(next(x) % vocab);
      for (std::size_t c = 0; c < max_blocks; ++c)
        table[r * max_blocks + c] = c < admitted_blocks ? block_id(static_cast<std::int64_t>(r * admitted_blocks + c)) : 0;
    }
  }

  scheduler() {
    std::vector<std::int32_t> table(requests * max_blocks), sampled(requests);
    initial_state(nc_.data(), table.data(), sampled.data());
    nblocks_.fill(static_cast<std::int32_t>(admitted_blocks));
  }

  /// Steps decided so far.
  [[nodiscard]] std::uint64_t steps() const noexcept { return step_; }

  /// Decides the next step: its per-row data into `a`, its block-table writes through
  /// `admit(request, std::span<const std::int32_t> ids)` (ids from column 0; rows 0..7 in order)
  /// and `append(request, column, id)` (in row order, after the admissions). Returns the number
  /// of appends.
  template <class Admit, class Append>
  std::size_t next_step(const step_arrays& a, Admit&& admit, Append&& append) {
    const std::uint64_t s = step_++;
    const std::size_t first = static_cast<std::size_t>(s * admitted % requests);
    std::array<std::int32_t, admitted_blocks> ids;
    for (std::size_t k = 0; k < admitted; ++k) {
      const std::size_t r = first + k;
      const auto p = static_cast<std::int32_t>(prompt_min + next(rng_) % block_size);  // in the last of its 64 blocks
      a.req_idx[k] = static_cast<std::int32_t>(r);
      a.gather_idx[k] = from_host;
      a.host_tokens[k] = static_cast<std::int32_t>((r * 7 + s) % vocab);
      a.accepted[k] = 1;
      a.prefill_computed[k] = p;
      for (auto& id : ids) id = block_id(next_block_++);
      admit(r, std::span<const std::int32_t>(ids));
      nc_[r] = p + 1;
      nblocks_[r] = static_cast<std::int32_t>(admitted_blocks);
    }
    // The decode rows: requests base, base + stride, ... (mod 1024, stride odd: all distinct),
    // skipping this step's admissions.
    const std::uint64_t pick = next(rng_);
    std::size_t t = pick % requests;
    const std::size_t stride = (pick >> 10) % (requests / 2) * 2 + 1;
    std::uint64_t acc_bits = 0;
    std::size_t appends = 0;
    for (std::size_t i = admitted; i < batch; t = (t + stride) % requests) {
      const std::size_t r = t;
      if ((r + requests - first) % requests < admitted) continue;
      if ((i - admitted) % 16 == 0) acc_bits = next(rng_);  // 2 bits a row (next() gives 53)
      const std::int32_t pos = nc_[r];
      if (pos / static_cast<std::int32_t>(block_size) >= nblocks_[r]) {
        append(r, static_cast<std::size_t>(nblocks_[r]), block_id(next_block_++));
        ++nblocks_[r];
        ++appends;
      }
      const auto acc = static_cast<std::int32_t>(1 + ((acc_bits >> ((i - admitted) % 16 * 2)) & 3));
      a.req_idx[i] = static_cast<std::int32_t>(r);
      a.gather_idx[i] = static_cast<std::int32_t>(r);
      a.accepted[i] = acc;
      nc_[r] = pos + acc;
      ++i;
    }
    for (std::size_t i = 0; i < batch; ++i) {
      a.temperature[i] = 0.5f + 0.0625f * static_cast<float>((i + s) % 8);
      a.top_p[i] = 0.96875f - 0.03125f * static_cast<float>((i + 3 * s) % 4);
      a.top_k[i] = static_cast<std::int32_t>(20 + (i + s) % 61);
      a.seed[i] = static_cast<std::int64_t>(s) * 1000003 + static_cast<std::int64_t>(i) + 1;
    }
    return appends;
  }

 private:
  static std::uint64_t next(std::uint64_t& x) noexcept {  // xorshift64*
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return (x * 0x2545f4914f6cdd1dull) >> 11;
  }
  static constexpr std::size_t prompt_min = (admitted_blocks - 1) * block_size;  // 1008
  std::uint64_t step_ = 0;
  std::int64_t next_block_ = static_cast<std::int64_t>(requests * admitted_blocks);
  std::uint64_t rng_ = 0x2545f4914f6cdd1dull;
  std::array<std::int32_t, requests> nc_{};       // the host's mirror of num_computed
  std::array<std::int32_t, requests> nblocks_{};  // block ids each request has
};

/// The stand-in sampler (run between steps only while checking; a kernel or torch ops on the GPU):
/// sampled[r] = (sampled[r] * 31 + s + r) % vocab for every request.
inline std::int32_t sampled_next(std::int32_t v, std::uint64_t s, std::size_t r) noexcept {
  return static_cast<std::int32_t>((static_cast<std::int64_t>(v) * 31 + static_cast<std::int64_t>(s % vocab) +
                                    static_cast<std::int64_t>(r)) %
                                   vocab);
}

/// The host reference: the engine's state and the last step's device inputs, replayed on the host
/// with a scheduler of its own. A row is checked by replaying the steps (and sampler runs) it ran.
class reference {
 public:
  reference() : table_(requests * max_blocks) { scheduler::initial_state(nc_.data(), table_.data(), sampled_.data()); }

  /// The sampler, as its GPU stand-in runs it before a step (`s`: a number the row chooses).
  void sample(std::uint64_t s) {
    for (std::size_t r = 0; r < requests; ++r) sampled_[r] = sampled_next(sampled_[r], s, r);
  }

  /// The next step, applied as the GPU applies it.
  void step() {
    std::array<std::int32_t, batch> gather{}, host_tokens{};
    std::array<std::int32_t, admitted> prefill{};
    const step_arrays a{req_.data(), gather.data(),        host_tokens.data(), accepted_.data(), prefill.data(),
                        temperature_.data(), top_p_.data(), top_k_.data(),      seed_.data()};
    sched_.next_step(
        a,
        [&](std::size_t r, std::span<const std::int32_t> ids) {
          for (std::size_t c = 0; c < ids.size(); ++c) table_[r * max_blocks + c] = ids[c];
        },
        [&](std::size_t r, std::size_t col, std::int32_t id) { table_[r * max_blocks + col] = id; });
    for (std::size_t i = 0; i < batch; ++i) {
      const auto r = static_cast<std::size_t>(req_[i]);
      input_ids_[i] = gather[i] == from_host ? host_tokens[i] : sampled_[static_cast<std::size_t>(gather[i])];
      const std::int32_t pos = i < admitted ? prefill[i] : nc_[r];
      positions_[i] = pos;
      seq_lens_[i] = pos + 1;
      slot_mapping_[i] = static_cast<std::int64_t>(table_[r * max_blocks + static_cast<std::size_t>(pos) / block_size]) *
                             static_cast<std::int64_t>(block_size) +
                         pos % static_cast<std::int32_t>(block_size);
      nc_[r] = pos + accepted_[i];
    }
  }

  [[nodiscard]] std::uint64_t steps() const noexcept { return sched_.steps(); }
  // The state and the last step's inputs.
  std::array<std::int32_t, requests> nc_{}, sampled_{};
  std::vector<std::int32_t> table_;
  std::array<std::int32_t, batch> req_{}, accepted_{}, input_ids_{}, seq_lens_{}, top_k_{};
  std::array<std::int64_t, batch> positions_{}, slot_mapping_{}, seed_{};
  std::array<float, batch> temperature_{}, top_p_{};

 private:
  scheduler sched_;
};

/// The first difference between `got` and `want` ("what[i] = got, expected want"), or "".
template <class T>
std::string first_difference(const char* what, const T* got, const T* want, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!(got[i] == want[i]))
      return std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", expected " +
             std::to_string(want[i]);
  return {};
}

}  // namespace engine_step
