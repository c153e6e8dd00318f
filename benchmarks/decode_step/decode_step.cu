// Benchmark decode_step (SPEC §10, §11): one engine step's input preparation, ferry beside the
// hand-written floors and the PyTorch and libtorch baselines, on the same host data.
//
// Rows measured in this process, in every pass interleaved round by round in an order rotated
// every round (so that no row always runs first or after the same neighbour):
//  - "ferry step_batch launch::kernel" and "... launch::graph": examples/decode_step/decode_step.hpp's
//    ferry_step, the whole step in one ferry::step_batch submit (one kernel launch, or one graph
//    replay of the batch's one executable, the step's table found on the device);
//  - "ferry per-component": the same file's component_step, the step built from ferry's
//    components (apply launch, UVA publishes, packed copy, logprob copy, fill launch);
//  - hand-written raw-CUDA floors (as ../shared/anchors/step-floor.cu writes them), each with its
//    own pinned slots (cudaHostAlloc, mapped) into which the host writes the whole step with the
//    same scheduler as ferry's (sampling arrays and logprob matrix packed, then positions,
//    sequence lengths, the block-table chunks and their contents), and one kernel that applies
//    the chunks (one block per chunk, read through UVA), fills the last logits index from the
//    slot's sequence lengths and, as its last act, stores the step's number into a mapped
//    counter (as ferry's kernel marks do); the host reads that counter once per step:
//      A:  one packed cudaMemcpyAsync of the sampling arrays and the logprob matrix's changing
//          rows + the kernel;
//      B:  the kernel alone, also copying those bytes from the slot through UVA, launched with
//          <<<>>> and checked with cudaPeekAtLastError (2 runtime calls);
//      B′: B launched with cudaLaunchKernel, its result checked (1 runtime call): the kernel
//          floor of the targets;
//      F:  B's kernel as a 1-node graph per slot (built once over the slot's fixed addresses,
//          replayed with each step's data in the slot): one cudaGraphLaunch;
//      G:  ONE graph executable for every slot: the kernel finds the step's slot on the device
//          (a device-side step counter, advanced by the kernel's last block, indexes a mapped
//          ring in which the host wrote the slot of each step), so a step is one cudaGraphLaunch
//          of one fixed executable: the graph floor of the targets.
//    Each floor is a correct step: a slot is rewritten only once the counter shows that its last
//    step has passed; when the next slot is still read, the floor takes a new one from slots it
//    allocated up front (as deep as ferry's ring may grow), as ferry's step_batch inserts one.
//    So its slots are as many, and as cold in the host's caches, as the steps in flight need.
//    The "4 slots, racy" row runs floor B over 4 fixed slots without that check: once the GPU
//    falls behind it rewrites slots that queued steps still read (wrong results, in warm memory):
//    a bound, not a step.
//    Appends covered by an admission of the same step are skipped, so chunks are disjoint.
//    The logprob matrix's rows that change (0..31) are uploaded every step, in ferry's step_batch
//    and in the floors alike; the rest stays no_token in device memory, written once (the
//    PyTorch and libtorch baselines upload the whole 12 KiB matrix: more device work, not more
//    host work, for their host figures).
//    Before timing, each floor is checked to produce exactly ferry's results.
//  - ablation rows, each floor B′ with a part left out (not steps: their results are not
//    checked): "launch only" (B′'s launch on a slot written once), "data generation only" (the
//    scheduler writing the step into one warm slot, no launch, no slot choice) and "prepared
//    data" (B′ with the step's slot image memcpy'd from a buffer prepared once, no scheduler);
//  - libtorch C++ in this process (where CMake found Torch: support/libtorch_peer.hpp): the step
//    written with libtorch (packed; 5 copies; packed with slots not fenced), on a
//    stream of torch's pool, in the same rounds as ferry's rows; its results checked against a
//    host replay after the run.
// Row read from a file written just before by a separate process on the same machine (a process
// cannot be interleaved; its label says so): --torch-step FILE (decode_step_torch.py --json).
//
// Host time, three regimes, each row's figure the median:
//  - bursts: --burst steps, the stream drained between bursts (not timed), --bursts rounds after
//    3 warm-up rounds (the device is slower than the host here, so a burst leaves up to ~100
//    steps in flight: deep, cold rings);
//  - "GPU idle": one step at a time, the stream drained before each (not timed);
//  - "warm ring": the GPU keeping up, as in an engine whose model step takes longer than its host
//    step: after each step (not timed) a 50 µs kernel stands in for the model and the host waits
//    for the previous step's model kernel, so the step is submitted to a busy stream with one
//    step in flight: a ring of 2-3 slots.
// Device time ("held"): a burst enqueued behind a kernel that spins until the host releases it
// once the burst is in, events from the release to the burst's end, median of several bursts
// after a warm-up one; a burst that fills the launch queue makes the hold give up after 1 s and
// is halved (the "device timing" column says with how many steps, and how the baselines in other
// processes measured theirs).
// Then an untimed pass of 1000 warm steps of each ferry row inside ferry::sync_guard (record
// mode) counts synchronizing calls and allocations per step, and, once no guard is alive (CUPTI
// takes one subscriber), another untimed pass counts every in-process row's CUDA runtime calls per
// step in steady state (support/runtime_calls.hpp: 1000 steps counted after 1000 uncounted ones),
// in bursts drained between them as the host-time bursts, and with the GPU idle. Each missed
// host-time target gets a line naming the calls per step of the two rows it compares. Last, where
// the host time of ferry's step_batch rows and their floors goes, in bursts and with the GPU idle:
// each sampled (support/host_profile.hpp), in the JSON's "host_profile".
//
// Under support/launch_tap.cpp (LD_PRELOAD; tools/gpu-check's launch phase) every launch call of
// the three timed regimes is timed too, by row and regime (support/launch_tap.hpp names them).
// FERRY_DECODE_SKIP_ROWS=REGEX leaves the rows whose labels match out of the timing (they are
// still built and warmed up; floor B' always stays): whether a row's figure depends on the rows
// timed beside it.
//
// The pair pass: after the pass with every row, each floor target's two rows (ferry's
// launch::kernel step and floor B'; ferry's launch::graph step and floor G) are timed again,
// alone with each other, in the same three host regimes and rotation (rows "alone with ...").
// Those targets compare two rows a fraction of a microsecond apart, and the rows timed beside
// them move that difference (benchmarks/results/h100/pairs: the same two rows' ratio differed
// between two library trees with every row timed, and matched when timed alone), so they are
// computed from the pair pass; the peer targets (libtorch, PyTorch) from the pass with every row.
//
// Before and after in one process: built with FERRY_BENCH_BEFORE_TREE (CMakeLists.txt), ferry's
// three rows are there twice, this tree's and the before tree's ("before tree: ..."; both from
// ferry_rows.cu, behind ferry_rows.hpp), timed in the same passes (in the pair pass, each floor
// with both trees' rows), and each tree gets its own table and targets from the shared floors and
// peers: this tree's into --json, the before tree's into --before-json FILE. A process's speed
// drifts (benchmarks/results/h100/pairs: whole processes ran every row slower for a while), and
// rows interleaved in one process see the same drift, where two processes, one per tree, do not.
//
// Targets (SPEC §10) are computed from rows looked up by label; a target whose row is absent is
// reported missing (null, not met) with a printed reason.
#include "ferry_rows.hpp"

#include <decode_step/decode_step.hpp>

#include <support/gpu.cuh>
#include <support/host_profile.hpp>
#include <support/launch_tap.hpp>
#include <support/runtime_calls.hpp>
#if FERRY_BENCH_LIBTORCH
#include <support/libtorch_peer.hpp>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iomanip>
#include <limits>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using B = ferry::backend::cuda;
using namespace decode_step;

