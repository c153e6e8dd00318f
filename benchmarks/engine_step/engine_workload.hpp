// benchmarks/engine_step/engine_workload.hpp: the engine-shaped step of SPEC §12.2/§12.3 that every
// row of bench.engine_step runs, at any shape: the scheduler that decides each step's host data
// (one per row, constructed alike, so every row runs the same steps), the host reference every row
// is checked against, and the device arrays a row is checked by. Plain C++ (no ferry, no CUDA, no
// torch): the benchmark's .cu and its libtorch .cpp both include it.
//
// The engine (the default shape; the scaling curves vary requests per step, block-table width,
// arrays and KV-cache groups): a table of R = max(1024, 2 x batch) requests whose state lives on
// the GPU: num_computed int32[R] (tokens computed so far), one block table int32[R x width] per
// KV-cache group (block size 16) and sampled int32[R] (the last sampled token, written by the
// sampler on the GPU). A step runs `batch` of them (256):
//  - rows 0..A-1 are A = batch / 32 requests admitted this step (requests (A s + k) % R: each is
//    re-admitted every R / A steps): a host token each (prefill rows), a new num_computed (a prompt
//    that ends in the last of its blocks), and their whole block list, width / 8 ids from column 0
//    (staged writes, into every group's table);
//  - the other rows are distinct requests, in an order that changes every step (decode rows): token
//    id = sampled[request] (gathered on the GPU, never read back), 1-4 accepted tokens each
//    (speculative decoding); a request whose position enters a block it has no id for yet gets one
//    appended in every group (a staged write of one int32 at column nblocks);
//  - per row: temperature, top-p (float), top-k (int32), seed (int64) and `extra` more float arrays.
// Derived on the GPU (vLLM's prepare_pos_seq_lens, compute_slot_mappings, post_update):
//   pos = row < A ? prefill[row] : num_computed[req]; positions[row] = pos (int64); seq_lens[row] =
//   pos + 1; per group g: slot_mapping[g][row] = table[g][req][pos / 16] * 16 + pos % 16 (int64);
//   num_computed[req] = pos + accepted[row].
// Group g's block ids are group 0's + g * 2^21. A request crosses a block boundary every 6-7 of its
// decode steps; a request that would outgrow its row of the table ends the run (std::logic_error).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace engine_step {

inline constexpr std::size_t block_size = 16;  ///< tokens per KV-cache block
inline constexpr std::size_t max_groups = 4;   ///< KV-cache groups a shape may have
inline constexpr std::int32_t vocab = 32000;
inline constexpr std::int32_t from_host = -1;  ///< a gather index: the row takes its host token

/// A step's shape (see the file comment); every count below follows from the four fields.
struct shape {
  std::size_t batch = 256, width = 512, extra = 0, groups = 1;
  [[nodiscard]] std::size_t requests() const { return std::max<std::size_t>(1024, 2 * batch); }
  [[nodiscard]] std::size_t admitted() const { return batch / 32; }
  [[nodiscard]] std::size_t admitted_blocks() const { return width / 8; }
  [[nodiscard]] std::size_t decode_rows() const { return batch - admitted(); }
  /// Per-row host arrays uploaded each step: req, accepted, prefill, temperature, top_p, top_k,
  /// seed and the extra ones (the gather's indices and host tokens aside).
  [[nodiscard]] std::size_t arrays() const { return 7 + extra; }
  /// Block-table writes a step makes per group, at most (an append per decode row).
  [[nodiscard]] std::size_t max_writes() const { return admitted() + decode_rows(); }
  [[nodiscard]] std::size_t max_write_elements() const { return admitted() * admitted_blocks() + decode_rows(); }
};

/// Block id n (never 0, the table's initial fill), of group g.
constexpr std::int32_t block_id(std::int64_t n, std::size_t g) noexcept {
  return static_cast<std::int32_t>(n % (std::int64_t{1} << 20)) + 1 + static_cast<std::int32_t>(g << 21);
}

