// examples/decode_step/decode_step.hpp: one engine step's input preparation (SPEC §11), built only
// from ferry, as a template on the backend. Shared by the example program (decode_step.cu, which
// checks it against a host reference and times it) and the benchmark (benchmarks/decode_step).
//
// The workload is SPEC §11's engine step, which the PyTorch baseline script decode_step_torch.py
// runs too: batch 256 running requests of a table of 1024, block size 16, up to 512 blocks per
// request. Per step:
//   - block-table appends for the requests that cross a block boundary (every 16th request, one
//     int32 each) and 8 newly admitted requests writing their whole block list (64 int32 each)
//     into a device int32[1024 x 512] table (staged writes);
//   - positions int64[256] and sequence lengths int32[256]: the host owns the truth, a snapshot is
//     published through UVA each step (no copy at all);
//   - token ids int32[256] and the sampling parameters temperature float[256], top-p float[256],
//     top-k int32[256], seed int64[256], packed into one device byte buffer;
//   - a logprob-request matrix int64[256 x 6] (32 requests ask for 5 token ids each, plus the
//     sampled column) in device memory: ferry_step uploads the rows that change (0..31) every
//     step, component_step the whole matrix;
//   - the last logits index filled on the device from a device value (logits_indices[255] =
//     seq_lens[255], read from the published UVA view) — never a host read-back.
//
// Two implementations with the same interface and results:
//   - ferry_step<B, Launch>: the step as ONE ferry::step_batch — the host writes the step into a
//     pinned slot and submit() is one kernel launch (launch::kernel) or one graph replay
//     (launch::graph) doing every upload, write and fill;
//   - component_step<B>: the same step from ferry's components (staged_write_tensor, uva_backed,
//     async_h2d_packed, cpu_gpu_buffer, a fill kernel): several launches and copies per step.
// Nothing in run() allocates or synchronizes once warm (the slots have seen the largest number of
// steps in flight); the benchmark proves it with ferry::sync_guard.
#pragma once

#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#else
#include <ferry/ferry.hpp>
#endif

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

namespace decode_step {

/// Running requests per step (the batch).
inline constexpr std::size_t batch = 256;
/// Rows of the block table: requests the engine can hold.
inline constexpr std::size_t max_requests = 1024;
/// Columns of the block table: blocks per request.
inline constexpr std::size_t max_blocks = 512;
/// Tokens per KV-cache block.
inline constexpr std::size_t block_size = 16;
/// Every `append_stride`-th request crosses a block boundary each step (one int32 append each).
inline constexpr std::size_t append_stride = 16;
/// Requests admitted per step; each writes its whole block list.
inline constexpr std::size_t admitted = 8;
/// Blocks in an admitted request's block list.
inline constexpr std::size_t admitted_blocks = 64;
/// Requests that ask for logprobs of given token ids.
inline constexpr std::size_t logprob_requests = 32;
/// Token ids per logprob request.
inline constexpr std::size_t logprob_ids = 5;
/// Columns of the logprob-request matrix: the sampled token, then the requested ids.
inline constexpr std::size_t logprob_cols = logprob_ids + 1;
/// Elements of the matrix's rows that change from step to step (rows 0..31, row-major first);
/// the other rows stay no_token.
inline constexpr std::size_t logprob_changing = logprob_requests * logprob_cols;
/// Vocabulary size (token ids are taken modulo it).
inline constexpr std::int32_t vocab = 32000;
/// Block-table writes per step, and their elements (what the table reserves).
inline constexpr std::size_t writes_per_step = batch / append_stride + admitted;
inline constexpr std::size_t elements_per_step = batch / append_stride + admitted * admitted_blocks;
/// Bytes of the packed sampling upload: five parts of 256 elements, each 16-byte aligned.
inline constexpr std::size_t packed_bytes = batch * (4 + 4 + 4 + 4 + 8);
/// The placeholder in the logprob matrix where nothing was asked (and in the sampled column,
/// which the sampler fills on the device).
inline constexpr std::int64_t no_token = -1;

/// The engine's scheduler, reduced to what decides a step's inputs. Every implementation of the
/// step (ferry's, the raw-CUDA baseline's, the example's host reference) asks it for the same
/// values, so their results can be compared; every value changes from step to step.
class scheduler {
 public:
  /// The initial sequence length of request i (decode_step_torch.py: arange(B) % 4096 + 1);
  /// its position is one less.
  static constexpr std::int32_t initial_seq_len(std::size_t i) noexcept {
    return static_cast<std::int32_t>(i % 4096 + 1);
  }

