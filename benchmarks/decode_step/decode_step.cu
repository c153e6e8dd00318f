// Benchmark decode_step (SPEC §10, §11): one engine step's input preparation, ferry beside the
// hand-written floors and the PyTorch and libtorch baselines, on the same host data.
//
// Rows measured in this process, interleaved burst by burst:
//  - "ferry step_batch launch::kernel" and "... launch::graph": examples/decode_step/decode_step.hpp's
//    ferry_step, the whole step in one ferry::step_batch submit (one kernel launch, or one graph
//    replay per slot);
//  - "ferry per-component": the same file's component_step, the step built from ferry's
//    components (apply launch, UVA publishes, packed copy, logprob copy, fill launch);
//  - three hand-written raw-CUDA floors, each with its own pinned slots (cudaHostAlloc, mapped)
//    into which the host writes the whole step (sampling arrays and logprob matrix packed, then
//    positions, sequence lengths, the block-table chunks and their contents), and one kernel that
//    applies the chunks (one block per chunk, read through UVA), fills the last logits index from
//    the slot's sequence lengths and, as its last act, stores the step's number into a mapped
//    counter (as ferry's kernel marks do); the host reads that counter once per step:
//      A: one packed cudaMemcpyAsync of the sampling arrays and the logprob matrix's changing
//         rows + the kernel;
//      B: the kernel alone, also copying those bytes from the slot through UVA;
//      C: cudaGraphLaunch of a 2-node graph per slot (A's copy + kernel), built once over the
//         slot's fixed addresses and replayed with each step's data in the slot.
//    Each floor is a correct step: a slot is rewritten only once the counter shows that its last
//    step has passed; when the next slot is still read, the floor takes a new one from slots it
//    allocated up front (as deep as ferry's ring may grow), as ferry's step_batch inserts one.
//    So its slots are as many, and as cold in the host's caches, as the steps in flight need.
//    "4 slots, racy" rows run floors B and C over 4 fixed slots without that check, as
//    docs/measurements/step-floor-2026-12-01.txt measured them: once the GPU falls behind they rewrite slots
//    that queued steps still read (wrong results, in warm memory): a bound, not a step.
//    Appends covered by an admission of the same step are skipped, so chunks are disjoint.
//    The logprob matrix's rows that change (0..31) are uploaded every step, in ferry's step_batch
//    and in the floors alike; the rest stays no_token in device memory, written once (the
//    PyTorch and libtorch baselines upload the whole 12 KiB matrix: more device work, not more
//    host work, for their host figures).
//    Before timing, each floor is checked to produce exactly ferry's results.
// Rows read from files written just before by separate processes on the same machine (processes
// cannot be interleaved; each label says so): --torch-step FILE (decode_step_torch.py --json)
// and --libtorch-step FILE (benchmarks/decode_step/libtorch_step --json).
//
// Host time, two ways: bursts of --burst steps, the stream drained between bursts (not timed),
// median over --bursts bursts after 3 warm-up bursts (the device is slower than the host here, so
// a burst leaves up to ~100 steps in flight: deep rings); and "GPU idle": one step at a time, the
// stream drained before each (not timed), median over the same number of steps (an engine whose
// model step is longer than its host step, with one or two steps in flight). Device time ("held"): a burst enqueued behind a kernel
// that spins until the host releases it once the burst is in, events from the release to the
// burst's end, median of several bursts after a warm-up one; a burst that fills the launch queue
// makes the hold give up after 1 s and is halved (the "device timing" column says with how many
// steps, and how the baselines in other processes measured theirs).
// Then an untimed pass of 1000 warm steps of each ferry row inside ferry::sync_guard (record
// mode) counts synchronizing calls and allocations per step, and, once no guard is alive (CUPTI
// takes one subscriber), another untimed pass counts every in-process row's CUDA runtime calls per
// step in steady state (support/runtime_calls.hpp: 1000 steps counted after 1000 uncounted ones),
// in bursts drained between them as the host-time bursts, and with the GPU idle. Each missed
// host-time target gets a line naming the calls per step of the two rows it compares.
//
// Targets (SPEC §10) are computed from rows looked up by label; a target whose row is absent is
// reported missing (null, not met). ferry's step_batch rows (label_step_batch_kernel,
// label_step_batch_graph) join the in-process list as one function each.
#include <decode_step/decode_step.hpp>

#include <ferry/sync/sync_guard.hpp>

