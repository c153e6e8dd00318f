// Benchmark engine_step (SPEC §10, §12.2-§12.4): the engine-shaped decode step (GPU-resident
// per-request state, token ids gathered from the previous step's sampled tokens, positions,
// sequence lengths and slot mappings derived on the GPU; engine_workload.hpp says what a step is),
// every row in this one process on the same host data: each row's own scheduler decides a step
// (untimed), and the row is timed for what it does from those decided arrays (its copies into its
// slot or ferry's spans, its fences, its launches). Rows at the default shape:
//  - ferry: one ferry::step_batch (the step's uploads, a gather of the sampled tokens with host
//    rows, the block-table writes of every KV-cache group, the fused epilogue derive_inputs) in
//    one submit: launch::graph, launch::kernel, and launch::graph in the engine's own graph
//    (submit_with: a child node before the model's first kernel) beside that graph's replay alone;
//    and launch::capture (SPEC §12.4: the step kernel recorded once into the engine's capture
//    before the model's first kernel; each step a commit with no CUDA call, then one replay);
//  - the floor: ONE kernel reading the step from a ring of pinned slots through UVA, doing the same
//    work and, in its last block, the same derivation, then storing the step's number into a mapped
//    counter from which the host chooses a free slot (support/fence.hpp: the cached counter first);
//    one graph executable for every slot (the slot found through a device-side step counter:
//    step-floor.cu's row G), and the same kernel by cudaLaunchKernel (the kernel floor);
//  - vLLM's operations in C++: exactly vLLM 0.26's operations for a decode step
//    (GPUModelRunner.prepare_inputs and prepare_attn): 2 uploads (idx_mapping, here with the step's
//    other host arrays, and query_start_loc) and 6 kernels (cu_num_logits = arange,
//    expanded_local_pos = zeros, prepare_pos_seq_lens, combine_sampled_and_draft_tokens,
//    gather_block_tables, compute_slot_mappings), kernel bodies written here for the same work
//    (vLLM's apply_staged_writes kernel folded into the zeros kernel's extra blocks and
//    post_update's num_computed into prepare_pos_seq_lens: fewer launches than vLLM makes), fenced
//    by a counter its first kernel stores; eager, and as one CUDA graph per pinned slot;
//  - libtorch C++ (engine_step_torch.hpp): 1 copy + 19 ATen ops, eager and as a CUDA graph per slot;
//  - rows that enqueue nothing: ferry's step built and cancelled, and the write floor (the step's
//    bytes memcpy'd into a ring of pinned slots: what any row writes at least).
// Every row that runs the step is checked against engine_workload.hpp's host reference before
// timing (with the stand-in sampler rewriting `sampled` between steps, some queued behind a held
// stream) and after; a mismatch fails the run (rc 1). Then the device gap from the step's last
// write to the model's first kernel (%globaltimer, mean over bursts queued behind a gate): after
// ferry launch::kernel, plain and with programmatic dependent launch (PDL); after ferry's child node
// in the engine's graph, with a full edge and a programmatic one (CUDA's answer recorded); after
// the floor's kernel, which triggers its dependents at its start, plain and with PDL. Then the
// scaling curves (rows "scaling": ferry launch::graph, the floor, the peers as graphs and, on the
// requests axis, the write floor) over requests per step 1-4096, block-table width 64-16384,
// uploaded arrays 7-35 and 1-4 KV-cache groups.
// Host time: bursts of --burst steps (256; scaling: a quarter), the stream drained between bursts,
// median of --bursts (40; scaling: a quarter, at least 5) interleaved rounds (support/bench.hpp;
// --aa: every row beside its twin). Device time: a burst queued behind a gate (support/gpu.cuh).
// Untimed passes at the default shape: ferry's rows inside ferry::sync_guard, and every row's CUDA
// runtime calls per step (support/runtime_calls.hpp).
#include <engine_step/engine_workload.hpp>

#include <ferry/ferry.cuh>

#include <support/fence.hpp>
#include <support/gpu.cuh>
#include <support/guarded_steps.hpp>
#include <support/runtime_calls.hpp>
#if FERRY_BENCH_LIBTORCH
#include <engine_step/engine_step_torch.hpp>
#include <support/libtorch_peer.hpp>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

using B = ferry::backend::cuda;
using namespace engine_step;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- ferry's epilogue (outside the anonymous namespace: the step kernel instantiated over it keeps
// ferry's hidden visibility, which needs external linkage) ----------------------------------------

namespace engine_step {

/// The epilogue (vLLM's prepare_pos_seq_lens, compute_slot_mappings and post_update, fused): runs
/// once the step's uploads, gather and block-table writes have landed. `end_ns` (the gap probe
/// only): the time its last thread is done.
struct derive_inputs {
  ferry::step_ref<std::int32_t> req, accepted, prefill;
  bool has_prefill;
  unsigned groups;
  std::size_t batch, width, table_stride;  // table g at tables + g * table_stride
  std::int32_t* num_computed;
  const std::int32_t* tables;
  std::int64_t *positions, *slot_mapping;  // slot mapping g at slot_mapping + g * batch
  std::int32_t* seq_lens;
  unsigned long long* end_ns;

  FERRY_HOST_DEVICE void operator()(const ferry::step_context& c) const {
    const auto rq = c.view(req);
    const auto acc = c.view(accepted);
    const auto pf = has_prefill ? c.view(prefill) : ferry::device_span<std::int32_t>{};
    for (std::size_t i = c.rank(); i < rq.size(); i += c.threads()) {
      const auto r = static_cast<std::size_t>(rq[i]);
      const std::int32_t pos = i < pf.size() ? pf[i] : num_computed[r];
      positions[i] = pos;
      seq_lens[i] = pos + 1;
      for (unsigned g = 0; g < groups; ++g)
        slot_mapping[g * batch + i] =
            static_cast<std::int64_t>(tables[g * table_stride + r * width + static_cast<std::size_t>(pos) / block_size]) *
                static_cast<std::int64_t>(block_size) + pos % static_cast<std::int32_t>(block_size);
      num_computed[r] = pos + acc[i];
    }
#if defined(__CUDA_ARCH__)
    if (end_ns != nullptr) {
      c.sync();
      if (c.rank() == 0) *end_ns = global_ns();
    }
#endif
  }
};

}  // namespace engine_step

namespace {

using ferry_bench::nan;

// ---- the step's bytes, each row's device state, the check ------------------------------------------

/// Byte offsets of a step's host data in a pinned slot (the floor, vLLM's operations, the write
/// floor) and in a row's device input region (every row but libtorch's): per-row arrays, the
/// block-table writes, the step's number, query_start_loc (vLLM's operations only).
struct layout {
  std::size_t req, gather, tokens, accepted, prefill, top_k, temperature, top_p, extra, seed, admit_req, admit_ids,
      append_req, append_col, append_ids, appends, seq, qsl, bytes;
  layout() = default;
  explicit layout(const shape& sh) {
    std::size_t at = 0;
    auto part = [&](std::size_t n, std::size_t size) {
      at = (at + 7) / 8 * 8;
      const std::size_t o = at;
      at += n * size;
      return o;
    };
    const std::size_t Bn = sh.batch, A = sh.admitted(), D = sh.decode_rows();
    req = part(Bn, 4), gather = part(Bn, 4), tokens = part(Bn, 4), accepted = part(Bn, 4), prefill = part(A, 4);
    top_k = part(Bn, 4), temperature = part(Bn, 4), top_p = part(Bn, 4), extra = part(sh.extra * Bn, 4), seed = part(Bn, 8);
    admit_req = part(A, 4), admit_ids = part(sh.groups * A * sh.admitted_blocks(), 4), append_req = part(D, 4);
    append_col = part(D, 4), append_ids = part(sh.groups * D, 4), appends = part(1, 4), seq = part(1, 8);
    qsl = part(Bn + 1, 4), bytes = (at + 255) / 256 * 256;
  }
};

/// The step's data into the slot at `p` (all but query_start_loc): what the floor and vLLM's
/// operations write each step, and all that the write floor does.
void write_slot(std::byte* p, const layout& L, const shape& sh, const step_data& d, std::uint64_t seq) {
  auto put = [&](std::size_t off, const auto* v, std::size_t n) {
    if (n != 0) std::memcpy(p + off, v, n * sizeof(*v));
  };
  const std::size_t Bn = sh.batch, A = sh.admitted(), D = sh.decode_rows();
  put(L.req, d.req.data(), Bn), put(L.gather, d.gather.data(), Bn), put(L.tokens, d.host_tokens.data(), Bn);
  put(L.accepted, d.accepted.data(), Bn), put(L.prefill, d.prefill.data(), A), put(L.top_k, d.top_k.data(), Bn);
  put(L.temperature, d.temperature.data(), Bn), put(L.top_p, d.top_p.data(), Bn), put(L.extra, d.extra.data(), d.extra.size());
  put(L.seed, d.seed.data(), Bn), put(L.admit_req, d.admit_req.data(), A), put(L.admit_ids, d.admit_ids.data(), d.admit_ids.size());
  put(L.append_req, d.append_req.data(), d.appends), put(L.append_col, d.append_col.data(), d.appends);
  for (std::size_t g = 0; g < sh.groups; ++g) put(L.append_ids + g * D * 4, d.append_ids.data() + g * D, d.appends);
  const auto n = static_cast<std::uint32_t>(d.appends);
  put(L.appends, &n, 1), put(L.seq, &seq, 1);
}

/// The stand-in sampler: sampled[r] = sampled_next(sampled[r], s, r) (engine_workload.hpp).
__global__ void sampler_kernel(std::int32_t* sampled, std::size_t requests, std::uint64_t s) {
  const std::size_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < requests)
    sampled[r] = static_cast<std::int32_t>((static_cast<std::int64_t>(sampled[r]) * 31 +
                                            static_cast<std::int64_t>(s % vocab) + static_cast<std::int64_t>(r)) % vocab);
}