  /// Starts a step and returns its number (0, 1, 2, ...).
  std::int64_t begin_step() noexcept { return step_++; }
  /// Steps begun so far.
  [[nodiscard]] std::int64_t steps() const noexcept { return step_; }

  /// Advances every running request by one token: ++positions[i], ++seq_lens[i].
  template <class Positions, class SeqLens>
  static void advance(Positions&& positions, SeqLens&& seq_lens) noexcept {
    for (std::size_t i = 0; i < batch; ++i) {
      ++positions[i];
      ++seq_lens[i];
    }
  }

  /// Calls `write(row, start, std::span<const std::int32_t>)` for every block-table write of step
  /// `s`, in staging order, given the sequence lengths already advanced for the step: first the
  /// appends (request r = s % 16, r + 16, ... gets one new block id at column
  /// seq_lens[r] / 16 % 512), then the 8 admitted requests (rows (8s + k) % 1024, 64 new block
  /// ids from column 0). An admission can cover an append of the same step: the later write wins.
  template <class SeqLens, class Write>
  void for_each_write(std::int64_t s, const SeqLens& seq_lens, Write&& write) {
    for (std::size_t r = static_cast<std::size_t>(s) % append_stride; r < batch; r += append_stride) {
      const std::int32_t id = block_id(next_block_++);
      write(r, append_column(seq_lens[r]), std::span<const std::int32_t>(&id, 1));
    }
    std::array<std::int32_t, admitted_blocks> ids;
    for (std::size_t k = 0; k < admitted; ++k) {
      for (auto& id : ids) id = block_id(next_block_++);
      write(admitted_row(s, k), std::size_t{0}, std::span<const std::int32_t>(ids));
    }
  }

  /// The column an append of a request with sequence length `seq_len` writes.
  static constexpr std::size_t append_column(std::int32_t seq_len) noexcept {
    return static_cast<std::size_t>(seq_len) / block_size % max_blocks;
  }
  /// The row of the k-th request admitted at step s.
  static constexpr std::size_t admitted_row(std::int64_t s, std::size_t k) noexcept {
    return (static_cast<std::size_t>(s) * admitted + k) % max_requests;
  }

  /// Writes the token ids and sampling parameters of step `s` (256 elements each).
  static void sampling(std::int64_t s, std::int32_t* tokens, float* temperature, float* top_p,
                       std::int32_t* top_k, std::int64_t* seed) noexcept {
    const auto u = static_cast<std::size_t>(s);
    for (std::size_t i = 0; i < batch; ++i) {
      tokens[i] = static_cast<std::int32_t>((i * 31 + u) % vocab);
      temperature[i] = 0.5f + 0.0625f * static_cast<float>((i + u) % 8);
      top_p[i] = 0.96875f - 0.03125f * static_cast<float>((i + 3 * u) % 4);
      top_k[i] = static_cast<std::int32_t>(20 + (i + u) % 61);
      seed[i] = s * 1000003 + static_cast<std::int64_t>(i) + 1;
    }
  }

  /// Fills the whole logprob-request matrix (256 x 6, row-major) with no_token (a matrix that
  /// persists needs it once: each step rewrites only the requested ids).
  static void logprob_init(std::int64_t* matrix) noexcept {
    for (std::size_t i = 0; i < batch * logprob_cols; ++i) matrix[i] = no_token;
  }

