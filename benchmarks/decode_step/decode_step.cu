// Benchmark decode_step (SPEC §10, §11): one engine step's input preparation, ferry beside the
// hand-written floors and the PyTorch and libtorch baselines, on the same host data.
//
// Rows measured in this process, interleaved round by round in an order rotated every round
// (support/bench.hpp; with --aa every row beside its twin, column "A/A", and each target's noise):
//  - "ferry step_batch launch::kernel" and "... launch::graph": examples/decode_step/decode_step.hpp's
//    ferry_step, the whole step in one ferry::step_batch submit (one kernel launch, or one graph
//    replay of the batch's one executable, the step's table found on the device);
//  - "ferry per-component": the same file's component_step, the step built from ferry's
//    components (apply launch, UVA publishes, packed copy, logprob copy, fill launch);
//  - hand-written raw-CUDA floors (as ../shared/anchors/step-floor.cu writes them), each with its
//    own pinned slots (cudaHostAlloc, mapped) into which the host writes the whole step with the
//    same scheduler as ferry's, and one kernel that applies the block-table chunks (one block per
//    chunk, read through UVA), fills the last logits index and, as its last act, stores the step's
//    number into a mapped counter (as ferry's kernel marks do); the host reads that counter once
//    per step:
//      A:  one packed cudaMemcpyAsync of the sampling arrays and the logprob matrix's changing
//          rows + the kernel;
//      B:  the kernel alone, also copying those bytes from the slot through UVA, launched with
//          <<<>>> and checked with cudaPeekAtLastError (2 runtime calls);
//      B′: B launched with cudaLaunchKernel (1 runtime call): the kernel floor of the targets;
//      F:  B's kernel as a 1-node graph per slot, replayed with each step's data in the slot;
//      G:  ONE graph executable for every slot: the kernel finds the step's slot on the device (a
//          device-side step counter indexes a mapped ring in which the host wrote the slot of each
//          step): the graph floor of the targets.
//    Each floor is a correct step: a slot is rewritten only once the counter shows that its last
//    step has passed, the slot chosen from the cached counter as ferry's step_batch chooses it (the
//    counter loaded only when the cache does not show a slot free: support/fence.hpp); when the
//    next slot is still read, the floor takes one it allocated up front (as deep as ferry's ring
//    may grow), as ferry's step_batch inserts one. Nothing cheaper does the same job: B′ is one
//    launch call and G one graph launch, the step's bytes are written once, and no slot is
//    rewritten before its step has passed. The "4 slots, racy" row
//    runs floor B over 4 fixed slots without that check: a bound, not a step. Before timing, each
//    floor is checked to produce exactly ferry's results;
//  - ablation rows, floor B′ with a part left out (not steps): "launch only", "data generation
//    only" and "prepared data" (B′ with the step's slot image memcpy'd from a buffer, no scheduler);
//  - libtorch C++ in this process (where CMake found Torch: support/libtorch_peer.hpp): the step
//    written with libtorch at its best: ONE copy of the step's contiguous pinned slot, index_put_
//    and the logits fill, eager and as a CUDA graph per slot, on a stream of torch's pool; each
//    checked against a host replay after the run;
//  - PyTorch in Python (--torch: support/torch_peer.hpp, a Python process asked for one burst per
//    round of the bursts regime): the shared baseline decode_step_torch.py as written, and the same
//    step as CUDA graphs, one per pinned slot (support/torch_peer.py's decode_graph, checked against
//    decode_step_torch.py before it is timed).
//
// Host time, three regimes, each row's figure the median over the rounds:
//  - bursts: --burst steps, the stream drained between bursts (not timed): the device is slower
//    than the host here, so a burst leaves up to ~100 steps in flight (deep, cold rings);
//  - "GPU idle": one step at a time, the stream drained before each (not timed);
//  - "warm ring": the GPU keeping up, as in an engine whose model step takes longer than its host
//    step: after each step (not timed) a 50 µs kernel stands in for the model and the host waits
//    for the previous step's model kernel: a ring of 2-3 slots.
// Device time: a burst queued behind a gate that holds the row's stream (support/gpu.cuh).
// Then the pair pass: each floor target's two rows (ferry's launch::kernel step and floor B′;
// ferry's launch::graph step and floor G) timed again, alone with each other, in the same three
// host regimes (rows "alone with ..."): the rows timed beside move a difference of a fraction of a
// microsecond (docs/measurements/host-time.md), so the floor targets come from the pair pass, the
// peer targets from the pass with every row. Then untimed passes: 1000 warm steps of each ferry
// row inside ferry::sync_guard (syncs and allocations per step), and every in-process row's CUDA
// runtime calls per step (support/runtime_calls.hpp), in bursts and with the GPU idle.
#include <decode_step/decode_step.hpp>