#include <support/gpu.cuh>
#include <support/runtime_calls.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <optional>
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
constexpr const char* label_step_batch_graph = "ferry step_batch launch::graph";
constexpr const char* label_floor_copy = "floor A: 1 packed copy + 1 fused kernel";
constexpr const char* label_floor_uva = "floor B: 1 fused kernel, all through UVA";
constexpr const char* label_floor_graph = "floor C: 2-node graph per slot";
constexpr const char* label_racy_uva = "floor B, 4 slots, racy (rewrites slots still read: a bound, not a step)";
constexpr const char* label_racy_graph = "floor C, 4 slots, racy (rewrites slots still read: a bound, not a step)";
constexpr const char* label_torch = "PyTorch (decode_step_torch.py, separate process, run just before)";
constexpr const char* label_libtorch = "libtorch C++ packed (libtorch_step, separate process, run just before)";
/// The rows of libtorch_step's --json output: label and variant (its keys are <variant>_host_us, ...).
constexpr std::pair<const char*, const char*> libtorch_rows[] = {
    {label_libtorch, "packed"},
    {"libtorch C++ 5 copies (libtorch_step, separate process, run just before)", "5copies"},
    {"libtorch C++ packed, slots not fenced (libtorch_step, separate process, run just before)", "packed_nofence"}};

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
/// Blocks after the chunk blocks: the fill (block 0 of them) and, for floor B, the UVA copy.
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
/// number into the counter (the pattern of ferry::detail::finish_kernel_mark).
/// Plain loads of the slot: a launch orders them after the host's writes, and `__ldcv` loads of mapped
/// host memory made this kernel take ~200 µs of device time on the H200 (docs/design.md).
__global__ void __launch_bounds__(floor_threads) floor_step_kernel(const floor_args a) {
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
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(a.blocks_done, 1u) != gridDim.x - 1) return;
  *a.blocks_done = 0;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(a.counter) = *a.seq;
}

/// A hand-written floor (see the file comment): its own slots, device arrays and scheduler.
class floor_step {
 public:
  enum class kind { copy_kernel, uva_kernel, graph };
  /// The slots a floor starts with (and the racy floors' fixed ring).
  static constexpr unsigned initial_slots = 4;

