// Benchmark engine_step (SPEC §10, §12.2, §12.3): the engine-shaped decode step (GPU-resident
// per-request state, token ids gathered from the previous step's sampled tokens, positions,
// sequence lengths and slot mappings derived on the GPU; engine_workload.hpp says what a step is),
// three ways, in this one process, on the same host data (one scheduler each, constructed alike):
//  - "ferry step_batch launch::graph" and "... launch::kernel": one ferry::step_batch per row, the
//    step's uploads, a gather (input_ids[i] = sampled[req[i]], the prefill rows' tokens from the
//    host), the block-table writes and the fused epilogue (derive_inputs below) in one submit;
//  - "libtorch C++ ..." (where CMake found Torch: engine_step_torch.hpp): the same step written the
//    way vLLM's model runner v2 writes it, with libtorch ops (engine_step_torch.cpp says which
//    functions it mirrors);
//  - "floor: one graph executable ...": the hand-written floor of the graph targets: ONE kernel,
//    captured once as a 1-node graph executable for every slot, that finds its slot on the device
//    through a device-side step counter (step-floor.cu's step_kernel_ring, row G; decode_step's
//    floor G), reads the step from a ring of pinned slots through UVA and does the same gather,
//    uploads, block-table writes and, in its last block (after a fence and an arrival count), the
//    same derivation. The ring is fenced as ferry's: the kernel's last act stores the step's number
//    into a mapped counter, and a slot is rewritten only once the counter shows its step passed (one
//    load; a slot not used so far is taken while the next one is still read);
//  - "floor: the same kernel launched by cudaLaunchKernel": the kernel floor, what
//    kernel_host_vs_floor compares ferry's launch::kernel row with (like for like, as decode_step);
//  - ablations, which enqueue nothing: ferry's step built and cancelled, and the floor's scheduler
//    writing one pinned slot: what building the step costs each way, the launch and ring aside.
// Before timing, every row runs steps with the stand-in sampler rewriting `sampled` between them,
// some queued behind a held stream, and is checked against engine_workload.hpp's host reference
// after each round; after timing every row is checked again (its state after every step it ran).
// A mismatch fails the benchmark (exit code 1).
//
// Host time: bursts of --burst steps (256), the stream drained between bursts (not timed), median
// of --bursts (40) interleaved rounds after 3 warm-up rounds (support/bench.hpp; with --aa every
// row beside its twin, column "A/A", and each target's A/A noise). Device time: a burst queued
// behind a gate that holds the row's stream (support/gpu.cuh; the libtorch row's bursts are
// shorter, so that they fit in the launch queue). Then untimed passes: ferry's rows inside
// ferry::sync_guard (record mode: syncs and allocations per step), and every row's CUDA runtime
// calls per step (support/runtime_calls.hpp).
#include <engine_step/engine_workload.hpp>

#include <ferry/ferry.cuh>

#include <support/gpu.cuh>
#include <support/guarded_steps.hpp>
#include <support/runtime_calls.hpp>
#if FERRY_BENCH_LIBTORCH
#include <engine_step/engine_step_torch.hpp>
#include <support/libtorch_peer.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using B = ferry::backend::cuda;
using namespace engine_step;

// ---- ferry's epilogue (outside the anonymous namespace: the step kernel instantiated over it keeps
// ferry's hidden visibility, which needs external linkage) ----------------------------------------

namespace engine_step {

/// The epilogue (vLLM's prepare_pos_seq_lens, compute_slot_mappings and post_update, fused): runs
/// once the step's uploads, gather and block-table writes have landed.
struct derive_inputs {
  ferry::step_ref<std::int32_t> req, accepted, prefill;
  std::int32_t* num_computed;
  const std::int32_t* table;
  std::int64_t* positions;
  std::int32_t* seq_lens;
  std::int64_t* slot_mapping;

  FERRY_HOST_DEVICE void operator()(const ferry::step_context& c) const {
    const auto rq = c.view(req);
    const auto acc = c.view(accepted);
    const auto pf = c.view(prefill);
    for (std::size_t i = c.rank(); i < rq.size(); i += c.threads()) {
      const auto r = static_cast<std::size_t>(rq[i]);
      const std::int32_t pos = i < pf.size() ? pf[i] : num_computed[r];
      positions[i] = pos;
      seq_lens[i] = pos + 1;
      slot_mapping[i] = static_cast<std::int64_t>(table[r * max_blocks + static_cast<std::size_t>(pos) / block_size]) *
                            static_cast<std::int64_t>(block_size) +
                        pos % static_cast<std::int32_t>(block_size);
      num_computed[r] = pos + acc[i];
    }
  }
};

}  // namespace engine_step