namespace {

constexpr double not_measured = std::numeric_limits<double>::quiet_NaN();

/// Runtime calls per step not counted in this process, and why.
ferry_bench::calls_per_op not_counted(const char* why) {
  ferry_bench::calls_per_op c;
  c.note = why;
  return c;
}

/// "5.00 (cudaLaunchKernel 1.00, ...)", or why they were not counted.
std::string calls_text(const ferry_bench::calls_per_op& c) {
  if (!c.measured()) return c.names();
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << c.total << " (" << c.names() << ")";
  return s.str();
}

// ---- labels (targets look rows up by them) ------------------------------------------------------

constexpr const char* label_ferry = "ferry per-component";
constexpr const char* label_step_batch_kernel = "ferry step_batch launch::kernel";
constexpr const char* label_step_batch_graph = "ferry step_batch launch::graph (one executable for every slot)";
constexpr const char* label_floor_copy = "floor A: 1 packed copy + 1 fused kernel";
constexpr const char* label_floor_uva = "floor B: 1 fused kernel, all through UVA (<<<>>> + cudaPeekAtLastError)";
constexpr const char* label_floor_direct = "floor B': floor B launched by cudaLaunchKernel (kernel floor)";
constexpr const char* label_floor_graph_slot = "floor F: floor B's kernel as a 1-node graph per slot";
constexpr const char* label_floor_graph_one = "floor G: one graph executable for every slot, slot found on the device (graph floor)";
constexpr const char* label_racy_uva = "floor B, 4 slots, racy (rewrites slots still read: a bound, not a step)";
constexpr const char* label_launch_only = "ablation: launch only (floor B' launching a slot written once; not a step)";
constexpr const char* label_generate_only = "ablation: data generation only (scheduler writing into one warm slot; no launch)";
constexpr const char* label_prepared = "ablation: prepared data (floor B' copying a prepared slot image; no scheduler)";
constexpr const char* label_torch = "PyTorch in Python (decode_step_torch.py, separate process, run just before)";
constexpr const char* label_libtorch = "libtorch C++ packed (in process)";
/// ferry's rows, in the order ferry_rows.hpp gives them.
constexpr std::array<const char*, 3> ferry_labels{label_step_batch_kernel, label_step_batch_graph, label_ferry};
/// What the before tree's ferry rows' labels start with (FERRY_BENCH_DECODE_BEFORE).
constexpr const char* before_prefix = "before tree: ";

/// A label made at run time, kept until the process exits (the launch tap keeps the pointer).
const char* kept_label(std::string label) {
  static std::deque<std::string> kept;
  for (const auto& k : kept)
    if (k == label) return k.c_str();
  return kept.emplace_back(std::move(label)).c_str();
}
/// ferry's row `label` in the tree whose labels start with `prefix` ("": this tree).
const char* tree_label(const char* prefix, const char* label) {
  return *prefix == '\0' ? label : kept_label(std::string(prefix) + label);
}
/// The in-process libtorch rows: label and variant.
#if FERRY_BENCH_LIBTORCH
constexpr std::pair<const char*, ferry_bench::libtorch_peer::step_variant> libtorch_rows[] = {
    {label_libtorch, ferry_bench::libtorch_peer::step_variant::packed},
    {"libtorch C++ 5 copies (in process)", ferry_bench::libtorch_peer::step_variant::five_copies},
    {"libtorch C++ packed, slots not fenced (in process)", ferry_bench::libtorch_peer::step_variant::packed_nofence}};
#endif

// ---- the hand-written floors ---------------------------------------------------------------------

/// One block-table write of a floor step: `count` int32 from contents[src] to table[dst].
struct chunk {
  std::uint64_t dst;
  std::uint32_t src;
  std::uint32_t count;
};

/// Byte offsets in a floor's pinned slot. The first `copied` bytes (the sampling arrays as
/// async_h2d_packed lays them out, then the logprob matrix) go to device memory; the rest is read
/// through UVA where it lies (positions and sequence lengths as ferry's uva_backed publishes).
namespace slot {
constexpr std::size_t tokens = 0;
constexpr std::size_t temperature = tokens + batch * 4;
constexpr std::size_t top_p = temperature + batch * 4;
constexpr std::size_t top_k = top_p + batch * 4;
constexpr std::size_t seed = top_k + batch * 4;
constexpr std::size_t logprobs = seed + batch * 8;
constexpr std::size_t copied = logprobs + logprob_changing * 8;  // the matrix's rows that change
constexpr std::size_t device_bytes = logprobs + batch * logprob_cols * 8;      // the whole matrix
constexpr std::size_t seq_lens = copied;
constexpr std::size_t positions = seq_lens + batch * 4;
constexpr std::size_t descs = positions + batch * 8;
constexpr std::size_t contents = descs + writes_per_step * sizeof(chunk);
constexpr std::size_t chunks = ferry::detail::round_up(contents + elements_per_step * 4, 8);  // uint32
constexpr std::size_t seq = chunks + 8;                                                    // uint64
constexpr std::size_t bytes = ferry::detail::round_up(seq + 8, 256);
static_assert(logprobs == packed_bytes && copied % 16 == 0, "the packed parts, then the logprob matrix");
}  // namespace slot

constexpr unsigned floor_threads = 256;
constexpr unsigned copy_vectors = slot::copied / 16;
/// Blocks after the chunk blocks: the fill (block 0 of them) and, for the UVA floors, the copy.
constexpr unsigned copy_blocks = (copy_vectors + floor_threads - 1) / floor_threads;

struct floor_args {
  const chunk* descs;              // the slot (UVA), as the three below
  const std::uint32_t* chunks;
  const std::int32_t* contents;
  const std::int32_t* seq_lens;
  const uint4* slot_bytes;         // the first slot::copied bytes
  const std::uint64_t* seq;        // the step's number + 1
  std::int32_t* table;
  std::int32_t* logits;
  uint4* dev_bytes;
  unsigned vectors;                // 16-byte vectors the kernel copies (0: a copy moves them)
  unsigned* blocks_done;
  std::uint64_t* counter;          // mapped host memory
};

/// The fused step: blocks [0, writes_per_step) apply the chunks; the next ones fill the last
/// logits index and copy `vectors` 16-byte vectors; the last block to finish stores the step's
/// number into the counter (the pattern of ferry::detail::finish_kernel_mark) and returns true
/// in its thread 0 (false everywhere else). Every thread of the block must call it.
/// Plain loads of the slot: a launch orders them after the host's writes, and `__ldcv` loads of mapped
/// host memory made this kernel take ~200 µs of device time on the H200 (docs/design.md).
__device__ __forceinline__ bool floor_step_body(const floor_args& a) {
  if (blockIdx.x < writes_per_step) {
    if (blockIdx.x < *a.chunks) {
      const chunk* c = a.descs + blockIdx.x;
      const std::uint64_t dst = c->dst;
      const std::uint32_t src = c->src, count = c->count;
      for (unsigned i = threadIdx.x; i < count; i += blockDim.x) a.table[dst + i] = a.contents[src + i];
    }
  } else {
    const unsigned j = (blockIdx.x - writes_per_step) * blockDim.x + threadIdx.x;
    if (j == 0) a.logits[batch - 1] = a.seq_lens[batch - 1];
    if (j < a.vectors) a.dev_bytes[j] = a.slot_bytes[j];
  }
  __syncthreads();
  if (threadIdx.x != 0) return false;
  __threadfence();
  if (atomicAdd(a.blocks_done, 1u) != gridDim.x - 1) return false;
  *a.blocks_done = 0;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(a.counter) = *a.seq;
  return true;
}

__global__ void __launch_bounds__(floor_threads) floor_step_kernel(const floor_args a) { (void)floor_step_body(a); }

/// Floor G's arguments: the same for every step.
struct floor_ring_args {
  const floor_args* slots;         // device memory: the arguments of every slot
  const std::uint32_t* slot_of;    // mapped host memory: the slot of step n at n % ring
  unsigned long long* step;        // device memory: the steps run so far
  unsigned ring;
};

/// Floor G's kernel (step-floor.cu's step_kernel_ring): reads the step's number from the device
/// counter, finds the step's slot in the ring the host wrote, runs floor_step_body on that slot's
/// arguments; the last block advances the counter. The next step's kernel starts after this one
/// ends (stream order), so it sees the counter advanced.
__global__ void __launch_bounds__(floor_threads) floor_step_ring_kernel(const floor_ring_args r) {
  __shared__ unsigned k;
  if (threadIdx.x == 0) k = r.slot_of[*reinterpret_cast<volatile unsigned long long*>(r.step) % r.ring];
  __syncthreads();
  if (floor_step_body(r.slots[k])) *r.step += 1;
}

/// A hand-written floor (see the file comment): its own slots, device arrays and scheduler.
class floor_step {
 public:
  enum class kind {
    copy_kernel,     ///< A: packed copy + kernel
    uva_kernel,      ///< B: kernel, <<<>>> + cudaPeekAtLastError
    direct_kernel,   ///< B′: kernel, cudaLaunchKernel
    graph_per_slot,  ///< F: 1-node graph per slot
    graph_one_exec   ///< G: one executable for every slot
  };
  /// The slots a floor starts with (and the racy floor's fixed ring).
  static constexpr unsigned initial_slots = 4;