/// A row's device state, outputs and input region (every row but libtorch's, which has its own).
struct engine_buffers {
  shape sh;
  layout L;
  ferry::device_buffer<std::int32_t, B> num_computed, sampled, tables, input_ids, seq_lens;
  ferry::device_buffer<std::int64_t, B> positions, slot_mapping;
  ferry::device_buffer<std::uint8_t, B> in;  // the step's inputs, as `L` places them

  explicit engine_buffers(const shape& s)
      : sh(s), L(s), num_computed(s.requests()), sampled(s.requests()), tables(s.groups * s.requests() * s.width),
        input_ids(s.batch), seq_lens(s.batch), positions(s.batch), slot_mapping(s.groups * s.batch), in(L.bytes) {
    std::vector<std::int32_t> nc(s.requests()), tab(tables.size()), smp(s.requests());
    scheduler::initial_state(s, nc.data(), tab.data(), smp.data());
    BENCH_CUDA(cudaMemcpy(num_computed.data(), nc.data(), nc.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(tables.data(), tab.data(), tab.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(sampled.data(), smp.data(), smp.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemset(in.data(), 0, L.bytes));
  }
  template <class T>
  T* at(std::size_t off) const {
    return reinterpret_cast<T*>(in.data() + off);
  }
  [[nodiscard]] device_arrays arrays() const {
    device_arrays a;
    a.num_computed = num_computed.data(), a.sampled = sampled.data(), a.input_ids = input_ids.data();
    a.seq_lens = seq_lens.data(), a.positions = positions.data();
    a.req = at<std::int32_t>(L.req), a.accepted = at<std::int32_t>(L.accepted), a.top_k = at<std::int32_t>(L.top_k);
    a.temperature = at<float>(L.temperature), a.top_p = at<float>(L.top_p), a.extra = at<float>(L.extra);
    a.seed = at<std::int64_t>(L.seed);
    for (std::size_t g = 0; g < sh.groups; ++g) {
      a.table[g] = tables.data() + g * sh.requests() * sh.width;
      a.slot_mapping[g] = slot_mapping.data() + g * sh.batch;
    }
    return a;
  }
};

/// Pinned, mapped memory of `n` bytes (zeroed), its device address beside.
struct mapped {
  ferry::pinned_buffer<std::uint8_t, B> buf;
  explicit mapped(std::size_t n) : buf(n) {}
  [[nodiscard]] std::byte* host() const { return reinterpret_cast<std::byte*>(buf.host().data()); }
  [[nodiscard]] std::byte* dev() const { return reinterpret_cast<std::byte*>(buf.device().data()); }
};

// ---- ferry: the step as one step_batch with a fused epilogue --------------------------------------

template <class Launch>
class ferry_engine {
  using epilogue = ferry::epilogue::functor<derive_inputs>;
  using batch_type = std::conditional_t<Launch::replays_graph, ferry::step_batch<B, Launch, ferry::presets::graph_safe, epilogue>,
                                        ferry::step_batch<B, Launch, epilogue>>;
  template <class T>
  auto upload(std::size_t off, std::size_t n) {
    return batch_.add_upload(ferry::device_span<T>(buf_.template at<T>(off), n), n);
  }

 public:
  ferry_engine(const shape& sh, std::size_t max_in_flight, unsigned long long* end_ns = nullptr)
      : buf_(sh), batch_(2, max_in_flight + 2) {
    const layout& L = buf_.L;
    const std::size_t Bn = sh.batch, R = sh.requests();
    req_ = upload<std::int32_t>(L.req, Bn), accepted_ = upload<std::int32_t>(L.accepted, Bn);
    if (sh.admitted() > 0) prefill_ = upload<std::int32_t>(L.prefill, sh.admitted());
    temperature_ = upload<float>(L.temperature, Bn), top_p_ = upload<float>(L.top_p, Bn);
    top_k_ = upload<std::int32_t>(L.top_k, Bn), seed_ = upload<std::int64_t>(L.seed, Bn);
    for (std::size_t j = 0; j < sh.extra; ++j) extra_.push_back(upload<float>(L.extra + j * Bn * 4, Bn));
    tokens_ = batch_.add_gather(buf_.input_ids.span(), ferry::device_span<const std::int32_t>(buf_.sampled.span()), Bn);
    for (std::size_t g = 0; g < sh.groups; ++g)
      table_.push_back(batch_.add_writes(ferry::staged_view<std::int32_t>(buf_.tables.data() + g * R * sh.width, R, sh.width),
                                         sh.max_writes(), sh.max_write_elements()));
    batch_.set_epilogue(derive_inputs{req_.ref(), accepted_.ref(), sh.admitted() > 0 ? prefill_.ref() : ferry::step_ref<std::int32_t>{},
                                      sh.admitted() > 0, static_cast<unsigned>(sh.groups), Bn, sh.width, R * sh.width,
                                      buf_.num_computed.data(), buf_.tables.data(), buf_.positions.data(),
                                      buf_.slot_mapping.data(), buf_.seq_lens.data(), end_ns});
    batch_.reserve();
  }

  /// One step: the decided data into the batch's slot, one submit.
  void run(const step_data& d, ferry::stream_ref<B> s) {
    fill(d);
    batch_.submit(s);
  }
  /// One step replayed in the engine's own graph: `launch(step_graph)` (submit_with).
  template <class Launch2>
  void run_with(const step_data& d, ferry::stream_ref<B> s, Launch2&& launch) {
    fill(d);
    batch_.submit_with(s, launch);
  }
  /// launch::capture: the step kernel recorded into the capture on `s` (once, before the first step).
  void record(ferry::stream_ref<B> s) { batch_.record(s); }
  /// launch::capture: one step committed (no CUDA call); the engine's next replay runs it.
  void commit(const step_data& d) {
    fill(d);
    batch_.commit();
  }
  /// The ablation: the step built as run() builds it, then dropped (nothing enqueued).
  void build_only(const step_data& d) {
    fill(d);
    batch_.cancel();
  }
  [[nodiscard]] device_arrays arrays() const { return buf_.arrays(); }
  [[nodiscard]] const engine_buffers& buf() const { return buf_; }
  [[nodiscard]] std::size_t slots() const noexcept { return batch_.slots(); }

 private:
  void fill(const step_data& d) {
    const shape& sh = buf_.sh;
    const std::size_t Bn = sh.batch, A = sh.admitted(), ab = sh.admitted_blocks(), D = sh.decode_rows();
    batch_.begin();
    auto put = [](auto& h, const auto* v, std::size_t n) { std::memcpy(h.span(n).data(), v, n * sizeof(*v)); };
    put(req_, d.req.data(), Bn), put(accepted_, d.accepted.data(), Bn), put(temperature_, d.temperature.data(), Bn);
    put(top_p_, d.top_p.data(), Bn), put(top_k_, d.top_k.data(), Bn), put(seed_, d.seed.data(), Bn);
    if (A > 0) put(prefill_, d.prefill.data(), A);
    for (std::size_t j = 0; j < extra_.size(); ++j) put(extra_[j], d.extra.data() + j * Bn, Bn);
    std::memcpy(tokens_.indices(Bn).data(), d.gather.data(), Bn * 4);
    std::memcpy(tokens_.host_values().data(), d.host_tokens.data(), Bn * 4);
    for (std::size_t g = 0; g < table_.size(); ++g) {
      for (std::size_t k = 0; k < A; ++k)
        table_[g].stage_write(static_cast<std::size_t>(d.admit_req[k]), 0,
                              std::span<const std::int32_t>(d.admit_ids.data() + (g * A + k) * ab, ab));
      for (std::size_t n = 0; n < d.appends; ++n)
        table_[g].stage_write(static_cast<std::size_t>(d.append_req[n]), static_cast<std::size_t>(d.append_col[n]),
                              {d.append_ids[g * D + n]});
    }
  }

  engine_buffers buf_;  // first: outlives the batch, whose destructor waits for its kernels
  batch_type batch_;
  typename batch_type::template upload<std::int32_t> req_, accepted_, prefill_, top_k_;
  typename batch_type::template upload<float> temperature_, top_p_;
  typename batch_type::template upload<std::int64_t> seed_;
  std::vector<typename batch_type::template upload<float>> extra_;
  typename batch_type::template gather<std::int32_t> tokens_;
  std::vector<typename batch_type::template writes<std::int32_t>> table_;
};

// ---- the block-table writes, for the floor and vLLM's operations --------------------------------------

/// Where a step's block-table writes land: `tables` (group g at g * requests * width) and, for
/// vLLM's operations, num_blocks (group g at g * requests).
struct table_args {
  std::int32_t* tables;
  std::int32_t* nblocks;
  std::size_t requests, width;
  unsigned admitted, admitted_blocks, groups, decode_rows;
  [[nodiscard]] __host__ __device__ unsigned blocks() const { return admitted * groups + groups; }
  static table_args of(engine_buffers& b, std::int32_t* nblocks) {
    const shape& s = b.sh;
    return {b.tables.data(), nblocks, s.requests(), s.width, static_cast<unsigned>(s.admitted()),
            static_cast<unsigned>(s.admitted_blocks()), static_cast<unsigned>(s.groups), static_cast<unsigned>(s.decode_rows())};
  }
};

/// Block b (< t.blocks()) of the writes in the step's bytes at `s`: admission b % A of group b / A
/// (its whole block list), or, for the last `groups` blocks, every append of one group.
__device__ void apply_writes(unsigned b, const std::byte* s, const layout& L, const table_args& t) {
  const unsigned A = t.admitted, ab = t.admitted_blocks;
  auto in = [&](std::size_t off) { return reinterpret_cast<const std::int32_t*>(s + off); };
  if (b < A * t.groups) {
    const unsigned k = b % A, g = b / A;
    const auto r = static_cast<std::size_t>(in(L.admit_req)[k]);
    std::int32_t* row = t.tables + (g * t.requests + r) * t.width;
    for (unsigned j = threadIdx.x; j < ab; j += blockDim.x) row[j] = in(L.admit_ids)[(g * A + k) * ab + j];
    if (t.nblocks != nullptr && threadIdx.x == 0) t.nblocks[g * t.requests + r] = static_cast<std::int32_t>(ab);
    return;
  }
  const unsigned g = b - A * t.groups, n = *reinterpret_cast<const std::uint32_t*>(s + L.appends);
  for (unsigned a = threadIdx.x; a < n; a += blockDim.x) {
    const auto r = static_cast<std::size_t>(in(L.append_req)[a]);
    const std::int32_t col = in(L.append_col)[a];
    t.tables[(g * t.requests + r) * t.width + static_cast<std::size_t>(col)] = in(L.append_ids)[g * t.decode_rows + a];
    if (t.nblocks != nullptr) t.nblocks[g * t.requests + r] = col + 1;
  }
}

constexpr unsigned threads = 256;
__host__ __device__ unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + threads - 1) / threads); }