  /// The host's truth before step 0: seq_lens[i] = initial_seq_len(i) and positions[i] one less,
  /// the logprob matrix all no_token (logprob_init), logits_indices[i] = i.
  template <class Positions, class SeqLens, class LogitsIndices>
  static void initial_state(Positions&& positions, SeqLens&& seq_lens, std::int64_t* logprobs,
                            LogitsIndices&& logits_indices) noexcept {
    for (std::size_t i = 0; i < batch; ++i) {
      seq_lens[i] = initial_seq_len(i);
      positions[i] = seq_lens[i] - 1;
      logits_indices[i] = static_cast<std::int32_t>(i);
    }
    logprob_init(logprobs);
  }
  /// Writes the rows of step s that change (logprob_changing elements: rows 0..31, the sampled
  /// column no_token, then the requested ids) into `rows`.
  static void logprob_changing_rows(std::int64_t s, std::int64_t* rows) noexcept {
    for (std::size_t r = 0; r < logprob_requests; ++r) rows[r * logprob_cols] = no_token;
    logprob_rows(s, rows);
  }
  /// Writes step s's requested ids: rows 0..31, columns 1..5 (decode_step_torch.py: lp[:32, 1:]).
  static void logprob_rows(std::int64_t s, std::int64_t* matrix) noexcept {
    for (std::size_t r = 0; r < logprob_requests; ++r)
      for (std::size_t c = 1; c < logprob_cols; ++c)
        matrix[r * logprob_cols + c] = (static_cast<std::int64_t>(r * logprob_ids + c - 1) + s) % vocab;
  }

 private:
  static constexpr std::int32_t block_id(std::int64_t n) noexcept {
    return static_cast<std::int32_t>(n % (std::int64_t{1} << 30)) + 1;  // never 0 (the table's fill)
  }
  std::int64_t step_ = 0;
  std::int64_t next_block_ = 0;
};

// ---- the device-side fill of the last logits index ----------------------------------------------

#if defined(__CUDACC__)
/// logits_indices[last] = seq_lens[last]: the device reads the value, the host never does. A
/// template, as ferry's kernels are, so that every translation unit that includes this header may
/// define it (one definition at link time, as an inline function).
template <class = void>
__global__ void fill_last_index_kernel(std::int32_t* logits_indices, const std::int32_t* seq_lens,
                                       std::size_t last) {
  logits_indices[last] = seq_lens[last];
}

/// Launches fill_last_index_kernel (one thread) on `s`; checked with cudaPeekAtLastError.
inline void launch_fill_last_index(std::int32_t* logits_indices, const std::int32_t* seq_lens,
                                   std::size_t last, cudaStream_t s) {
  fill_last_index_kernel<><<<1, 1, 0, s>>>(logits_indices, seq_lens, last);
  FERRY_CUDA_CHECK_LAUNCH("decode_step::fill_last_index_kernel");
}
#endif

/// Enqueues on `s`: out[last] = seq_lens[last] with last = out.size() - 1, both read and written
/// on the device (CUDA: a one-thread kernel; host backend: a host task in stream order).
template <class B>
void fill_last_index(ferry::device_span<std::int32_t> out, ferry::device_span<const std::int32_t> seq_lens,
                     ferry::stream_ref<B> s) {
  std::int32_t* o = out.data();
  const std::int32_t* l = seq_lens.data();
  const std::size_t last = out.size() - 1;
  if constexpr (std::is_same_v<B, ferry::backend::host>) {
    ferry::enqueue_host(s, [o, l, last] { o[last] = l[last]; });
  } else {
#if defined(__CUDACC__)
    launch_fill_last_index(o, l, last, s.get());
#else
    static_assert(sizeof(B) == 0,  // false, but only once instantiated
                  "decode_step::fill_last_index launches a CUDA kernel: build this translation unit "
                  "with nvcc and include <ferry/ferry.cuh>.");
#endif
  }
}

/// The setup both implementations of the step share: the host's truth before step 0
/// (scheduler::initial_state) written into `positions`, `seq_lens` and `logprobs`, and the
/// initial logits indices (0..255) uploaded into `logits_indices`, enqueued on `s`.
template <class B, class Positions, class SeqLens>
void set_up_initial_state(Positions&& positions, SeqLens&& seq_lens, std::int64_t* logprobs,
                          ferry::device_span<std::int32_t> logits_indices, ferry::stream_ref<B> s) {
  std::vector<std::int32_t> indices(batch);
  scheduler::initial_state(positions, seq_lens, logprobs, indices);
  ferry::async_h2d(indices, logits_indices, s);
}

// ---- the step, built from ferry -----------------------------------------------------------------

/// One engine step's input preparation on backend B from ferry's components (see the file
/// comment): a staged-write apply, two UVA publishes, a packed upload, a logprob upload and a fill
/// launch per step. Construct once (allocations happen here and while warming up); call
/// run(stream) every step. The device-side results of the last step are exposed for checking.
template <class B>
class component_step {
 public:
  using backend_type = B;
  /// The packed sampling upload's parts: token ids, temperature, top-p, top-k, seed.
  using sampling_views = std::tuple<ferry::device_span<std::int32_t>, ferry::device_span<float>,
                                    ferry::device_span<float>, ferry::device_span<std::int32_t>,
                                    ferry::device_span<std::int64_t>>;