namespace {

static_assert(ferry::from_host == engine_step::from_host, "the workload's from_host is ferry's");

constexpr double not_measured = std::numeric_limits<double>::quiet_NaN();

constexpr const char* label_graph = "ferry step_batch launch::graph";
constexpr const char* label_kernel = "ferry step_batch launch::kernel";
constexpr const char* label_floor = "floor: one graph executable for every slot, slot found on the device";
constexpr const char* label_floor_kernel = "floor: the same kernel launched by cudaLaunchKernel (kernel floor)";
constexpr const char* label_ferry_build = "ablation: ferry step built, not submitted (begin, handles, cancel)";
constexpr const char* label_floor_data = "ablation: floor's host data only (one pinned slot, no launch)";
constexpr const char* label_libtorch = "libtorch C++, vLLM model runner v2's way (in process)";

// ---- the GPU-resident state and the step's device inputs (every ferry and floor row has its own) --

/// The stand-in sampler: sampled[r] = sampled_next(sampled[r], s, r) (engine_workload.hpp).
__global__ void sampler_kernel(std::int32_t* sampled, std::uint64_t s) {
  const std::size_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < requests)
    sampled[r] = static_cast<std::int32_t>((static_cast<std::int64_t>(sampled[r]) * 31 +
                                            static_cast<std::int64_t>(s % vocab) + static_cast<std::int64_t>(r)) %
                                           vocab);
}

template <class T>
std::vector<T> fetch(const T* p, std::size_t n) {
  std::vector<T> v(n);
  BENCH_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDefault));
  return v;
}

/// A row's device arrays, its step count and the host reference it is checked against.
struct engine_buffers {
  ferry::device_buffer<std::int32_t, B> num_computed{requests}, table{requests * max_blocks}, sampled{requests};
  ferry::device_buffer<std::int32_t, B> input_ids{batch}, req{batch}, accepted{batch}, prefill{admitted};
  ferry::device_buffer<std::int32_t, B> top_k{batch}, seq_lens{batch};
  ferry::device_buffer<float, B> temperature{batch}, top_p{batch};
  ferry::device_buffer<std::int64_t, B> seed{batch}, positions{batch}, slot_mapping{batch};
  std::uint64_t steps = 0;  ///< steps run (the reference catches up lazily)
  reference ref;