// ---- the floor ------------------------------------------------------------------------------------

/// The floor kernel's arguments: the same for every step.
struct floor_args {
  const std::byte* slots;        // mapped: slot k at slots + k * L.bytes
  const std::uint32_t* slot_of;  // mapped: the slot of step n at n % ring
  unsigned long long* step;      // device: the steps run so far
  unsigned ring;
  layout L;
  table_args t;
  unsigned batch, extra;
  std::byte* in;  // the row's input region
  std::int32_t *num_computed, *input_ids, *seq_lens;
  const std::int32_t* sampled;
  std::int64_t *positions, *slot_mapping;
  unsigned* blocks_done;
  unsigned long long* counter;  // mapped: the last finished step's number + 1
  unsigned long long* end_ns;   // the gap probe (null: none)
  bool trigger;                 // let a dependent (PDL) launch at once
};

/// The whole step in one kernel (see the file comment): the writes' blocks, then blocks of rows
/// (the gather and the uploads into the input region); the last block to finish derives. Plain
/// loads of the slot: a launch orders them after the host's writes (`__ldcv` loads of mapped host
/// memory made such a kernel take ~200 µs of device time on the H200: docs/design.md).
__global__ void __launch_bounds__(threads) floor_step_kernel(const floor_args a) {
#if __CUDA_ARCH__ >= 900
  if (a.trigger) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  __shared__ unsigned k;
  __shared__ bool last;
  if (threadIdx.x == 0) k = a.slot_of[*reinterpret_cast<volatile unsigned long long*>(a.step) % a.ring];
  __syncthreads();
  const layout& L = a.L;
  const std::byte* s = a.slots + std::size_t{k} * L.bytes;
  auto in32 = [&](std::size_t off) { return reinterpret_cast<const std::int32_t*>(s + off); };
  auto out = [&](std::size_t off) { return reinterpret_cast<std::int32_t*>(a.in + off); };
  const unsigned nw = a.t.blocks(), A = a.t.admitted;
  if (blockIdx.x < nw) {
    apply_writes(blockIdx.x, s, L, a.t);
  } else if (const unsigned i = (blockIdx.x - nw) * blockDim.x + threadIdx.x; i < a.batch) {
    const std::int32_t g = in32(L.gather)[i];
    a.input_ids[i] = g == from_host ? in32(L.tokens)[i] : a.sampled[g];
    for (const std::size_t off : {L.req, L.accepted, L.top_k, L.temperature, L.top_p}) out(off)[i] = in32(off)[i];
    reinterpret_cast<std::int64_t*>(a.in + L.seed)[i] = reinterpret_cast<const std::int64_t*>(s + L.seed)[i];
    for (unsigned j = 0; j < a.extra; ++j) out(L.extra)[j * a.batch + i] = in32(L.extra)[j * a.batch + i];
    if (i < A) out(L.prefill)[i] = in32(L.prefill)[i];
  }
  __threadfence();  // this thread's writes, before the block's arrival
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last block: the derivation, reading the tables the other blocks wrote and the state the
  // previous step's last block wrote from L2 (__ldcg: never a stale L1 line).
  const table_args& t = a.t;
  for (unsigned i = threadIdx.x; i < a.batch; i += blockDim.x) {
    const auto r = static_cast<std::size_t>(in32(L.req)[i]);
    const std::int32_t pos = i < A ? in32(L.prefill)[i] : __ldcg(a.num_computed + r);
    a.positions[i] = pos;
    a.seq_lens[i] = pos + 1;
    for (unsigned g = 0; g < t.groups; ++g)
      a.slot_mapping[g * a.batch + i] =
          static_cast<std::int64_t>(__ldcg(t.tables + (g * t.requests + r) * t.width + static_cast<std::size_t>(pos) / block_size)) *
              static_cast<std::int64_t>(block_size) + pos % static_cast<std::int32_t>(block_size);
    a.num_computed[r] = pos + in32(L.accepted)[i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (a.end_ns != nullptr) *a.end_ns = global_ns();
    *a.blocks_done = 0;
    __threadfence_system();
    *reinterpret_cast<volatile unsigned long long*>(a.counter) = *reinterpret_cast<const std::uint64_t*>(s + L.seq);
    *a.step += 1;  // the next step's kernel runs after this one (stream order)
  }
}

/// The floor (see the file comment): its slots, counter, ring and one graph executable.
class floor_engine {
 public:
  floor_engine(const shape& sh, cudaStream_t s, unsigned max_slots, bool graph, unsigned long long* end_ns = nullptr)
      : buf_(sh), s_(s), graph_launch_(graph), max_(std::max(max_slots, 4u)), slots_(std::size_t{max_} * buf_.L.bytes),
        marks_(256 + std::size_t{max_} * 4), ring_(reinterpret_cast<volatile std::uint64_t*>(marks_.host()), 4, max_) {
    BENCH_CUDA(cudaMalloc(&blocks_done_, sizeof(unsigned)));
    BENCH_CUDA(cudaMemset(blocks_done_, 0, sizeof(unsigned)));
    BENCH_CUDA(cudaMalloc(&step_, sizeof(unsigned long long)));
    BENCH_CUDA(cudaMemset(step_, 0, sizeof(unsigned long long)));
    engine_buffers& b = buf_;
    args_ = floor_args{slots_.dev(), reinterpret_cast<const std::uint32_t*>(marks_.dev() + 256), step_, max_, b.L,
                       table_args::of(b, nullptr),
                       static_cast<unsigned>(sh.batch), static_cast<unsigned>(sh.extra), b.at<std::byte>(0), b.num_computed.data(),
                       b.input_ids.data(), b.seq_lens.data(), b.sampled.data(), b.positions.data(), b.slot_mapping.data(),
                       blocks_done_, reinterpret_cast<unsigned long long*>(marks_.dev()), end_ns, end_ns != nullptr};
    grid_ = args_.t.blocks() + blocks_for(sh.batch);
    BENCH_CUDA(cudaGraphCreate(&graph_, 0));
    cudaGraphNode_t node = nullptr;
    cudaKernelNodeParams p = node_params();
    BENCH_CUDA(cudaGraphAddKernelNode(&node, graph_, nullptr, 0, &p));
    BENCH_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
    BENCH_CUDA(cudaGraphUpload(exec_, s_));
  }
  floor_engine(const floor_engine&) = delete;
  floor_engine& operator=(const floor_engine&) = delete;
  ~floor_engine() {
    cudaStreamSynchronize(s_);
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    cudaFree(blocks_done_);
    cudaFree(step_);
  }

  /// One step: a free slot (the cached counter first), the step's bytes into it, the ring entry
  /// of the step, one cudaGraphLaunch (or one cudaLaunchKernel).
  void run(const step_data& d) {
    const std::uint64_t seq = ++submitted_;  // the step's number + 1
    const unsigned k = ring_.next(seq);
    write_slot(slots_.host() + std::size_t{k} * buf_.L.bytes, buf_.L, buf_.sh, d, seq);
    reinterpret_cast<std::uint32_t*>(marks_.host() + 256)[(seq - 1) % max_] = k;  // the kernel of step seq - 1 reads it
    if (graph_launch_) {
      BENCH_CUDA(cudaGraphLaunch(exec_, s_));
    } else {
      void* params[] = {&args_};
      BENCH_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&floor_step_kernel), dim3(grid_), dim3(threads), params, 0, s_));
    }
  }
  [[nodiscard]] device_arrays arrays() const { return buf_.arrays(); }
  [[nodiscard]] std::size_t slots() const noexcept { return ring_.active(); }
  /// "" when the device's step counter equals the steps submitted (after the stream drained).
  [[nodiscard]] std::string counter_check() const {
    unsigned long long n = 0;
    BENCH_CUDA(cudaMemcpy(&n, step_, sizeof n, cudaMemcpyDeviceToHost));
    return n == submitted_ ? "" : "the device's step counter lags the steps submitted";
  }

 private:
  cudaKernelNodeParams node_params() {
    cudaKernelNodeParams p{};
    params_[0] = &args_;
    p.func = reinterpret_cast<void*>(&floor_step_kernel);
    p.gridDim = dim3(grid_);
    p.blockDim = dim3(threads);
    p.kernelParams = params_;
    return p;
  }
  engine_buffers buf_;
  cudaStream_t s_;
  bool graph_launch_;
  unsigned max_;
  mapped slots_, marks_;  // marks_: the counter, then (at 256) the ring of the slot of each step
  ferry_bench::counter_ring ring_;
  floor_args args_{};
  void* params_[1]{};
  unsigned grid_ = 0;
  unsigned* blocks_done_ = nullptr;
  unsigned long long* step_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::uint64_t submitted_ = 0;
};

