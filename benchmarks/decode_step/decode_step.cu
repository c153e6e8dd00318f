// Benchmark decode_step (SPEC §10, §11): one engine step's input preparation, ferry's step
// (examples/decode_step/decode_step.hpp, the same code as the example) beside
//  (a) a hand-written raw-CUDA step doing the same work with nothing but the unavoidable: one
//      preallocated pinned buffer (cudaHostAlloc, mapped) holding every array of the step, the
//      host state kept there and rewritten in place; one cudaMemcpyAsync per array (positions,
//      seq_lens, token ids, temperature, top-p, top-k, seed, logprob matrix: 8 copies) into
//      preallocated device arrays; the block-table writes applied by THE SAME apply kernel ferry
//      launches (ferry::detail::launch_apply_chunks, a chunk table and contents written into the
//      pinned buffer and read by the kernel through UVA, as presets::block_table does — an append
//      that an admission of the same step covers is skipped, so that chunks stay disjoint); the
//      same one-thread fill kernel of the last logits index, from the copied seq_lens. It fences
//      nothing (it rewrites the pinned buffer while earlier copies may still be pending when the
//      host runs ahead): a floor, not a safe engine;
//  (b) the PyTorch way, decode_step_torch.py run on the same machine (--torch-step FILE: its
//      --json output, {"host_us", "device_us"}).
// Host time: SPEC §10 bursts (256 steps, stream drained between bursts, median); device time:
// steps queued behind a kernel that holds the stream. Then an untimed pass of 1000 warm steps
// inside ferry::sync_guard (record mode) counts ferry's synchronizing calls and allocations per
// step. Inputs change every step (the scheduler rotates token ids, sampling parameters, block ids,
// admitted rows, logprob ids). Before timing, the raw step is checked to produce exactly ferry's
// results (both run from step 0, drained, read back).
// Targets: host_vs_torch (PyTorch host / ferry host) >= 20, host_vs_raw (ferry host / raw host)
// <= 1.25, syncs_per_step <= 0, allocations_per_step <= 0.
#include <decode_step/decode_step.hpp>

#include <ferry/sync/sync_guard.hpp>

#include <support/gpu.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

using ferry_bench::device_us;
using ferry_bench::host_us;
using B = ferry::backend::cuda;
using namespace decode_step;

namespace {

/// The hand-written raw-CUDA step (see the file comment).
class raw_step {
 public:
  // Byte offsets of the arrays in the one pinned buffer (each 256-byte aligned).
  static constexpr std::size_t max_chunks = 2 * writes_per_step;
  static constexpr std::size_t off_positions = 0;
  static constexpr std::size_t off_seq_lens = off_positions + batch * 8;
  static constexpr std::size_t off_tokens = off_seq_lens + batch * 4;
  static constexpr std::size_t off_temperature = off_tokens + batch * 4;
  static constexpr std::size_t off_top_p = off_temperature + batch * 4;
  static constexpr std::size_t off_top_k = off_top_p + batch * 4;
  static constexpr std::size_t off_seed = off_top_k + batch * 4;
  static constexpr std::size_t off_logprobs = off_seed + batch * 8;
  static constexpr std::size_t off_descs = off_logprobs + batch * logprob_cols * 8;
  static constexpr std::size_t off_contents = ferry::detail::round_up(off_descs + max_chunks * 24, 256);
  static constexpr std::size_t total_bytes = off_contents + 2 * elements_per_step * 4 + 256;