  engine_buffers() {
    std::vector<std::int32_t> nc(requests), tab(requests * max_blocks), smp(requests);
    scheduler::initial_state(nc.data(), tab.data(), smp.data());
    BENCH_CUDA(cudaMemcpy(num_computed.data(), nc.data(), nc.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(table.data(), tab.data(), tab.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(sampled.data(), smp.data(), smp.size() * 4, cudaMemcpyHostToDevice));
  }
  void catch_up() {
    while (ref.steps() < steps) ref.step();
  }
  /// The sampler on `s` after the steps run so far (untimed: checks only).
  void sample(cudaStream_t s, std::uint64_t n) {
    catch_up();
    ref.sample(n);
    sampler_kernel<<<(requests + 255) / 256, 256, 0, s>>>(sampled.data(), n);
    BENCH_CUDA(cudaPeekAtLastError());
  }
  /// Drains `s`, replays the steps on the host and compares everything: "" when equal.
  std::string check(cudaStream_t s) {
    BENCH_CUDA(cudaStreamSynchronize(s));
    catch_up();
    std::string bad;
    auto cmp = [&](const char* what, const auto* dev, const auto& want) {
      if (!bad.empty()) return;
      const auto got = fetch(dev, want.size());
      bad = first_difference(what, got.data(), want.data(), want.size());
    };
    cmp("num_computed", num_computed.data(), ref.nc_);
    cmp("block_table", table.data(), ref.table_);
    cmp("sampled", sampled.data(), ref.sampled_);
    cmp("req_idx", req.data(), ref.req_);
    cmp("accepted", accepted.data(), ref.accepted_);
    cmp("input_ids", input_ids.data(), ref.input_ids_);
    cmp("positions", positions.data(), ref.positions_);
    cmp("seq_lens", seq_lens.data(), ref.seq_lens_);
    cmp("slot_mapping", slot_mapping.data(), ref.slot_mapping_);
    cmp("temperature", temperature.data(), ref.temperature_);
    cmp("top_p", top_p.data(), ref.top_p_);
    cmp("top_k", top_k.data(), ref.top_k_);
    cmp("seed", seed.data(), ref.seed_);
    return bad.empty() ? bad : bad + " after step " + std::to_string(steps);
  }
};

// ---- ferry: the step as one step_batch with a fused epilogue ------------------------------------

template <class Launch>
class ferry_engine {
  using epilogue = ferry::epilogue::functor<derive_inputs>;
  using batch_type = std::conditional_t<Launch::replays_graph,
                                        ferry::step_batch<B, Launch, ferry::presets::graph_safe, epilogue>,
                                        ferry::step_batch<B, Launch, epilogue>>;

 public:
  explicit ferry_engine(std::size_t max_in_flight)
      : batch_(2, max_in_flight + 2),
        req_(batch_.add_upload(buf_.req.span(), batch)),
        accepted_(batch_.add_upload(buf_.accepted.span(), batch)),
        prefill_(batch_.add_upload(buf_.prefill.span(), admitted)),
        temperature_(batch_.add_upload(buf_.temperature.span(), batch)),
        top_p_(batch_.add_upload(buf_.top_p.span(), batch)),
        top_k_(batch_.add_upload(buf_.top_k.span(), batch)),
        seed_(batch_.add_upload(buf_.seed.span(), batch)),
        tokens_(batch_.add_gather(buf_.input_ids.span(), ferry::device_span<const std::int32_t>(buf_.sampled.span()), batch)),
        table_(batch_.add_writes(ferry::staged_view<std::int32_t>(buf_.table.data(), requests, max_blocks), max_writes,
                                 max_write_elements)) {
    batch_.set_epilogue(derive_inputs{req_.ref(), accepted_.ref(), prefill_.ref(), buf_.num_computed.data(),
                                      buf_.table.data(), buf_.positions.data(), buf_.seq_lens.data(),
                                      buf_.slot_mapping.data()});
    batch_.reserve();
  }

  /// One step: the scheduler writes it into the batch's slot, one submit.
  void run(ferry::stream_ref<B> s) {
    batch_.begin();
    fill();
    batch_.submit(s);
    ++buf_.steps;
  }
  /// The scheduler writes the open step into the batch's slot.
  void fill() {
    const auto idx = tokens_.indices(batch);
    const auto host = tokens_.host_values();
    const step_arrays a{req_.span(batch).data(),         idx.data(),
                        host.data(),                     accepted_.span(batch).data(),
                        prefill_.span(admitted).data(),  temperature_.span(batch).data(),
                        top_p_.span(batch).data(),       top_k_.span(batch).data(),
                        seed_.span(batch).data()};
    sched_.next_step(
        a, [&](std::size_t r, std::span<const std::int32_t> ids) { table_.stage_write(r, 0, ids); },
        [&](std::size_t r, std::size_t col, std::int32_t id) { table_.stage_write(r, col, {id}); });
  }
  /// The ablation: the step built as run() builds it, then dropped (cancel(): the next step takes
  /// the same slot, as the floor's data-only row writes one slot); state not kept (no check).
  void build_only() {
    batch_.begin();
    fill();
    batch_.cancel();
  }
  engine_buffers& buf() noexcept { return buf_; }
  [[nodiscard]] std::size_t slots() const noexcept { return batch_.slots(); }

 private:
  engine_buffers buf_;  // first: outlives the batch, whose destructor waits for its kernels
  scheduler sched_;
  batch_type batch_;
  typename batch_type::template upload<std::int32_t> req_, accepted_, prefill_;
  typename batch_type::template upload<float> temperature_, top_p_;
  typename batch_type::template upload<std::int32_t> top_k_;
  typename batch_type::template upload<std::int64_t> seed_;
  typename batch_type::template gather<std::int32_t> tokens_;
  typename batch_type::template writes<std::int32_t> table_;
};

// ---- the floor ----------------------------------------------------------------------------------

/// Byte offsets in a floor slot (pinned, mapped; the kernel reads it through UVA).
namespace slot {
constexpr std::size_t round8(std::size_t n) { return (n + 7) / 8 * 8; }
constexpr std::size_t req = 0;
constexpr std::size_t gather = req + batch * 4;
constexpr std::size_t host_tokens = gather + batch * 4;
constexpr std::size_t accepted = host_tokens + batch * 4;
constexpr std::size_t top_k = accepted + batch * 4;
constexpr std::size_t temperature = top_k + batch * 4;
constexpr std::size_t top_p = temperature + batch * 4;
constexpr std::size_t seed = top_p + batch * 4;  // int64: 8-aligned
constexpr std::size_t prefill = seed + batch * 8;
constexpr std::size_t admit_rows = prefill + admitted * 4;
constexpr std::size_t admit_ids = admit_rows + admitted * 4;
constexpr std::size_t append_dst = admit_ids + admitted * admitted_blocks * 4;  // row * max_blocks + column
constexpr std::size_t append_ids = append_dst + max_appends * 4;
constexpr std::size_t appends = append_ids + max_appends * 4;  // uint32: how many
constexpr std::size_t seq = round8(appends + 4);                // uint64: the step's number + 1
constexpr std::size_t bytes = (seq + 8 + 255) / 256 * 256;
static_assert(seed % 8 == 0 && seq % 8 == 0);
}  // namespace slot

constexpr unsigned floor_threads = 256;
constexpr unsigned floor_blocks = admitted + 2;  // the admissions, the appends, the per-row arrays
static_assert(floor_threads >= batch && floor_threads >= admitted_blocks && floor_threads >= max_appends);

/// The floor kernel's arguments: the same for every step.
struct floor_args {
  const std::byte* slots;        // mapped: slot k at slots + k * slot::bytes
  const std::uint32_t* slot_of;  // mapped: the slot of step n at n % ring
  unsigned long long* step;      // device: the steps run so far
  unsigned ring;
  std::int32_t *num_computed, *table;
  const std::int32_t* sampled;
  std::int32_t *input_ids, *req, *accepted, *prefill, *top_k, *seq_lens;
  float *temperature, *top_p;
  std::int64_t *seed, *positions, *slot_mapping;
  unsigned* blocks_done;
  unsigned long long* counter;  // mapped: the last finished step's number + 1
};

template <class T>
__device__ __forceinline__ const T* in(const std::byte* s, std::size_t off) {
  return reinterpret_cast<const T*>(s + off);
}

/// The whole step in one kernel (see the file comment). Plain loads of the slot: the launch orders
/// them after the host's writes (decode_step.cu's floor kernel says why not __ldcv).
__global__ void __launch_bounds__(floor_threads) floor_step_kernel(const floor_args a) {
  __shared__ unsigned k;
  __shared__ bool last;
  if (threadIdx.x == 0) k = a.slot_of[*reinterpret_cast<volatile unsigned long long*>(a.step) % a.ring];
  __syncthreads();
  const std::byte* s = a.slots + std::size_t{k} * slot::bytes;
  const unsigned t = threadIdx.x;
  if (blockIdx.x < admitted) {  // admission blockIdx.x: its 64 block ids from column 0
    if (t < admitted_blocks) {
      const auto r = static_cast<std::size_t>(in<std::int32_t>(s, slot::admit_rows)[blockIdx.x]);
      a.table[r * max_blocks + t] = in<std::int32_t>(s, slot::admit_ids)[blockIdx.x * admitted_blocks + t];
    }
  } else if (blockIdx.x == admitted) {  // the appends
    if (t < *in<std::uint32_t>(s, slot::appends))
      a.table[in<std::int32_t>(s, slot::append_dst)[t]] = in<std::int32_t>(s, slot::append_ids)[t];
  } else {  // the per-row arrays: the gather and the uploads
    const std::int32_t g = in<std::int32_t>(s, slot::gather)[t];
    a.input_ids[t] = g == from_host ? in<std::int32_t>(s, slot::host_tokens)[t] : a.sampled[g];
    a.req[t] = in<std::int32_t>(s, slot::req)[t];
    a.accepted[t] = in<std::int32_t>(s, slot::accepted)[t];
    a.top_k[t] = in<std::int32_t>(s, slot::top_k)[t];
    a.temperature[t] = in<float>(s, slot::temperature)[t];
    a.top_p[t] = in<float>(s, slot::top_p)[t];
    a.seed[t] = in<std::int64_t>(s, slot::seed)[t];
    if (t < admitted) a.prefill[t] = in<std::int32_t>(s, slot::prefill)[t];
  }
  __threadfence();  // this thread's writes, before the block's arrival
  __syncthreads();
  if (t == 0) last = atomicAdd(a.blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last block: the derivation, reading the block table the other blocks wrote and the state
  // the previous step's last block wrote from L2 (__ldcg: never a stale L1 line).
  for (unsigned i = t; i < batch; i += blockDim.x) {
    const auto r = static_cast<std::size_t>(in<std::int32_t>(s, slot::req)[i]);
    const std::int32_t pos = i < admitted ? in<std::int32_t>(s, slot::prefill)[i] : __ldcg(a.num_computed + r);
    a.positions[i] = pos;
    a.seq_lens[i] = pos + 1;
    a.slot_mapping[i] = static_cast<std::int64_t>(__ldcg(a.table + r * max_blocks + static_cast<std::size_t>(pos) / block_size)) *
                            static_cast<std::int64_t>(block_size) +
                        pos % static_cast<std::int32_t>(block_size);
    a.num_computed[r] = pos + in<std::int32_t>(s, slot::accepted)[i];
  }
  __syncthreads();
  if (t == 0) {
    *a.blocks_done = 0;
    __threadfence_system();
    *reinterpret_cast<volatile unsigned long long*>(a.counter) = *in<std::uint64_t>(s, slot::seq);
    *a.step += 1;  // the next step's kernel runs after this one (stream order)
  }
}

/// The floor (see the file comment): its slots, counter, ring and one graph executable.
class floor_engine {
 public:
  static constexpr unsigned initial_slots = 4;

  /// `graph`: each step is one cudaGraphLaunch of the one executable; else one cudaLaunchKernel of
  /// the same kernel with the same parameters (the kernel floor).
  floor_engine(cudaStream_t s, unsigned max_slots, bool graph = true)
      : s_(s), graph_launch_(graph), max_slots_(std::max(max_slots, initial_slots)), last_step_(max_slots_, 0) {
    const std::size_t pinned_bytes = std::size_t{max_slots_} * slot::bytes + 256 + std::size_t{max_slots_} * 4;
    BENCH_CUDA(cudaHostAlloc(&pinned_, pinned_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(pinned_, 0, pinned_bytes);
    counter_ = reinterpret_cast<std::uint64_t*>(pinned_ + std::size_t{max_slots_} * slot::bytes);
    slot_of_ = reinterpret_cast<std::uint32_t*>(pinned_ + std::size_t{max_slots_} * slot::bytes + 256);
    BENCH_CUDA(cudaMalloc(&blocks_done_, sizeof(unsigned)));
    BENCH_CUDA(cudaMemset(blocks_done_, 0, sizeof(unsigned)));
    BENCH_CUDA(cudaMalloc(&ring_step_, sizeof(unsigned long long)));
    BENCH_CUDA(cudaMemset(ring_step_, 0, sizeof(unsigned long long)));
    engine_buffers& b = buf_;
    floor_args& a = args_;
    a = floor_args{static_cast<const std::byte*>(device_address(pinned_)),
                 static_cast<const std::uint32_t*>(device_address(slot_of_)),
                 ring_step_, max_slots_, b.num_computed.data(), b.table.data(), b.sampled.data(), b.input_ids.data(),
                 b.req.data(), b.accepted.data(), b.prefill.data(), b.top_k.data(), b.seq_lens.data(),
                 b.temperature.data(), b.top_p.data(), b.seed.data(), b.positions.data(), b.slot_mapping.data(),
                 blocks_done_, static_cast<unsigned long long*>(device_address(counter_))};
    BENCH_CUDA(cudaGraphCreate(&graph_, 0));
    cudaGraphNode_t node = nullptr;
    void* params[] = {&a};
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(&floor_step_kernel);
    p.gridDim = dim3(floor_blocks);
    p.blockDim = dim3(floor_threads);
    p.kernelParams = params;
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
    cudaFreeHost(pinned_);
    cudaFree(blocks_done_);
    cudaFree(ring_step_);
  }

  /// One step: the next free slot (one load of the counter), the scheduler writes the step into it,
  /// the ring entry of the step, one cudaGraphLaunch.
  void run() {
    const unsigned k = next_slot();
    write_step(pinned_ + std::size_t{k} * slot::bytes);
    const std::uint64_t seq = ++submitted_;  // the step's number + 1
    *at<std::uint64_t>(pinned_ + std::size_t{k} * slot::bytes, slot::seq) = seq;
    last_step_[k] = seq;
    slot_of_[(seq - 1) % max_slots_] = k;  // the kernel of step seq - 1 reads it
    before_ = cur_;
    cur_ = k;
    if (graph_launch_) {
      BENCH_CUDA(cudaGraphLaunch(exec_, s_));
    } else {
      void* params[] = {&args_};
      BENCH_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&floor_step_kernel), dim3(floor_blocks),
                                  dim3(floor_threads), params, 0, s_));
    }
    ++buf_.steps;
  }
  /// The ablation: the scheduler writes a step into slot 0, nothing else (no ring, no launch; the
  /// engine is not run or checked after).
  void data_only() { write_step(pinned_); }
  /// The scheduler writes the step into the slot at `p`.
  void write_step(std::byte* p) {
    auto* rows = at<std::int32_t>(p, slot::admit_rows);
    auto* ids = at<std::int32_t>(p, slot::admit_ids);
    auto* dst = at<std::int32_t>(p, slot::append_dst);
    auto* aid = at<std::int32_t>(p, slot::append_ids);
    std::uint32_t admissions = 0, appends = 0;
    const step_arrays a{at<std::int32_t>(p, slot::req),     at<std::int32_t>(p, slot::gather),
                        at<std::int32_t>(p, slot::host_tokens), at<std::int32_t>(p, slot::accepted),
                        at<std::int32_t>(p, slot::prefill),  at<float>(p, slot::temperature),
                        at<float>(p, slot::top_p),           at<std::int32_t>(p, slot::top_k),
                        at<std::int64_t>(p, slot::seed)};
    sched_.next_step(
        a,
        [&](std::size_t r, std::span<const std::int32_t> v) {
          rows[admissions] = static_cast<std::int32_t>(r);
          std::memcpy(ids + std::size_t{admissions} * admitted_blocks, v.data(), v.size_bytes());
          ++admissions;
        },
        [&](std::size_t r, std::size_t col, std::int32_t id) {
          dst[appends] = static_cast<std::int32_t>(r * max_blocks + col);
          aid[appends++] = id;
        });
    *at<std::uint32_t>(p, slot::appends) = appends;
  }
  engine_buffers& buf() noexcept { return buf_; }
  [[nodiscard]] std::size_t slots() const noexcept { return active_; }
  /// The device's step counter equals the steps submitted (after the stream is drained).
  [[nodiscard]] bool counter_matches() const {
    return fetch(ring_step_, 1)[0] == submitted_;
  }

 private:
  // decode_step.cu's floor rule (ferry's begin()): the slot of the step before the last if its step
  // has passed, else the next one if passed, else a slot not used yet, else wait for the next one.
  // Steps in flight hold distinct slots, so the ring of max_slots_ entries is never rewritten
  // before the kernel that reads an entry has run.
  unsigned next_slot() {
    const unsigned next = (cur_ + 1) % active_;
    const std::uint64_t passed = *reinterpret_cast<volatile std::uint64_t*>(counter_);
    if (before_ != cur_ && passed >= last_step_[before_]) return before_;
    if (passed >= last_step_[next]) return next;
    if (active_ < max_slots_) return active_++;
    while (*reinterpret_cast<volatile std::uint64_t*>(counter_) < last_step_[next]) {
    }
    return next;
  }
  template <class T>
  static T* at(std::byte* p, std::size_t off) noexcept {
    return reinterpret_cast<T*>(p + off);
  }
  static void* device_address(void* host) {
    void* d = nullptr;
    BENCH_CUDA(cudaHostGetDevicePointer(&d, host, 0));
    return d;
  }

  engine_buffers buf_;
  scheduler sched_;
  cudaStream_t s_;
  bool graph_launch_;
  floor_args args_{};
  unsigned max_slots_;
  std::vector<std::uint64_t> last_step_;  // per slot: its last step's number + 1 (0: none)
  std::byte* pinned_ = nullptr;           // the slots, the counter, the ring
  std::uint64_t* counter_ = nullptr;
  std::uint32_t* slot_of_ = nullptr;
  unsigned* blocks_done_ = nullptr;
  unsigned long long* ring_step_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::uint64_t submitted_ = 0;
  unsigned active_ = initial_slots;
  unsigned cur_ = initial_slots - 1;
  unsigned before_ = cur_;
};

// ---- rows, checks, measurement --------------------------------------------------------------------

/// One in-process row.
struct variant {
  const char* label;
  std::function<void()> step;
  cudaStream_t stream;
  bool ferry;                                 ///< counted by the sync_guard pass
  std::function<std::string()> check;         ///< "" when its state equals the host reference
  std::function<void(std::uint64_t)> sample;  ///< the stand-in sampler on its stream (checks only)
  std::function<double()> slots{};
  bool launches = true;  ///< false: an ablation that enqueues nothing (no device time)
  int device_burst = 256;
  double host = not_measured, host_twin = not_measured, device = not_measured, syncs = not_measured,
         allocations = not_measured;
  std::string guard_report{};
  ferry_bench::calls_per_op calls{};
};

void drain(const variant& v) { BENCH_CUDA(cudaStreamSynchronize(v.stream)); }

/// Before timing: 32 rounds of steps, the sampler rewriting `sampled` before some of them, every
/// 4th round 6 steps queued behind a 1 ms hold (slots in flight, the floor's ring past a fixed
/// rotation); the row is checked after each round.
void check_before_timing(variant& v) {
  for (int round = 0; round < 32; ++round) {
    const int queued = round % 4 == 3 ? 6 : 1;
    if (queued > 1) ferry_bench::hold_stream(v.stream, 1);
    for (int q = 0; q < queued; ++q) {
      if ((round + q) % 3 != 1) v.sample(static_cast<std::uint64_t>(round * 8 + q));
      v.step();
    }
    if (const std::string bad = v.check(); !bad.empty())
      throw std::runtime_error(std::string(v.label) + ": check before timing failed: " + bad);
  }
}

/// The untimed guard pass of a ferry row (ferry_bench::guarded_steps).
void count_syncs(variant& v) {
  auto counts = ferry_bench::guarded_steps([&] { v.step(); }, [&] { drain(v); });
  v.syncs = counts.syncs;
  v.allocations = counts.allocations;
  if (!counts.report.empty()) v.guard_report = std::move(counts.report);
}

/// Host and device time of every row, each in interleaved rounds.
void measure(std::vector<variant>& vs, const ferry_bench::options& o) {
  std::vector<ferry_bench::timed_burst> host, device;
  std::vector<std::unique_ptr<ferry_bench::stream_gate>> gates;  // one per row: its stream
  for (auto& v : vs) {
    host.push_back(ferry_bench::host_burst([&v](std::size_t) { v.step(); }));
    gates.push_back(std::make_unique<ferry_bench::stream_gate>(v.stream));
    v.device_burst = std::min(v.device_burst, o.burst);
    device.push_back(v.launches ? ferry_bench::device_burst(*gates.back(), [&v](std::size_t) { v.step(); },
                                                            static_cast<std::size_t>(v.device_burst))
                                : ferry_bench::timed_burst([](std::size_t) { return ferry_bench::nan; }));
  }
  const auto h = ferry_bench::interleaved(o, host, [&] {
    for (const auto& v : vs) drain(v);  // the other rows' streams are idle: their drain returns at once
  });
  ferry_bench::options od = o;
  od.bursts = std::max(3, o.bursts / 4);
  const auto d = ferry_bench::interleaved(od, device, [] {}, 1);
  for (std::size_t i = 0; i < vs.size(); ++i) {
    vs[i].host = h[i];
    vs[i].host_twin = h.twin[i];
    vs[i].device = d[i];
  }
}

int run(const ferry_bench::options& o) {
  ferry_bench::report rep("engine_step", o);
  rep.machine = ferry_bench::gpu_name();

  ferry::stream<B> s;
  const cudaStream_t cs = s.get();
  const auto in_flight = static_cast<std::size_t>(std::max(o.burst, 250)) + 8;
  ferry_engine<ferry::launch::graph> graph(in_flight);
  ferry_engine<ferry::launch::kernel> kernel(in_flight);
  floor_engine floor(cs, static_cast<unsigned>(in_flight + 2));
  floor_engine floor_kernel(cs, static_cast<unsigned>(in_flight + 2), false);
  ferry_engine<ferry::launch::graph> build(in_flight);
  floor_engine floor_data(cs, 4);

  std::vector<variant> vs;
  auto add_ferry = [&](const char* label, auto& e) {
    vs.push_back({label, [&e, &s] { e.run(s); }, cs, true, [&e, cs] { return e.buf().check(cs); },
                  [&e, cs](std::uint64_t n) { e.buf().sample(cs, n); },
                  [&e] { return static_cast<double>(e.slots()); }});
  };
  add_ferry(label_graph, graph);
  add_ferry(label_kernel, kernel);
  vs.push_back({label_floor, [&] { floor.run(); }, cs, false,
                [&]() -> std::string {
                  std::string bad = floor.buf().check(cs);
                  if (bad.empty() && !floor.counter_matches()) bad = "the device's step counter lags the steps submitted";
                  return bad;
                },
                [&](std::uint64_t n) { floor.buf().sample(cs, n); }, [&] { return static_cast<double>(floor.slots()); }});
  vs.push_back({label_floor_kernel, [&] { floor_kernel.run(); }, cs, false,
                [&]() -> std::string {
                  std::string bad = floor_kernel.buf().check(cs);
                  if (bad.empty() && !floor_kernel.counter_matches()) bad = "the device's step counter lags the steps submitted";
                  return bad;
                },
                [&](std::uint64_t n) { floor_kernel.buf().sample(cs, n); },
                [&] { return static_cast<double>(floor_kernel.slots()); }});
  // Ablations (no launch: no device time, no check): what building the step costs each way.
  auto no_check = [] { return std::string(); };
  auto no_sample = [](std::uint64_t) {};
  vs.push_back({label_ferry_build, [&] { build.build_only(); }, cs, false, no_check, no_sample, {}, false});
  vs.push_back({label_floor_data, [&] { floor_data.data_only(); }, cs, false, no_check, no_sample, {}, false});

  std::string libtorch_why;  // why the libtorch row has no figures
#if FERRY_BENCH_LIBTORCH
  std::unique_ptr<ferry_bench::libtorch_engine::engine_step_torch> torch_engine;
  try {
    torch_engine = std::make_unique<ferry_bench::libtorch_engine::engine_step_torch>(static_cast<int>(in_flight));
    auto* te = torch_engine.get();
    variant v{label_libtorch, [te] { te->step(); }, static_cast<cudaStream_t>(te->stream()), false,
              [te]() -> std::string { const char* bad = te->check(); return bad ? bad : ""; },
              [te](std::uint64_t n) { te->sample(n); }};
    v.device_burst = 32;  // ~20 launches a step: a burst that fits the launch queue
    vs.push_back(std::move(v));
    std::cout << "libtorch " << ferry_bench::libtorch_peer::torch_version() << " in process\n";
  } catch (const std::exception& e) {
    libtorch_why = std::string("libtorch in process failed: ") + e.what();
    torch_engine.reset();
  }
#else
  libtorch_why = "not built: this build has no libtorch (CMake found no Torch config: tools/gpu-check passes "
                 "FERRY_BENCH_TORCH_PREFIX from python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')";
#endif

  // Every row against the host reference, before any timing; a mismatch ends the run (rc 1).
  for (auto& v : vs) {
    check_before_timing(v);
    std::cout << v.label << ": check before timing ok\n";
  }
  // Warm-up: rings and pools reach their steady state, including a burst queued behind a held
  // stream (the most steps in flight).
  for (int k = 0; k < 300; ++k)
    for (auto& v : vs) v.step();
  for (auto& v : vs) {
    drain(v);
    ferry_bench::hold_stream(v.stream, 40);
    for (int k = 0; k < std::max(o.burst, 250); ++k) v.step();
    drain(v);
  }

  measure(vs, o);
  for (auto& v : vs)
    if (v.ferry) count_syncs(v);
  for (auto& v : vs) {
    v.calls = ferry_bench::steady_calls([&](std::size_t) { v.step(); },
                                        [&](std::size_t i) {
                                          if (i % static_cast<std::size_t>(o.burst) == 0) drain(v);
                                        });
    drain(v);
  }
  // After timing: every step each row ran, against the host reference.
  for (auto& v : vs) {
    if (const std::string bad = v.check(); !bad.empty())
      throw std::runtime_error(std::string(v.label) + ": check after timing failed: " + bad);
    std::cout << v.label << ": check after timing ok\n";
  }

  auto find = [&](const char* label) -> variant* {
    for (auto& v : vs)
      if (std::string(v.label) == label) return &v;
    return nullptr;
  };
  auto host = [&](const char* label, bool twin = false) {
    const auto* v = find(label);
    return v ? (twin ? v->host_twin : v->host) : not_measured;
  };
  const double floor_host = host(label_floor), kernel_floor_host = host(label_floor_kernel), torch_host = host(label_libtorch);
  for (const auto& v : vs)
    rep.add({{"step", v.label}, {"host us", v.host}, {"A/A", v.host_twin / v.host - 1}, {"device us", v.device},
             {"host / floor", v.host / floor_host}, {"host / kernel floor", v.host / kernel_floor_host},
             {"libtorch host / host", torch_host / v.host},
             {"device burst", static_cast<double>(v.device_burst)},
             {"slots", v.slots ? v.slots() : not_measured}, {"runtime_calls_per_step", v.calls.total},
             {"runtime_calls", v.calls.names()}});
  if (find(label_libtorch) == nullptr)
    rep.add({{"step", label_libtorch}, {"host us", not_measured}, {"device us", not_measured},
             {"note", libtorch_why}});

  // Each target, and the same from the twins (A/A).
  auto ratio = [&](const char* a, const char* b, bool twin) { return host(a, twin) / host(b, twin); };
  rep.add_target("graph_host_vs_libtorch", ratio(label_libtorch, label_graph, false), ">=", 8,
                 ratio(label_libtorch, label_graph, true));
  rep.add_target("graph_host_vs_floor", ratio(label_graph, label_floor, false), "<=", 1.15,
                 ratio(label_graph, label_floor, true));
  // launch::kernel against the same floor kernel launched by cudaLaunchKernel (like for like, as
  // decode_step's kernel targets); the graph floor's ratio is in the row's "host / floor".
  rep.add_target("kernel_host_vs_floor", ratio(label_kernel, label_floor_kernel, false), "<=", 1.15,
                 ratio(label_kernel, label_floor_kernel, true));
  double syncs = 0, allocations = 0;  // the worst ferry row
  for (const auto& v : vs)
    if (v.ferry) {
      syncs = std::max(syncs, v.syncs);
      allocations = std::max(allocations, v.allocations);
    }
  rep.add_target("syncs_per_step", syncs, "<=", 0);
  rep.add_target("allocations_per_step", allocations, "<=", 0);

  rep.print();
  if (!libtorch_why.empty())
    std::cout << "target graph_host_vs_libtorch: missing (the libtorch row has no figures: " << libtorch_why << ")\n";
  for (const auto& v : vs)
    if (!v.guard_report.empty()) std::cout << "sync_guard saw in " << v.label << ": " << v.guard_report << "\n";
  rep.write_json(o.json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ferry_bench::bench_main("bench.engine_step", argc, argv, run); }