/// The write floor: the step's bytes memcpy'd into a ring of pinned slots, nothing enqueued.
class write_floor {
 public:
  write_floor(const shape& sh, unsigned slots) : sh_(sh), L_(sh), n_(slots), slots_(std::size_t{slots} * L_.bytes) {}
  void run(const step_data& d) {
    const std::size_t k = i_++ % n_;
    write_slot(slots_.host() + k * L_.bytes, L_, sh_, d, i_);
  }

 private:
  shape sh_;
  layout L_;
  std::size_t n_, i_ = 0;
  mapped slots_;
};

// ---- vLLM's operations ----------------------------------------------------------------------------

struct vllm_args {
  const std::byte* in;  // upload 1's destination: the step's bytes (layout L)
  layout L;
  table_args t;
  const std::int32_t* qsl;  // upload 2's destination: query_start_loc[batch + 1]
  unsigned batch;
  std::int32_t *cu_num_logits, *expanded_local_pos, *input_ids, *seq_lens, *num_computed, *input_block_tables;
  const std::int32_t* sampled;
  std::int64_t *positions, *slot_mapping, *logits_indices;
  unsigned long long* counter;  // mapped: the step's number + 1 once its uploads are done
  [[nodiscard]] __device__ const std::int32_t* i32(std::size_t off) const { return reinterpret_cast<const std::int32_t*>(in + off); }
};

__device__ unsigned row_index() { return blockIdx.x * blockDim.x + threadIdx.x; }

/// cu_num_logits = arange(batch + 1); its first thread stores the step's number: the uploads that
/// read the slot are done.
__global__ void vllm_arange(const vllm_args a) {
  const unsigned i = row_index();
  if (i <= a.batch) a.cu_num_logits[i] = static_cast<std::int32_t>(i);
  if (i == 0) *reinterpret_cast<volatile unsigned long long*>(a.counter) = *reinterpret_cast<const std::uint64_t*>(a.in + a.L.seq);
}

/// expanded_local_pos = zeros(batch); the blocks after those apply the step's block-table writes.
__global__ void vllm_zeros_and_writes(const vllm_args a) {
  const unsigned rows = blocks_for(a.batch);
  if (blockIdx.x >= rows) return apply_writes(blockIdx.x - rows, a.in, a.L, a.t);
  if (const unsigned i = row_index(); i < a.batch) a.expanded_local_pos[i] = 0;
}

/// prepare_pos_seq_lens (and post_update's num_computed).
__global__ void vllm_prepare_pos_seq_lens(const vllm_args a) {
  const unsigned i = row_index();
  if (i >= a.batch) return;
  const auto r = static_cast<std::size_t>(a.i32(a.L.req)[i]);
  const std::int32_t pos = i < a.t.admitted ? a.i32(a.L.prefill)[i] : a.num_computed[r];
  a.positions[i] = pos;
  a.seq_lens[i] = pos + a.qsl[i + 1] - a.qsl[i];
  a.num_computed[r] = pos + a.i32(a.L.accepted)[i];
}

/// combine_sampled_and_draft_tokens: input_ids and logits_indices.
__global__ void vllm_combine_sampled(const vllm_args a) {
  const unsigned i = row_index();
  if (i >= a.batch) return;
  const std::int32_t g = a.i32(a.L.gather)[i];
  a.input_ids[i] = g == from_host ? a.i32(a.L.tokens)[i] : a.sampled[g];
  a.logits_indices[i] = a.qsl[i + 1] - 1;
}

/// gather_block_tables: block (i, g) copies request req[i]'s block ids of group g.
__global__ void vllm_gather_block_tables(const vllm_args a) {
  const unsigned i = blockIdx.x, g = blockIdx.y;
  const auto r = static_cast<std::size_t>(a.i32(a.L.req)[i]);
  const std::int32_t* src = a.t.tables + (g * a.t.requests + r) * a.t.width;
  std::int32_t* dst = a.input_block_tables + (std::size_t{g} * a.batch + i) * a.t.width;
  const auto n = static_cast<unsigned>(a.t.nblocks[g * a.t.requests + r]);
  for (unsigned j = threadIdx.x; j < n; j += blockDim.x) dst[j] = src[j];
}

/// compute_slot_mappings: blocks (rows, g).
__global__ void vllm_slot_mappings(const vllm_args a) {
  const unsigned i = row_index(), g = blockIdx.y;
  if (i >= a.batch) return;
  const auto r = static_cast<std::size_t>(a.i32(a.L.req)[i]);
  const std::int64_t pos = a.positions[i];
  const std::int32_t* row = a.t.tables + (g * a.t.requests + r) * a.t.width;
  a.slot_mapping[g * a.batch + i] = static_cast<std::int64_t>(row[pos / static_cast<std::int64_t>(block_size)]) *
                                        static_cast<std::int64_t>(block_size) + pos % static_cast<std::int64_t>(block_size);
}