/// One step's host data as the scheduler decides it: every row copies it from here into whatever
/// its way of stepping needs (its pinned slot, ferry's spans), and that copy is what it is timed for.
struct step_data {
  std::vector<std::int32_t> req, gather, host_tokens, accepted, prefill, top_k;
  std::vector<float> temperature, top_p, extra;  ///< extra array j at [j * batch, (j + 1) * batch)
  std::vector<std::int64_t> seed;
  std::vector<std::int32_t> admit_req;   ///< the admitted requests (rows 0..A-1)
  std::vector<std::int32_t> admit_ids;   ///< [g][k][j]: group g's id j of admission k
  std::vector<std::int32_t> append_req, append_col;  ///< the first `appends` entries
  std::vector<std::int32_t> append_ids;  ///< [g][n]: group g's id of append n (rows of decode_rows())
  std::size_t appends = 0;
  explicit step_data(const shape& s)
      : req(s.batch), gather(s.batch), host_tokens(s.batch), accepted(s.batch), prefill(s.admitted()), top_k(s.batch),
        temperature(s.batch), top_p(s.batch), extra(s.extra * s.batch), seed(s.batch), admit_req(s.admitted()),
        admit_ids(s.groups * s.admitted() * s.admitted_blocks()), append_req(s.decode_rows()),
        append_col(s.decode_rows()), append_ids(s.groups * s.decode_rows()) {}
};

/// The engine's scheduler: decides each step's host data (see the file comment).
class scheduler {
 public:
  /// The state before step 0, the same for every row: num_computed[R], the block tables
  /// (groups x R x width, row-major; the first width / 8 columns of every request hold ids) and
  /// sampled[R] (`tables` may be null).
  static void initial_state(const shape& sh, std::int32_t* num_computed, std::int32_t* tables, std::int32_t* sampled) {
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    const std::size_t R = sh.requests(), ab = sh.admitted_blocks();
    for (std::size_t r = 0; r < R; ++r) {
      num_computed[r] = static_cast<std::int32_t>(ab * block_size - 64 + next(x) % 64);  // within its blocks
      sampled[r] = static_cast<std::int32_t>(next(x) % vocab);
      for (std::size_t g = 0; tables != nullptr && g < sh.groups; ++g)
        for (std::size_t c = 0; c < sh.width; ++c)
          tables[(g * R + r) * sh.width + c] = c < ab ? block_id(static_cast<std::int64_t>(r * ab + c), g) : 0;
    }
  }

  explicit scheduler(const shape& sh) : sh_(sh), nc_(sh.requests()), nblocks_(sh.requests(), static_cast<std::int32_t>(sh.admitted_blocks())) {
    const std::size_t R = sh.requests();
    if ((R & (R - 1)) != 0 || sh.admitted_blocks() < 4 || sh.groups == 0 || sh.groups > max_groups)
      throw std::invalid_argument("engine_step: a shape needs a power-of-two batch, width >= 32 and 1-4 groups");
    std::vector<std::int32_t> sampled(R);
    initial_state(sh, nc_.data(), nullptr, sampled.data());
    next_block_ = static_cast<std::int64_t>(R * sh.admitted_blocks());
  }

  [[nodiscard]] std::uint64_t steps() const noexcept { return step_; }

