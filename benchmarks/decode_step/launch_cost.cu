// probe.launch_cost: what a kernel's own properties, and what the caller did just before (stores,
// other code run, other data read), add to cudaLaunchKernel's host time.
//
// decode_step's launch::kernel row spends most of its time inside cudaLaunchKernel
// (support/host_profile.hpp). This probe launches kernels that differ in one property each, on
// one stream, interleaved round by round in a rotated order, and prints the median host time of
// the cudaLaunchKernel call alone (and of what ran before it and the fence, timed apart):
//  - parameters: one pointer (8 bytes, as the step kernel before the slot ring took) against a
//    step_locator and an empty functor (33 bytes, as ferry::step_kernels::run_step takes);
//  - a stack frame: the same kernels with a local array (run_step had an 8-byte one, from a spill);
//  - ferry's own step kernel, run_step<no_step_epilogue>, on a table with no work;
//  - the grid: the pointer kernel over 1, 64 and 256 blocks;
//  - what the caller stored just before: the pointer kernel launched right after 12 KiB (about a
//    decode step's slot) were written to mapped pinned memory, into one slot every time (warm), or
//    into the next of 256 slots (a ring as deep as decode_step's in bursts: cold), and the cold
//    case again with a full fence between the stores and the launch: whether stores still in
//    flight when the launch starts are paid for inside cudaLaunchKernel;
//  - what the caller ran or read just before: the pointer kernel launched right after 4, 16 or
//    32 KiB of other code (one jump per 64-byte line: that many lines of the instruction cache
//    taken) or after reading 16 or 64 KiB of other data: whether the launch call pays for the
//    caches its caller filled (ferry's step runs more code than the floor's before its launch);
//  - ferry's stream checks just before (cudaGetDevice + cudaStreamIsCapturing, as every submit
//    makes them): what they cost, and whether the launch after them costs more;
//  - what the kernels read: a kernel that reads the 12 KiB just stored to the next of 256 slots
//    through UVA, as decode_step's step kernels and floors do, so that in bursts the GPU reads
//    host memory over the bus while the host stores and launches the next steps: whether the call
//    pays for the device's reads (the launch tap found the same call costing different amounts in
//    rows whose kernels read differently).
// Every kernel runs 16 blocks of 256 threads (decode_step's descriptors) unless its row names
// another grid, and stores one word.
// Regimes: "idle" (the stream drained before each launch, not timed) and "burst" (64 launches back
// to back, each timed, the stream drained between bursts).
// Build: the target probe.launch_cost (benchmarks/decode_step/CMakeLists.txt); run it on the GPU
// machine.
#include <ferry/step/step_batch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

#define PROBE_CUDA(call)                                                                 \
  do {                                                                                   \
    const cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                    \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

struct empty_functor {};

__global__ void __launch_bounds__(256) by_pointer(unsigned long long* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *out += 1;
}

// Reads `words` words of a mapped pinned slot (each block a share, one word per thread per pass)
// and stores their sum: the device reading host memory through UVA, as the step kernels do.
__global__ void __launch_bounds__(256) reads_slot(const unsigned long long* slot, unsigned words,
                                                  unsigned long long* out) {
  unsigned long long sum = 0;
  for (unsigned w = blockIdx.x * blockDim.x + threadIdx.x; w < words; w += gridDim.x * blockDim.x) sum += slot[w];
  if (sum == 0x5eed) *out = sum;  // never true for the probe's data: keeps the reads
}

__global__ void __launch_bounds__(256) by_locator(ferry::detail::step_locator loc, empty_functor) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<unsigned long long*>(loc.tables) += 1;
}

// Two words whose address a call takes: ptxas gives the caller a stack frame (its size: the
// "local bytes/thread" printed).
__device__ __noinline__ unsigned pick(const unsigned* a, unsigned i) { return a[i & 1]; }
__device__ __forceinline__ unsigned through_stack(unsigned x, const unsigned long long* at) {
  const unsigned a[2] = {x, x + 1};
  return pick(a, static_cast<unsigned>(*at));
}

__global__ void __launch_bounds__(256) by_pointer_stack(unsigned long long* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *out += through_stack(threadIdx.x + 1, out);
}

__global__ void __launch_bounds__(256) by_locator_stack(ferry::detail::step_locator loc, empty_functor) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    auto* out = reinterpret_cast<unsigned long long*>(loc.tables);
    *out += through_stack(threadIdx.x + 1, out);
  }
}

