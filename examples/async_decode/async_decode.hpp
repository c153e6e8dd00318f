// examples/async_decode/async_decode.hpp: an asynchronous decode loop with speculative tokens, in
// which the host never learns what the device decided. Requests join and leave; every step is ONE
// ferry::step_batch whose gathers pull the previous step's sampled tokens and per-request state
// on the device, and whose epilogue derives positions, sequence lengths and slot mappings from
// that state. A stand-in sampler, enqueued on the same stream after each step, writes the next
// tokens and a random number of accepted draft tokens per request. A template on the backend and
// the launch policy; async_decode.cu runs it against a host reference.
//
// Device state (after setup only the step's launch and the sampler write it; the host never reads
// it in the loop):
//   block_table  int32[1024 x 64]  block ids; a joining request's whole list and the appends of
//                                  requests that may cross a 16-token block boundary arrive as
//                                  the step's staged writes
//   num_computed int32[1024]       tokens of each request whose KV is computed; the epilogue
//                                  advances it by 1 + the accepted drafts
//   sampled      int32[1024]       each request's last sampled token (the sampler's)
//   accepted     int32[1024]       each request's accepted draft tokens, 0..3 (the sampler's)
// Per step, for the n running requests (row i holds request slot rows[i]):
//   rows                           uploaded from the host
//   input_ids, base, drafts        gathered: sampled, num_computed and accepted at rows[i], or for
//                                  a request that joins this step, ferry::from_host values (its
//                                  first token, its prompt length, 0)
//   positions, seq_lens,           derived by the epilogue: positions[i] = base[i] + drafts[i],
//   slot_mapping                   seq_lens[i] = positions[i] + 1, slot_mapping[i] =
//                                  block_table[r][pos / 16] * 16 + pos % 16; num_computed[r] =
//                                  positions[i] + 1
// The host only knows an upper bound of each request's length (4 tokens a step at most), and
// writes blocks for that bound ahead of time, as an asynchronous scheduler must.
#pragma once