  /// Decides the next step into `d`.
  void next(step_data& d) {
    const std::uint64_t s = step_++;
    const std::size_t R = sh_.requests(), A = sh_.admitted(), ab = sh_.admitted_blocks(), B = sh_.batch;
    const std::size_t first = static_cast<std::size_t>(s * A % R), D = sh_.decode_rows();
    for (std::size_t k = 0; k < A; ++k) {
      const std::size_t r = (first + k) % R;
      const auto p = static_cast<std::int32_t>((ab - 1) * block_size + next(rng_) % block_size);  // in its last block
      d.req[k] = d.admit_req[k] = static_cast<std::int32_t>(r);
      d.gather[k] = from_host;
      d.host_tokens[k] = static_cast<std::int32_t>((r * 7 + s) % vocab);
      d.accepted[k] = 1;
      d.prefill[k] = p;
      for (std::size_t j = 0; j < ab; ++j, ++next_block_)
        for (std::size_t g = 0; g < sh_.groups; ++g) d.admit_ids[(g * A + k) * ab + j] = block_id(next_block_, g);
      nc_[r] = p + 1;
      nblocks_[r] = static_cast<std::int32_t>(ab);
    }
    // The decode rows: requests t, t + stride, ... (mod R, stride odd: all distinct), skipping
    // this step's admissions.
    const std::uint64_t pick = next(rng_);
    std::size_t t = pick % R;
    const std::size_t stride = (pick >> 10) % (R / 2) * 2 + 1;
    std::uint64_t acc_bits = 0;
    d.appends = 0;
    for (std::size_t i = A; i < B; t = (t + stride) % R) {
      const std::size_t r = t;
      if ((r + R - first) % R < A) continue;
      if ((i - A) % 16 == 0) acc_bits = next(rng_);  // 2 bits a row (next() gives 53)
      const std::int32_t pos = nc_[r];
      if (pos / static_cast<std::int32_t>(block_size) >= nblocks_[r]) {
        if (static_cast<std::size_t>(nblocks_[r]) >= sh_.width) throw std::logic_error("engine_step: a request outgrew its block-table row");
        d.append_req[d.appends] = static_cast<std::int32_t>(r);
        d.append_col[d.appends] = nblocks_[r]++;
        for (std::size_t g = 0; g < sh_.groups; ++g) d.append_ids[g * D + d.appends] = block_id(next_block_, g);
        ++next_block_;
        ++d.appends;
      }
      const auto acc = static_cast<std::int32_t>(1 + ((acc_bits >> ((i - A) % 16 * 2)) & 3));
      d.req[i] = d.gather[i] = static_cast<std::int32_t>(r);
      d.host_tokens[i] = 0;
      d.accepted[i] = acc;
      nc_[r] = pos + acc;
      ++i;
    }
    for (std::size_t i = 0; i < B; ++i) {
      d.temperature[i] = 0.5f + 0.0625f * static_cast<float>((i + s) % 8);
      d.top_p[i] = 0.96875f - 0.03125f * static_cast<float>((i + 3 * s) % 4);
      d.top_k[i] = static_cast<std::int32_t>(20 + (i + s) % 61);
      d.seed[i] = static_cast<std::int64_t>(s) * 1000003 + static_cast<std::int64_t>(i) + 1;
      for (std::size_t j = 0; j < sh_.extra; ++j) d.extra[j * B + i] = 0.25f * static_cast<float>((i + s + 7 * j) % 64);
    }
  }

 private:
  static std::uint64_t next(std::uint64_t& x) noexcept {  // xorshift64*
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return (x * 0x2545f4914f6cdd1dull) >> 11;
  }
  shape sh_;
  std::uint64_t step_ = 0;
  std::int64_t next_block_ = 0;
  std::uint64_t rng_ = 0x2545f4914f6cdd1dull;
  std::vector<std::int32_t> nc_;       // the host's mirror of num_computed
  std::vector<std::int32_t> nblocks_;  // block ids each request has
};

/// The stand-in sampler (run between steps only while checking, as a kernel on the row's stream):
/// sampled[r] = (sampled[r] * 31 + s + r) % vocab for every request.
inline std::int32_t sampled_next(std::int32_t v, std::uint64_t s, std::size_t r) noexcept {
  return static_cast<std::int32_t>((static_cast<std::int64_t>(v) * 31 + static_cast<std::int64_t>(s % vocab) +
                                    static_cast<std::int64_t>(r)) % vocab);
}

/// Where a row keeps the engine's state and the last step's inputs on the device (what the check
/// reads back): tables and slot mappings of groups 0..groups-1.
struct device_arrays {
  std::int32_t *num_computed = nullptr, *sampled = nullptr, *req = nullptr, *accepted = nullptr, *input_ids = nullptr,
               *seq_lens = nullptr, *top_k = nullptr;
  std::int32_t* table[max_groups]{};
  std::int64_t *positions = nullptr, *seed = nullptr;
  std::int64_t* slot_mapping[max_groups]{};
  float *temperature = nullptr, *top_p = nullptr, *extra = nullptr;
};

/// The host reference: the engine's state and the last step's device inputs, replayed on the host
/// with a scheduler of its own.
class reference {
 public:
  explicit reference(const shape& sh)
      : sh_(sh), sched_(sh), d_(sh), nc_(sh.requests()), sampled_(sh.requests()), table_(sh.groups * sh.requests() * sh.width),
        input_ids_(sh.batch), seq_lens_(sh.batch), positions_(sh.batch), slot_mapping_(sh.groups * sh.batch) {
    scheduler::initial_state(sh, nc_.data(), table_.data(), sampled_.data());
  }