  /// A correct floor with up to `max_slots` slots (allocated now, used as the steps in flight
  /// need them), or with `racy`, initial_slots fixed slots rewritten without a check.
  floor_step(kind k, cudaStream_t s, unsigned max_slots, bool racy = false)
      : kind_(k), s_(s), racy_(racy), max_slots_(racy ? initial_slots : std::max(max_slots, initial_slots)),
        args_(max_slots_), graph_(max_slots_), exec_(max_slots_), last_step_(max_slots_, 0) {
    const std::size_t pinned_bytes = std::size_t{max_slots_} * slot::bytes + 256;
    BENCH_CUDA(cudaHostAlloc(&pinned_, pinned_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(pinned_, 0, pinned_bytes);
    counter_ = reinterpret_cast<std::uint64_t*>(pinned_ + std::size_t{max_slots_} * slot::bytes);
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
    for (unsigned k = 0; k < max_slots_; ++k) {
      std::fill_n(at<std::int64_t>(k, slot::logprobs), logprob_changing, no_token);  // kept: ids rewritten
      args_[k] = {dev<chunk>(k, slot::descs), dev<std::uint32_t>(k, slot::chunks), dev<std::int32_t>(k, slot::contents),
                  dev<std::int32_t>(k, slot::seq_lens), dev<uint4>(k, 0), dev<std::uint64_t>(k, slot::seq),
                  table_, logits_, reinterpret_cast<uint4*>(dev_bytes_),
                  kind_ == kind::uva_kernel ? copy_vectors : 0u, blocks_done_,
                  static_cast<std::uint64_t*>(device_address(counter_))};
    }
    grid_ = writes_per_step + (kind_ == kind::uva_kernel ? copy_blocks : 1u);
    if (kind_ == kind::graph)
      for (unsigned k = 0; k < max_slots_; ++k) build_graph(k);
  }
  floor_step(const floor_step&) = delete;
  floor_step& operator=(const floor_step&) = delete;
  ~floor_step() {
    cudaStreamSynchronize(s_);
    for (unsigned k = 0; k < max_slots_; ++k) {
      if (exec_[k] != nullptr) cudaGraphExecDestroy(exec_[k]);
      if (graph_[k] != nullptr) cudaGraphDestroy(graph_[k]);
    }
    cudaFreeHost(pinned_);
    cudaFree(table_);
    cudaFree(dev_bytes_);
    cudaFree(logits_);
    cudaFree(blocks_done_);
  }

  /// One step: the next free slot (one load of the counter), the host writes the step into it,
  /// submits.
  void run() {
    const std::int64_t step = sched_.begin_step();
    const unsigned k = next_slot();
    write_step(step, k);
    last_step_[k] = static_cast<std::uint64_t>(step) + 1;  // what the counter reads once it passed
    before_ = cur_;
    cur_ = k;
    switch (kind_) {
      case kind::copy_kernel:
        BENCH_CUDA(cudaMemcpyAsync(dev_bytes_, at<std::byte>(k, 0), slot::copied, cudaMemcpyHostToDevice, s_));
        launch(k);
        break;
      case kind::uva_kernel:
        launch(k);
        break;
      case kind::graph:
        BENCH_CUDA(cudaGraphLaunch(exec_[k], s_));
        break;
    }
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

 private:
  // ferry's step_batch::begin() rule, by hand: the slot of the step before the last if its step
  // has passed (the GPU keeps up: two warm slots), else the slot after the last one if passed,
  // else a slot not used yet; with none left the host waits (a correct step never rewrites a
  // slot that is still read). "Passed" is one load of the counter, which the kernels store in
  // step order. Racy: the next of 4, unchecked.
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
    floor_step_kernel<<<grid_, floor_threads, 0, s_>>>(args_[k]);
    BENCH_CUDA(cudaPeekAtLastError());
  }

  void build_graph(unsigned k) {
    BENCH_CUDA(cudaGraphCreate(&graph_[k], 0));
    cudaGraphNode_t copy = nullptr, kernel = nullptr;
    BENCH_CUDA(cudaGraphAddMemcpyNode1D(&copy, graph_[k], nullptr, 0, dev_bytes_, at<std::byte>(k, 0), slot::copied,
                                        cudaMemcpyHostToDevice));
    void* params[] = {&args_[k]};
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(&floor_step_kernel);
    p.gridDim = dim3(grid_);
    p.blockDim = dim3(floor_threads);
    p.kernelParams = params;
    BENCH_CUDA(cudaGraphAddKernelNode(&kernel, graph_[k], &copy, 1, &p));
    BENCH_CUDA(cudaGraphInstantiate(&exec_[k], graph_[k], 0));
    BENCH_CUDA(cudaGraphUpload(exec_[k], s_));
  }

  kind kind_;
  cudaStream_t s_;
  bool racy_;
  unsigned max_slots_;
  scheduler sched_;
  std::array<std::int64_t, batch> positions_{};  // the host's truth
  std::array<std::int32_t, batch> seq_lens_{};
  std::byte* pinned_ = nullptr;  // max_slots_ slots, then the counter
  std::uint64_t* counter_ = nullptr;
  std::byte* dev_bytes_ = nullptr;
  std::int32_t* table_ = nullptr;
  std::int32_t* logits_ = nullptr;
  unsigned* blocks_done_ = nullptr;
  unsigned grid_ = 0;
  std::vector<floor_args> args_;
  std::vector<cudaGraph_t> graph_;
  std::vector<cudaGraphExec_t> exec_;
  std::vector<std::uint64_t> last_step_;  // per slot: its last step's number + 1 (0: none)
  unsigned active_ = initial_slots;       // slots in the ring so far
  unsigned cur_ = initial_slots - 1;      // the slot of the last step
  unsigned before_ = cur_;                // the slot of the step before it
};

/// Copies `n` elements at `p` (device or mapped host memory) to the host (synchronous: checks only).
template <class T>
std::vector<T> fetch(const T* p, std::size_t n) {
  std::vector<T> v(n);
  BENCH_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDefault));
  return v;
}