#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#else
#include <ferry/ferry.hpp>
#endif

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace async_decode {

inline constexpr std::size_t max_requests = 1024;  ///< Request slots (rows of the block table).
inline constexpr std::size_t max_blocks = 64;      ///< Blocks per request (columns).
inline constexpr std::int32_t block_size = 16;     ///< Tokens per KV-cache block.
inline constexpr std::size_t batch = 256;          ///< Most running requests in one step.
inline constexpr std::size_t max_joins = 8;        ///< Most requests joining in one step.
inline constexpr std::int32_t max_drafts = 3;      ///< Most accepted draft tokens per step.
inline constexpr std::int32_t max_len = static_cast<std::int32_t>(max_blocks) * block_size;
inline constexpr std::int32_t vocab = 32000;
/// Staged writes per step: an append per running request at most, and the joins' block lists.
inline constexpr std::size_t max_writes = batch + max_joins;
inline constexpr std::size_t max_write_elements = batch + max_joins * max_blocks;

// ---- the stand-in sampler (device code; the host reference calls the same function) -------------

/// splitmix64's finalizer.
FERRY_HOST_DEVICE constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// What the sampler reads and writes for the n rows of one step.
struct sampler_args {
  std::uint64_t step = 0;
  std::size_t n = 0;
  const std::int32_t* rows = nullptr;       // request slot of each row
  const std::int32_t* input_ids = nullptr;  // the step's tokens
  const std::int64_t* positions = nullptr;  // the step's positions
  std::int32_t* sampled = nullptr;          // [max_requests]
  std::int32_t* accepted = nullptr;         // [max_requests]
};

/// Row i: a token and 0..3 accepted drafts for its request, a hash of the step, the request slot,
/// the row's input token and its position (a wrong input anywhere changes every later step).
FERRY_HOST_DEVICE inline void sample_row(const sampler_args& a, std::size_t i) {
  const std::int32_t r = a.rows[i];
  const std::uint64_t h = mix(mix(a.step * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(r)) ^
                              (static_cast<std::uint64_t>(a.input_ids[i]) << 32) ^
                              static_cast<std::uint64_t>(a.positions[i]));
  a.sampled[r] = static_cast<std::int32_t>(h % vocab);
  a.accepted[r] = static_cast<std::int32_t>((h >> 40) % (max_drafts + 1));
}

#if defined(__CUDACC__)
__global__ void sampler_kernel(sampler_args a) {
  for (std::size_t i = threadIdx.x; i < a.n; i += blockDim.x) sample_row(a, i);
}
#endif

/// Enqueues the sampler on `s` (CUDA: one block of 256 threads; host backend: a host task).
template <class B>
void enqueue_sampler(const sampler_args& a, ferry::stream_ref<B> s) {
  if constexpr (std::is_same_v<B, ferry::backend::host>) {
    ferry::enqueue_host(s, [a] {
      for (std::size_t i = 0; i < a.n; ++i) sample_row(a, i);
    });
  } else {
#if defined(__CUDACC__)
    sampler_kernel<<<1, static_cast<unsigned>(batch), 0, s.get()>>>(a);
    if (const cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
      throw std::runtime_error(std::string("sampler_kernel: ") + cudaGetErrorString(e));
#else
    static_assert(sizeof(B) == 0, "the CUDA sampler needs nvcc: build this file as .cu with <ferry/ferry.cuh>");
#endif
  }
}

// ---- the epilogue -------------------------------------------------------------------------------

/// Runs after the step's uploads, gathers and writes have landed (on CUDA by the threads of one
/// block; on the host backend once): derives the step's positions, sequence lengths and slot
/// mappings from the gathered per-request state, and advances that state (num_computed, which the
/// `base` gather of the same step read before the epilogue ran: docs/step_batch.md allows it).
// [epilogue]
struct derive_positions {
  ferry::step_ref<std::int32_t> rows, base, drafts;  // the upload and two gathers
  const std::int32_t* block_table = nullptr;        // [max_requests x max_blocks]
  std::int32_t* num_computed = nullptr;             // [max_requests]
  std::int64_t* positions = nullptr;                // [batch]
  std::int32_t* seq_lens = nullptr;                 // [batch]
  std::int64_t* slot_mapping = nullptr;             // [batch]

  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    const ferry::device_span<std::int32_t> slot = ctx.view(rows), b = ctx.view(base), d = ctx.view(drafts);
    for (std::size_t i = ctx.rank(); i < slot.size(); i += ctx.threads()) {
      const std::int32_t r = slot[i];
      const std::int64_t pos = std::int64_t{b[i]} + d[i];  // the drafts the sampler accepted count
      const std::int64_t block = block_table[static_cast<std::size_t>(r) * max_blocks + pos / block_size];
      positions[i] = pos;
      seq_lens[i] = static_cast<std::int32_t>(pos + 1);
      slot_mapping[i] = block * block_size + pos % block_size;
      num_computed[r] = static_cast<std::int32_t>(pos + 1);  // rows hold distinct requests: no race
    }
  }
};
// [/epilogue]

// ---- the host's scheduler -----------------------------------------------------------------------

/// A running request as the host sees it: its slot, and an upper bound of its next position.
struct request {
  std::int32_t slot = 0;
  bool joined = false;       // joined in this step: its inputs come from the host
  std::int32_t first = 0;    // first token (joined only)
  std::int32_t prompt = 0;   // prompt length = its first position (joined only)
  std::int32_t bound = 0;    // no position of this step exceeds it
  std::int32_t blocks = 0;   // blocks written for it
};

/// Decides each step's requests from a seeded generator: which leave (at random, or when the next
/// bound would pass the table's 64 blocks), which join (0..8, into free slots, reused most recently
/// freed first) and which block ids to write. The engine and the host reference each run one with
/// the same seed, so they see the same steps.
class scheduler {
 public:
  explicit scheduler(std::uint64_t seed) : rng_(seed) {
    rows_.reserve(batch);
    ids_.reserve(max_blocks);
    for (std::size_t k = max_requests; k-- > 0;) free_.push_back(static_cast<std::int32_t>(k));
  }

  /// Plans the next step: calls `write(slot, column, std::span<const std::int32_t>)` for its staged
  /// writes and returns its step number; rows() then holds the step's requests.
  template <class Write>
  std::uint64_t next(Write&& write) {
    // leave: swap-remove, so that rows move as in an engine's condensed batch
    for (std::size_t i = rows_.size(); i-- > 0;) {
      if (rows_[i].bound + 1 + max_drafts < max_len && rng_() % 40 != 0) continue;
      free_.push_back(rows_[i].slot);
      if (rows_[i].bound + 1 + max_drafts >= max_len) ++full_;
      rows_[i] = rows_.back();
      rows_.pop_back();
      ++left_;
    }
    // the survivors' next bound, and an append where it crosses into a new block
    for (request& q : rows_) {
      q.joined = false;
      q.bound += 1 + max_drafts;
      if (q.bound / block_size >= q.blocks) {
        const std::int32_t id = block_id();
        write(q.slot, static_cast<std::size_t>(q.blocks++), std::span<const std::int32_t>(&id, 1));
      }
    }
    // join: the whole block list of the prompt
    std::size_t joins = rng_() % (max_joins + 1);
    if (rows_.empty() && joins == 0) joins = 1;
    for (; joins > 0 && rows_.size() < batch && !free_.empty(); --joins) {
      request q;
      q.slot = free_.back();
      free_.pop_back();
      q.joined = true;
      q.first = static_cast<std::int32_t>(rng_() % vocab);
      q.prompt = static_cast<std::int32_t>(1 + rng_() % 400);
      q.bound = q.prompt;
      q.blocks = q.prompt / block_size + 1;
      ids_.resize(static_cast<std::size_t>(q.blocks));
      for (auto& id : ids_) id = block_id();
      write(q.slot, std::size_t{0}, std::span<const std::int32_t>(ids_));
      rows_.push_back(q);
      ++joined_;
    }
    return step_++;
  }

  [[nodiscard]] const std::vector<request>& rows() const noexcept { return rows_; }
  [[nodiscard]] std::uint64_t steps() const noexcept { return step_; }
  [[nodiscard]] std::uint64_t joined() const noexcept { return joined_; }
  [[nodiscard]] std::uint64_t left() const noexcept { return left_; }
  /// Requests that left because their next bound would pass the table's width.
  [[nodiscard]] std::uint64_t left_full() const noexcept { return full_; }

 private:
  std::int32_t block_id() { return static_cast<std::int32_t>(next_block_++ % (1 << 30)) + 1; }

  std::mt19937_64 rng_;
  std::vector<std::int32_t> free_;  // free slots, a stack
  std::vector<request> rows_;       // row i of the step
  std::vector<std::int32_t> ids_;
  std::uint64_t step_ = 0, joined_ = 0, left_ = 0, full_ = 0;
  std::int64_t next_block_ = 0;
};

/// Initial contents of the per-request arrays (not zeros: a row that read a stale or unwritten
/// entry would go unnoticed otherwise). `which`: 0 num_computed, 1 sampled, 2 accepted.
inline std::vector<std::int32_t> initial_state(int which) {
  std::vector<std::int32_t> v(max_requests);
  for (std::size_t r = 0; r < v.size(); ++r)
    v[r] = static_cast<std::int32_t>(mix(r * 3 + static_cast<std::size_t>(which)) % 1000) - 500;
  return v;
}

// ---- the engine ---------------------------------------------------------------------------------

/// The decode loop's input preparation on backend B: each step() is one step_batch submit
/// (launch::kernel or launch::graph) followed by the sampler, on the same stream. Never reads device
/// memory; allocates and synchronizes nothing once warm (`slots` >= steps in flight + 2).
template <class B, class Launch>
class engine {
  using batch_type = ferry::step_batch<B, Launch, ferry::presets::graph_safe, ferry::epilogue::functor<derive_positions>>;

 public:
  engine(ferry::stream_ref<B> s, std::uint64_t seed, std::size_t slots)
      : sched_(seed), batch_(slots, slots) {
    // The initial state, in stream order before the first step (each call consumes its vector).
    ferry::async_h2d(std::vector<std::int32_t>(max_requests * max_blocks, 0), table_.span(), s);
    ferry::async_h2d(initial_state(0), num_computed_.span(), s);
    ferry::async_h2d(initial_state(1), sampled_.span(), s);
    ferry::async_h2d(initial_state(2), accepted_.span(), s);
    rows_ = batch_.add_upload(rows_dev_.span(), batch);
    // [gather_plan]
    tokens_ = batch_.add_gather(input_ids_.span(), const_span(sampled_), batch);
    base_ = batch_.add_gather(base_dev_.span(), const_span(num_computed_), batch);
    drafts_ = batch_.add_gather(drafts_dev_.span(), const_span(accepted_), batch);
    // [/gather_plan]
    writes_ = batch_.add_writes(ferry::staged_view<std::int32_t>(table_.data(), max_requests, max_blocks), max_writes,
                                max_write_elements);
    batch_.set_epilogue(derive_positions{rows_.ref(), base_.ref(), drafts_.ref(), table_.data(), num_computed_.data(),
                                         positions_.data(), seq_lens_.data(), slot_mapping_.data()});
    batch_.reserve();
  }

  /// One step on `s`: the scheduler's decisions written into the batch's slot, one submit, then
  /// the sampler. Never blocks the host.
  void step(ferry::stream_ref<B> s) {
    batch_.begin();
    const std::uint64_t t = sched_.next([&](std::size_t slot, std::size_t col, std::span<const std::int32_t> ids) {
      writes_.stage_write(slot, col, ids);
    });
    const std::vector<request>& rows = sched_.rows();
    const std::size_t n = rows.size();
    // [gather_step]
    std::span<std::int32_t> slots = rows_.span(n), tok = tokens_.indices(n), base = base_.indices(n),
                            drafts = drafts_.indices(n);
    for (std::size_t i = 0; i < n; ++i) {
      slots[i] = rows[i].slot;
      tok[i] = base[i] = drafts[i] = rows[i].joined ? ferry::from_host : rows[i].slot;
    }
    if (n > 0 && rows.back().joined) {  // joins are the last rows: their values come from the host
      std::span<std::int32_t> tv = tokens_.host_values(), bv = base_.host_values(), dv = drafts_.host_values();
      for (std::size_t i = 0; i < n; ++i) {
        if (!rows[i].joined) continue;
        tv[i] = rows[i].first;
        bv[i] = rows[i].prompt;
        dv[i] = 0;
      }
    }
    batch_.submit(s);  // input_ids[i] = sampled[slot] or the joining request's first token, in the launch
    // [/gather_step]
    enqueue_sampler<B>(sampler_args{t, n, rows_dev_.data(), input_ids_.data(), positions_.data(), sampled_.data(),
                                    accepted_.data()},
                       s);
  }

  [[nodiscard]] const scheduler& sched() const noexcept { return sched_; }
  // Device arrays, for the check (read back after a synchronize, outside the loop).
  [[nodiscard]] ferry::device_span<std::int32_t> block_table() const noexcept { return table_.span(); }
  [[nodiscard]] ferry::device_span<std::int32_t> num_computed() const noexcept { return num_computed_.span(); }
  [[nodiscard]] ferry::device_span<std::int32_t> sampled() const noexcept { return sampled_.span(); }
  [[nodiscard]] ferry::device_span<std::int32_t> accepted() const noexcept { return accepted_.span(); }
  /// The last step's rows of input_ids, positions, seq_lens, slot_mapping.
  [[nodiscard]] ferry::device_span<std::int32_t> input_ids() const noexcept { return last(input_ids_); }
  [[nodiscard]] ferry::device_span<std::int64_t> positions() const noexcept { return last(positions_); }
  [[nodiscard]] ferry::device_span<std::int32_t> seq_lens() const noexcept { return last(seq_lens_); }
  [[nodiscard]] ferry::device_span<std::int64_t> slot_mapping() const noexcept { return last(slot_mapping_); }

 private:
  template <class T>
  static ferry::device_span<const T> const_span(const ferry::device_buffer<T, B>& b) noexcept {
    return b.span();
  }
  template <class T>
  ferry::device_span<T> last(const ferry::device_buffer<T, B>& b) const noexcept {
    return b.span().first(sched_.rows().size());
  }

  scheduler sched_;
  ferry::device_buffer<std::int32_t, B> table_{max_requests * max_blocks};
  ferry::device_buffer<std::int32_t, B> num_computed_{max_requests}, sampled_{max_requests}, accepted_{max_requests};
  ferry::device_buffer<std::int32_t, B> rows_dev_{batch}, input_ids_{batch}, base_dev_{batch}, drafts_dev_{batch};
  ferry::device_buffer<std::int64_t, B> positions_{batch}, slot_mapping_{batch};
  ferry::device_buffer<std::int32_t, B> seq_lens_{batch};
  batch_type batch_;
  typename batch_type::template upload<std::int32_t> rows_;
  typename batch_type::template gather<std::int32_t> tokens_, base_, drafts_;
  typename batch_type::template writes<std::int32_t> writes_;
};

}  // namespace async_decode