/// vLLM's operations (see the file comment), eager or one graph per slot.
class vllm_engine {
 public:
  vllm_engine(const shape& sh, cudaStream_t s, unsigned max_slots, bool graphs)
      : buf_(sh), s_(s), graphs_(graphs), max_(std::max(max_slots, 4u)), slots_(std::size_t{max_} * buf_.L.bytes),
        counter_(256), ring_(reinterpret_cast<volatile std::uint64_t*>(counter_.host()), 4, max_), qsl_(sh.batch + 1),
        cu_(sh.batch + 1), elp_(sh.batch), logits_(sh.batch), nblocks_(sh.groups * sh.requests()),
        ibt_(sh.groups * sh.batch * sh.width) {
    std::vector<std::int32_t> nb(nblocks_.size(), static_cast<std::int32_t>(sh.admitted_blocks()));
    BENCH_CUDA(cudaMemcpy(nblocks_.data(), nb.data(), nb.size() * 4, cudaMemcpyHostToDevice));
    engine_buffers& b = buf_;
    a_ = vllm_args{b.at<const std::byte>(0), b.L,
                   table_args::of(b, nblocks_.data()),
                   qsl_.data(), static_cast<unsigned>(sh.batch), cu_.data(), elp_.data(), b.input_ids.data(), b.seq_lens.data(),
                   b.num_computed.data(), ibt_.data(), b.sampled.data(), b.positions.data(), b.slot_mapping.data(),
                   logits_.data(), reinterpret_cast<unsigned long long*>(counter_.dev())};
    if (graphs_) {
      cudaStream_t cap = nullptr;
      BENCH_CUDA(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
      for (unsigned k = 0; k < max_; ++k) {
        cudaGraph_t g = nullptr;
        BENCH_CUDA(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
        issue(k, cap);
        BENCH_CUDA(cudaStreamEndCapture(cap, &g));
        BENCH_CUDA(cudaGraphInstantiate(&exec_.emplace_back(), g, 0));
        BENCH_CUDA(cudaGraphDestroy(g));
      }
      BENCH_CUDA(cudaStreamDestroy(cap));
    }
  }
  vllm_engine(const vllm_engine&) = delete;
  vllm_engine& operator=(const vllm_engine&) = delete;
  ~vllm_engine() {
    cudaStreamSynchronize(s_);
    for (auto e : exec_) cudaGraphExecDestroy(e);
  }

  /// One step: a free slot, the step's bytes and query_start_loc (the cumulative sum of one token
  /// a row) into it, then its 2 uploads and 6 kernels (or that slot's graph).
  void run(const step_data& d) {
    const std::uint64_t seq = ++submitted_;
    const unsigned k = ring_.next(seq);
    std::byte* p = slot(k);
    write_slot(p, buf_.L, buf_.sh, d, seq);
    auto* qsl = reinterpret_cast<std::int32_t*>(p + buf_.L.qsl);
    for (std::size_t i = 0; i <= buf_.sh.batch; ++i) qsl[i] = static_cast<std::int32_t>(i);
    if (graphs_) BENCH_CUDA(cudaGraphLaunch(exec_[k], s_));
    else issue(k, s_);
  }
  [[nodiscard]] device_arrays arrays() const { return buf_.arrays(); }
  [[nodiscard]] std::size_t slots() const noexcept { return ring_.active(); }

 private:
  std::byte* slot(unsigned k) const { return slots_.host() + std::size_t{k} * buf_.L.bytes; }
  void issue(unsigned k, cudaStream_t s) {
    const layout& L = buf_.L;
    const unsigned Bn = a_.batch, G = a_.t.groups, rows = blocks_for(Bn);
    BENCH_CUDA(cudaMemcpyAsync(buf_.in.data(), slot(k), L.qsl, cudaMemcpyHostToDevice, s));  // idx_mapping and the rest
    BENCH_CUDA(cudaMemcpyAsync(qsl_.data(), slot(k) + L.qsl, (Bn + 1) * 4, cudaMemcpyHostToDevice, s));  // query_start_loc
    vllm_arange<<<blocks_for(Bn + 1), threads, 0, s>>>(a_);
    vllm_zeros_and_writes<<<rows + a_.t.blocks(), threads, 0, s>>>(a_);
    vllm_prepare_pos_seq_lens<<<rows, threads, 0, s>>>(a_);
    vllm_combine_sampled<<<rows, threads, 0, s>>>(a_);
    vllm_gather_block_tables<<<dim3(Bn, G), threads, 0, s>>>(a_);
    vllm_slot_mappings<<<dim3(rows, G), threads, 0, s>>>(a_);
    BENCH_CUDA(cudaPeekAtLastError());
  }
  engine_buffers buf_;
  cudaStream_t s_;
  bool graphs_;
  unsigned max_;
  mapped slots_, counter_;
  ferry_bench::counter_ring ring_;
  ferry::device_buffer<std::int32_t, B> qsl_, cu_, elp_;
  ferry::device_buffer<std::int64_t, B> logits_;
  ferry::device_buffer<std::int32_t, B> nblocks_, ibt_;
  vllm_args a_{};
  std::vector<cudaGraphExec_t> exec_;
  std::uint64_t submitted_ = 0;
};

// ---- the engine's model and the gap probe ---------------------------------------------------------

/// Where the gap probe meets: the step's end (written by the step), the gaps summed by the model.
struct gap_probe {
  unsigned long long end_ns, sum_ns, count;
};

/// The model's first kernel (a stand-in): waits for its prerequisite grid where launched with PDL
/// (griddepcontrol.wait: a no-op otherwise), reads the step's positions, and with a probe adds the
/// gap since the step's end.
__global__ void model_kernel(const std::int64_t* positions, std::int64_t* sink, gap_probe* p) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (threadIdx.x != 0) return;
  const unsigned long long t = global_ns();
  if (p != nullptr) {
    const unsigned long long e = *reinterpret_cast<volatile unsigned long long*>(&p->end_ns);
    if (e != 0 && t > e) p->sum_ns += t - e, p->count += 1;
    p->end_ns = 0;
  }
  *sink = positions[0];
}

/// An executable of the engine's graph: [the step graph as a child node, when given] -> the model's
/// first kernel (with `programmatic`, over a programmatic edge: CUDA's refusal is thrown).
cudaGraphExec_t engine_graph(cudaGraph_t step, const std::int64_t* positions, std::int64_t* sink, gap_probe* p,
                             bool programmatic = false) {
  cudaGraph_t g = nullptr;
  BENCH_CUDA(cudaGraphCreate(&g, 0));
  auto check = [&](cudaError_t r, const char* what) {
    if (r == cudaSuccess) return;
    (void)cudaGetLastError();  // the refusal is this row's answer: it must not fail a later row's cudaPeekAtLastError
    cudaGraphDestroy(g);
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(r));
  };
  cudaGraphNode_t child = nullptr, model = nullptr;
  if (step != nullptr) check(cudaGraphAddChildGraphNode(&child, g, nullptr, 0, step), "cudaGraphAddChildGraphNode");
  void* args[] = {&positions, &sink, &p};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(&model_kernel);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(32);
  kp.kernelParams = args;
  check(cudaGraphAddKernelNode(&model, g, nullptr, 0, &kp), "cudaGraphAddKernelNode");
  if (child != nullptr) {
    cudaGraphEdgeData e{};
    if (programmatic) e.from_port = cudaGraphKernelNodePortProgrammatic, e.type = cudaGraphDependencyTypeProgrammatic;
    check(cudaGraphAddDependencies(g, &child, &model, &e, 1), "cudaGraphAddDependencies");
  }
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  return exec;
}

/// The model's first kernel on `s` after the step: plainly, or with programmatic dependent launch.
void launch_model(cudaStream_t s, const std::int64_t* positions, std::int64_t* sink, gap_probe* p, bool pdl) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  BENCH_CUDA(cudaLaunchKernelEx(&cfg, model_kernel, positions, sink, p));
}

// ---- rows, checks, measurement --------------------------------------------------------------------

/// One way to run the step (a row of the table): its own scheduler decides each step (untimed),
/// `submit` runs it from the decided data (timed).
struct row {
  std::string label;
  shape sh;
  std::function<void(const step_data&)> submit;
  cudaStream_t stream = nullptr;
  std::function<device_arrays()> arrays{};  ///< where its state is (empty: it keeps none: not checked)
  std::function<std::string()> more_check{};
  std::function<double()> slots{};
  bool ferry = false, launches = true;
  std::size_t device_burst = 256;
  std::shared_ptr<void> owner;  ///< its engine
  std::unique_ptr<scheduler> sched;
  std::unique_ptr<step_data> data;
  std::unique_ptr<reference> ref;
  std::uint64_t steps = 0;
  double host = nan, twin = nan, device = nan;
  ferry_bench::guarded_counts guarded{};
  ferry_bench::calls_per_op calls{};