/// Each floor and ferry's step from step 0, drained after each: the floor's results must equal ferry's.
void check_same_work(floor_step::kind k, const char* label) {
  ferry::stream<B> s;
  ferry_step<B> f(s);
  floor_step r(k, s.get(), floor_step::initial_slots);
  for (int step = 0; step < 20; ++step) {
    f.run(s);
    r.run();
    s.synchronize();
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

/// One in-process row: a way to run the step on the benchmark's stream.
struct variant {
  const char* label;
  std::function<void()> step;
  bool ferry;  ///< counted by the sync_guard pass
  std::function<std::size_t()> slots{};  ///< its ring's depth, where it has one
  double host = not_measured, device = not_measured;
  double host_idle = not_measured;  ///< one step at a time, the stream drained before each
  int device_burst = 0;
  double syncs = not_measured, allocations = not_measured;  ///< per step (ferry rows)
  std::string guard_report{};
  /// Runtime calls per step: in bursts drained between them, and with the GPU idle.
  ferry_bench::calls_per_op calls = not_counted("not counted"), calls_idle = not_counted("not counted");
};

/// Host and device time of every variant, interleaved: each round runs one burst of each.
void measure(std::vector<variant>& vs, const ferry_bench::options& o, cudaStream_t s) {
  auto drain = [&] { BENCH_CUDA(cudaStreamSynchronize(s)); };
  for (int w = 0; w < 3; ++w)
    for (auto& v : vs) {
      for (int k = 0; k < o.burst; ++k) v.step();
      drain();
    }
  std::vector<std::vector<double>> host(vs.size()), device(vs.size());
  for (int b = 0; b < o.bursts; ++b)
    for (std::size_t i = 0; i < vs.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < o.burst; ++k) vs[i].step();
      const auto t1 = std::chrono::steady_clock::now();
      drain();
      host[i].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / o.burst);
    }
  held_timer timer(s);
  const std::size_t reps = static_cast<std::size_t>(std::max(3, o.bursts / 4));
  for (auto& v : vs) {
    v.device_burst = o.burst;
    (void)timer.sample(v.step, v.device_burst);  // warm-up: the most steps in flight
  }
  for (bool more = true; more;) {
    more = false;
    for (std::size_t i = 0; i < vs.size(); ++i) {
      if (device[i].size() == reps) continue;
      if (const auto us = timer.sample(vs[i].step, vs[i].device_burst)) {
        device[i].push_back(*us);
      } else {
        if ((vs[i].device_burst /= 2) < 8) throw std::runtime_error(std::string(vs[i].label) + ": 8 steps fill the launch queue");
        device[i].clear();
      }
      more = more || device[i].size() < reps;
    }
  }
  // GPU idle: one step at a time (as many steps as a host-time pass), interleaved step by step.
  std::vector<std::vector<double>> idle(vs.size());
  for (int k = 0; k < o.bursts * o.burst; ++k)
    for (std::size_t i = 0; i < vs.size(); ++i) {
      drain();
      const auto t0 = std::chrono::steady_clock::now();
      vs[i].step();
      const auto t1 = std::chrono::steady_clock::now();
      idle[i].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  drain();
  for (std::size_t i = 0; i < vs.size(); ++i) {
    vs[i].host = ferry_bench::median(host[i]);
    vs[i].device = ferry_bench::median(device[i]);
    vs[i].host_idle = ferry_bench::median(idle[i]);
  }
}

/// The untimed guard pass of a ferry row: warm steps in bursts (the stream drained between
/// bursts, outside the guards, so that no burst runs further ahead than the measured ones).
void count_syncs(variant& v, cudaStream_t s) {
  constexpr int steps = 1000, burst = 250;
  std::uint64_t syncs = 0, allocations = 0;
  BENCH_CUDA(cudaStreamSynchronize(s));
  for (int done = 0; done < steps; done += burst) {
    {
      ferry::sync_guard guard(ferry::sync_guard::mode::record);
      for (int k = 0; k < burst; ++k) v.step();
      syncs += guard.syncs();
      allocations += guard.allocations();
      if (guard.syncs() + guard.allocations() != 0) v.guard_report = guard.report();
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
  }
  v.syncs = static_cast<double>(syncs) / steps;
  v.allocations = static_cast<double>(allocations) / steps;
}

/// The untimed calls pass of a row (see the file comment): bursts of `burst` steps with the stream
/// drained between them, then one step at a time with the stream drained before each. No
/// sync_guard may be alive meanwhile.
void count_calls(variant& v, cudaStream_t s, int burst) {
  auto drain = [&] { BENCH_CUDA(cudaStreamSynchronize(s)); };
  auto step = [&](std::size_t) { v.step(); };
  v.calls = ferry_bench::steady_calls(step, [&](std::size_t i) {
    if (i % static_cast<std::size_t>(burst) == 0) drain();
  });
  v.calls_idle = ferry_bench::steady_calls(step, [&](std::size_t) { drain(); });
  drain();
}

/// A row of the table and the JSON.
struct row_figures {
  std::string label;
  double host, device;
  std::string device_timing;
  double host_idle = not_measured;
  double slots = not_measured;  ///< pinned slots its ring holds after the run
  ferry_bench::calls_per_op calls = not_counted("a separate process"), calls_idle = calls;
};

}  // namespace

static int run(int argc, char** argv) {
  const auto o = ferry_bench::parse(argc, argv);
  ferry_bench::report rep("decode_step");
  rep.machine = ferry_bench::gpu_name();

  check_same_work(floor_step::kind::copy_kernel, label_floor_copy);
  check_same_work(floor_step::kind::uva_kernel, label_floor_uva);
  check_same_work(floor_step::kind::graph, label_floor_graph);
  {  // the racy floors compute the same step when nothing is in flight
    ferry::stream<B> s;
    floor_step r(floor_step::kind::uva_kernel, s.get(), 0, true);
    r.run();
    s.synchronize();
  }

  ferry::stream<B> s;
  const cudaStream_t cs = s.get();
  // the UVA-backed state gets a slot per step in flight: a held burst, or a guard burst
  const auto in_flight = static_cast<std::size_t>(std::max(o.burst, 250)) + 8;
  ferry_step<B> batch_kernel(s, in_flight);
  ferry_step<B, ferry::launch::graph> batch_graph(s, in_flight);
  component_step<B> parts(s, in_flight);
  const auto floor_slots = static_cast<unsigned>(in_flight + 2);  // as deep as ferry's rings may grow
  floor_step floor_copy(floor_step::kind::copy_kernel, cs, floor_slots);
  floor_step floor_uva(floor_step::kind::uva_kernel, cs, floor_slots);
  floor_step floor_graph(floor_step::kind::graph, cs, floor_slots);
  floor_step racy_uva(floor_step::kind::uva_kernel, cs, 0, true);
  floor_step racy_graph(floor_step::kind::graph, cs, 0, true);
  std::vector<variant> vs;
  vs.push_back({label_step_batch_kernel, [&] { batch_kernel.run(s); }, true, [&] { return batch_kernel.slots(); }});
  vs.push_back({label_step_batch_graph, [&] { batch_graph.run(s); }, true, [&] { return batch_graph.slots(); }});
  vs.push_back({label_ferry, [&] { parts.run(s); }, true});
  for (auto* f : {&floor_copy, &floor_uva, &floor_graph, &racy_uva, &racy_graph}) {
    const char* label = f == &floor_copy ? label_floor_copy : f == &floor_uva ? label_floor_uva
                        : f == &floor_graph ? label_floor_graph : f == &racy_uva ? label_racy_uva : label_racy_graph;
    vs.push_back({label, [f] { f->run(); }, false, [f] { return std::size_t{f->slots()}; }});
  }

  // Warm-up: ferry's arena, staging slots and UVA pools reach their steady state, including the
  // most steps in flight (a burst queued behind a stream held for a fixed time, so that a growth
  // that synchronizes cannot wait on a hold that waits on the host).
  for (int k = 0; k < 300; ++k)
    for (auto& v : vs) v.step();
  BENCH_CUDA(cudaStreamSynchronize(cs));
  // The correct floors go through the same burst, so that their rings are as deep as ferry's.
  ferry_bench::hold_stream(cs, 40);
  for (int k = 0; k < std::max(o.burst, 250); ++k) {
    batch_kernel.run(s);
    batch_graph.run(s);
    parts.run(s);
    floor_copy.run();
    floor_uva.run();
    floor_graph.run();
  }
  BENCH_CUDA(cudaStreamSynchronize(cs));

  measure(vs, o, cs);
  for (auto& v : vs)
    if (v.ferry) count_syncs(v, cs);
  for (auto& v : vs) count_calls(v, cs, o.burst);

  std::vector<row_figures> rows;
  for (const auto& v : vs)
    rows.push_back({v.label, v.host, v.device, "held, burst " + std::to_string(v.device_burst), v.host_idle,
                    v.slots ? static_cast<double>(v.slots()) : not_measured, v.calls, v.calls_idle});
  if (!o.torch_step.empty())
    rows.push_back({label_torch, ferry_bench::json_number(o.torch_step, "host_us"),
                    ferry_bench::json_number(o.torch_step, "device_us"),
                    "burst behind a 300 ms spin; host-paced once the launch queue fills"});
  if (!o.libtorch_step.empty())
    for (const auto& [label, name] : libtorch_rows) {
      auto figure = [&](const char* key) { return ferry_bench::json_number(o.libtorch_step, std::string(name) + key); };
      const double burst = figure("_device_burst");
      rows.push_back({label, figure("_host_us"), figure("_device_us"),
                      "held (host function), burst " + (std::isfinite(burst) ? std::to_string(static_cast<int>(burst)) : "?")});
    }

  auto find = [&](const char* label) -> const row_figures* {
    for (const auto& r : rows)
      if (r.label == label) return &r;
    return nullptr;
  };
  auto host = [&](const char* label) { const auto* r = find(label); return r ? r->host : not_measured; };
  auto host_idle = [&](const char* label) { const auto* r = find(label); return r ? r->host_idle : not_measured; };
  auto device = [&](const char* label) { const auto* r = find(label); return r ? r->device : not_measured; };
  const char* const best_floor = host(label_floor_uva) < host(label_floor_copy) ? label_floor_uva : label_floor_copy;
  const char* const best_floor_idle =
      host_idle(label_floor_uva) < host_idle(label_floor_copy) ? label_floor_uva : label_floor_copy;
  const double best_kernel_floor = host(best_floor);
  const double best_kernel_floor_idle = host_idle(best_floor_idle);
  const double fused_kernel_device = device(label_floor_uva);
  for (const auto& r : rows)
    rep.add({{"step", r.label}, {"host us", r.host}, {"device us", r.device},
             {"host / best kernel floor", r.host / best_kernel_floor},
             {"device / fused kernel", r.device / fused_kernel_device},
             {"host us, GPU idle", r.host_idle}, {"idle host / best kernel floor", r.host_idle / best_kernel_floor_idle},
             {"slots", r.slots}, {"runtime_calls_per_step", r.calls.total},
             {"runtime_calls_per_step_idle", r.calls_idle.total}, {"device timing", r.device_timing},
             {"runtime_calls", r.calls.names()}, {"runtime_calls_idle", r.calls_idle.names()}});

  std::vector<std::string> missing;
  auto target = [&](const char* name, double value, const char* op, double goal, std::initializer_list<const char*> needs) {
    rep.add_target(name, value, op, goal);
    for (const char* need : needs)
      if (find(need) == nullptr) missing.push_back(std::string(name) + ": missing (no row \"" + need + "\" in this run)");
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
  host_target("kernel_host_vs_best_kernel_floor", host(label_step_batch_kernel) / best_kernel_floor, "<=", 1.25,
              label_step_batch_kernel, best_floor, false);
  host_target("graph_host_vs_graph_floor", host(label_step_batch_graph) / host(label_floor_graph), "<=", 1.25,
              label_step_batch_graph, label_floor_graph, false);
  host_target("kernel_host_idle_vs_best_kernel_floor", host_idle(label_step_batch_kernel) / best_kernel_floor_idle,
              "<=", 1.25, label_step_batch_kernel, best_floor_idle, true);
  host_target("graph_host_idle_vs_graph_floor", host_idle(label_step_batch_graph) / host_idle(label_floor_graph),
              "<=", 1.25, label_step_batch_graph, label_floor_graph, true);
  target("device_vs_fused_kernel", device(label_step_batch_kernel) / fused_kernel_device, "<=", 1.1,
         {label_step_batch_kernel});
  host_target("host_vs_torch", host(label_torch) / host(label_step_batch_kernel), ">=", 40, label_step_batch_kernel,
              label_torch, false);
  host_target("host_vs_libtorch_kernel", host(label_libtorch) / host(label_step_batch_kernel), ">=", 6,
              label_step_batch_kernel, label_libtorch, false);
  host_target("host_vs_libtorch_graph", host(label_libtorch) / host(label_step_batch_graph), ">=", 8,
              label_step_batch_graph, label_libtorch, false);
  double syncs = 0, allocations = 0;  // the worst ferry row
  for (const auto& v : vs)
    if (v.ferry) {
      syncs = std::max(syncs, v.syncs);
      allocations = std::max(allocations, v.allocations);
    }
  rep.add_target("syncs_per_step", syncs, "<=", 0);
  rep.add_target("allocations_per_step", allocations, "<=", 0);

  rep.print();
  for (const auto& m : missing) std::cout << "target " << m << "\n";
  for (const auto& e : explained) std::cout << "target " << e << "\n";
  for (const auto& v : vs)
    if (!v.guard_report.empty()) std::cout << "sync_guard saw in " << v.label << ": " << v.guard_report << "\n";
  if (o.torch_step.empty()) std::cout << "(no --torch-step FILE: the PyTorch figures are absent)\n";
  if (o.libtorch_step.empty()) std::cout << "(no --libtorch-step FILE: the libtorch figures are absent)\n";
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