  /// Allocates everything; the zero fill of the table and the initial logits indices (0..255) are
  /// enqueued on `s`. `max_in_flight`: the most steps the host may run ahead of the device (the
  /// UVA-backed state gets a slot per step in flight, inserted while warming up, never beyond).
  explicit component_step(ferry::stream_ref<B> s, std::size_t max_in_flight = 264)
      : table_(max_requests, max_blocks, s),
        positions_(batch, 2, max_in_flight + 2),
        seq_lens_(batch, 2, max_in_flight + 2),
        packed_(packed_bytes / sizeof(std::uint64_t)),
        logprobs_(batch * logprob_cols),
        logits_indices_(batch),
        tokens_(batch),
        temperature_(batch),
        top_p_(batch),
        top_k_(batch),
        seed_(batch) {
    table_.reserve(writes_per_step, elements_per_step);
    set_up_initial_state(positions_.host(), seq_lens_.host(), logprobs_.host().data(), logits_indices_.span(), s);
  }

  /// One step on `s`: host-side state, staged block-table writes, then the uploads in the order
  /// of decode_step_torch.py (apply, the arrays, the logprob matrix, the logits-index fill).
  /// Never blocks the host.
  void run(ferry::stream_ref<B> s) {
    const std::int64_t step = sched_.begin_step();
    // the host's state of the step
    auto lens = seq_lens_.host();
    scheduler::advance(positions_.host(), lens);
    sched_.for_each_write(step, lens, [&](std::size_t row, std::size_t start, std::span<const std::int32_t> ids) {
      table_.stage_write(row, start, ids);
    });
    scheduler::sampling(step, tokens_.data(), temperature_.data(), top_p_.data(), top_k_.data(), seed_.data());
    scheduler::logprob_rows(step, logprobs_.host().data());
    // the uploads
    table_.apply_write(s);
    positions_view_ = positions_.publish(batch, s);
    seq_lens_view_ = seq_lens_.publish(batch, s);
    sampling_ = ferry::async_h2d_packed(packed_span(), s, tokens_, temperature_, top_p_, top_k_, seed_);
    logprob_view_ = logprobs_.copy_to_device(batch * logprob_cols, s);
    fill_last_index<B>(logits_indices_.span(), seq_lens_view_, s);
  }

  /// Steps run so far.
  [[nodiscard]] std::int64_t steps() const noexcept { return sched_.steps(); }
  /// The block table (device int32[1024 x 512], row-major).
  [[nodiscard]] ferry::device_span<std::int32_t> block_table() const noexcept { return table_.span(); }
  /// The last step's positions (UVA view of its published slot).
  [[nodiscard]] ferry::device_span<const std::int64_t> positions() const noexcept { return positions_view_; }
  /// The last step's sequence lengths (UVA view of its published slot).
  [[nodiscard]] ferry::device_span<const std::int32_t> seq_lens() const noexcept { return seq_lens_view_; }
  /// The last step's packed parts (device memory).
  [[nodiscard]] const sampling_views& sampling() const noexcept { return sampling_; }
  /// The last step's logprob-request matrix (device int64[256 x 6]).
  [[nodiscard]] ferry::device_span<std::int64_t> logprobs() const noexcept { return logprob_view_; }
  /// The logits indices (device int32[256]; the last filled on the device each step).
  [[nodiscard]] ferry::device_span<std::int32_t> logits_indices() const noexcept { return logits_indices_.span(); }