  /// The sampler, as its GPU stand-in runs it before a step.
  void sample(std::uint64_t s) {
    for (std::size_t r = 0; r < sampled_.size(); ++r) sampled_[r] = sampled_next(sampled_[r], s, r);
  }

  /// The next step, applied as the GPU applies it.
  void step() {
    sched_.next(d_);
    const std::size_t R = sh_.requests(), W = sh_.width, A = sh_.admitted(), ab = sh_.admitted_blocks(), D = sh_.decode_rows();
    for (std::size_t g = 0; g < sh_.groups; ++g) {
      std::int32_t* t = table_.data() + g * R * W;
      for (std::size_t k = 0; k < A; ++k)
        std::copy_n(d_.admit_ids.begin() + static_cast<std::ptrdiff_t>((g * A + k) * ab), ab, t + static_cast<std::size_t>(d_.admit_req[k]) * W);
      for (std::size_t n = 0; n < d_.appends; ++n)
        t[static_cast<std::size_t>(d_.append_req[n]) * W + static_cast<std::size_t>(d_.append_col[n])] = d_.append_ids[g * D + n];
    }
    for (std::size_t i = 0; i < sh_.batch; ++i) {
      const auto r = static_cast<std::size_t>(d_.req[i]);
      input_ids_[i] = d_.gather[i] == from_host ? d_.host_tokens[i] : sampled_[static_cast<std::size_t>(d_.gather[i])];
      const std::int32_t pos = i < A ? d_.prefill[i] : nc_[r];
      positions_[i] = pos;
      seq_lens_[i] = pos + 1;
      for (std::size_t g = 0; g < sh_.groups; ++g)
        slot_mapping_[g * sh_.batch + i] =
            static_cast<std::int64_t>(table_[(g * R + r) * W + static_cast<std::size_t>(pos) / block_size]) *
                static_cast<std::int64_t>(block_size) + pos % static_cast<std::int32_t>(block_size);
      nc_[r] = pos + d_.accepted[i];
    }
  }

  [[nodiscard]] std::uint64_t steps() const noexcept { return sched_.steps(); }
  /// Compares the device's arrays, read back by `fetch(dst, src, bytes)`: "" when equal, else the
  /// first difference.
  template <class Fetch>
  std::string compare(const device_arrays& a, Fetch&& fetch) const {
    std::string bad;
    auto cmp = [&](const char* what, const auto* dev, const auto* want, std::size_t n) {
      if (!bad.empty() || n == 0) return;
      std::vector<std::decay_t<decltype(*want)>> got(n);
      fetch(got.data(), dev, n * sizeof(*want));
      for (std::size_t i = 0; i < n && bad.empty(); ++i)
        if (!(got[i] == want[i]))
          bad = std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
    };
    const std::size_t R = sh_.requests(), B = sh_.batch;
    cmp("num_computed", a.num_computed, nc_.data(), R);
    cmp("sampled", a.sampled, sampled_.data(), R);
    for (std::size_t g = 0; g < sh_.groups; ++g) {
      cmp("block table", a.table[g], table_.data() + g * R * sh_.width, R * sh_.width);
      cmp("slot_mapping", a.slot_mapping[g], slot_mapping_.data() + g * B, B);
    }
    cmp("req_idx", a.req, d_.req.data(), B);
    cmp("accepted", a.accepted, d_.accepted.data(), B);
    cmp("input_ids", a.input_ids, input_ids_.data(), B);
    cmp("positions", a.positions, positions_.data(), B);
    cmp("seq_lens", a.seq_lens, seq_lens_.data(), B);
    cmp("temperature", a.temperature, d_.temperature.data(), B);
    cmp("top_p", a.top_p, d_.top_p.data(), B);
    cmp("top_k", a.top_k, d_.top_k.data(), B);
    cmp("seed", a.seed, d_.seed.data(), B);
    cmp("extra arrays", a.extra, d_.extra.data(), d_.extra.size());
    return bad.empty() ? bad : bad + " after step " + std::to_string(steps());
  }

 private:
  shape sh_;
  scheduler sched_;
  step_data d_;  // the last step
  std::vector<std::int32_t> nc_, sampled_, table_, input_ids_, seq_lens_;
  std::vector<std::int64_t> positions_, slot_mapping_;
};

}  // namespace engine_step