  /// A correct floor with up to `max_slots` slots (allocated now, used as the steps in flight
  /// need them), or with `racy`, initial_slots fixed slots rewritten without a check.
  floor_step(kind k, cudaStream_t s, unsigned max_slots, bool racy = false)
      : kind_(k), s_(s), racy_(racy), max_slots_(racy ? initial_slots : std::max(max_slots, initial_slots)),
        args_(max_slots_), graph_(max_slots_), exec_(max_slots_), last_step_(max_slots_, 0) {
    // The slots, then the counter, then floor G's ring of the slot of each step.
    const std::size_t pinned_bytes = std::size_t{max_slots_} * slot::bytes + 256 + std::size_t{max_slots_} * 4;
    BENCH_CUDA(cudaHostAlloc(&pinned_, pinned_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(pinned_, 0, pinned_bytes);
    counter_ = reinterpret_cast<std::uint64_t*>(pinned_ + std::size_t{max_slots_} * slot::bytes);
    slot_of_ = reinterpret_cast<std::uint32_t*>(pinned_ + std::size_t{max_slots_} * slot::bytes + 256);
    BENCH_CUDA(cudaMalloc(&table_, max_requests * max_blocks * 4));
    BENCH_CUDA(cudaMemset(table_, 0, max_requests * max_blocks * 4));
    BENCH_CUDA(cudaMalloc(&dev_bytes_, slot::device_bytes));
    std::vector<std::int64_t> matrix(batch * logprob_cols);
    scheduler::logprob_init(matrix.data());  // the rows that never change, once
    BENCH_CUDA(cudaMemcpy(dev_bytes_ + slot::logprobs, matrix.data(), matrix.size() * 8, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMalloc(&logits_, batch * 4));
    BENCH_CUDA(cudaMalloc(&blocks_done_, sizeof(unsigned)));
    BENCH_CUDA(cudaMemset(blocks_done_, 0, sizeof(unsigned)));
    std::vector<std::int32_t> iota(batch);
    for (std::size_t i = 0; i < batch; ++i) {
      iota[i] = static_cast<std::int32_t>(i);
      seq_lens_[i] = scheduler::initial_seq_len(i);
      positions_[i] = seq_lens_[i] - 1;
    }
    BENCH_CUDA(cudaMemcpy(logits_, iota.data(), batch * 4, cudaMemcpyHostToDevice));
    const bool uva_copy = kind_ != kind::copy_kernel;
    for (unsigned k = 0; k < max_slots_; ++k) {
      std::fill_n(at<std::int64_t>(k, slot::logprobs), logprob_changing, no_token);  // kept: ids rewritten
      args_[k] = {dev<chunk>(k, slot::descs), dev<std::uint32_t>(k, slot::chunks), dev<std::int32_t>(k, slot::contents),
                  dev<std::int32_t>(k, slot::seq_lens), dev<uint4>(k, 0), dev<std::uint64_t>(k, slot::seq),
                  table_, logits_, reinterpret_cast<uint4*>(dev_bytes_),
                  uva_copy ? copy_vectors : 0u, blocks_done_,
                  static_cast<std::uint64_t*>(device_address(counter_))};
    }
    grid_ = writes_per_step + (uva_copy ? copy_blocks : 1u);
    if (kind_ == kind::graph_per_slot)
      for (unsigned k = 0; k < max_slots_; ++k) build_graph(k);
    if (kind_ == kind::graph_one_exec) build_ring_graph();
  }
  floor_step(const floor_step&) = delete;
  floor_step& operator=(const floor_step&) = delete;
  ~floor_step() {
    cudaStreamSynchronize(s_);
    for (unsigned k = 0; k < max_slots_; ++k) {
      if (exec_[k] != nullptr) cudaGraphExecDestroy(exec_[k]);
      if (graph_[k] != nullptr) cudaGraphDestroy(graph_[k]);
    }
    if (ring_exec_ != nullptr) cudaGraphExecDestroy(ring_exec_);
    if (ring_graph_ != nullptr) cudaGraphDestroy(ring_graph_);
    cudaFreeHost(pinned_);
    cudaFree(table_);
    cudaFree(dev_bytes_);
    cudaFree(logits_);
    cudaFree(blocks_done_);
    cudaFree(ring_slots_);
    cudaFree(ring_step_);
  }

  /// One step: the next free slot (one load of the counter), the host writes the step into it,
  /// submits.
  void run() {
    const std::int64_t step = sched_.begin_step();
    const unsigned k = next_slot();
    write_step(step, k);
    submit(step, k);
  }

  // ---- ablations (floor B′ with a part left out; not steps) ----

  /// The launch alone, on the slot of the last step (written by run() once before).
  void launch_only() { launch(cur_); }
  /// The host data alone: the scheduler writes the next step into the slot of the last step (the
  /// GPU reads no slot of this floor meanwhile: nothing else runs on it), no slot choice, no launch.
  void generate_only() { write_step(sched_.begin_step(), cur_); }
  /// The step with its data prepared: the next free slot, the slot image of the last step run()
  /// wrote (taken by prepare()) copied into it with the step's number, the launch; no scheduler.
  void prepared() {
    const std::int64_t step = prepared_step_++;
    const unsigned k = next_slot();
    std::memcpy(at<std::byte>(k, 0), image_.data(), slot::seq);
    *at<std::uint64_t>(k, slot::seq) = static_cast<std::uint64_t>(step) + 1;
    submit(step, k);
  }
  /// Runs one real step, waits for it, and keeps its slot image for prepared().
  void prepare() {
    run();
    BENCH_CUDA(cudaStreamSynchronize(s_));
    image_.assign(at<std::byte>(cur_, 0), at<std::byte>(cur_, 0) + slot::bytes);
    prepared_step_ = sched_.steps();
  }

  /// Slots in use so far (the deepest ring the steps in flight needed).
  [[nodiscard]] unsigned slots() const noexcept { return active_; }

  // The results, for the check against ferry's (after the stream is drained).
  [[nodiscard]] const std::int32_t* table() const noexcept { return table_; }
  [[nodiscard]] const std::int32_t* logits_indices() const noexcept { return logits_; }
  /// A device array of the step (at slot::tokens .. slot::logprobs).
  template <class T>
  [[nodiscard]] const T* device_array(std::size_t off) const noexcept {
    return reinterpret_cast<const T*>(dev_bytes_ + off);
  }
  /// An array of the last step's slot (slot::positions, slot::seq_lens).
  template <class T>
  [[nodiscard]] const T* last_slot(std::size_t off) const noexcept {
    return at<const T>(cur_, off);
  }
  /// Floor G: the device's step counter equals the steps submitted (after the stream is drained).
  [[nodiscard]] bool ring_counter_matches() const {
    if (kind_ != kind::graph_one_exec) return true;
    unsigned long long n = 0;
    BENCH_CUDA(cudaMemcpy(&n, ring_step_, sizeof n, cudaMemcpyDeviceToHost));
    return n == ring_submitted_;
  }

 private:
  // The step into slot k, written: record its number, submit it.
  void submit(std::int64_t step, unsigned k) {
    last_step_[k] = static_cast<std::uint64_t>(step) + 1;  // what the counter reads once it passed
    before_ = cur_;
    cur_ = k;
    switch (kind_) {
      case kind::copy_kernel:
        BENCH_CUDA(cudaMemcpyAsync(dev_bytes_, at<std::byte>(k, 0), slot::copied, cudaMemcpyHostToDevice, s_));
        launch(k);
        break;
      case kind::uva_kernel:
      case kind::direct_kernel:
        launch(k);
        break;
      case kind::graph_per_slot:
        BENCH_CUDA(cudaGraphLaunch(exec_[k], s_));
        break;
      case kind::graph_one_exec:
        slot_of_[ring_submitted_ % max_slots_] = k;  // the kernel of step ring_submitted_ reads it
        ++ring_submitted_;
        BENCH_CUDA(cudaGraphLaunch(ring_exec_, s_));
        break;
    }
  }

  // ferry's step_batch::begin() rule, by hand: the slot of the step before the last if its step
  // has passed (the GPU keeps up: two warm slots), else the slot after the last one if passed,
  // else a slot not used yet; with none left the host waits (a correct step never rewrites a
  // slot that is still read). "Passed" is one load of the counter, which the kernels store in
  // step order. Racy: the next of 4, unchecked. Steps in flight hold distinct slots, so there
  // are never more than max_slots_ of them: floor G's ring of max_slots_ entries is never
  // rewritten before the kernel that reads an entry has run.
  unsigned next_slot() {
    const unsigned next = (cur_ + 1) % active_;
    if (racy_) return next;
    const std::uint64_t passed = *reinterpret_cast<volatile std::uint64_t*>(counter_);
    if (before_ != cur_ && passed >= last_step_[before_]) return before_;
    if (passed >= last_step_[next]) return next;
    if (active_ < max_slots_) return active_++;
    while (*reinterpret_cast<volatile std::uint64_t*>(counter_) < last_step_[next]) {
    }
    return next;
  }

  template <class T>
  T* at(unsigned k, std::size_t off) const noexcept {
    return reinterpret_cast<T*>(pinned_ + std::size_t{k} * slot::bytes + off);
  }
  static void* device_address(void* host) {
    void* d = nullptr;
    BENCH_CUDA(cudaHostGetDevicePointer(&d, host, 0));
    return d;
  }
  template <class T>
  const T* dev(unsigned k, std::size_t off) const {
    return static_cast<const T*>(device_address(at<std::byte>(k, off)));
  }

  void write_step(std::int64_t step, unsigned k) {
    scheduler::advance(positions_, seq_lens_);
    std::memcpy(at<std::int32_t>(k, slot::seq_lens), seq_lens_.data(), batch * 4);
    std::memcpy(at<std::int64_t>(k, slot::positions), positions_.data(), batch * 8);
    auto* descs = at<chunk>(k, slot::descs);
    auto* contents = at<std::int32_t>(k, slot::contents);
    std::uint32_t n = 0, used = 0;
    const std::size_t first_admitted = scheduler::admitted_row(step, 0);
    sched_.for_each_write(step, seq_lens_, [&](std::size_t row, std::size_t start, std::span<const std::int32_t> ids) {
      if (ids.size() == 1 && start < admitted_blocks && row - first_admitted < admitted) return;  // covered
      std::memcpy(contents + used, ids.data(), ids.size() * 4);
      descs[n++] = {row * max_blocks + start, used, static_cast<std::uint32_t>(ids.size())};
      used += static_cast<std::uint32_t>(ids.size());
    });
    *at<std::uint32_t>(k, slot::chunks) = n;
    *at<std::uint64_t>(k, slot::seq) = static_cast<std::uint64_t>(step) + 1;
    scheduler::sampling(step, at<std::int32_t>(k, slot::tokens), at<float>(k, slot::temperature),
                        at<float>(k, slot::top_p), at<std::int32_t>(k, slot::top_k), at<std::int64_t>(k, slot::seed));
    scheduler::logprob_rows(step, at<std::int64_t>(k, slot::logprobs));
  }

  void launch(unsigned k) {
    if (kind_ == kind::uva_kernel || kind_ == kind::copy_kernel) {
      floor_step_kernel<<<grid_, floor_threads, 0, s_>>>(args_[k]);
      BENCH_CUDA(cudaPeekAtLastError());
    } else {  // B′: one runtime call, whose result is the launch's
      void* params[] = {&args_[k]};
      BENCH_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&floor_step_kernel), dim3(grid_), dim3(floor_threads),
                                  params, 0, s_));
    }
  }