 private:
  [[nodiscard]] ferry::device_span<std::byte> packed_span() const noexcept {
    return {reinterpret_cast<std::byte*>(packed_.data()), packed_bytes};
  }

  scheduler sched_;
  ferry::staged_write_tensor<std::int32_t, B, ferry::presets::block_table> table_;
  ferry::uva_backed<std::int64_t, B> positions_;
  ferry::uva_backed<std::int32_t, B> seq_lens_;
  ferry::device_buffer<std::uint64_t, B> packed_;  // the packed upload's bytes (16-byte aligned)
  ferry::cpu_gpu_buffer<std::int64_t, B> logprobs_;
  ferry::device_buffer<std::int32_t, B> logits_indices_;
  // the step's pageable host arrays, rewritten every step (consumed by async_h2d_packed)
  std::vector<std::int32_t> tokens_;
  std::vector<float> temperature_;
  std::vector<float> top_p_;
  std::vector<std::int32_t> top_k_;
  std::vector<std::int64_t> seed_;
  // the last step's device-side views
  ferry::device_span<const std::int64_t> positions_view_;
  ferry::device_span<const std::int32_t> seq_lens_view_;
  sampling_views sampling_;
  ferry::device_span<std::int64_t> logprob_view_;
};

// ---- the step as one step_batch -----------------------------------------------------------------

/// One engine step's input preparation on backend B as ONE ferry::step_batch (see the file
/// comment): run() writes the host's step into the batch's pinned slot and submits it, one kernel
/// launch (launch::kernel) or one graph replay (launch::graph, fixed slots: presets::graph_safe).
/// Construct once (allocations happen here and while warming up); call run(stream) every step.
/// The device-side results of the last step are exposed for checking and for the model's kernels.
template <class B, class Launch = ferry::launch::kernel>
class ferry_step {
  using batch_type = std::conditional_t<Launch::replays_graph, ferry::step_batch<B, Launch, ferry::presets::graph_safe>,
                                        ferry::step_batch<B, Launch>>;

 public:
  using backend_type = B;
  /// The packed sampling parts: token ids, temperature, top-p, top-k, seed.
  using sampling_views = std::tuple<ferry::device_span<std::int32_t>, ferry::device_span<float>,
                                    ferry::device_span<float>, ferry::device_span<std::int32_t>,
                                    ferry::device_span<std::int64_t>>;

  /// Allocates everything; the zero fill of the table and the initial logits indices (0..255) are
  /// enqueued on `s`. `max_in_flight`: the most steps the host may run ahead of the device (slots,
  /// with their graphs under launch::graph, are inserted up to that depth while warming up).
  explicit ferry_step(ferry::stream_ref<B> s, std::size_t max_in_flight = 264)
      : table_(max_requests, max_blocks, s),
        packed_(packed_bytes / sizeof(std::uint64_t)),
        logprobs_(batch * logprob_cols),
        logits_indices_(batch),
        batch_(2, max_in_flight + 2),
        sampling_(part<std::int32_t>(0), part<float>(1), part<float>(2), part<std::int32_t>(3), part<std::int64_t>(4)),
        tokens_(batch_.add_upload(std::get<0>(sampling_), batch)),
        temperature_(batch_.add_upload(std::get<1>(sampling_), batch)),
        top_p_(batch_.add_upload(std::get<2>(sampling_), batch)),
        top_k_(batch_.add_upload(std::get<3>(sampling_), batch)),
        seed_(batch_.add_upload(std::get<4>(sampling_), batch)),
        logprob_upload_(batch_.add_upload(logprobs_.span(), logprob_changing)),
        positions_(batch_.template add_publish<std::int64_t>(batch)),
        seq_lens_(batch_.template add_publish<std::int32_t>(batch)),
        writes_(batch_.add_writes(table_, writes_per_step, elements_per_step)) {
    batch_.add_fill(logits_indices_.span().subspan(batch - 1, 1), seq_lens_, batch - 1);
    batch_.reserve();
    std::vector<std::int64_t> logprobs(batch * logprob_cols);
    set_up_initial_state(positions_host_, lens_, logprobs.data(), logits_indices_.span(), s);
    ferry::async_h2d(logprobs, logprobs_.span(), s);  // the rows that never change, once
  }