// `lines` 64-byte lines of straight-line host code, one jump each (the rest of a line is padding):
// runs them all, so that they take that many lines of the instruction cache.
#define PROBE_CODE_LINES(name, lines)                                                       \
  __attribute__((noinline)) void name() {                                                   \
    asm volatile(".rept " #lines "\n\tjmp 1f\n\t.balign 64\n1:\n\t.endr" ::: "memory"); \
  }
PROBE_CODE_LINES(run_code_4k, 64)
PROBE_CODE_LINES(run_code_16k, 256)
PROBE_CODE_LINES(run_code_32k, 512)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main() {
  constexpr unsigned block = 256;
  constexpr int rounds = 400, burst = 64;
  cudaStream_t s = nullptr;
  PROBE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long* word = nullptr;
  PROBE_CUDA(cudaMalloc(&word, sizeof(unsigned long long)));
  // ferry's step kernel: a mapped table with no work and no kernel mark, on one device lane.
  void* table = nullptr;
  PROBE_CUDA(cudaHostAlloc(&table, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
  std::fill_n(static_cast<unsigned char*>(table), 4096, 0);
  void* mapped = nullptr;
  PROBE_CUDA(cudaHostGetDevicePointer(&mapped, table, 0));
  const ferry::detail::step_lane lane = ferry::detail::step_lanes().take(0);
  ferry::detail::preload_step_kernel<void>();

  const ferry::detail::step_locator to_word{reinterpret_cast<std::uintptr_t>(word), 0, 0, 0};
  const ferry::detail::step_locator to_table{reinterpret_cast<std::uintptr_t>(mapped), 0, 0, lane.address};
  empty_functor none{};
  ferry::detail::no_step_epilogue no_epilogue{};
  // What the host does just before a launch: stores of `slot_words` words into one of `slots`
  // mapped pinned slots, other code run, or other data read (`other_data`).
  enum class prior {
    none, warm_slot, next_slot, next_slot_fenced, code_4k, code_16k, code_32k, data_16k, data_64k, stream_checks
  };
  std::vector<std::uint64_t> other_data(64 * 1024 / sizeof(std::uint64_t), 1);
  volatile std::uint64_t sink = 0;
  constexpr std::size_t slot_words = 12 * 1024 / sizeof(std::uint64_t), slots = 256;
  std::uint64_t* ring = nullptr;
  PROBE_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring), slots * slot_words * sizeof(std::uint64_t),
                           cudaHostAllocMapped | cudaHostAllocPortable));
  std::fill_n(ring, slots * slot_words, 0);
  void* mapped_ring = nullptr;
  PROBE_CUDA(cudaHostGetDevicePointer(&mapped_ring, ring, 0));
  struct variant {
    const char* name;
    const void* kernel;
    std::array<void*, 2> args;
    std::size_t param_bytes;
    unsigned grid = 16;
    prior before = prior::none;
    bool reads_slot = false;  // the kernel is reads_slot, over the slot just stored (args set per launch)
  };
  constexpr std::size_t by_ptr = sizeof(void*), by_loc = sizeof(ferry::detail::step_locator) + 1;
  // The pointer kernel over `grid` blocks after `before`: the rows that vary what is around a launch.
  const auto pointer = [&](const char* name, unsigned grid = 16, prior before = prior::none) {
    return variant{name, reinterpret_cast<const void*>(&by_pointer), {&word, nullptr}, by_ptr, grid, before};
  };
  const std::array<variant, 19> variants{{
      pointer("pointer (8 B), no stack frame"),
      {"locator + functor (33 B), no stack frame", reinterpret_cast<const void*>(&by_locator),
       {const_cast<ferry::detail::step_locator*>(&to_word), &none}, by_loc},
      {"pointer (8 B), stack frame", reinterpret_cast<const void*>(&by_pointer_stack), {&word, nullptr}, by_ptr},
      {"locator + functor (33 B), stack frame", reinterpret_cast<const void*>(&by_locator_stack),
       {const_cast<ferry::detail::step_locator*>(&to_word), &none}, by_loc},
      {"ferry run_step<no_step_epilogue>, empty table",
       reinterpret_cast<const void*>(&ferry::step_kernels::run_step<ferry::detail::no_step_epilogue>),
       {const_cast<ferry::detail::step_locator*>(&to_table), &no_epilogue}, by_loc},
      pointer("pointer, grid 1", 1),
      pointer("pointer, grid 64", 64),
      pointer("pointer, grid 256", 256),
      pointer("pointer, after 12 KiB stored to one slot", 16, prior::warm_slot),
      pointer("pointer, after 12 KiB stored to the next of 256", 16, prior::next_slot),
      pointer("pointer, ... of 256, then a fence", 16, prior::next_slot_fenced),
      pointer("pointer, after 4 KiB of other code", 16, prior::code_4k),
      pointer("pointer, after 16 KiB of other code", 16, prior::code_16k),
      pointer("pointer, after 32 KiB of other code", 16, prior::code_32k),
      pointer("pointer, after 16 KiB of other data read", 16, prior::data_16k),
      pointer("pointer, after 64 KiB of other data read", 16, prior::data_64k),
      pointer("pointer, after ferry's two stream checks", 16, prior::stream_checks),
      {"UVA reader, after 12 KiB stored to the next of 256", reinterpret_cast<const void*>(&reads_slot),
       {nullptr, nullptr}, 2 * by_ptr + sizeof(unsigned), 16, prior::next_slot, true},
      {"UVA reader, ... of one slot", reinterpret_cast<const void*>(&reads_slot), {nullptr, nullptr},
       2 * by_ptr + sizeof(unsigned), 16, prior::warm_slot, true},
  }};
  for (const auto& v : variants) {
    cudaFuncAttributes a{};
    PROBE_CUDA(cudaFuncGetAttributes(&a, v.kernel));
    std::printf("%-48s local bytes/thread %zu, registers %d, params %zu\n", v.name, a.localSizeBytes,
                a.numRegs, v.param_bytes);
  }
  // One launch of `v`, after what runs before it: the host us of that, of the fence and of the launch call.
  struct timing {
    double before = 0, fence = 0, launch = 0;
  };
  std::size_t next = 0;
  std::uint64_t value = 0;
  int device = 0;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  auto launch = [&](const variant& v) {
    using clock = std::chrono::steady_clock;
    const auto us = [](clock::time_point a, clock::time_point b) {
      return std::chrono::duration<double, std::micro>(b - a).count();
    };
    // The slot a store row writes (the warm one: the first), and the launch's arguments, chosen
    // before anything is timed.
    const bool next_slot = v.before == prior::next_slot || v.before == prior::next_slot_fenced;
    std::uint64_t* const slot = ring + (next_slot ? next++ % slots : 0) * slot_words;
    const unsigned long long* uva = reinterpret_cast<const unsigned long long*>(mapped_ring) + (slot - ring);
    unsigned words = static_cast<unsigned>(slot_words);
    void* reader_args[3] = {&uva, &words, &word};
    void* args[2] = {v.args[0], v.args[1]};
    void** const launch_args = v.reads_slot ? reader_args : args;
    const auto t0 = clock::now();
    switch (v.before) {
      case prior::none: break;
      case prior::warm_slot:
      case prior::next_slot:
      case prior::next_slot_fenced:
        ++value;
        for (std::size_t w = 0; w < slot_words; ++w) slot[w] = value + w;
        break;
      case prior::code_4k: run_code_4k(); break;
      case prior::code_16k: run_code_16k(); break;
      case prior::code_32k: run_code_32k(); break;
      case prior::data_16k:
      case prior::data_64k: {
        const std::size_t n = (v.before == prior::data_16k ? 16 : 64) * 1024 / sizeof(std::uint64_t);
        std::uint64_t sum = 0;
        for (std::size_t w = 0; w < n; w += 8) sum += other_data[w];  // one load per line
        sink = sum;
        break;
      }
      case prior::stream_checks:
        PROBE_CUDA(cudaGetDevice(&device));
        PROBE_CUDA(cudaStreamIsCapturing(s, &capturing));
        break;
    }
    const auto t1 = clock::now();
    if (v.before == prior::next_slot_fenced) std::atomic_thread_fence(std::memory_order_seq_cst);
    const auto t2 = clock::now();
    PROBE_CUDA(cudaLaunchKernel(v.kernel, dim3(v.grid), dim3(block), launch_args, 0, s));
    const auto t3 = clock::now();
    return timing{us(t0, t1), us(t1, t2), us(t2, t3)};
  };
  std::array<std::vector<timing>, variants.size()> idle, bursts;
  for (int r = -20; r < rounds; ++r) {  // 20 warm-up rounds
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const auto& v = variants[(k + static_cast<std::size_t>(r + 20)) % variants.size()];
      const std::size_t i = static_cast<std::size_t>(&v - variants.data());
      PROBE_CUDA(cudaStreamSynchronize(s));
      const timing t = launch(v);
      if (r >= 0) idle[i].push_back(t);
      PROBE_CUDA(cudaStreamSynchronize(s));
      for (int b = 0; b < burst; ++b) {
        const timing tb = launch(v);
        if (r >= 0) bursts[i].push_back(tb);
      }
    }
  }
  PROBE_CUDA(cudaStreamSynchronize(s));
  const auto med = [](const std::vector<timing>& ts, double timing::*part) {
    std::vector<double> v;
    for (const timing& t : ts) v.push_back(t.*part);
    return median(std::move(v));
  };
  std::printf("\nmedian host us, %d rounds (interleaved, rotated), blocks of %u threads: the cudaLaunchKernel call, and "
              "what ran before it (stores, code or reads) and the fence\n",
              rounds, block);
  std::printf("%-48s %8s %8s %14s %14s\n", "kernel", "idle", "burst", "before idle/b", "fence idle/b");
  for (std::size_t i = 0; i < variants.size(); ++i)
    std::printf("%-48s %8.3f %8.3f %6.3f/%6.3f %6.3f/%6.3f\n", variants[i].name, med(idle[i], &timing::launch),
                med(bursts[i], &timing::launch), med(idle[i], &timing::before), med(bursts[i], &timing::before),
                med(idle[i], &timing::fence), med(bursts[i], &timing::fence));
  ferry::detail::step_lanes().give(0, lane);
  PROBE_CUDA(cudaFreeHost(ring));
  PROBE_CUDA(cudaFreeHost(table));
  PROBE_CUDA(cudaFree(word));
  PROBE_CUDA(cudaStreamDestroy(s));
  return 0;
}