  /// A graph of one kernel node with `params` (a pointer to the kernel's one argument).
  template <class Args>
  void one_node_graph(cudaGraph_t& graph, cudaGraphExec_t& exec, void (*kernel)(Args), Args* args) {
    BENCH_CUDA(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t node = nullptr;
    void* params[] = {args};
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(kernel);
    p.gridDim = dim3(grid_);
    p.blockDim = dim3(floor_threads);
    p.kernelParams = params;
    BENCH_CUDA(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &p));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    BENCH_CUDA(cudaGraphUpload(exec, s_));
  }

  void build_graph(unsigned k) { one_node_graph(graph_[k], exec_[k], &floor_step_kernel, &args_[k]); }

  void build_ring_graph() {
    BENCH_CUDA(cudaMalloc(&ring_slots_, std::size_t{max_slots_} * sizeof(floor_args)));
    BENCH_CUDA(cudaMemcpy(ring_slots_, args_.data(), std::size_t{max_slots_} * sizeof(floor_args), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMalloc(&ring_step_, sizeof(unsigned long long)));
    BENCH_CUDA(cudaMemset(ring_step_, 0, sizeof(unsigned long long)));
    floor_ring_args r{ring_slots_, static_cast<const std::uint32_t*>(device_address(slot_of_)), ring_step_, max_slots_};
    one_node_graph(ring_graph_, ring_exec_, &floor_step_ring_kernel, &r);
  }

  kind kind_;
  cudaStream_t s_;
  bool racy_;
  unsigned max_slots_;
  scheduler sched_;
  std::array<std::int64_t, batch> positions_{};  // the host's truth
  std::array<std::int32_t, batch> seq_lens_{};
  std::byte* pinned_ = nullptr;  // max_slots_ slots, the counter, floor G's ring
  std::uint64_t* counter_ = nullptr;
  std::uint32_t* slot_of_ = nullptr;
  std::byte* dev_bytes_ = nullptr;
  std::int32_t* table_ = nullptr;
  std::int32_t* logits_ = nullptr;
  unsigned* blocks_done_ = nullptr;
  unsigned grid_ = 0;
  std::vector<floor_args> args_;
  std::vector<cudaGraph_t> graph_;
  std::vector<cudaGraphExec_t> exec_;
  cudaGraph_t ring_graph_ = nullptr;
  cudaGraphExec_t ring_exec_ = nullptr;
  floor_args* ring_slots_ = nullptr;
  unsigned long long* ring_step_ = nullptr;
  unsigned long long ring_submitted_ = 0;  // floor G's steps submitted: the device counter follows it
  std::vector<std::uint64_t> last_step_;  // per slot: its last step's number + 1 (0: none)
  unsigned active_ = initial_slots;       // slots in the ring so far
  unsigned cur_ = initial_slots - 1;      // the slot of the last step
  unsigned before_ = cur_;                // the slot of the step before it
  std::vector<std::byte> image_;          // prepared(): a slot image
  std::int64_t prepared_step_ = 0;
};

/// Copies `n` elements at `p` (device or mapped host memory) to the host (synchronous: checks only).
template <class T>
std::vector<T> fetch(const T* p, std::size_t n) {
  std::vector<T> v(n);
  BENCH_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDefault));
  return v;
}

/// Each floor and ferry's step from step 0, drained after each: the floor's results must equal
/// ferry's. Every 5th time, 6 steps are queued behind a kernel that holds the stream for 1 ms, so
/// that the floor's ring grows and floor G's device-side slot lookup is checked past a fixed
/// rotation.
void check_same_work(floor_step::kind k, const char* label) {
  ferry::stream<B> s;
  ferry_step<B> f(s);
  floor_step r(k, s.get(), 16);
  for (int step = 0; step < 40; ++step) {
    const int queued = step % 5 == 4 ? 6 : 1;  // a few steps behind a held stream: new slots
    if (queued > 1) ferry_bench::hold_stream(s.get(), 1);
    for (int q = 0; q < queued; ++q) {
      f.run(s);
      r.run();
    }
    s.synchronize();
    if (!r.ring_counter_matches())
      throw std::runtime_error(std::string(label) + ": the device's step counter does not follow the steps submitted");
    const auto& [tok, temp, top_p, top_k, seed] = f.sampling();
    auto same = [&](const char* what, const auto& got, const auto& want) {
      if (got != want)
        throw std::runtime_error(std::string(label) + " differs from ferry's step in " + what + " at step " +
                                 std::to_string(step));
    };
    same("the block table", fetch(r.table(), max_requests * max_blocks), fetch(f.block_table().data(), max_requests * max_blocks));
    same("positions", fetch(r.last_slot<std::int64_t>(slot::positions), batch), fetch(f.positions().data(), batch));
    same("seq_lens", fetch(r.last_slot<std::int32_t>(slot::seq_lens), batch), fetch(f.seq_lens().data(), batch));
    same("token ids", fetch(r.device_array<std::int32_t>(slot::tokens), batch), fetch(tok.data(), batch));
    same("temperature", fetch(r.device_array<float>(slot::temperature), batch), fetch(temp.data(), batch));
    same("top-p", fetch(r.device_array<float>(slot::top_p), batch), fetch(top_p.data(), batch));
    same("top-k", fetch(r.device_array<std::int32_t>(slot::top_k), batch), fetch(top_k.data(), batch));
    same("seed", fetch(r.device_array<std::int64_t>(slot::seed), batch), fetch(seed.data(), batch));
    same("the logprob matrix", fetch(r.device_array<std::int64_t>(slot::logprobs), batch * logprob_cols),
         fetch(f.logprobs().data(), batch * logprob_cols));
    same("the logits indices", fetch(r.logits_indices(), batch), fetch(f.logits_indices().data(), batch));
  }
}