  void step() {
    sched->next(*data);
    submit(*data);
    ++steps;
  }
};

template <class E, class Submit>
row& add_row(std::deque<row>& rows, std::string label, const shape& sh, std::shared_ptr<E> e, cudaStream_t s, Submit submit) {
  row& r = rows.emplace_back();
  r.label = std::move(label);
  r.sh = sh;
  r.submit = [p = e.get(), submit](const step_data& d) { submit(*p, d); };
  r.stream = s;
  r.owner = std::move(e);
  r.sched = std::make_unique<scheduler>(sh);
  r.data = std::make_unique<step_data>(sh);
  r.ref = std::make_unique<reference>(sh);
  return r;
}

void drain(const row& r) { BENCH_CUDA(cudaStreamSynchronize(r.stream)); }

/// Drains the row's stream, replays its steps on the host and compares: "" when equal.
std::string check(row& r) {
  drain(r);
  while (r.ref->steps() < r.steps) r.ref->step();
  std::string bad = r.ref->compare(r.arrays(), [](void* dst, const void* src, std::size_t n) {
    BENCH_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
  });
  return bad.empty() && r.more_check ? r.more_check() : bad;
}

/// Before timing: `rounds` rounds of steps, the sampler rewriting `sampled` before some of them,
/// every 4th round 6 steps queued behind a 1 ms hold (slots in flight, rings past a fixed
/// rotation); the row is checked after each round. Rows that keep no state are left out.
void check_before_timing(row& r, int rounds) {
  for (int round = 0; r.arrays && round < rounds; ++round) {
    const int queued = round % 4 == 3 ? 6 : 1;
    if (queued > 1) ferry_bench::hold_stream(r.stream, 1);
    for (int q = 0; q < queued; ++q) {
      if ((round + q) % 3 != 1) {
        while (r.ref->steps() < r.steps) r.ref->step();
        const auto n = static_cast<std::uint64_t>(round * 8 + q);
        r.ref->sample(n);
        sampler_kernel<<<blocks_for(r.sh.requests()), threads, 0, r.stream>>>(r.arrays().sampled, r.sh.requests(), n);
        BENCH_CUDA(cudaPeekAtLastError());
      }
      r.step();
    }
    if (const std::string bad = check(r); !bad.empty())
      throw std::runtime_error(r.label + ": check before timing failed: " + bad);
  }
}

/// Warm-up: rings and pools reach their steady state, including a burst queued behind a held
/// stream (the most steps in flight).
void warm_up(std::deque<row>& rows, int burst) {
  for (int k = 0; k < 300; ++k)
    for (auto& r : rows) r.step();
  for (auto& r : rows) {
    drain(r);
    ferry_bench::hold_stream(r.stream, 40);
    for (int k = 0; k < burst; ++k) r.step();
    drain(r);
  }
}

/// Host and device time of every row, each in interleaved rounds.
void measure(std::deque<row>& rows, const ferry_bench::options& o) {
  std::vector<ferry_bench::timed_burst> host, device;
  std::vector<std::unique_ptr<ferry_bench::stream_gate>> gates;  // one per row: its stream
  for (auto& r : rows) {
    host.push_back([&r](std::size_t n) {  // the step from the decided data: the scheduler is not timed
      double us = 0;
      for (std::size_t k = 0; k < n; ++k, ++r.steps) {
        r.sched->next(*r.data);
        const auto t0 = std::chrono::steady_clock::now();
        r.submit(*r.data);
        us += ferry_bench::micros(t0, std::chrono::steady_clock::now());
      }
      return us / static_cast<double>(n);
    });
    gates.push_back(std::make_unique<ferry_bench::stream_gate>(r.stream));
    device.push_back(r.launches ? ferry_bench::device_burst(*gates.back(), [&r](std::size_t) { r.step(); },
                                                            std::min<std::size_t>(r.device_burst, o.burst))
                                : ferry_bench::timed_burst([](std::size_t) { return nan; }));
  }
  const auto h = ferry_bench::interleaved(o, host, [&] {
    for (const auto& r : rows) drain(r);  // the other rows' streams are idle: their drain returns at once
  });
  ferry_bench::options od = o;
  od.bursts = std::max(3, o.bursts / 4);
  const auto d = ferry_bench::interleaved(od, device, [] {}, 1);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i].host = h[i], rows[i].twin = h.twin[i], rows[i].device = d[i];
}

/// After timing: every step each row ran, against the host reference.
void check_after_timing(std::deque<row>& rows) {
  for (auto& r : rows)
    if (r.arrays)
      if (const std::string bad = check(r); !bad.empty()) throw std::runtime_error(r.label + ": check after timing failed: " + bad);
}

// ---- the rows of a shape ----------------------------------------------------------------------------

constexpr const char* label_graph = "ferry step_batch launch::graph";
constexpr const char* label_kernel = "ferry step_batch launch::kernel";
constexpr const char* label_floor = "floor: one graph executable for every slot, slot found on the device";
constexpr const char* label_floor_kernel = "floor: the same kernel launched by cudaLaunchKernel (kernel floor)";
constexpr const char* label_vllm = "vLLM's operations in C++: 2 uploads + 6 kernels, eager";
constexpr const char* label_vllm_graph = "vLLM's operations in C++: 2 uploads + 6 kernels, a CUDA graph per slot";
constexpr const char* label_libtorch = "libtorch C++: 1 copy + 19 ATen ops, eager (in process)";
constexpr const char* label_libtorch_graph = "libtorch C++: 1 copy + 19 ATen ops, a CUDA graph per slot (in process)";
constexpr const char* label_write_floor = "write floor: the step's bytes memcpy'd into a ring of pinned slots (no launch)";
constexpr const char* label_build = "ablation: ferry step built, not submitted (begin, handles, cancel)";
constexpr const char* label_alone = "the engine's graph replay alone (its model kernel, no step)";
constexpr const char* label_in_graph = "ferry launch::graph in the engine's graph (submit_with child node) + replay";
constexpr const char* label_capture = "ferry step recorded into the engine's capture (SPEC §12.4)";

/// The rows that run `sh`: `which` of ferry launch::graph / kernel, the floors, vLLM's operations
/// and libtorch (eager and graph), the write floor and the ablation; errors of an optional peer
/// (libtorch) go to `why`.
struct which_rows {
  bool kernel = false, eager_peers = false, ablation = false, write_floor = false;
};

void add_shape_rows(std::deque<row>& rows, const shape& sh, cudaStream_t cs, ferry::stream_ref<B> s, std::size_t in_flight,
                    which_rows w, std::string& why) {
  const auto slots = static_cast<unsigned>(in_flight + 2);  // as deep as ferry's rings may grow
  auto ferry_row = [&](const char* label, auto e) -> row& {
    row& r = add_row(rows, label, sh, e, cs, [s](auto& x, const step_data& d) { x.run(d, s); });
    r.ferry = true;
    r.arrays = [p = e.get()] { return p->arrays(); };
    r.slots = [p = e.get()] { return static_cast<double>(p->slots()); };
    return r;
  };
  ferry_row(label_graph, std::make_shared<ferry_engine<ferry::launch::graph>>(sh, in_flight));
  if (w.kernel) ferry_row(label_kernel, std::make_shared<ferry_engine<ferry::launch::kernel>>(sh, in_flight));
  auto counter_row = [&](const char* label, auto e) -> row& {
    row& r = add_row(rows, label, sh, e, cs, [](auto& x, const step_data& d) { x.run(d); });
    r.arrays = [p = e.get()] { return p->arrays(); };
    r.slots = [p = e.get()] { return static_cast<double>(p->slots()); };
    return r;
  };
  auto fl = std::make_shared<floor_engine>(sh, cs, slots, true);
  counter_row(label_floor, fl).more_check = [p = fl.get()] { return p->counter_check(); };
  if (w.kernel) {
    auto fk = std::make_shared<floor_engine>(sh, cs, slots, false);
    counter_row(label_floor_kernel, fk).more_check = [p = fk.get()] { return p->counter_check(); };
  }
  if (w.eager_peers) counter_row(label_vllm, std::make_shared<vllm_engine>(sh, cs, slots, false)).device_burst = 64;
  counter_row(label_vllm_graph, std::make_shared<vllm_engine>(sh, cs, slots, true)).device_burst = 64;
#if FERRY_BENCH_LIBTORCH
  for (const bool graphs : {false, true}) {
    if (!graphs && !w.eager_peers) continue;
    try {
      auto t = std::make_shared<ferry_bench::libtorch_engine::engine_step_torch>(sh, static_cast<int>(slots), graphs);
      row& r = add_row(rows, graphs ? label_libtorch_graph : label_libtorch, sh, t, static_cast<cudaStream_t>(t->stream()),
                       [](auto& x, const step_data& d) { x.step(d); });
      r.arrays = [p = t.get()] { return p->arrays(); };
      r.slots = [p = t.get()] { return static_cast<double>(p->slots()); };
      r.device_burst = graphs ? 64 : 32;  // ~20 launches a step eager: a burst that fits the launch queue
    } catch (const std::exception& e) {
      why = std::string("libtorch in process failed: ") + e.what();
    }
  }
#else
  why = "this build has no libtorch (CMake found no Torch config: set FERRY_BENCH_TORCH_PREFIX)";
#endif
  if (w.write_floor) {
    row& r = add_row(rows, label_write_floor, sh, std::make_shared<write_floor>(sh, slots), cs,
                     [](auto& x, const step_data& d) { x.run(d); });
    r.launches = false;
  }
  if (w.ablation) {
    row& r = add_row(rows, label_build, sh, std::make_shared<ferry_engine<ferry::launch::graph>>(sh, in_flight), cs,
                     [](auto& x, const step_data& d) { x.build_only(d); });
    r.launches = false;
  }
}