#include <support/fence.hpp>
#include <support/gpu.cuh>
#include <support/guarded_steps.hpp>
#include <support/runtime_calls.hpp>
#include <support/torch_peer.hpp>
#if FERRY_BENCH_LIBTORCH
#include <support/libtorch_peer.hpp>
#endif

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <span>

using B = ferry::backend::cuda;
using namespace decode_step;

namespace {

using ferry_bench::nan;

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
constexpr const char* label_torch = "decode_step_torch.py as written (eager, pinned buffers rewritten unfenced)";
constexpr const char* label_torch_graph = "the same step as a CUDA graph per pinned slot, replayed";
const std::string torch_label = std::string("PyTorch in Python, ") + label_torch;  // (torch_peer::label's form)
const std::string torch_graph_label = std::string("PyTorch in Python, ") + label_torch_graph;
constexpr const char* label_libtorch = "libtorch C++: 1 copy + index_put_ + logits fill, eager (in process)";
constexpr const char* label_libtorch_graph = "libtorch C++: 1 copy + index_put_ + logits fill, a CUDA graph per slot (in process)";
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
        args_(max_slots_), graph_(max_slots_), exec_(max_slots_) {
    // The slots, then the counter, then floor G's ring of the slot of each step.
    const std::size_t pinned_bytes = std::size_t{max_slots_} * slot::bytes + 256 + std::size_t{max_slots_} * 4;
    BENCH_CUDA(cudaHostAlloc(&pinned_, pinned_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(pinned_, 0, pinned_bytes);
    counter_ = reinterpret_cast<std::uint64_t*>(pinned_ + std::size_t{max_slots_} * slot::bytes);
    slot_of_ = reinterpret_cast<std::uint32_t*>(pinned_ + std::size_t{max_slots_} * slot::bytes + 256);
    ring_.emplace(counter_, initial_slots, max_slots_);
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

  /// One step: the next free slot (from the cached counter), the host writes the step into it,
  /// submits.
  void run() {
    const std::int64_t step = sched_.begin_step();
    const unsigned k = next_slot(step);
    write_step(step, k);
    submit(k);
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
    const unsigned k = next_slot(step);
    std::memcpy(at<std::byte>(k, 0), image_.data(), slot::seq);
    *at<std::uint64_t>(k, slot::seq) = static_cast<std::uint64_t>(step) + 1;
    submit(k);
  }
  /// Runs one real step, waits for it, and keeps its slot image for prepared().
  void prepare() {
    run();
    BENCH_CUDA(cudaStreamSynchronize(s_));
    image_.assign(at<std::byte>(cur_, 0), at<std::byte>(cur_, 0) + slot::bytes);
    prepared_step_ = sched_.steps();
  }

  /// Slots in use so far (the deepest ring the steps in flight needed).
  [[nodiscard]] unsigned slots() const noexcept { return racy_ ? initial_slots : ring_->active(); }

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
  // The step written into slot k: submit it.
  void submit(unsigned k) {
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

  // The slot of `step`: ferry's step_batch::begin() rule, by hand (support/fence.hpp's
  // counter_ring: the slot of the step before the last, else the next one, each as the cached
  // counter or, when that does not show it, one load of the counter says; else a slot not used
  // yet; else the host waits: a correct step never rewrites a slot that is still read). Racy: the
  // next of 4, unchecked. Steps in flight hold distinct slots, so floor G's ring of max_slots_
  // entries is never rewritten before the kernel that reads an entry has run.
  unsigned next_slot(std::int64_t step) {
    cur_ = racy_ ? (cur_ + 1) % initial_slots : ring_->next(static_cast<std::uint64_t>(step) + 1);
    return cur_;
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
  std::optional<ferry_bench::counter_ring> ring_;  // the correct floors' slot choice
  unsigned cur_ = initial_slots - 1;              // the slot of the last step
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

/// A row's figures: host µs per step in the three regimes, device µs per step.
struct figures {
  double host = nan, idle = nan, warm = nan, device = nan;
};

/// One in-process row: a way to run the step, on its stream.
struct variant {
  const char* label;
  std::function<void()> step;
  std::function<ferry_bench::guarded_counts()> guard{};  ///< a ferry row's sync_guard pass
  std::function<std::size_t()> slots{};                  ///< its ring's depth, where it has one
  bool device_work = true;                               ///< false: it enqueues nothing
  cudaStream_t stream = nullptr;                         ///< the stream it runs on
  std::size_t device_burst = 0;                          ///< steps per device burst (0: --burst)
  ferry_bench::timed_burst python{}, python_device{};    ///< a PyTorch-in-Python row: its bursts
  figures f{}, twin{};                                   ///< its figures and its twin's (--aa)
  ferry_bench::guarded_counts guarded{};
  ferry_bench::calls_per_op calls{}, calls_idle{};  ///< runtime calls per step: in bursts, GPU idle
};

void drain(const variant& v) { BENCH_CUDA(cudaStreamSynchronize(v.stream)); }

/// The model kernel of the warm regime: how long it holds the stream after each step.
constexpr double warm_model_ms = 0.05;

/// Host time of every row in the three regimes and, with `device_time`, its device time (see the
/// file comment), each regime in interleaved rounds; a PyTorch-in-Python row runs in the bursts
/// regime's rounds and has a device time, no idle or warm figure.
void measure(std::vector<variant>& vs, const ferry_bench::options& o, bool device_time) {
  using clk = std::chrono::steady_clock;
  std::vector<ferry_bench::timed_burst> bursts, idle, warm, device;
  std::vector<std::unique_ptr<ferry_bench::stream_gate>> gates;
  cudaEvent_t model_done[2];
  for (auto& e : model_done) BENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const ferry_bench::timed_burst none = [](std::size_t) { return nan; };
  for (auto& v : vs) {
    if (v.python) {  // the bursts regime and device time only
      bursts.push_back(v.python), idle.push_back(none), warm.push_back(none);
      device.push_back(device_time ? v.python_device : none);
      continue;
    }
    bursts.push_back(ferry_bench::host_burst([&v](std::size_t) { v.step(); }));
    idle.push_back([&v](std::size_t n) {
      std::vector<double> us;
      for (std::size_t k = 0; k < n; ++k) {
        drain(v);
        const auto t0 = clk::now();
        v.step();
        us.push_back(ferry_bench::micros(t0, clk::now()));
      }
      drain(v);
      return ferry_bench::median(us);
    });
    // 34 steps, the first 2 not kept (submitted to an idle stream).
    warm.push_back([&v, &model_done](std::size_t) {
      std::vector<double> us;
      drain(v);
      for (int k = 0; k < 34; ++k) {
        const auto t0 = clk::now();
        v.step();
        if (k >= 2) us.push_back(ferry_bench::micros(t0, clk::now()));
        ferry_bench::hold_stream(v.stream, warm_model_ms);
        BENCH_CUDA(cudaEventRecord(model_done[k % 2], v.stream));
        if (k > 0) BENCH_CUDA(cudaEventSynchronize(model_done[(k + 1) % 2]));
      }
      drain(v);
      return ferry_bench::median(us);
    });
    if (device_time && v.device_work) {
      gates.push_back(std::make_unique<ferry_bench::stream_gate>(v.stream));
      device.push_back(ferry_bench::device_burst(*gates.back(), [&v](std::size_t) { v.step(); }, v.device_burst));
    } else {
      device.push_back(none);
    }
  }
  auto drain_all = [&] {
    for (const auto& v : vs) drain(v);  // the other rows' streams are idle: their drain returns at once
  };
  const auto h = ferry_bench::interleaved(o, bursts, drain_all);
  const auto i = ferry_bench::interleaved(o, idle, [] {}, 1);
  const auto w = ferry_bench::interleaved(o, warm, [] {}, 1);
  ferry_bench::options od = o;
  od.bursts = device_time ? std::max(3, o.bursts / 4) : 0;
  const auto d = ferry_bench::interleaved(od, device, [] {}, device_time ? 1 : 0);
  for (auto& e : model_done) BENCH_CUDA(cudaEventDestroy(e));
  for (std::size_t k = 0; k < vs.size(); ++k) {
    vs[k].f = {h[k], i[k], w[k], d[k]};
    vs[k].twin = {h.twin[k], i.twin[k], w.twin[k], d.twin[k]};
  }
}

/// The two rows of a floor target, and their labels in the pair pass.
struct target_pair {
  const char* ferry_row;
  const char* floor_row;
  const char* ferry_alone;
  const char* floor_alone;
};
constexpr target_pair kernel_pair{label_step_batch_kernel, label_floor_direct,
                                  "alone with floor B': ferry step_batch launch::kernel",
                                  "alone with ferry launch::kernel: floor B'"};
constexpr target_pair graph_pair{label_step_batch_graph, label_floor_graph_one,
                                 "alone with floor G: ferry step_batch launch::graph (one executable for every slot)",
                                 "alone with ferry launch::graph: floor G"};

const variant* find_row(const std::vector<variant>& vs, const char* label) {
  for (const auto& v : vs)
    if (std::string(v.label) == label) return &v;
  return nullptr;
}

/// The pair pass: each floor target's rows timed again, host time only, relabelled.
std::vector<variant> measure_pairs(const std::vector<variant>& vs, const ferry_bench::options& o) {
  std::vector<variant> alone;
  for (const target_pair& p : {kernel_pair, graph_pair}) {
    std::vector<variant> pair{*find_row(vs, p.ferry_row), *find_row(vs, p.floor_row)};
    pair[0].label = p.ferry_alone;
    pair[1].label = p.floor_alone;
    measure(pair, o, false);
    alone.insert(alone.end(), pair.begin(), pair.end());
  }
  return alone;
}

/// The untimed passes of a row: its sync_guard pass (ferry rows), then its runtime calls per step
/// in bursts of `burst` steps drained between them, and one step at a time. No sync_guard may be
/// alive during the second (CUPTI takes one subscriber).
void count(variant& v, int burst) {
  if (v.python) return;
  if (v.guard) v.guarded = v.guard();
  auto step = [&](std::size_t) { v.step(); };
  v.calls = ferry_bench::steady_calls(step, [&](std::size_t i) {
    if (i % static_cast<std::size_t>(burst) == 0) drain(v);
  });
  v.calls_idle = ferry_bench::steady_calls(step, [&](std::size_t) { drain(v); });
  drain(v);
}

/// The table and the targets (see the file comment): every row, and the pair pass's rows beside
/// their pair's floor.
void report(std::vector<variant>& vs, const std::vector<variant>& alone, const ferry_bench::options& o,
            const std::string& libtorch_why, const std::string& torch_why) {
  ferry_bench::report rep("decode_step", o);
  rep.machine = ferry_bench::gpu_name();
  auto fig = [&](const std::vector<variant>& rows, const char* label, double figures::*x, bool twin = false) {
    const variant* v = find_row(rows, label);
    return v ? (twin ? v->twin : v->f).*x : nan;
  };
  const double kernel_floor = fig(vs, label_floor_direct, &figures::host);
  const double kernel_floor_idle = fig(vs, label_floor_direct, &figures::idle);
  const double kernel_floor_warm = fig(vs, label_floor_direct, &figures::warm);
  const double graph_floor = fig(vs, label_floor_graph_one, &figures::host);
  const double fused_kernel_device = fig(vs, label_floor_direct, &figures::device);
  for (const auto& v : vs)
    rep.add({{"step", v.label}, {"host us", v.f.host}, {"A/A", v.twin.host / v.f.host - 1}, {"host us, GPU idle", v.f.idle},
             {"host us, warm ring", v.f.warm}, {"device us", v.f.device},
             {"host / kernel floor B'", v.f.host / kernel_floor}, {"idle host / kernel floor B'", v.f.idle / kernel_floor_idle},
             {"warm host / kernel floor B'", v.f.warm / kernel_floor_warm}, {"host / graph floor G", v.f.host / graph_floor},
             {"device / fused kernel", v.f.device / fused_kernel_device},
             {"slots", v.slots ? static_cast<double>(v.slots()) : nan}, {"runtime_calls_per_step", v.calls.total},
             {"runtime_calls_per_step_idle", v.calls_idle.total},
             {"device burst", v.device_work ? static_cast<double>(v.device_burst ? v.device_burst : std::size_t(o.burst)) : nan},
             {"runtime_calls", v.calls.names()}, {"runtime_calls_idle", v.calls_idle.names()}});
  for (const target_pair& p : {kernel_pair, graph_pair})
    for (const char* label : {p.ferry_alone, p.floor_alone}) {
      auto over_floor = [&](double figures::*x) { return fig(alone, label, x) / fig(alone, p.floor_alone, x); };
      rep.add({{"step", label}, {"host us", fig(alone, label, &figures::host)},
               {"A/A", fig(alone, label, &figures::host, true) / fig(alone, label, &figures::host) - 1},
               {"host us, GPU idle", fig(alone, label, &figures::idle)},
               {"host us, warm ring", fig(alone, label, &figures::warm)},
               {"host / its pair's floor", over_floor(&figures::host)},
               {"idle host / its pair's floor", over_floor(&figures::idle)},
               {"warm host / its pair's floor", over_floor(&figures::warm)}});
    }

  // Each target, and the same computed from the twins (A/A). The floor targets come from the pair
  // pass, the peer targets from the pass with every row, each peer at its best (the faster of its
  // rows) and beside the same ratio of the floor (a peer ratio the floor misses too is reported).
  auto ratio = [&](const auto& rows, const char* a, const char* b, double figures::*x, bool twin) {
    return fig(rows, a, x, twin) / fig(rows, b, x, twin);
  };
  auto over = [&](const auto& rows, const char* a, const char* b, double figures::*x, bool twin) {
    return fig(rows, a, x, twin) - fig(rows, b, x, twin);
  };
  auto best = [&](const char* a, const char* b, bool twin) {
    return std::fmin(fig(vs, a, &figures::host, twin), fig(vs, b, &figures::host, twin));
  };
  const auto& k = kernel_pair;
  const auto& g = graph_pair;
  for (const bool twin : {false, true}) {
    const double libtorch = best(label_libtorch, label_libtorch_graph, twin);
    const double torch = best(torch_label.c_str(), torch_graph_label.c_str(), twin);
    const double ferry_graph = fig(vs, label_step_batch_graph, &figures::host, twin);
    const double ferry_kernel = fig(vs, label_step_batch_kernel, &figures::host, twin);
    const std::vector<std::pair<const char*, double>> values{
        {"kernel_host_vs_floor", ratio(alone, k.ferry_alone, k.floor_alone, &figures::host, twin)},
        {"kernel_host_over_floor_us", over(alone, k.ferry_alone, k.floor_alone, &figures::host, twin)},
        {"kernel_host_idle_over_floor_us", over(alone, k.ferry_alone, k.floor_alone, &figures::idle, twin)},
        {"graph_host_vs_one_exec_floor", ratio(alone, g.ferry_alone, g.floor_alone, &figures::host, twin)},
        {"graph_host_over_floor_us", over(alone, g.ferry_alone, g.floor_alone, &figures::host, twin)},
        {"device_vs_fused_kernel", ratio(vs, label_step_batch_kernel, label_floor_direct, &figures::device, twin)},
        {"host_vs_libtorch_graph", libtorch / ferry_graph},
        {"host_vs_libtorch_kernel", libtorch / ferry_kernel},
        {"host_vs_torch_graph", torch / ferry_graph}};
    const std::vector<double> floors{nan, nan, nan, nan, nan, nan, libtorch / graph_floor, libtorch / kernel_floor, torch / graph_floor};
    constexpr std::array<std::pair<const char*, double>, 9> goals{{{"<=", 1.15}, {"<=", 0.5}, {"<=", 0.8}, {"<=", 1.15},
                                                                   {"<=", 0.5}, {"<=", 1.1}, {">=", 8}, {">=", 4}, {">=", 40}}};
    for (std::size_t t = 0; t < values.size(); ++t) {
      if (!twin) rep.add_peer_target(values[t].first, values[t].second, goals[t].first, goals[t].second, floors[t]);
      else rep.targets[t].noise = std::abs(values[t].second - rep.targets[t].value);
    }
  }
  double syncs = 0, allocations = 0;  // the worst ferry row
  for (const auto& v : vs)
    if (v.guard) {
      syncs = std::max(syncs, v.guarded.syncs);
      allocations = std::max(allocations, v.guarded.allocations);
    }
  rep.add_target("syncs_per_step", syncs, "<=", 0);
  rep.add_target("allocations_per_step", allocations, "<=", 0);
  rep.print();
  for (const auto& v : vs)
    if (!v.guarded.report.empty()) std::cout << "sync_guard saw in " << v.label << ": " << v.guarded.report << "\n";
  if (!libtorch_why.empty()) std::cout << "(the in-process libtorch rows are absent: " << libtorch_why << ")\n";
  if (!torch_why.empty()) std::cout << "(the PyTorch-in-Python rows are not measured: " << torch_why << ")\n";
  rep.write_json(o.json);
}

int run(const ferry_bench::options& o) {
  ferry_bench::torch_peer torch(o.torch);  // started first: its Python process loads torch meanwhile
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
  auto drain_all = [&] { BENCH_CUDA(cudaStreamSynchronize(cs)); };
  // the UVA-backed state gets a slot per step in flight: a device burst, or a guard burst
  const auto in_flight = static_cast<std::size_t>(std::max(o.burst, 250)) + 8;
  const auto ref = ferry::stream_ref<B>::identified(cs);  // ferry's reference: its id and device looked up once
  ferry_step<B> kernel(ref, in_flight);
  ferry_step<B, ferry::launch::graph> graph(ref, in_flight);
  component_step<B> components(ref, in_flight);
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

  std::vector<variant> vs;
  auto add_ferry = [&](const char* label, auto& step) {
    auto run_step = [&step, ref] { step.run(ref); };
    vs.push_back({label, run_step, [run_step, drain_all] { return ferry_bench::guarded_steps(run_step, drain_all); }});
    if constexpr (requires { step.slots(); }) vs.back().slots = [&step] { return std::size_t{step.slots()}; };
  };
  add_ferry(label_step_batch_kernel, kernel);
  add_ferry(label_step_batch_graph, graph);
  add_ferry(label_ferry, components);
  const std::pair<floor_step*, const char*> floors[] = {
      {&floor_copy, label_floor_copy},          {&floor_uva, label_floor_uva},
      {&floor_direct, label_floor_direct},      {&floor_graph_slot, label_floor_graph_slot},
      {&floor_graph_one, label_floor_graph_one}, {&racy_uva, label_racy_uva}};
  for (const auto& [f, label] : floors) vs.push_back({label, [f] { f->run(); }, {}, [f] { return std::size_t{f->slots()}; }});
  vs.push_back({label_launch_only, [&] { ablation_launch.launch_only(); }});
  vs.push_back({label_generate_only, [&] { ablation_generate.generate_only(); }, {}, {}, false});
  vs.push_back({label_prepared, [&] { ablation_prepared.prepared(); }, {}, [&] { return std::size_t{ablation_prepared.slots()}; }});
  for (auto& v : vs) v.stream = cs;

  // Warm-up: ferry's arena, staging slots and UVA pools reach their steady state, including the
  // most steps in flight (a burst queued behind a stream held for a fixed time, so that a growth
  // that synchronizes cannot wait on a hold that waits on the host); the correct floors go through
  // the same burst, so that their rings are as deep as ferry's.
  for (int k = 0; k < 300; ++k)
    for (auto& v : vs) v.step();
  drain_all();
  ferry_bench::hold_stream(cs, 40);
  for (int k = 0; k < std::max(o.burst, 250); ++k) {
    for (std::size_t r = 0; r < 3; ++r) vs[r].step();
    for (floor_step* f : {&floor_copy, &floor_uva, &floor_direct, &floor_graph_slot, &floor_graph_one}) f->run();
    ablation_prepared.prepared();
  }
  drain_all();

  // libtorch in this process, on its own stream (see the file comment): eager and graphs, each
  // engine with its own state, checked before and after timing.
  std::string libtorch_why = "this build has no libtorch (CMake found no Torch config: set FERRY_BENCH_TORCH_PREFIX)";
#if FERRY_BENCH_LIBTORCH
  std::vector<std::unique_ptr<ferry_bench::libtorch_peer::decode_step_engine>> torch_engines;
  libtorch_why.clear();
  for (const bool graphs : {false, true}) {  // each on its own: a graph that torch cannot capture leaves the eager row
    try {
      auto e = std::make_unique<ferry_bench::libtorch_peer::decode_step_engine>(static_cast<int>(in_flight), graphs);
      for (int k = 0; k < 300; ++k) e->step();
      if (const char* bad = e->check()) throw std::runtime_error(std::string("check before timing: ") + bad);
      vs.push_back({graphs ? label_libtorch_graph : label_libtorch, [p = e.get()] { p->step(); }});
      vs.back().stream = static_cast<cudaStream_t>(e->stream());
      vs.back().device_burst = 128;  // a burst that fits the launch queue
      torch_engines.push_back(std::move(e));
      std::cout << "libtorch " << ferry_bench::libtorch_peer::torch_version() << (graphs ? " graphs" : " eager")
                << " in process: check ok\n";
    } catch (const std::exception& e) {
      libtorch_why += std::string(graphs ? "graphs" : "eager") + ": libtorch in process failed: " + e.what() + "; ";
    }
  }
#endif
  // PyTorch in Python (--torch): its rows' bursts come from the Python process, round by round.
  for (const auto& [what, label] : {std::pair{std::string("decode_eager"), label_torch},
                                    std::pair{"decode_graph " + std::to_string(in_flight), label_torch_graph}}) {
    vs.push_back({label == label_torch ? torch_label.c_str() : torch_graph_label.c_str(), {}});
    vs.back().stream = cs;
    vs.back().device_burst = 64;
    vs.back().python = torch.host(what);
    vs.back().python_device = [&torch, what](std::size_t) { return torch.ask("device", what, 64); };
  }

  measure(vs, o, true);
  const std::vector<variant> alone = measure_pairs(vs, o);
  for (auto& v : vs) count(v, o.burst);
#if FERRY_BENCH_LIBTORCH
  for (auto& e : torch_engines)
    if (const char* bad = e->check()) {  // wrong results: its figures are not a step's
      libtorch_why = std::string("libtorch in process: check after timing failed: ") + bad;
      for (auto& v : vs)
        if (v.stream == static_cast<cudaStream_t>(e->stream())) v.f = v.twin = {};
    }
#endif
  report(vs, alone, o, libtorch_why, torch.why());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ferry_bench::bench_main("bench.decode_step", argc, argv, run); }