// ---- measurement ----------------------------------------------------------------------------------

/// Holds a stream until released: spins on a flag in mapped memory, gives up after max_ns.
__global__ void hold_until_released(const volatile unsigned* flag, unsigned long long max_ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (*flag == 0 && t - t0 < max_ns);
}

/// Held-stream device time (see the file comment), the same for every in-process row.
class held_timer {
 public:
  explicit held_timer(cudaStream_t s) : s_(s) {
    BENCH_CUDA(cudaHostAlloc(&flag_, sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable));
    BENCH_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev_), const_cast<unsigned*>(flag_), 0));
    BENCH_CUDA(cudaEventCreate(&e0_));
    BENCH_CUDA(cudaEventCreate(&e1_));
  }
  held_timer(const held_timer&) = delete;
  held_timer& operator=(const held_timer&) = delete;
  ~held_timer() {
    cudaStreamSynchronize(s_);
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
    cudaFreeHost(const_cast<unsigned*>(flag_));
  }

  /// Device µs per step of `burst` steps queued behind the hold; nullopt when the host blocked
  /// (the burst filled the launch queue).
  std::optional<double> sample(const std::function<void()>& step, int burst) {
    *flag_ = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    hold_until_released<<<1, 1, 0, s_>>>(flag_dev_, timeout_ns);
    BENCH_CUDA(cudaPeekAtLastError());
    BENCH_CUDA(cudaEventRecord(e0_, s_));
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < burst; ++k) step();
    const auto t1 = std::chrono::steady_clock::now();
    BENCH_CUDA(cudaEventRecord(e1_, s_));
    *flag_ = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    BENCH_CUDA(cudaStreamSynchronize(s_));
    if (std::chrono::duration<double, std::nano>(t1 - t0).count() > timeout_ns / 2) return std::nullopt;
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0_, e1_));
    return ms * 1e3 / burst;
  }

 private:
  static constexpr unsigned long long timeout_ns = 1'000'000'000ull;
  cudaStream_t s_;
  volatile unsigned* flag_ = nullptr;
  unsigned* flag_dev_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

/// One in-process row: a way to run the step, on its stream.
struct variant {
  const char* label;
  std::function<void()> step;
  /// A ferry row's sync_guard pass (its tree's guard); empty for the others.
  std::function<decode_step_ferry_rows::guard_counts()> guard{};
  std::function<std::size_t()> slots{};  ///< its ring's depth, where it has one
  bool device_work = true;               ///< false: it enqueues nothing (no device time)
  cudaStream_t stream = nullptr;         ///< the stream it runs on (set in run(): the benchmark's by default)
  double host = not_measured, device = not_measured;
  double host_idle = not_measured;  ///< one step at a time, the stream drained before each
  double host_warm = not_measured;  ///< the GPU keeping up: a ring of 2-3 slots
  int device_burst = 0;
  double syncs = not_measured, allocations = not_measured;  ///< per step (ferry rows)
  std::string guard_report{};
  /// Runtime calls per step: in bursts drained between them, and with the GPU idle.
  ferry_bench::calls_per_op calls = not_counted("not counted"), calls_idle = not_counted("not counted");
};

void drain(const variant& v) { BENCH_CUDA(cudaStreamSynchronize(v.stream)); }