  explicit raw_step(cudaStream_t s) : s_(s) {
    BENCH_CUDA(cudaHostAlloc(&pinned_, total_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(pinned_, 0, total_bytes);
    BENCH_CUDA(cudaMalloc(&table_, max_requests * max_blocks * 4));
    BENCH_CUDA(cudaMemset(table_, 0, max_requests * max_blocks * 4));
    BENCH_CUDA(cudaMalloc(&device_, off_descs));  // the arrays, at the same offsets as in pinned_
    BENCH_CUDA(cudaMalloc(&logits_, batch * 4));
    for (std::size_t i = 0; i < batch; ++i) {
      seq_lens()[i] = scheduler::initial_seq_len(i);
      positions()[i] = seq_lens()[i] - 1;
    }
    scheduler::logprob_init(at<std::int64_t>(pinned_, off_logprobs));
    std::vector<std::int32_t> iota(batch);
    for (std::size_t i = 0; i < batch; ++i) iota[i] = static_cast<std::int32_t>(i);
    BENCH_CUDA(cudaMemcpy(logits_, iota.data(), batch * 4, cudaMemcpyHostToDevice));
  }
  raw_step(const raw_step&) = delete;
  raw_step& operator=(const raw_step&) = delete;
  ~raw_step() {
    cudaStreamSynchronize(s_);
    cudaFreeHost(pinned_);
    cudaFree(table_);
    cudaFree(device_);
    cudaFree(logits_);
  }

  void run() {
    const std::int64_t step = sched_.begin_step();
    std::int32_t* lens = seq_lens();
    scheduler::advance(positions(), lens);
    // the block-table writes: contents and one chunk per write, straight into the pinned buffer
    auto* descs = at<ferry::detail::chunk_desc>(pinned_, off_descs);
    auto* contents = at<std::int32_t>(pinned_, off_contents);
    std::size_t n = 0, used = 0;
    const std::size_t first_admitted = scheduler::admitted_row(step, 0);
    sched_.for_each_write(step, lens, [&](std::size_t row, std::size_t start, std::span<const std::int32_t> ids) {
      if (ids.size() == 1 && start < admitted_blocks && row - first_admitted < admitted) return;  // covered
      if (ids.size() * 4 >= 64) used = (used + 3) / 4 * 4;  // congruent with the destination mod 16 bytes
      std::memcpy(contents + used, ids.data(), ids.size() * 4);
      descs[n++] = {row * max_blocks + start, used, static_cast<std::uint32_t>(ids.size()), 0};
      used += ids.size();
    });
    scheduler::sampling(step, at<std::int32_t>(pinned_, off_tokens), at<float>(pinned_, off_temperature),
                        at<float>(pinned_, off_top_p), at<std::int32_t>(pinned_, off_top_k),
                        at<std::int64_t>(pinned_, off_seed));
    scheduler::logprob_rows(step, at<std::int64_t>(pinned_, off_logprobs));
    // the uploads
    ferry::detail::launch_apply_chunks<std::uint32_t>(descs, n, reinterpret_cast<std::uintptr_t>(table_),
                                                      reinterpret_cast<std::uintptr_t>(contents),
                                                      ferry::detail::kernel_mark{}, s_);
    copy(off_positions, batch * 8);
    copy(off_seq_lens, batch * 4);
    copy(off_tokens, batch * 4);
    copy(off_temperature, batch * 4);
    copy(off_top_p, batch * 4);
    copy(off_top_k, batch * 4);
    copy(off_seed, batch * 8);
    copy(off_logprobs, batch * logprob_cols * 8);
    launch_fill_last_index(logits_, at<std::int32_t>(device_, off_seq_lens), batch - 1, s_);
  }

  /// A device array of the step (as raw_step::off_*), for the equality check.
  template <class T>
  [[nodiscard]] const T* device_array(std::size_t off) const noexcept { return at<T>(device_, off); }
  [[nodiscard]] const std::int32_t* table() const noexcept { return table_; }
  [[nodiscard]] const std::int32_t* logits_indices() const noexcept { return logits_; }

 private:
  template <class T>
  static T* at(std::byte* base, std::size_t off) noexcept {
    return reinterpret_cast<T*>(base + off);
  }
  std::int64_t* positions() noexcept { return at<std::int64_t>(pinned_, off_positions); }
  std::int32_t* seq_lens() noexcept { return at<std::int32_t>(pinned_, off_seq_lens); }
  void copy(std::size_t off, std::size_t bytes) {
    BENCH_CUDA(cudaMemcpyAsync(device_ + off, pinned_ + off, bytes, cudaMemcpyHostToDevice, s_));
  }

  cudaStream_t s_;
  scheduler sched_;
  std::byte* pinned_ = nullptr;
  std::byte* device_ = nullptr;
  std::int32_t* table_ = nullptr;
  std::int32_t* logits_ = nullptr;
};

/// Copies `n` elements at the device address `p` to the host (synchronous: checks only).
template <class T>
std::vector<T> fetch(const T* p, std::size_t n) {
  std::vector<T> v(n);
  BENCH_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDefault));
  return v;
}

/// Both steps from step 0, drained after each: the raw step's device results must equal ferry's.
void check_same_work() {
  ferry::stream<B> s;
  ferry_step<B> f(s);
  raw_step r(s.get());
  for (int k = 0; k < 20; ++k) {
    f.run(s);
    r.run();
    s.synchronize();
    const auto& [tok, temp, top_p, top_k, seed] = f.sampling();
    auto same = [&](const char* what, auto got, auto want) {
      if (got != want)
        throw std::runtime_error(std::string("the raw-CUDA step differs from ferry's in ") + what + " at step " +
                                 std::to_string(k));
    };
    same("the block table", fetch(r.table(), max_requests * max_blocks), fetch(f.block_table().data(), max_requests * max_blocks));
    same("positions", fetch(r.device_array<std::int64_t>(raw_step::off_positions), batch), fetch(f.positions().data(), batch));
    same("seq_lens", fetch(r.device_array<std::int32_t>(raw_step::off_seq_lens), batch), fetch(f.seq_lens().data(), batch));
    same("token ids", fetch(r.device_array<std::int32_t>(raw_step::off_tokens), batch), fetch(tok.data(), batch));
    same("temperature", fetch(r.device_array<float>(raw_step::off_temperature), batch), fetch(temp.data(), batch));
    same("top-p", fetch(r.device_array<float>(raw_step::off_top_p), batch), fetch(top_p.data(), batch));
    same("top-k", fetch(r.device_array<std::int32_t>(raw_step::off_top_k), batch), fetch(top_k.data(), batch));
    same("seed", fetch(r.device_array<std::int64_t>(raw_step::off_seed), batch), fetch(seed.data(), batch));
    same("the logprob matrix", fetch(r.device_array<std::int64_t>(raw_step::off_logprobs), batch * logprob_cols),
         fetch(f.logprobs().data(), batch * logprob_cols));
    same("the logits indices", fetch(r.logits_indices(), batch), fetch(f.logits_indices().data(), batch));
  }
}

}  // namespace