  /// One step on `s`: the host's state of the step written into the batch's slot, then one
  /// submit. Never blocks the host.
  void run(ferry::stream_ref<B> s) {
    const std::int64_t step = sched_.begin_step();
    batch_.begin();
    scheduler::advance(positions_host_, lens_);
    sched_.for_each_write(step, lens_, [&](std::size_t row, std::size_t start, std::span<const std::int32_t> ids) {
      writes_.stage_write(row, start, ids);
    });
    scheduler::sampling(step, tokens_.span(batch).data(), temperature_.span(batch).data(), top_p_.span(batch).data(),
                        top_k_.span(batch).data(), seed_.span(batch).data());
    // The logprob-request matrix: the rows that change, written in the slot (the rest stays).
    scheduler::logprob_changing_rows(step, logprob_upload_.span(logprob_changing).data());
    copy_into(positions_.span(batch), positions_host_);
    copy_into(seq_lens_.span(batch), lens_);
    batch_.submit(s);
  }

  /// Steps run so far.
  [[nodiscard]] std::int64_t steps() const noexcept { return sched_.steps(); }
  /// The batch's pinned slots now (the ring grows while the device is behind).
  [[nodiscard]] std::size_t slots() const noexcept { return batch_.slots(); }
  /// The block table (device int32[1024 x 512], row-major).
  [[nodiscard]] ferry::device_span<std::int32_t> block_table() const noexcept { return table_.span(); }
  /// The last step's positions (UVA view of its slot).
  [[nodiscard]] ferry::device_span<const std::int64_t> positions() const noexcept { return positions_.view(); }
  /// The last step's sequence lengths (UVA view of its slot).
  [[nodiscard]] ferry::device_span<const std::int32_t> seq_lens() const noexcept { return seq_lens_.view(); }
  /// The packed parts (device memory, rewritten every step).
  [[nodiscard]] const sampling_views& sampling() const noexcept { return sampling_; }
  /// The logprob-request matrix (device int64[256 x 6]).
  [[nodiscard]] ferry::device_span<std::int64_t> logprobs() const noexcept { return logprobs_.span(); }
  /// The logits indices (device int32[256]; the last filled on the device each step).
  [[nodiscard]] ferry::device_span<std::int32_t> logits_indices() const noexcept { return logits_indices_.span(); }

 private:
  // Part k of the packed buffer: 256 elements at a 16-byte aligned offset (int32, float, float,
  // int32, int64: each part's bytes are a multiple of 16).
  template <class T>
  ferry::device_span<T> part(std::size_t k) const noexcept {
    static constexpr std::size_t offsets[] = {0, 4 * batch, 8 * batch, 12 * batch, 16 * batch};
    return {reinterpret_cast<T*>(reinterpret_cast<std::byte*>(packed_.data()) + offsets[k]), batch};
  }
  template <class T>
  static void copy_into(std::span<T> out, const std::vector<T>& from) noexcept {
    std::copy(from.begin(), from.end(), out.begin());
  }

  scheduler sched_;
  ferry::staged_write_tensor<std::int32_t, B, ferry::presets::block_table> table_;
  ferry::device_buffer<std::uint64_t, B> packed_;  // the packed parts' bytes (16-byte aligned)
  ferry::device_buffer<std::int64_t, B> logprobs_;
  ferry::device_buffer<std::int32_t, B> logits_indices_;
  // the host's truth
  std::vector<std::int64_t> positions_host_ = std::vector<std::int64_t>(batch);
  std::vector<std::int32_t> lens_ = std::vector<std::int32_t>(batch);
  // the step
  batch_type batch_;
  sampling_views sampling_;
  typename batch_type::template upload<std::int32_t> tokens_;
  typename batch_type::template upload<float> temperature_;
  typename batch_type::template upload<float> top_p_;
  typename batch_type::template upload<std::int32_t> top_k_;
  typename batch_type::template upload<std::int64_t> seed_;
  typename batch_type::template upload<std::int64_t> logprob_upload_;
  typename batch_type::template publish<std::int64_t> positions_;
  typename batch_type::template publish<std::int32_t> seq_lens_;
  typename batch_type::template writes<std::int32_t> writes_;
};

}  // namespace decode_step