double micros(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

/// The model kernel of the warm regime: how long it holds the stream after each step.
constexpr double warm_model_ms = 0.05;

/// Host time of every variant in the three regimes and, with `device_time`, its device time (see
/// the file comment). In every pass, round r runs each row once, in the order rotated by r.
void measure(std::vector<variant>& vs, const ferry_bench::options& o, bool device_time = true) {
  using clk = std::chrono::steady_clock;
  const std::size_t m = vs.size();
  // Bursts: ferry_bench::interleaved_us (3 warm-up rounds, then o.bursts rounds).
  std::vector<ferry_bench::timed_burst> bursts;
  for (auto& v : vs)
    bursts.push_back([&v](std::size_t n) {
      ferry_bench::tap_row(v.label, "bursts");
      const auto t0 = clk::now();
      for (std::size_t k = 0; k < n; ++k) v.step();
      const auto t1 = clk::now();
      ferry_bench::tap_row(nullptr, nullptr);
      drain(v);
      return micros(t0, t1);
    });
  const std::vector<double> host = ferry_bench::interleaved_us(o, bursts, [] {});

  // Device time: one held_timer per stream.
  std::vector<std::pair<cudaStream_t, std::unique_ptr<held_timer>>> timers;
  auto timer_of = [&](cudaStream_t s) -> held_timer& {
    for (auto& [t_s, t] : timers)
      if (t_s == s) return *t;
    timers.emplace_back(s, std::make_unique<held_timer>(s));
    return *timers.back().second;
  };
  std::vector<std::vector<double>> device(m);
  const std::size_t reps = static_cast<std::size_t>(std::max(3, o.bursts / 4));
  for (auto& v : vs) {
    if (!v.device_work || !device_time) continue;
    v.device_burst = o.burst;
    (void)timer_of(v.stream).sample(v.step, v.device_burst);  // warm-up: the most steps in flight
  }
  auto device_done = [&](std::size_t i) { return !vs[i].device_work || !device_time || device[i].size() == reps; };
  for (std::size_t round = 0;; ++round) {
    bool more = false;
    for (std::size_t j = 0; j < m; ++j) {
      const std::size_t i = (j + round) % m;
      if (device_done(i)) continue;
      if (const auto us = timer_of(vs[i].stream).sample(vs[i].step, vs[i].device_burst)) {
        device[i].push_back(*us);
      } else {
        if ((vs[i].device_burst /= 2) < 8) throw std::runtime_error(std::string(vs[i].label) + ": 8 steps fill the launch queue");
        device[i].clear();
      }
    }
    for (std::size_t i = 0; i < m; ++i) more = more || !device_done(i);
    if (!more) break;
  }

  // GPU idle: one step at a time, the stream drained before each; rounds of 16 steps per row.
  constexpr int idle_chunk = 16;
  const int idle_rounds = std::max(1, o.bursts * o.burst / idle_chunk);
  std::vector<std::vector<double>> idle(m);
  for (int round = 0; round < idle_rounds; ++round)
    for (std::size_t j = 0; j < m; ++j) {
      variant& v = vs[(j + static_cast<std::size_t>(round)) % m];
      auto& out = idle[(j + static_cast<std::size_t>(round)) % m];
      ferry_bench::tap_row(v.label, "GPU idle");
      for (int k = 0; k < idle_chunk; ++k) {
        drain(v);
        const auto t0 = clk::now();
        v.step();
        const auto t1 = clk::now();
        out.push_back(micros(t0, t1));
      }
      ferry_bench::tap_row(nullptr, nullptr);
      drain(v);
    }

  // Warm ring: after each step (not timed) the model kernel, then a wait for the previous
  // step's model kernel; rounds of 34 steps per row, the first 2 of each not kept (submitted to
  // an idle stream).
  constexpr int warm_chunk = 34, warm_skip = 2;
  const int warm_rounds = std::max(1, o.bursts);
  std::vector<std::vector<double>> warm(m);
  cudaEvent_t model_done[2];
  for (auto& e : model_done) BENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (int round = 0; round < warm_rounds; ++round)
    for (std::size_t j = 0; j < m; ++j) {
      variant& v = vs[(j + static_cast<std::size_t>(round)) % m];
      auto& out = warm[(j + static_cast<std::size_t>(round)) % m];
      drain(v);
      ferry_bench::tap_row(v.label, "warm ring");
      for (int k = 0; k < warm_chunk; ++k) {
        const auto t0 = clk::now();
        v.step();
        const auto t1 = clk::now();
        if (k >= warm_skip) out.push_back(micros(t0, t1));
        ferry_bench::hold_stream(v.stream, warm_model_ms);
        BENCH_CUDA(cudaEventRecord(model_done[k % 2], v.stream));
        if (k > 0) BENCH_CUDA(cudaEventSynchronize(model_done[(k + 1) % 2]));
      }
      ferry_bench::tap_row(nullptr, nullptr);
      drain(v);
    }
  for (auto& e : model_done) BENCH_CUDA(cudaEventDestroy(e));

  for (std::size_t i = 0; i < m; ++i) {
    vs[i].host = host[i];
    vs[i].device = vs[i].device_work && device_time ? ferry_bench::median(device[i]) : not_measured;
    vs[i].host_idle = ferry_bench::median(idle[i]);
    vs[i].host_warm = ferry_bench::median(warm[i]);
  }
}

/// The untimed guard pass of a ferry row.
void count_syncs(variant& v) {
  auto counts = v.guard();
  v.syncs = counts.syncs;
  v.allocations = counts.allocations;
  if (!counts.report.empty()) v.guard_report = std::move(counts.report);
}

/// The untimed calls pass of a row (see the file comment): bursts of `burst` steps with the stream
/// drained between them, then one step at a time with the stream drained before each. No
/// sync_guard may be alive meanwhile.
void count_calls(variant& v, int burst) {
  auto step = [&](std::size_t) { v.step(); };
  v.calls = ferry_bench::steady_calls(step, [&](std::size_t i) {
    if (i % static_cast<std::size_t>(burst) == 0) drain(v);
  });
  v.calls_idle = ferry_bench::steady_calls(step, [&](std::size_t) { drain(v); });
  drain(v);
}

/// The two rows of a floor target, and their labels in the pair pass (see the file comment).
struct target_pair {
  const char* ferry_row;
  const char* floor_row;
  const char* alone;        ///< what the labels of ferry's rows in the pair pass start with
  const char* floor_alone;  ///< the floor's label there
  /// ferry's row of the tree whose labels start with `prefix`, in the pair pass.
  [[nodiscard]] const char* ferry_alone(const char* prefix = "") const {
    return kept_label(std::string(alone) + prefix + ferry_row);
  }
};
constexpr target_pair kernel_pair{label_step_batch_kernel, label_floor_direct, "alone with floor B': ",
                                  "alone with ferry launch::kernel: floor B'"};
constexpr target_pair graph_pair{label_step_batch_graph, label_floor_graph_one, "alone with floor G: ",
                                 "alone with ferry launch::graph: floor G"};
constexpr std::array<target_pair, 2> target_pairs{kernel_pair, graph_pair};

/// One tree's ferry rows, and what their labels start with.
struct tree_rows {
  const char* prefix;
  decode_step_ferry_rows rows;
};

const variant* find_row(const std::vector<variant>& vs, const char* label) {
  for (const auto& v : vs)
    if (std::string(v.label) == label) return &v;
  return nullptr;
}

/// The pair pass: each floor target's rows timed again, host time only, in a measure() of their
/// own (the same rows, so the same rings), relabelled: the floor and ferry's row of every tree
/// built in (the before tree's beside this one's). A pair whose floor or ferry row is not timed in
/// this run (FERRY_DECODE_SKIP_ROWS) is left out.
std::vector<variant> measure_pairs(const std::vector<variant>& vs, const std::vector<tree_rows>& trees,
                                   const ferry_bench::options& o) {
  std::vector<variant> alone;
  for (const target_pair& p : target_pairs) {
    std::vector<variant> group;
    for (const tree_rows& t : trees)
      if (const variant* v = find_row(vs, tree_label(t.prefix, p.ferry_row))) {
        group.push_back(*v);
        group.back().label = p.ferry_alone(t.prefix);
      }
    const variant* floor_row = find_row(vs, p.floor_row);
    if (group.empty() || floor_row == nullptr) continue;
    group.push_back(*floor_row);
    group.back().label = p.floor_alone;
    measure(group, o, false);
    alone.insert(alone.end(), group.begin(), group.end());
  }
  return alone;
}

/// The rows as the tree `t` reports them: its ferry rows under this tree's labels, the other
/// trees' left out (each tree's report holds the same floors and peers).
std::vector<variant> tree_view(const std::vector<variant>& rows, const std::vector<tree_rows>& trees,
                               const tree_rows& t) {
  std::vector<variant> out;
  for (const variant& v : rows) {
    const char* label = v.label;
    bool other_tree = false;
    for (const tree_rows& u : trees) {
      auto match = [&](const char* theirs, const char* ours) {
        if (std::string(v.label) != theirs) return;
        if (&u == &t) label = ours; else other_tree = true;
      };
      for (const char* l : ferry_labels) match(tree_label(u.prefix, l), l);
      for (const target_pair& p : target_pairs) match(p.ferry_alone(u.prefix), p.ferry_alone());
    }
    if (other_tree) continue;
    out.push_back(v);
    out.back().label = label;
  }
  return out;
}

/// A row of the table and the JSON.
struct row_figures {
  std::string label;
  double host, device;
  std::string device_timing;
  double host_idle = not_measured, host_warm = not_measured;
  double slots = not_measured;  ///< pinned slots its ring holds after the run
  ferry_bench::calls_per_op calls = not_counted("a separate process"), calls_idle = calls;
};

/// Prints and writes (to `json`) the table and targets of one tree's rows (tree_view), and with
/// `profile` where the host time of its step_batch rows and their floors goes.
void report_tree(std::vector<variant>& vs, const std::vector<variant>& alone, const ferry_bench::options& o,
                 const std::string& libtorch_why, const std::string& json, bool profile) {
  ferry_bench::report rep("decode_step");
  rep.machine = ferry_bench::gpu_name();
  std::vector<row_figures> rows;
  for (const auto& v : vs)
    rows.push_back({v.label, v.host, v.device,
                    v.device_work ? "held, burst " + std::to_string(v.device_burst) : "none (no device work)",
                    v.host_idle, v.host_warm, v.slots ? static_cast<double>(v.slots()) : not_measured, v.calls,
                    v.calls_idle});
  if (!o.torch_step.empty())
    rows.push_back({label_torch, ferry_bench::json_number(o.torch_step, "host_us"),
                    ferry_bench::json_number(o.torch_step, "device_us"),
                    "burst behind a 300 ms spin; host-paced once the launch queue fills"});

  auto find = [&](const char* label) -> const row_figures* {
    for (const auto& r : rows)
      if (r.label == label) return &r;
    return nullptr;
  };
  auto host = [&](const char* label) { const auto* r = find(label); return r ? r->host : not_measured; };
  auto host_idle = [&](const char* label) { const auto* r = find(label); return r ? r->host_idle : not_measured; };
  auto device = [&](const char* label) { const auto* r = find(label); return r ? r->device : not_measured; };
  const double kernel_floor = host(label_floor_direct), kernel_floor_idle = host_idle(label_floor_direct);
  const double kernel_floor_warm = find(label_floor_direct)->host_warm;
  const double graph_floor = host(label_floor_graph_one);
  const double fused_kernel_device = device(label_floor_direct);
  for (const auto& r : rows)
    rep.add({{"step", r.label}, {"host us", r.host}, {"host us, GPU idle", r.host_idle},
             {"host us, warm ring", r.host_warm}, {"device us", r.device},
             {"host / kernel floor B'", r.host / kernel_floor},
             {"idle host / kernel floor B'", r.host_idle / kernel_floor_idle},
             {"warm host / kernel floor B'", r.host_warm / kernel_floor_warm},
             {"host / graph floor G", r.host / graph_floor},
             {"device / fused kernel", r.device / fused_kernel_device},
             {"slots", r.slots}, {"runtime_calls_per_step", r.calls.total},
             {"runtime_calls_per_step_idle", r.calls_idle.total}, {"device timing", r.device_timing},
             {"runtime_calls", r.calls.names()}, {"runtime_calls_idle", r.calls_idle.names()}});
  // The pair pass's rows, each beside its pair's floor timed in the same pass.
  auto alone_figure = [&](const char* label, double variant::*figure) {
    const variant* v = find_row(alone, label);
    return v ? v->*figure : not_measured;
  };
  for (const target_pair& p : target_pairs)
    for (const char* label : {p.ferry_alone(), p.floor_alone}) {
      if (find_row(alone, label) == nullptr) continue;
      auto over_floor = [&](double variant::*figure) {
        return alone_figure(label, figure) / alone_figure(p.floor_alone, figure);
      };
      rep.add({{"step", label}, {"host us", alone_figure(label, &variant::host)},
               {"host us, GPU idle", alone_figure(label, &variant::host_idle)},
               {"host us, warm ring", alone_figure(label, &variant::host_warm)},
               {"host / its pair's floor", over_floor(&variant::host)},
               {"idle host / its pair's floor", over_floor(&variant::host_idle)},
               {"warm host / its pair's floor", over_floor(&variant::host_warm)}});
    }

  std::vector<std::string> missing;
  auto target = [&](const char* name, double value, const char* op, double goal, std::initializer_list<const char*> needs) {
    rep.add_target(name, value, op, goal);
    if (!std::isnan(value)) return;
    std::string why;
    for (const char* need : needs)
      why += std::string(why.empty() ? "" : "; ") + (find(need) == nullptr ? "no row \"" : "no figure in row \"") +
             need + "\" in this run";
    missing.push_back(std::string(name) + ": missing (" + why + ")");
  };
  // A host-time target between a ferry row and another; missed, it gets a line naming both rows'
  // runtime calls per step (in bursts, or with the GPU idle, as the target's times).
  std::vector<std::string> explained;
  auto host_target = [&](const char* name, double value, const char* op, double goal, const char* ferry_row,
                         const char* other, bool idle) {
    target(name, value, op, goal, {other, ferry_row});
    if (std::isnan(value) || ferry_bench::target{name, value, op, goal}.met()) return;
    auto calls = [&](const char* label) {
      const auto* r = find(label);
      return std::string(label) + " " + calls_text(idle ? r->calls_idle : r->calls);
    };
    explained.push_back(std::string(name) + " missed, runtime calls per step " + (idle ? "with the GPU idle" : "in bursts") +
                        ": " + calls(ferry_row) + " vs " + calls(other));
  };
  // The floor targets from the pair pass (see the file comment); the peer targets from every row's.
  const double kernel_alone = alone_figure(kernel_pair.ferry_alone(), &variant::host),
               kernel_floor_alone = alone_figure(kernel_pair.floor_alone, &variant::host);
  const double graph_alone = alone_figure(graph_pair.ferry_alone(), &variant::host),
               graph_floor_alone = alone_figure(graph_pair.floor_alone, &variant::host);
  host_target("kernel_host_vs_floor", kernel_alone / kernel_floor_alone, "<=", 1.15, label_step_batch_kernel,
              label_floor_direct, false);
  host_target("kernel_host_over_floor_us", kernel_alone - kernel_floor_alone, "<=", 0.5, label_step_batch_kernel,
              label_floor_direct, false);
  host_target("kernel_host_idle_over_floor_us",
              alone_figure(kernel_pair.ferry_alone(), &variant::host_idle) -
                  alone_figure(kernel_pair.floor_alone, &variant::host_idle),
              "<=", 0.8, label_step_batch_kernel, label_floor_direct, true);
  // ferry's launch::graph replays one executable for every slot, as the floor does (SPEC §12.2).
  host_target("graph_host_vs_one_exec_floor", graph_alone / graph_floor_alone, "<=", 1.15, label_step_batch_graph,
              label_floor_graph_one, false);
  host_target("graph_host_over_floor_us", graph_alone - graph_floor_alone, "<=", 0.5, label_step_batch_graph,
              label_floor_graph_one, false);
  const double kernel_host = host(label_step_batch_kernel), graph_host = host(label_step_batch_graph);
  target("device_vs_fused_kernel", device(label_step_batch_kernel) / fused_kernel_device, "<=", 1.1,
         {label_step_batch_kernel, label_floor_direct});
  host_target("host_vs_libtorch_graph", host(label_libtorch) / graph_host, ">=", 8, label_step_batch_graph,
              label_libtorch, false);
  host_target("host_vs_libtorch_kernel", host(label_libtorch) / kernel_host, ">=", 4, label_step_batch_kernel,
              label_libtorch, false);
  host_target("host_vs_torch_graph", host(label_torch) / graph_host, ">=", 40, label_step_batch_graph, label_torch,
              false);
  double syncs = 0, allocations = 0;  // the worst ferry row
  for (const auto& v : vs)
    if (v.guard) {
      syncs = std::max(syncs, v.syncs);
      allocations = std::max(allocations, v.allocations);
    }
  rep.add_target("syncs_per_step", syncs, "<=", 0);
  rep.add_target("allocations_per_step", allocations, "<=", 0);

  rep.print();
  // Where floor B′'s host time goes, per regime: its ablations beside it (the rest: the slot
  // choice, the ring's cold slots and what does not add up).
  auto breakdown = [&](const char* regime, double row_figures::*figure) {
    auto at = [&](const char* label) { const auto* r = find(label); return r ? r->*figure : not_measured; };
    const double whole = at(label_floor_direct), launch = at(label_launch_only), generate = at(label_generate_only);
    const auto precision = std::cout.precision();
    std::cout << std::fixed << std::setprecision(2) << "floor B' " << regime << ": " << whole << " us = launch only "
              << launch << " + data generation only " << generate << " + the rest " << whole - launch - generate
              << "; prepared data (no scheduler) " << at(label_prepared) << "; ferry launch::kernel "
              << at(label_step_batch_kernel) << ", launch::graph " << at(label_step_batch_graph) << ", floor G "
              << at(label_floor_graph_one) << "\n";
    std::cout.unsetf(std::ios::floatfield);
    std::cout.precision(precision);
  };
  breakdown("in bursts", &row_figures::host);
  breakdown("with the GPU idle", &row_figures::host_idle);
  breakdown("on a warm ring", &row_figures::host_warm);
  for (const auto& m : missing) std::cout << "target " << m << "\n";
  for (const auto& e : explained) std::cout << "target " << e << "\n";
  for (const auto& v : vs)
    if (!v.guard_report.empty()) std::cout << "sync_guard saw in " << v.label << ": " << v.guard_report << "\n";
  if (!libtorch_why.empty()) std::cout << "(the in-process libtorch rows are absent: " << libtorch_why << ")\n";
  if (o.torch_step.empty()) std::cout << "(no --torch-step FILE: the PyTorch-in-Python row is absent)\n";
  std::cout << "(the warm ring: a " << warm_model_ms * 1e3 << " us kernel after each step stands in for the model; "
               "the host waits for the previous step's before the next step)\n";
  rep.write_json(json);

  if (!profile) return;
  // Where the host time goes (written after the figures above, which stand without it): ferry's
  // step_batch rows and their floors, sampled every 20 us (support/host_profile.hpp), in bursts
  // (the GPU behind) and with the GPU idle (one step at a time, the stream drained before each,
  // not sampled); "us per step" is the share times the row's timed figure of that regime.
  struct sampled_row {
    const char* label;
    bool idle;
  };
  for (const sampled_row r : {sampled_row{label_step_batch_kernel, true}, sampled_row{label_floor_direct, true},
                              sampled_row{label_step_batch_kernel, false}, sampled_row{label_floor_direct, false},
                              sampled_row{label_step_batch_graph, false}, sampled_row{label_floor_graph_one, false}}) {
    variant* v = nullptr;
    for (auto& x : vs)
      if (std::string(x.label) == r.label) v = &x;
    if (v == nullptr) continue;  // not timed (FERRY_DECODE_SKIP_ROWS)
    const double figure = r.idle ? host_idle(r.label) : host(r.label);
    const int steps = r.idle ? 1 : o.burst, bursts = r.idle ? 4096 : std::min(o.bursts, 20);
    ferry_bench::profile_row(rep, {{"row", r.label}, {"regime", r.idle ? "GPU idle" : "bursts"}}, figure, bursts, steps,
                             [&] { v->step(); }, [&] { drain(*v); });
  }
  rep.write_json(json);
}

}  // namespace