const row* find(const std::deque<row>& rows, const char* label) {
  for (const auto& r : rows)
    if (r.label == label) return &r;
  return nullptr;
}
double host_of(const std::deque<row>& rows, const char* label, bool twin = false) {
  const row* r = find(rows, label);
  return r == nullptr ? nan : twin ? r->twin : r->host;
}

// ---- the engine's graph: the host rows and the device gap -------------------------------------------

/// The rows of ferry in the engine's graph (submit_with; launch::capture, SPEC §12.4: the step
/// recorded once into the engine's capture, each step committed with no CUDA call) and of the
/// engine's replay alone; every engine graph ends in the model's first kernel.
void add_engine_graph_rows(std::deque<row>& rows, const shape& sh, cudaStream_t cs, ferry::stream_ref<B> s,
                           std::size_t in_flight, ferry::device_buffer<std::int64_t, B>& sink) {
  struct alone {
    ferry::device_buffer<std::int64_t, B> positions{1};
    cudaGraphExec_t exec = nullptr;
    ~alone() { cudaGraphExecDestroy(exec); }
  };
  auto a = std::make_shared<alone>();
  a->exec = engine_graph(nullptr, a->positions.data(), sink.data(), nullptr);
  add_row(rows, label_alone, sh, a, cs, [cs](alone& x, const step_data&) { BENCH_CUDA(cudaGraphLaunch(x.exec, cs)); });
  struct in_graph {
    ferry_engine<ferry::launch::graph> e;
    cudaGraphExec_t exec = nullptr;
    in_graph(const shape& sh, std::size_t n) : e(sh, n) {}
    ~in_graph() { cudaGraphExecDestroy(exec); }
  };
  auto g = std::make_shared<in_graph>(sh, in_flight);
  std::int64_t* out = sink.data();
  row& r = add_row(rows, label_in_graph, sh, g, cs, [s, cs, out](in_graph& x, const step_data& d) {
    x.e.run_with(d, s, [&](cudaGraph_t step) {
      if (x.exec == nullptr) x.exec = engine_graph(step, x.e.buf().positions.data(), out, nullptr);
      BENCH_CUDA(cudaGraphLaunch(x.exec, cs));
    });
  });
  r.ferry = true;
  r.arrays = [p = g.get()] { return p->e.arrays(); };
  // The engine captures its graph once (cudaStreamBeginCapture on its stream): the step kernel
  // recorded by the batch, then the model's first kernel. Each step: commit, one replay.
  struct captured {
    ferry_engine<ferry::launch::capture> e;
    cudaGraphExec_t exec = nullptr;
    captured(const shape& sh, std::size_t n, cudaStream_t cs, std::int64_t* out) : e(sh, n) {
      const auto ref = ferry::stream_ref<B>::identified(cs);  // asks the device now: a capturing stream refuses
      BENCH_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
      cudaGraph_t graph = nullptr;
      try {
        e.record(ref);
        launch_model(cs, e.buf().positions.data(), out, nullptr, false);
      } catch (...) {
        cudaStreamEndCapture(cs, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      BENCH_CUDA(cudaStreamEndCapture(cs, &graph));
      const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      BENCH_CUDA(made);
    }
    ~captured() { cudaGraphExecDestroy(exec); }
  };
  auto c = std::make_shared<captured>(sh, in_flight, cs, out);
  row& rc = add_row(rows, label_capture, sh, c, cs, [cs](captured& x, const step_data& d) {
    x.e.commit(d);
    BENCH_CUDA(cudaGraphLaunch(x.exec, cs));
  });
  rc.ferry = true;
  rc.arrays = [p = c.get()] { return p->e.arrays(); };
}

/// The device gap between the step's last write and the model's first kernel (see the file
/// comment): one row per way of following the step (each with its own engine and scheduler), each a
/// mean over bursts queued behind a gate.
void measure_gaps(ferry_bench::report& rep, const ferry_bench::options& o, const shape& sh, ferry::stream<B>& s,
                  std::size_t in_flight) {
  const cudaStream_t cs = s.get();
  ferry::device_buffer<unsigned long long, B> probe_buf(3);  // a gap_probe
  auto* probe = reinterpret_cast<gap_probe*>(probe_buf.data());
  BENCH_CUDA(cudaMemset(probe, 0, sizeof(gap_probe)));
  ferry::device_buffer<std::int64_t, B> sink(1);
  auto* end = &probe->end_ns;
  struct way {
    const char* label;
    std::function<void(const step_data&)> step;
    std::shared_ptr<void> engine;
    cudaGraphExec_t exec = nullptr;
  };
  std::deque<way> ways;
  auto ferry_kernel = [&](const char* label, bool pdl) {
    auto e = std::make_shared<ferry_engine<ferry::launch::kernel>>(sh, in_flight, end);
    ways.push_back({label, [&, p = e.get(), pdl](const step_data& d) {
                      p->run(d, s);
                      launch_model(cs, p->buf().positions.data(), sink.data(), probe, pdl);
                    }, e});
  };
  auto ferry_child = [&](const char* label, bool programmatic) {
    auto e = std::make_shared<ferry_engine<ferry::launch::graph>>(sh, in_flight, end);
    way& w = ways.emplace_back(way{label, {}, e});
    w.step = [&, p = e.get(), programmatic, wp = &w](const step_data& d) {
      p->run_with(d, s, [&](cudaGraph_t g) {
        if (!wp->exec) wp->exec = engine_graph(g, p->buf().positions.data(), sink.data(), probe, programmatic);
        BENCH_CUDA(cudaGraphLaunch(wp->exec, cs));
      });
    };
  };
  auto floor_kernel = [&](const char* label, bool pdl) {
    auto e = std::make_shared<floor_engine>(sh, cs, static_cast<unsigned>(in_flight + 2), false, end);
    ways.push_back({label, [&, p = e.get(), pdl](const step_data& d) {
                      p->run(d);
                      launch_model(cs, p->arrays().positions, sink.data(), probe, pdl);
                    }, e});
  };
  ferry_kernel("ferry launch::kernel, then the model kernel", false);
  ferry_kernel("ferry launch::kernel, then the model kernel with PDL", true);
  ferry_child("ferry's child node in the engine's graph, a full edge to the model kernel", false);
  ferry_child("ferry's child node in the engine's graph, a programmatic edge to the model kernel", true);
  floor_kernel("floor kernel (triggers its dependents at its start), then the model kernel", false);
  floor_kernel("floor kernel (triggers its dependents at its start), then the model kernel with PDL", true);
  ferry_bench::stream_gate gate(cs);
  std::vector<ferry_bench::timed_burst> bursts;
  std::vector<std::string> why(ways.size());
  std::deque<scheduler> scheds;
  std::deque<step_data> data;
  for (std::size_t c = 0; c < ways.size(); ++c) {
    scheds.emplace_back(sh), data.emplace_back(sh);
    bursts.push_back([&, c](std::size_t n) {
      if (!why[c].empty()) return nan;
      gate.close();
      try {
        for (std::size_t k = 0; k < n; ++k) scheds[c].next(data[c]), ways[c].step(data[c]);
      } catch (const std::exception& e) {  // CUDA refused this way of following the step
        why[c] = e.what();
      }
      gate.open();
      s.synchronize();
      gap_probe p{};
      BENCH_CUDA(cudaMemcpy(&p, probe, sizeof p, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemset(probe, 0, sizeof(gap_probe)));
      return why[c].empty() && p.count > 0 ? static_cast<double>(p.sum_ns) / static_cast<double>(p.count) / 1e3 : nan;
    });
  }
  ferry_bench::options og = o;
  og.burst = 64;
  og.bursts = std::max(ferry_bench::min_rounds, o.bursts / 4);
  const auto t = ferry_bench::interleaved(og, bursts, [] {}, 1);
  for (std::size_t c = 0; c < ways.size(); ++c)
    rep.add({{"case", std::string("device gap: step -> model's first kernel")}, {"step", std::string(ways[c].label)},
             {"gap us", t[c]}, {"A/A", t.aa(c)}, {"note", why[c].empty() ? std::string() : "refused: " + why[c]}});
  s.synchronize();
  for (const auto& w : ways)
    if (w.exec) cudaGraphExecDestroy(w.exec);
}

// ---- the scaling curves ------------------------------------------------------------------------------

/// The curves' rows at one shape: ferry launch::graph, the floor, the best peers as graphs and, on
/// the requests axis, the write floor; host and device time, each in interleaved rounds.
/// Returns ferry launch::graph's and the write floor's host figures and their twins'.
std::array<double, 4> scale_point(ferry_bench::report& rep, const ferry_bench::options& o, const char* axis, double x,
                                  const shape& sh, ferry::stream<B>& s) {
  ferry_bench::options os = o;
  os.burst = std::max(16, o.burst / 4);
  os.bursts = std::max(ferry_bench::min_rounds, o.bursts / 4);
  const auto in_flight = static_cast<std::size_t>(os.burst) + 8;
  std::deque<row> rows;
  std::string why;
  const bool requests_axis = std::string(axis) == "requests per step";
  add_shape_rows(rows, sh, s.get(), ferry::stream_ref<B>::identified(s.get()), in_flight, {false, false, false, requests_axis}, why);
  for (auto& r : rows) check_before_timing(r, 8);
  warm_up(rows, os.burst);
  measure(rows, os);
  check_after_timing(rows);
  for (const auto& r : rows)
    rep.add({{"case", std::string("scaling")}, {"axis", std::string(axis)}, {"x", x}, {"step", r.label}, {"host us", r.host},
             {"A/A", r.twin / r.host - 1}, {"device us", r.device}});
  if (!why.empty()) rep.add({{"case", std::string("scaling")}, {"axis", std::string(axis)}, {"x", x}, {"step", std::string(label_libtorch_graph)}, {"note", why}});
  return {host_of(rows, label_graph), host_of(rows, label_write_floor), host_of(rows, label_graph, true),
          host_of(rows, label_write_floor, true)};
}

int run(const ferry_bench::options& o) {
  ferry_bench::report rep("engine_step", o);
  rep.machine = ferry_bench::gpu_name();
  ferry::stream<B> s;
  const cudaStream_t cs = s.get();
  const auto ref = ferry::stream_ref<B>::identified(cs);
  const auto in_flight = static_cast<std::size_t>(std::max(o.burst, 250)) + 8;
  const shape base{};

  // ---- the default shape: every row -------------------------------------------------------------
  ferry::device_buffer<std::int64_t, B> sink(1);  // what the engine graphs' model kernel writes
  std::deque<row> rows;
  std::string why;
  add_shape_rows(rows, base, cs, ref, in_flight, {true, true, true, true}, why);
  add_engine_graph_rows(rows, base, cs, ref, in_flight, sink);
  for (auto& r : rows) {
    check_before_timing(r, 32);
    std::cout << r.label << ": check before timing ok\n";
  }
  warm_up(rows, std::max(o.burst, 250));
  measure(rows, o);
  for (auto& r : rows) {
    if (r.ferry) r.guarded = ferry_bench::guarded_steps([&] { r.step(); }, [&] { drain(r); });
    r.calls = ferry_bench::steady_calls([&](std::size_t) { r.step(); }, [&](std::size_t i) {
      if (i % static_cast<std::size_t>(o.burst) == 0) drain(r);
    });
    drain(r);
  }
  check_after_timing(rows);
  std::cout << "every row: check after timing ok\n";

  const double floor_host = host_of(rows, label_floor), kernel_floor_host = host_of(rows, label_floor_kernel);
  const double alone = host_of(rows, label_alone);
  for (const auto& r : rows) {
    ferry_bench::row out{{"step", r.label}, {"host us", r.host}, {"A/A", r.twin / r.host - 1}, {"device us", r.device},
                         {"host / floor", r.host / floor_host}, {"host / kernel floor", r.host / kernel_floor_host},
                         {"slots", r.slots ? r.slots() : nan}, {"runtime_calls_per_step", r.calls.total},
                         {"runtime_calls", r.calls.names()}};
    if (r.label == label_in_graph || r.label == label_capture)
      out.push_back({"host us over the engine's replay alone", r.host - alone});
    rep.add(std::move(out));
  }
  if (!why.empty()) rep.add({{"step", std::string("libtorch C++ rows")}, {"note", why}});
  measure_gaps(rep, o, base, s, in_flight);

  // ---- the scaling curves ------------------------------------------------------------------------
  std::vector<std::array<double, 4>> by_requests;  // ferry's and the write floor's host us, and their twins'
  for (const std::size_t n : {1, 4, 16, 64, 256, 1024, 4096}) {
    shape sh = base;
    sh.batch = n;
    by_requests.push_back(scale_point(rep, o, "requests per step", static_cast<double>(n), sh, s));
    std::cout << "scaling: " << n << " requests per step done\n";
  }
  for (const std::size_t w : {64, 512, 4096, 16384}) {
    shape sh = base;
    sh.width = w;
    scale_point(rep, o, "block-table width", static_cast<double>(w), sh, s);
  }
  for (const std::size_t e : {0, 4, 12, 28}) {
    shape sh = base;
    sh.extra = e;
    scale_point(rep, o, "uploaded arrays", static_cast<double>(sh.arrays()), sh, s);
  }
  for (const std::size_t g : {1, 2, 3, 4}) {
    shape sh = base;
    sh.groups = g;
    scale_point(rep, o, "KV-cache groups", static_cast<double>(g), sh, s);
  }
  std::cout << "scaling done\n";

  // ---- targets (each also from the twins: its A/A noise) ---------------------------------------------
  auto ratio = [&](const char* a, const char* b, bool twin) { return host_of(rows, a, twin) / host_of(rows, b, twin); };
  // The best peer's CUDA-graph replay of the same step, and libtorch at its best (the faster of its
  // rows), against ferry's graph step and the floor.
  auto best_graph_peer = [&](bool twin) { return std::fmin(host_of(rows, label_vllm_graph, twin), host_of(rows, label_libtorch_graph, twin)); };
  rep.add_target("graph_host_vs_floor", ratio(label_graph, label_floor, false), "<=", 1.15, ratio(label_graph, label_floor, true));
  rep.add_target("kernel_host_vs_floor", ratio(label_kernel, label_floor_kernel, false), "<=", 1.15,
                 ratio(label_kernel, label_floor_kernel, true));
  rep.add_peer_target("graph_host_vs_graph_peer", best_graph_peer(false) / host_of(rows, label_graph), ">=", 1.0,
                      best_graph_peer(false) / floor_host, best_graph_peer(true) / host_of(rows, label_graph, true));
  auto libtorch = [&](bool twin) { return std::fmin(host_of(rows, label_libtorch, twin), host_of(rows, label_libtorch_graph, twin)); };
  rep.add_peer_target("graph_host_vs_libtorch", libtorch(false) / host_of(rows, label_graph), ">=", 8, libtorch(false) / floor_host,
                      libtorch(true) / host_of(rows, label_graph, true));
  // ferry's extra host time from 1 to 4096 requests per step over the write floor's.
  auto growth = [&](bool twin) {
    const auto& lo = by_requests.front();
    const auto& hi = by_requests.back();
    const std::size_t f = twin ? 2 : 0;
    return (hi[f] - lo[f]) / (hi[f + 1] - lo[f + 1]);
  };
  rep.add_target("host_growth_vs_write_floor", growth(false), "<=", 1.2, growth(true));
  double syncs = 0, allocations = 0;  // the worst ferry row
  for (const auto& r : rows)
    if (r.ferry) syncs = std::max(syncs, r.guarded.syncs), allocations = std::max(allocations, r.guarded.allocations);
  rep.add_target("syncs_per_step", syncs, "<=", 0);
  rep.add_target("allocations_per_step", allocations, "<=", 0);

  rep.print();
  for (const auto& r : rows)
    if (!r.guarded.report.empty()) std::cout << "sync_guard saw in " << r.label << ": " << r.guarded.report << "\n";
  rep.write_json(o.json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ferry_bench::bench_main("bench.engine_step", argc, argv, run); }