static int run(int argc, char** argv) {
  const auto o = ferry_bench::parse(argc, argv);
  ferry_bench::report rep("decode_step");
  rep.machine = ferry_bench::gpu_name();

  check_same_work();

  ferry::stream<B> s;
  cudaStream_t cs = s.get();
  auto drain = [&] { BENCH_CUDA(cudaStreamSynchronize(cs)); };
  constexpr int guard_steps = 1000, guard_burst = 250;
  const std::size_t in_flight = static_cast<std::size_t>(std::max(o.burst, guard_burst)) + 8;
  ferry_step<B> step(s, in_flight);
  raw_step raw(cs);

  // Warm-up: the arena, the staging slots and the UVA pools reach their steady state, including
  // the most steps in flight (a burst queued behind a held stream).
  for (int k = 0; k < 300; ++k) {
    step.run(s);
    raw.run();
  }
  drain();
  ferry_bench::hold_stream(cs, 20);
  for (std::size_t k = 0; k < in_flight - 8; ++k) step.run(s);
  drain();

  auto ferry_op = [&](std::size_t) { step.run(s); };
  auto raw_op = [&](std::size_t) { raw.run(); };
  const double h_ferry = host_us(o, ferry_op, drain);
  const double h_raw = host_us(o, raw_op, drain);
  const double d_ferry = device_us(cs, o.burst, ferry_op);
  const double d_raw = device_us(cs, o.burst, raw_op);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double h_torch = o.torch_step.empty() ? nan : ferry_bench::json_number(o.torch_step, "host_us");
  const double d_torch = o.torch_step.empty() ? nan : ferry_bench::json_number(o.torch_step, "device_us");

  // The untimed guard pass: warm steps in bursts (the stream drained between bursts, outside the
  // guards, so that no burst runs further ahead of the device than the warm-up did).
  std::uint64_t syncs = 0, allocations = 0;
  std::string seen;
  drain();
  for (int done = 0; done < guard_steps; done += guard_burst) {
    {
      ferry::sync_guard guard(ferry::sync_guard::mode::record);
      for (int k = 0; k < guard_burst; ++k) step.run(s);
      syncs += guard.syncs();
      allocations += guard.allocations();
      if (guard.syncs() + guard.allocations() != 0) seen = guard.report();
    }
    drain();
  }

  auto row = [&](const char* name, double h, double d) {
    rep.add({{"step", std::string(name)}, {"host us", h}, {"device us", d},
             {"host / ferry", h / h_ferry}, {"device / ferry", d / d_ferry}});
  };
  row("ferry", h_ferry, d_ferry);
  row("raw CUDA (8 memcpy + apply + fill)", h_raw, d_raw);
  if (!o.torch_step.empty()) row("PyTorch (decode_step_torch.py)", h_torch, d_torch);
  rep.add_target("host_vs_torch", h_torch / h_ferry, ">=", 20);
  rep.add_target("host_vs_raw", h_ferry / h_raw, "<=", 1.25);
  rep.add_target("syncs_per_step", static_cast<double>(syncs) / guard_steps, "<=", 0);
  rep.add_target("allocations_per_step", static_cast<double>(allocations) / guard_steps, "<=", 0);
  rep.print();
  if (!seen.empty()) std::cout << "sync_guard saw: " << seen << "\n";
  if (o.torch_step.empty()) std::cout << "(no --torch-step FILE: the PyTorch figures are absent)\n";
  rep.write_json(o.json);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench.decode_step: " << e.what() << "\n";
    return 1;
  }
}