static int run(int argc, char** argv) {
  const auto o = ferry_bench::parse(argc, argv);

  check_same_work(floor_step::kind::copy_kernel, label_floor_copy);
  check_same_work(floor_step::kind::uva_kernel, label_floor_uva);
  check_same_work(floor_step::kind::direct_kernel, label_floor_direct);
  check_same_work(floor_step::kind::graph_per_slot, label_floor_graph_slot);
  check_same_work(floor_step::kind::graph_one_exec, label_floor_graph_one);
  {  // the racy floor computes the same step when nothing is in flight
    ferry::stream<B> s;
    floor_step r(floor_step::kind::uva_kernel, s.get(), 0, true);
    r.run();
    s.synchronize();
  }

  ferry::stream<B> s;
  const cudaStream_t cs = s.get();
  // the UVA-backed state gets a slot per step in flight: a held burst, or a guard burst
  const auto in_flight = static_cast<std::size_t>(std::max(o.burst, 250)) + 8;
  // ferry's rows (ferry_rows.hpp): this tree's, and the before tree's where it was built.
  std::vector<tree_rows> trees;
  trees.push_back({"", make_decode_step_ferry_rows(cs, in_flight)});
#if FERRY_BENCH_DECODE_BEFORE
  trees.push_back({before_prefix, make_decode_step_ferry_rows_before(cs, in_flight)});
#endif
  const auto floor_slots = static_cast<unsigned>(in_flight + 2);  // as deep as ferry's rings may grow
  floor_step floor_copy(floor_step::kind::copy_kernel, cs, floor_slots);
  floor_step floor_uva(floor_step::kind::uva_kernel, cs, floor_slots);
  floor_step floor_direct(floor_step::kind::direct_kernel, cs, floor_slots);
  floor_step floor_graph_slot(floor_step::kind::graph_per_slot, cs, floor_slots);
  floor_step floor_graph_one(floor_step::kind::graph_one_exec, cs, floor_slots);
  floor_step racy_uva(floor_step::kind::uva_kernel, cs, 0, true);
  floor_step ablation_launch(floor_step::kind::direct_kernel, cs, floor_slots);
  floor_step ablation_generate(floor_step::kind::direct_kernel, cs, floor_slots);
  floor_step ablation_prepared(floor_step::kind::direct_kernel, cs, floor_slots);
  ablation_launch.prepare();
  ablation_prepared.prepare();
  // The correct floors (and the prepared-data ablation, which takes slots as they do).
  const std::vector<floor_step*> correct_floors{&floor_copy, &floor_uva, &floor_direct, &floor_graph_slot,
                                                &floor_graph_one, &ablation_prepared};

  std::vector<variant> vs;
  for (const tree_rows& t : trees)
    for (std::size_t i = 0; i < ferry_labels.size(); ++i) {
      const auto& r = t.rows.rows.at(i);
      vs.push_back({tree_label(t.prefix, ferry_labels[i]), r.step, r.guard, r.slots});
    }
  const std::pair<floor_step*, const char*> floors[] = {
      {&floor_copy, label_floor_copy},          {&floor_uva, label_floor_uva},
      {&floor_direct, label_floor_direct},      {&floor_graph_slot, label_floor_graph_slot},
      {&floor_graph_one, label_floor_graph_one}, {&racy_uva, label_racy_uva}};
  for (const auto& [f, label] : floors)
    vs.push_back({label, [f] { f->run(); }, {}, [f] { return std::size_t{f->slots()}; }});
  vs.push_back({label_launch_only, [&] { ablation_launch.launch_only(); }});
  vs.push_back({label_generate_only, [&] { ablation_generate.generate_only(); }, {}, {}, false});
  vs.push_back({label_prepared, [&] { ablation_prepared.prepared(); }, {},
                [&] { return std::size_t{ablation_prepared.slots()}; }});
  for (auto& v : vs) v.stream = cs;

  // Warm-up: ferry's arena, staging slots and UVA pools reach their steady state, including the
  // most steps in flight (a burst queued behind a stream held for a fixed time, so that a growth
  // that synchronizes cannot wait on a hold that waits on the host).
  for (int k = 0; k < 300; ++k)
    for (auto& v : vs) v.step();
  BENCH_CUDA(cudaStreamSynchronize(cs));
  // The correct floors go through the same burst, so that their rings are as deep as ferry's.
  ferry_bench::hold_stream(cs, 40);
  for (int k = 0; k < std::max(o.burst, 250); ++k) {
    for (const tree_rows& t : trees)
      for (const auto& r : t.rows.rows) r.step();
    for (floor_step* f : correct_floors) f == &ablation_prepared ? f->prepared() : f->run();
  }
  BENCH_CUDA(cudaStreamSynchronize(cs));

  // libtorch in this process, on its own stream (see the file comment).
  std::string libtorch_why;  // why its rows are absent
#if FERRY_BENCH_LIBTORCH
  std::unique_ptr<ferry_bench::libtorch_peer::decode_step_engine> torch_engine;
  try {
    torch_engine = std::make_unique<ferry_bench::libtorch_peer::decode_step_engine>(static_cast<int>(in_flight));
    const cudaStream_t ts = static_cast<cudaStream_t>(torch_engine->stream());
    for (const auto& [label, v] : libtorch_rows) {
      vs.push_back({label, [&torch_engine, v = v] { torch_engine->step(v); }});
      vs.back().stream = ts;
      // Warm-up, drained every 128 steps (the unfenced variant must never lap its ring).
      for (int k = 0; k < 300; ++k) {
        torch_engine->step(v);
        if (k % 128 == 127) torch_engine->synchronize();
      }
      torch_engine->synchronize();
    }
    if (const char* bad = torch_engine->check()) throw std::runtime_error(std::string("check before timing: ") + bad);
    std::cout << "libtorch " << ferry_bench::libtorch_peer::torch_version() << " in process: check ok\n";
  } catch (const std::exception& e) {
    libtorch_why = std::string("libtorch in process failed: ") + e.what();
    while (!vs.empty() && vs.back().stream != cs) vs.pop_back();
    torch_engine.reset();
  }
#else
  libtorch_why = "this build has no libtorch (CMake found no Torch config: tools/gpu-check passes "
                 "CMAKE_PREFIX_PATH from python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')";
#endif

  // FERRY_DECODE_SKIP_ROWS=REGEX (a diagnostic): the rows whose labels match it (extended) are
  // built and warmed up but not timed; floor B', the targets' reference, always is.
  if (const char* skip = std::getenv("FERRY_DECODE_SKIP_ROWS"); skip != nullptr && *skip != '\0') {
    const std::regex drop(skip, std::regex::extended);
    std::erase_if(vs, [&](const variant& v) {
      return std::string(v.label) != label_floor_direct && std::regex_search(v.label, drop);
    });
    std::cout << "FERRY_DECODE_SKIP_ROWS=" << skip << ": " << vs.size() << " rows timed\n";
  }
  measure(vs, o);
  const std::vector<variant> alone = measure_pairs(vs, trees, o);
  for (auto& v : vs)
    if (v.guard) count_syncs(v);
  for (auto& v : vs) count_calls(v, o.burst);
#if FERRY_BENCH_LIBTORCH
  if (torch_engine) {
    if (const char* bad = torch_engine->check()) {  // wrong results: its figures are not a step's
      libtorch_why = std::string("libtorch in process: check after timing failed: ") + bad;
      for (auto& v : vs)
        if (v.stream != cs) v.host = v.device = v.host_idle = v.host_warm = not_measured;
    } else {
      std::cout << "libtorch in process: check after timing ok\n";
    }
  }
#endif

  // Each tree's table and targets: this tree's into --json, the before tree's into --before-json.
  for (const tree_rows& t : trees) {
    const bool mine = *t.prefix == '\0';
    if (!mine) std::cout << "\n== the before tree's rows (FERRY_BENCH_BEFORE_TREE), beside the same floors and peers\n";
    std::vector<variant> view = tree_view(vs, trees, t);
    report_tree(view, tree_view(alone, trees, t), o, libtorch_why, mine ? o.json : o.before_json, mine);
  }
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
