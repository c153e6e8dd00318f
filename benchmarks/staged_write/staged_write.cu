// Benchmark staged_write (SPEC §10): staged-write applies over writes W in {1, 8, 64, 256} x
// elements per write in {8, 64, 1024, 4096}, into a 1024 x 4096 int32 device target (and a UVA
// target), ferry beside its baselines in one table:
//  - host time of W stage_write calls + apply_write (uva_direct = presets::block_table, h2d_copy,
//    and the UVA target) against its floor: the raw-CUDA way with nothing but the unavoidable
//    work, done correctly: memcpy of each write's contents (and its chunk descriptor) into a
//    preallocated pinned buffer that no queued apply still reads (a ring, floor_ring), then a bare
//    launch of the same kernel with the same arguments (h2d_copy: plus a bare cudaMemcpyAsync of
//    the contents). Printed too: the racy floor (the same into one pinned buffer, rewritten while
//    queued applies may still read it: a bound, not a correct apply) and a launch-only floor.
//  - device time (ops queued behind a held stream) of ferry uva_direct, h2d_copy and
//    threshold<256 KiB>, of the naive one-block-per-write kernel (contents through UVA and
//    through an H2D copy, metadata through UVA), and of cub::DeviceMemcpy::Batched doing the same
//    scatter (pointer and size arrays in device memory, prepared outside the timing);
//  - host time again with the GPU behind: every burst (ferry's and its floors') enqueued behind a
//    kernel that holds the stream until the burst's last call has returned (a gate the host
//    opens: stream_gate), so that applies queue up as when the host runs ahead of a long step;
//  - runtime API calls per apply in steady state (support/runtime_calls.hpp: CUPTI, 1000 applies
//    counted after 1000 uncounted ones, apart from any timing), idle and behind: all of them, by
//    name, and those on events (records and queries: zero once apply kernels store their own
//    reuse marks);
//  - with --torch CMD, the PyTorch + Triton way in Python (support/torch_peer.py's case "staged":
//    W stage_write calls into Python lists, one pinned tensor per array, a Triton kernel), its host
//    time a variant of every point's idle rounds (a Python process asked for one burst per round:
//    support/torch_peer.hpp), its device time asked once per point.
// Method notes: ferry's host time and its floors are measured in interleaved rounds (same burst of
// 256, same drain, medians; support/bench.hpp: with --aa every variant beside its twin, column
// "A/A", and each target also from the twins' ratios, its A/A noise), so that drift of the machine
// falls on both alike. The floors include
// the host copy of the contents into pinned memory (SPEC §10: work that the operation needs is
// counted wherever it happens; a staged write must copy its range somewhere the GPU can reach),
// and are otherwise a bare launch of the kernel ferry launches, with the same arguments: for
// points whose chunk table and contents fit in 4 KiB ferry passes them in the launch's
// parameters (column "inline"), and the floor launches that same inline kernel with the same
// parameter block. The floor's ring: pinned mapped buffers allocated up front, 2 rotating at
// first, one more inserted when the next is still read (as ferry's pool adds a slot when its
// next is busy); every launch that reads a buffer afterwards carries a kernel_mark storing the
// ring's apply number into a mapped counter, and a buffer is rewritten only once one load of that
// counter shows its last apply has passed (the inline launch copies the buffer into its
// parameters, so the ring stays on that buffer). It cycles oldest first (ferry's pool takes the
// newest of its last few used slots that has passed), so it writes colder memory than the racy
// floor's one cache-hot buffer, as a correct engine must once applies queue up. Rings are warmed as ferry's
// pools are (a burst behind a hold): no timed burst grows one (column "floor ring growth in host
// timing"). At every point, the correct floors' and ferry's results are checked against the
// reference (random contents, applies to distinct rows queued behind a gate, read back after a
// drain). Device times queue bursts of 32 operations behind a gate, every variant interleaved
// (larger bursts of launches fill a held stream's launch queue and block the host, which then sets
// the pace); "device gates cut" > 0 means a gate reached its cap before the host had queued the
// burst (that sample is dropped). Time: each point's host timings stop adding rounds once their budget is
// spent and 5 rounds are in (ferry_bench::time_budget; "bursts idle", "bursts behind" and
// "point s" say what ran): the small points still run all 40, the largest 5 to 10, and the whole
// grid took about a minute on an H200 without --aa (it prints its time).
// Targets (SPEC §10): host / the correct floor over every point and both configurations, median
// <= 1.15x and worst <= 1.3x, idle and behind; no event call per apply in steady state; >= 20x
// PyTorch + Triton at every point (a peer ratio: reported where the floor misses it too);
// uva_direct device time >= 0.95x h2d_copy at every point and >= 1.3x median; applies of >= 4 MiB
// at >= 90% of the zero-copy read bandwidth measured in this run (a kernel reading 256 MiB of
// pinned memory).
// Every target is emitted; one that could not be measured in this run (no --torch CMD, no CUPTI)
// is recorded as missing (null) and missed.
#include <ferry/ferry.cuh>

#include <support/gpu.cuh>
#include <support/runtime_calls.hpp>
#include <support/torch_peer.hpp>

#include <cub/device/device_memcpy.cuh>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using ferry_bench::host_us_interleaved;
using ferry_bench::stream_gate;
using B = ferry::backend::cuda;
using T = std::int32_t;
constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();

namespace {

constexpr std::size_t kRows = 1024, kCols = 4096;

// The baseline: one block per write (rows, starts, 64-bit offsets read through UVA).
__global__ void naive_apply(T* dst, std::size_t cols, const std::int32_t* rows, const std::int32_t* starts,
                            const std::int64_t* offsets, const T* contents) {
  const int w = blockIdx.x;
  const std::int64_t b = offsets[w], e = offsets[w + 1];
  T* d = dst + static_cast<std::size_t>(rows[w]) * cols + starts[w];
  for (std::int64_t i = b + threadIdx.x; i < e; i += blockDim.x) d[i - b] = contents[i];
}

// Zero-copy read bandwidth: every thread reads 16-byte vectors of pinned memory.
__global__ void zero_copy_read(const uint4* p, std::size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// Stages W writes of `per` elements (write w: row row(w), columns [0, per), contents src(w)) into
// contents `c` and chunk table `d`, chunked as ferry chunks (elements_per_chunk<T> per chunk);
// returns the chunk count.
template <class Row, class Src>
std::size_t stage_writes(T* c, ferry::detail::chunk_desc* d, int W, int per, Row&& row, Src&& src) {
  constexpr std::size_t per_chunk = ferry::detail::elements_per_chunk<T>;
  std::size_t n = 0;
  for (int w = 0; w < W; ++w) {
    std::memcpy(c + static_cast<std::size_t>(w) * per, src(w), per * sizeof(T));
    for (std::size_t e = 0; e < static_cast<std::size_t>(per); e += per_chunk)
      d[n++] = {row(w) * kCols + e, static_cast<std::uint64_t>(w) * per + e,
                static_cast<std::uint32_t>(std::min<std::size_t>(per_chunk, per - e)), 0};
  }
  return n;
}

// The correct floor's staging, hand-written as a careful engine would: `capacity` pinned, mapped
// buffers (contents, then chunk table), allocated up front, of which the first `active` rotate
// (2 at first). Every apply that reads its buffer after the launch returns carries a kernel_mark
// that stores the ring's apply number into a mapped counter once the kernel is done (one stream:
// numbers pass in order; an H2D copy before the kernel is covered too). A buffer is rewritten
// only once one load of that counter shows its last apply has passed; when the next buffer is
// still read, a fresh one is inserted before it (the active count grows, nothing is allocated:
// ferry's pool adds a slot likewise); at capacity the host waits for the stream.
class floor_ring {
 public:
  struct buffer {
    T* contents = nullptr;  // host address; contents_dev: the same bytes for kernels
    const T* contents_dev = nullptr;
    ferry::detail::chunk_desc* descs = nullptr;
    const ferry::detail::chunk_desc* descs_dev = nullptr;
    std::uint64_t last = 0;  // the number of the last apply that reads it (0: none)
  };

  floor_ring(std::size_t capacity, std::size_t elements, std::size_t descs, cudaStream_t s) : stream_(s) {
    const std::size_t desc_offset = (elements * sizeof(T) + 255) / 256 * 256;
    const std::size_t stride = (desc_offset + descs * sizeof(ferry::detail::chunk_desc) + 4095) / 4096 * 4096;
    void* p = nullptr;
    BENCH_CUDA(cudaHostAlloc(&p, capacity * stride, cudaHostAllocMapped));
    base_ = static_cast<std::byte*>(p);
    void* pd = nullptr;
    BENCH_CUDA(cudaHostGetDevicePointer(&pd, p, 0));
    auto* base_dev = static_cast<std::byte*>(pd);
    bufs_.resize(capacity);
    for (std::size_t k = 0; k < capacity; ++k) {
      auto& b = bufs_[k];
      b.contents = reinterpret_cast<T*>(base_ + k * stride);
      b.contents_dev = reinterpret_cast<const T*>(base_dev + k * stride);
      b.descs = reinterpret_cast<ferry::detail::chunk_desc*>(base_ + k * stride + desc_offset);
      b.descs_dev = reinterpret_cast<const ferry::detail::chunk_desc*>(base_dev + k * stride + desc_offset);
    }
    order_.reserve(capacity);  // growth inserts into reserved capacity: no allocation
    order_ = {0, 1};
    BENCH_CUDA(cudaHostAlloc(&p, sizeof(std::uint64_t), cudaHostAllocMapped));
    counter_ = static_cast<std::uint64_t*>(p);
    *counter_ = 0;
    BENCH_CUDA(cudaHostGetDevicePointer(&pd, p, 0));
    counter_dev_ = static_cast<std::uint64_t*>(pd);
    BENCH_CUDA(cudaMalloc(&pd, sizeof(unsigned)));
    blocks_done_ = static_cast<unsigned*>(pd);
    BENCH_CUDA(cudaMemset(blocks_done_, 0, sizeof(unsigned)));
    BENCH_CUDA(cudaDeviceSynchronize());
  }
  floor_ring(const floor_ring&) = delete;
  floor_ring& operator=(const floor_ring&) = delete;
  ~floor_ring() {  // cudaFreeHost waits for the device
    cudaFreeHost(base_);
    cudaFreeHost(counter_);
    cudaFree(blocks_done_);
  }

  // The buffer the next apply stages into (the same one until commit()), by the rule of ferry's
  // staging slots: the newest of the 3 buffers committed last whose apply has passed (the GPU
  // keeps up: warm in the host's caches), else the next of the ring if passed, else a fresh
  // buffer inserted before it (which stays next); at capacity the host waits for the stream.
  buffer& acquire() {
    if (sel_ == none) sel_ = pick();
    return bufs_[sel_];
  }
  // The acquired buffer is read by the apply launched next with the returned mark.
  ferry::detail::kernel_mark commit() {
    buffer& b = bufs_[sel_];
    b.last = ++applies_;
    auto at = std::find(recent_.begin(), recent_.end(), sel_);
    if (at == recent_.end()) at = recent_.end() - 1;
    std::rotate(recent_.begin(), at, at + 1);  // sel_ first, the others keep their order
    recent_[0] = sel_;
    sel_ = none;
    return {counter_dev_, blocks_done_, b.last};
  }
  [[nodiscard]] std::size_t active() const noexcept { return order_.size(); }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  std::size_t pick() {
    for (const std::size_t k : recent_)
      if (k != none && passed(bufs_[k].last)) return k;
    const std::size_t next = order_[cur_];
    if (!passed(bufs_[next].last)) {
      if (order_.size() < bufs_.size()) {  // a fresh buffer goes before the busy one
        order_.insert(order_.begin() + static_cast<std::ptrdiff_t>(cur_), static_cast<std::uint32_t>(order_.size()));
        const std::size_t fresh = order_[cur_];
        cur_ = (cur_ + 1) % order_.size();
        return fresh;
      }
      while (!passed(bufs_[next].last)) {  // at capacity: wait for the stream to pass it
        const cudaError_t r = cudaStreamQuery(stream_);
        if (r == cudaSuccess && !passed(bufs_[next].last)) throw std::logic_error("floor_ring: stream idle, counter short");
        if (r != cudaSuccess && r != cudaErrorNotReady) BENCH_CUDA(r);
        std::this_thread::yield();
      }
    }
    cur_ = (cur_ + 1) % order_.size();
    return next;
  }

  bool passed(std::uint64_t n) {
    if (n <= known_) return true;
    known_ = std::atomic_ref<std::uint64_t>(*counter_).load(std::memory_order_acquire);  // the one load
    return n <= known_;
  }

  cudaStream_t stream_;
  std::byte* base_ = nullptr;
  std::vector<buffer> bufs_;
  std::vector<std::uint32_t> order_;  // the active buffers in rotation order
  std::size_t cur_ = 0;               // position in order_ of the next buffer
  std::size_t sel_ = none;            // the acquired buffer, until commit()
  std::array<std::size_t, 3> recent_{none, none, none};  // committed last, newest first
  std::uint64_t* counter_ = nullptr;  // host address of the mapped counter
  std::uint64_t* counter_dev_ = nullptr;
  unsigned* blocks_done_ = nullptr;
  std::uint64_t applies_ = 0, known_ = 0;
};

// How a floor apply reaches the kernel: contents read in place through UVA, in the launch's
// parameters (the inline kernel), or copied first (a bare cudaMemcpyAsync into `dev_contents`).
enum class via { uva, params, h2d };

// One apply of the correct floor: W writes staged into the ring's next free buffer, then the bare
// launch of ferry's kernel with the ring's mark. Inline: the launch copies the buffer into its
// parameters before returning, so nothing reads it afterwards and the ring stays on it.
template <class Row, class Src>
void floor_apply(floor_ring& ring, via path, int W, int per, Row&& row, Src&& src, T* dst, T* dev_contents,
                 cudaStream_t s) {
  auto& b = ring.acquire();
  const std::size_t n = stage_writes(b.contents, b.descs, W, per, row, src);
  const std::size_t bytes = static_cast<std::size_t>(W) * per * sizeof(T);
  const auto dst_base = reinterpret_cast<std::uintptr_t>(dst);
  if (path == via::params) {
    if (!ferry::detail::launch_apply_inline_chunks<std::uint32_t>(b.descs, n, b.contents, bytes, dst_base, s))
      throw std::logic_error("floor_apply: not an inline point");
    return;
  }
  const ferry::detail::kernel_mark m = ring.commit();
  const T* src_dev = b.contents_dev;
  if (path == via::h2d) {
    BENCH_CUDA(cudaMemcpyAsync(dev_contents, b.contents, bytes, cudaMemcpyDefault, s));
    src_dev = dev_contents;
  }
  ferry::detail::launch_apply_chunks<std::uint32_t>(b.descs_dev, n, dst_base, reinterpret_cast<std::uintptr_t>(src_dev),
                                                    m, s);
}

// Runtime API calls per apply in steady state (support/runtime_calls.hpp: `ops` applies counted
// after `ops` uncounted ones), with the GPU idle (the stream drained before each apply) or behind
// (bursts of 64 applies, each queued behind a closed gate, capped at `cap_ms`). Drains and gates
// are not counted.
template <class Op, class Drain>
ferry_bench::calls_per_op count_calls(stream_gate& gate, Op&& op, Drain&& drain, bool behind, double cap_ms,
                                      std::size_t ops) {
  constexpr std::size_t burst = 64;
  auto r = ferry_bench::steady_calls(op, [&](std::size_t i) {
    if (!behind) {
      drain();
    } else if (i % burst == 0) {
      gate.open();
      drain();
      gate.close(cap_ms);
    }
  }, ops, ops);
  gate.open();
  drain();
  return r;
}

// ferry's pinned and device allocations so far (a steady-state apply makes none).
std::uint64_t allocations() {
  const auto st = ferry::backend_stats_of<B>();
  return st.pinned_allocations + st.device_allocations;
}

int run(const ferry_bench::options& o) {
  // --points WxP,...: only those grid points (the targets then cover those points only).
  std::vector<std::pair<int, int>> points;
  std::istringstream list(o.points);
  for (std::string point; std::getline(list, point, ',');) {
    int w = 0, per = 0;
    if (std::sscanf(point.c_str(), "%dx%d", &w, &per) != 2) throw std::runtime_error("--points takes WxP,WxP,... (got '" + point + "')");
    points.emplace_back(w, per);
  }
  if (points.empty())
    for (int w : {1, 8, 64, 256})
      for (int per : {8, 64, 1024, 4096}) points.emplace_back(w, per);
  ferry_bench::torch_peer torch(o.torch);
  ferry_bench::report rep("staged_write", o);
  rep.machine = ferry_bench::gpu_name();

  ferry::stream<B> s;
  cudaStream_t cs = s.get();
  auto drain = [&] { BENCH_CUDA(cudaStreamSynchronize(cs)); };
  stream_gate gate(cs);
  auto open_and_drain = [&] {
    gate.open();
    drain();
  };
  const auto run_start = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Time per point: its host timings have a budget each (ferry_bench::time_budget: no new round
  // of bursts once it is spent and every variant has kMinBursts measured; small points, whose
  // rounds take milliseconds, still run all o.bursts), the rest is bounded by its counts: the
  // result checks (4 x 8 applies), the runtime-call counts (4 x 2 x call_ops applies) and the
  // device times (8 variants x (reps + 1) bursts of 32, each queued behind a gate). On the H200
  // (third run's figures) that is ~1 s for the smallest points and ~9 s for the largest (256
  // writes of 4096: idle rounds ~0.36 s, rounds behind ~0.9 s), ~50 s for the grid, plus ~8 s of
  // set-up (5 s of it the settling pause).
  constexpr double kIdleBudgetS = 1.0, kBehindBudgetS = 2.0;
  constexpr int kMinBursts = 5;
  std::cout << "time: per point, host timing idle <= " << kIdleBudgetS << " s and behind <= " << kBehindBudgetS
            << " s once " << kMinBursts << " rounds are in (of " << o.bursts << " bursts of " << o.burst
            << "); estimated ~50 s for the 16 points (about twice with --aa) and ~8 s of set-up on an H200; each point prints its time\n"
            << std::flush;

  // Zero-copy read bandwidth of this machine, this run.
  double zero_copy_gbps = 0;
  {
    const std::size_t bytes = 256ull << 20;
    ferry::pinned_buffer<std::uint8_t, B> big(bytes);
    std::memset(big.host().data(), 1, bytes);
    ferry::device_buffer<unsigned, B> sink(1);
    cudaEvent_t e0, e1;
    BENCH_CUDA(cudaEventCreate(&e0));
    BENCH_CUDA(cudaEventCreate(&e1));
    std::vector<double> gbps;
    for (int r = 0; r < (o.quick ? 2 : 6); ++r) {
      BENCH_CUDA(cudaEventRecord(e0, cs));
      zero_copy_read<<<132 * 8, 256, 0, cs>>>(reinterpret_cast<const uint4*>(big.device().data()), bytes / 16, sink.data());
      BENCH_CUDA(cudaEventRecord(e1, cs));
      BENCH_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) gbps.push_back(bytes / (ms * 1e-3) / 1e9);
    }
    zero_copy_gbps = ferry_bench::median(gbps);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }

  // Targets and ferry tensors (constructed once; reserved for the largest point).
  ferry::staged_write_tensor<T, B, ferry::presets::block_table> t_uva(kRows, kCols, s, 8);
  ferry::staged_write_tensor<T, B, ferry::staging::h2d_copy> t_h2d(kRows, kCols, s, 8);
  ferry::staged_write_tensor<T, B, ferry::staging::threshold<256 * 1024>> t_thr(kRows, kCols, s, 8);
  ferry::staged_write_tensor<T, B, ferry::presets::uva_state> t_uvat(kRows, kCols, s, 8);
  t_h2d.reserve(256, 256 * 4096);
  t_uva.reserve(256, 256 * 4096);
  t_thr.reserve(256, 256 * 4096);
  t_uvat.reserve(256, 256 * 4096);
  ferry::device_buffer<T, B> raw_dst(kRows * kCols);

  // Raw-CUDA staging for the floors and baselines.
  const std::size_t max_el = 256 * 4096;
  ferry::pinned_buffer<T, B> raw_contents(max_el);
  // chunk_desc is no ferry element type: hold the table as 64-bit words (3 per descriptor)
  ferry::pinned_buffer<std::uint64_t, B> raw_desc_words(3 * (max_el / 1024 + 256));
  auto* raw_descs_host = reinterpret_cast<ferry::detail::chunk_desc*>(raw_desc_words.host().data());
  const auto* raw_descs_dev = reinterpret_cast<const ferry::detail::chunk_desc*>(raw_desc_words.device().data());
  ferry::pinned_buffer<std::int32_t, B> raw_rows(256), raw_starts(256);
  ferry::pinned_buffer<std::int64_t, B> raw_offsets(257);
  ferry::device_buffer<T, B> dev_contents(max_el);
  // The correct floors' rings (uva/inline and h2d_copy), with room for as many buffers in flight
  // as a burst can queue (ferry's pools grow as deep).
  const std::size_t ring_capacity = std::max<std::size_t>(264, static_cast<std::size_t>(o.burst) + 8);
  floor_ring ring_uva(ring_capacity, max_el, max_el / 1024 + 256, cs);
  floor_ring ring_h2d(ring_capacity, max_el, max_el / 1024 + 256, cs);
  ferry::device_buffer<std::uint64_t, B> cub_src_uva(256), cub_src_dev(256), cub_dst(256);  // void* arrays
  ferry::device_buffer<std::size_t, B> cub_sizes(256);
  std::size_t cub_temp_bytes = 0;
  BENCH_CUDA(cub::DeviceMemcpy::Batched(nullptr, cub_temp_bytes, static_cast<void**>(nullptr),
                                        static_cast<void**>(nullptr), static_cast<std::size_t*>(nullptr), 256, cs));
  ferry::device_buffer<std::uint8_t, B> cub_temp(cub_temp_bytes + 1);

  // Steady state before the first grid point (SPEC §3: no allocation once the largest case has
  // been seen): every tensor's staging pool grown to the deepest backlog a burst can leave (256
  // applies that each read their slot, queued behind a hold so that none is free again before the
  // burst ends: host-time bursts leave backlogs of up to ~200 applies where the device is slower
  // than the host, and any growth inside a timed burst would be measured), a pause for the host
  // to settle after those pinned allocations, and the whole path warmed up (CPU clocks, caches,
  // the launch path), so that the first points are not measured on a colder machine than the rest.
  {
    const std::vector<T> row(1024, 7);  // beyond the inline path's 4 KiB: the apply reads a slot
    auto grow = [&](auto& t) {
      gate.close(3000);
      for (int i = 0; i < 256; ++i) {
        t.stage_write(static_cast<std::size_t>(i), 0, row);
        t.apply_write(s);
      }
      open_and_drain();
    };
    grow(t_uva);
    grow(t_h2d);
    grow(t_thr);
    grow(t_uvat);
    // The floors' rings likewise (one buffer more per apply still queued behind the hold).
    auto grow_ring = [&](floor_ring& ring, via path) {
      gate.close(3000);
      for (int i = 0; i < 256; ++i)
        floor_apply(ring, path, 1, 1024, [i](int) { return static_cast<std::size_t>(i); },
                    [&](int) { return row.data(); }, raw_dst.data(), dev_contents.data(), cs);
      open_and_drain();
    };
    grow_ring(ring_uva, via::uva);
    grow_ring(ring_h2d, via::h2d);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    for (int i = 0; i < 8192; ++i) {
      t_uva.stage_write(0, 0, {1, 2, 3});
      t_uva.apply_write(s);
      if (i % 256 == 255) drain();
    }
    drain();
  }

  std::vector<double> host_floor_ratios[2], behind_floor_ratios[2], torch_ratios[2], uva_h2d_ratios[2], torch_floor_ratios;
  double worst_event_calls = 0;
  double large_fraction[2] = {nan_value, nan_value};  // the worst apply of >= 4 MiB
  double device_cut = 0;  // device-time gates cut by their cap, every point
  for (const auto& point : points) {
    const auto point_start = std::chrono::steady_clock::now();
    const int W = point.first, per = point.second;
    const std::size_t L = static_cast<std::size_t>(W) * per;
    std::vector<T> vals(per);
    for (int i = 0; i < per; ++i) vals[i] = i + 1;
    auto row_of = [](int w) { return static_cast<std::size_t>((w * 7) % kRows); };

    // ---- ferry ops: W stage_write calls + apply_write
    auto ferry_op = [&](auto& t) {
      return [&](std::size_t) {
        for (int w = 0; w < W; ++w) t.stage_write(row_of(w), 0, vals);
        t.apply_write(s);
      };
    };
    // ---- raw floor pieces (same chunking as ferry: elements_per_chunk<int32> per chunk)
    std::size_t nchunks = 0;
    auto vals_of = [&](int) { return vals.data(); };
    auto raw_stage = [&] {  // the racy floors' staging: always the same buffer
      nchunks = stage_writes(raw_contents.host().data(), raw_descs_host, W, per, row_of, vals_of);
    };
    raw_stage();
    auto raw_launch = [&](const T* src) {
      ferry::detail::launch_apply_chunks<std::uint32_t>(raw_descs_dev, nchunks,
                                                        reinterpret_cast<std::uintptr_t>(raw_dst.data()),
                                                        reinterpret_cast<std::uintptr_t>(src),
                                                        ferry::detail::kernel_mark{}, cs);
    };
    // ferry passes small in-place applies in the launch's parameters (the inline kernel); its
    // floor is then a bare launch of that kernel with the same parameter block. The contents
    // are in the parameters, so this floor, too, stages them in pinned memory first (the host
    // copy that the operation needs, counted wherever it happens: SPEC §10).
    const bool inline_point = ferry::detail::inline_apply_data_bytes(nchunks, L * sizeof(T)) <=
                              sizeof(ferry::detail::inline_apply_params<ferry::detail::inline_apply_max_bytes>::data);
    auto raw_launch_inline = [&] {
      ferry::detail::launch_apply_inline_chunks<std::uint32_t>(raw_descs_host, nchunks, raw_contents.host().data(),
                                                               L * sizeof(T), reinterpret_cast<std::uintptr_t>(raw_dst.data()), cs);
    };
    // The floors: correct (each apply stages into a ring buffer that no queued apply reads) and
    // racy (one buffer, rewritten while queued applies may still read it: a bound only).
    const via uva_path = inline_point ? via::params : via::uva;
    auto floor_uva = [&](std::size_t) {
      floor_apply(ring_uva, uva_path, W, per, row_of, vals_of, raw_dst.data(), dev_contents.data(), cs);
    };
    auto floor_h2d = [&](std::size_t) {
      floor_apply(ring_h2d, via::h2d, W, per, row_of, vals_of, raw_dst.data(), dev_contents.data(), cs);
    };
    auto racy_uva = [&](std::size_t) {
      raw_stage();
      if (inline_point) raw_launch_inline();
      else raw_launch(raw_contents.device().data());
    };
    auto racy_h2d = [&](std::size_t) {
      raw_stage();
      BENCH_CUDA(cudaMemcpyAsync(dev_contents.data(), raw_contents.host().data(), L * sizeof(T), cudaMemcpyDefault, cs));
      raw_launch(dev_contents.data());
    };
    auto launch_only = [&](std::size_t) { raw_launch(raw_contents.device().data()); };

    // Results: the correct floors and ferry against the reference, on random contents: the
    // target zeroed, K applies to distinct rows queued behind a hold (their buffers and slots
    // all in flight at once), drained, every written row read back.
    {
      const int K = std::min<int>(8, static_cast<int>(kRows) / W);
      std::vector<T> ref(static_cast<std::size_t>(K) * L);
      std::mt19937 gen(static_cast<unsigned>(W * 4096 + per));
      for (auto& v : ref) v = static_cast<T>(gen());
      auto rows_k = [&](int j) { return [=](int w) { return static_cast<std::size_t>((j * W + w) % kRows); }; };
      auto src_k = [&](int j) {
        return [&, j](int w) { return ref.data() + static_cast<std::size_t>(j * W + w) * per; };
      };
      std::vector<T> back(kRows * kCols);
      auto verify = [&](const T* target, const char* who) {
        drain();
        BENCH_CUDA(cudaMemcpy(back.data(), target, back.size() * sizeof(T), cudaMemcpyDefault));
        for (int j = 0; j < K; ++j)
          for (int w = 0; w < W; ++w)
            if (std::memcmp(back.data() + rows_k(j)(w) * kCols, src_k(j)(w), per * sizeof(T)) != 0)
              throw std::runtime_error(std::string("staged_write: ") + who + " wrote wrong results (W=" +
                                       std::to_string(W) + " per=" + std::to_string(per) + ", apply " +
                                       std::to_string(j) + ", write " + std::to_string(w) + ")");
      };
      auto clear = [&](T* target) { BENCH_CUDA(cudaMemsetAsync(target, 0, back.size() * sizeof(T), cs)); };
      auto check_floor = [&](floor_ring& ring, via path, const char* who) {
        clear(raw_dst.data());
        gate.close(1000);
        for (int j = 0; j < K; ++j)
          floor_apply(ring, path, W, per, rows_k(j), src_k(j), raw_dst.data(), dev_contents.data(), cs);
        gate.open();
        verify(raw_dst.data(), who);
      };
      auto check_ferry = [&](auto& t, const char* who) {
        clear(t.span().data());
        gate.close(1000);
        for (int j = 0; j < K; ++j) {
          for (int w = 0; w < W; ++w) t.stage_write(rows_k(j)(w), 0, std::span<const T>(src_k(j)(w), per));
          t.apply_write(s);
        }
        gate.open();
        verify(t.span().data(), who);
      };
      check_floor(ring_uva, uva_path, "floor (uva)");
      check_floor(ring_h2d, via::h2d, "floor (h2d_copy)");
      check_ferry(t_uva, "ferry uva_direct");
      check_ferry(t_h2d, "ferry h2d_copy");
    }

    // Host time: ferry and its floors in interleaved bursts (same burst, same drain, same
    // machine state), within the point's budget.
    const auto allocs_before = allocations();
    const std::size_t rings_before = ring_uva.active() + ring_h2d.active();
    ferry_bench::time_budget idle_budget{kIdleBudgetS, kMinBursts};
    const std::string torch_case = "staged " + std::to_string(W) + " " + std::to_string(per);
    std::vector<ferry_bench::timed_burst> idle_ops;
    for (auto op : std::initializer_list<std::function<void(std::size_t)>>{
             ferry_op(t_uva), floor_uva, ferry_op(t_h2d), floor_h2d, ferry_op(t_uvat), launch_only, racy_uva, racy_h2d})
      idle_ops.push_back(ferry_bench::host_burst(op));
    (void)torch.ask("host", torch_case, 1);       // made and warmed up (Triton compiles) before the rounds
    idle_ops.push_back(torch.host(torch_case));  // PyTorch + Triton in Python, in the same rounds
    const auto h = ferry_bench::interleaved(o, idle_ops, drain, 3, &idle_budget);
    const double h_uva = h[0], f_uva = h[1], h_h2d = h[2], f_h2d = h[3], h_uvat = h[4], f_launch = h[5];
    const double fr_uva = h[6], fr_h2d = h[7];
    // The GPU behind: every burst queued behind a closed gate, opened once the burst's last call
    // has returned (stream_gate). The cap (20x the idle burst's host time, at least 200 ms) is
    // only a guard: a gate that reaches it is counted ("behind: gates cut").
    const double behind_cap_ms = std::max(200.0, 20 * o.burst * std::max(h_uva, h_h2d) / 1000);
    const unsigned cut_before = gate.cut();
    ferry_bench::time_budget behind_budget{kBehindBudgetS, kMinBursts};
    const auto hb = host_us_interleaved(o, {ferry_op(t_uva), floor_uva, ferry_op(t_h2d), floor_h2d,
                                            racy_uva, racy_h2d}, open_and_drain,
                                        [&] { gate.close(behind_cap_ms); }, 3, &behind_budget);
    const double hb_uva = hb[0], fb_uva = hb[1], hb_h2d = hb[2], fb_h2d = hb[3], fbr_uva = hb[4], fbr_h2d = hb[5];
    const double behind_cut = static_cast<double>(gate.cut() - cut_before);
    const double host_allocs = static_cast<double>(allocations() - allocs_before);
    const double ring_growth = static_cast<double>(ring_uva.active() + ring_h2d.active() - rings_before);

    // Runtime API calls per apply in steady state (untimed: CUPTI callbacks cost time): 1000
    // counted after 1000 uncounted, 256 and 256 at points of 1 MiB and more (a call count does not
    // vary with the size: those applies take 0.1-0.5 ms each); behind: bursts of 64 behind a gate.
    const std::size_t call_ops = L * sizeof(T) >= (1u << 20) ? 256 : 1000;
    const auto c_uva = count_calls(gate, ferry_op(t_uva), drain, false, behind_cap_ms, call_ops);
    const auto c_uva_behind = count_calls(gate, ferry_op(t_uva), drain, true, behind_cap_ms, call_ops);
    const auto c_h2d = count_calls(gate, ferry_op(t_h2d), drain, false, behind_cap_ms, call_ops);
    const auto c_h2d_behind = count_calls(gate, ferry_op(t_h2d), drain, true, behind_cap_ms, call_ops);
    const double event_calls = std::max({c_uva.starting_with("cudaEvent"), c_uva_behind.starting_with("cudaEvent"),
                                         c_h2d.starting_with("cudaEvent"), c_h2d_behind.starting_with("cudaEvent")});
    // NaN (not measured) sticks: std::max keeps its first argument when either is NaN.
    worst_event_calls = std::isnan(event_calls) ? event_calls : std::max(worst_event_calls, event_calls);

    // ---- baselines' inputs
    for (int w = 0; w < W; ++w) {
      raw_rows.host()[w] = static_cast<std::int32_t>(row_of(w));
      raw_starts.host()[w] = 0;
      raw_offsets.host()[w] = static_cast<std::int64_t>(w) * per;
    }
    raw_offsets.host()[W] = static_cast<std::int64_t>(L);
    {
      std::vector<void*> su(W), sd(W), dd(W);
      std::vector<std::size_t> sz(W, per * sizeof(T));
      for (int w = 0; w < W; ++w) {
        su[w] = raw_contents.host().data() + static_cast<std::size_t>(w) * per;
        sd[w] = dev_contents.data() + static_cast<std::size_t>(w) * per;
        dd[w] = raw_dst.data() + row_of(w) * kCols;
      }
      BENCH_CUDA(cudaMemcpyAsync(cub_src_uva.data(), su.data(), W * sizeof(void*), cudaMemcpyDefault, cs));
      BENCH_CUDA(cudaMemcpyAsync(cub_src_dev.data(), sd.data(), W * sizeof(void*), cudaMemcpyDefault, cs));
      BENCH_CUDA(cudaMemcpyAsync(cub_dst.data(), dd.data(), W * sizeof(void*), cudaMemcpyDefault, cs));
      BENCH_CUDA(cudaMemcpyAsync(cub_sizes.data(), sz.data(), W * sizeof(std::size_t), cudaMemcpyDefault, cs));
      drain();
    }
    auto naive = [&](const T* src) {
      naive_apply<<<W, 256, 0, cs>>>(raw_dst.data(), kCols, raw_rows.device().data(), raw_starts.device().data(),
                                     raw_offsets.device().data(), src);
    };
    auto cub_run = [&](void** srcs) {
      std::size_t tb = cub_temp_bytes;
      BENCH_CUDA(cub::DeviceMemcpy::Batched(cub_temp.data(), tb, srcs, reinterpret_cast<void**>(cub_dst.data()),
                                            cub_sizes.data(), W, cs));
    };
    auto h2d_copy = [&] {
      BENCH_CUDA(cudaMemcpyAsync(dev_contents.data(), raw_contents.host().data(), L * sizeof(T), cudaMemcpyDefault, cs));
    };

    // ---- device time: bursts of 32 behind a gate, every variant interleaved (support/gpu.cuh); the
    // warm-up round grows the staging pools to the burst's depth; a gate cut by its cap would mean
    // the host set the pace (that sample is dropped and counted)
    const std::size_t burst = static_cast<std::size_t>(std::min(32, o.burst));
    const double cap_ms = std::max(200.0, 20 * static_cast<double>(burst) * std::max(h_uva, h_h2d) / 1000);
    auto dev = [&](std::function<void(std::size_t)> op) { return ferry_bench::device_burst(gate, std::move(op), burst, cap_ms); };
    ferry_bench::options od = o;
    od.bursts = o.quick ? 3 : 11;
    std::uint64_t dev_allocs_from = 0;  // ferry's allocations once the warm-up round is done
    const unsigned dev_cut_before = gate.cut();
    const auto d = ferry_bench::interleaved(
        od,
        {dev(ferry_op(t_uva)), dev(ferry_op(t_h2d)), dev(ferry_op(t_thr)),
         dev([&](std::size_t) { naive(raw_contents.device().data()); }),
         dev([&](std::size_t) { h2d_copy(); naive(dev_contents.data()); }),
         dev([&](std::size_t) { cub_run(reinterpret_cast<void**>(cub_src_uva.data())); }),
         dev([&](std::size_t) { h2d_copy(); cub_run(reinterpret_cast<void**>(cub_src_dev.data())); }),
         dev([&](std::size_t) {
           if (inline_point) raw_launch_inline();
           else raw_launch(raw_contents.device().data());
         })},
        [] {}, 1, nullptr, [&](int round) { if (round == 0) dev_allocs_from = allocations(); });
    const double d_uva = d[0], d_h2d = d[1], d_thr = d[2], d_naive_uva = d[3], d_naive_h2d = d[4], d_cub_uva = d[5],
                 d_cub_h2d = d[6], d_kernel = d[7];
    const double cut_here = gate.cut() - dev_cut_before, dev_allocs = static_cast<double>(allocations() - dev_allocs_from);
    device_cut += cut_here;

    const double r_uva = h_uva / f_uva, r_h2d = h_h2d / f_h2d;
    const double rb_uva = hb_uva / fb_uva, rb_h2d = hb_h2d / fb_h2d;
    // Every ratio a target takes, and the same from the twins (A/A), [1] of each pair.
    host_floor_ratios[0].insert(host_floor_ratios[0].end(), {r_uva, r_h2d});
    host_floor_ratios[1].insert(host_floor_ratios[1].end(), {h.twin[0] / h.twin[1], h.twin[2] / h.twin[3]});
    behind_floor_ratios[0].insert(behind_floor_ratios[0].end(), {rb_uva, rb_h2d});
    behind_floor_ratios[1].insert(behind_floor_ratios[1].end(), {hb.twin[0] / hb.twin[1], hb.twin[2] / hb.twin[3]});
    uva_h2d_ratios[0].push_back(d_h2d / d_uva);
    uva_h2d_ratios[1].push_back(d.twin[1] / d.twin[0]);
    if (L * sizeof(T) >= (4u << 20))
      for (const int twin : {0, 1}) {
        const double f = (L * sizeof(T) / ((twin ? d.twin[0] : d_uva) * 1e-6) / 1e9) / zero_copy_gbps;
        large_fraction[twin] = std::isnan(large_fraction[twin]) ? f : std::min(large_fraction[twin], f);
      }

    ferry_bench::row r{{"W", double(W)}, {"per", double(per)},
                       {"host uva_direct us", h_uva}, {"A/A", h.aa(0)}, {"uva/floor", r_uva},
                       {"host h2d_copy us", h_h2d}, {"h2d/floor", r_h2d},
                       {"host uva target us", h_uvat}, {"launch-only floor us", f_launch},
                       {"uva floor us", f_uva}, {"h2d floor us", f_h2d},
                       {"uva racy floor us", fr_uva}, {"uva/racy floor", h_uva / fr_uva},
                       {"h2d racy floor us", fr_h2d}, {"h2d/racy floor", h_h2d / fr_h2d},
                       {"behind: host uva_direct us", hb_uva}, {"behind: uva/floor", rb_uva},
                       {"behind: host h2d_copy us", hb_h2d}, {"behind: h2d/floor", rb_h2d},
                       {"behind: uva floor us", fb_uva}, {"behind: h2d floor us", fb_h2d},
                       {"behind: uva racy floor us", fbr_uva}, {"behind: uva/racy floor", hb_uva / fbr_uva},
                       {"behind: h2d racy floor us", fbr_h2d}, {"behind: h2d/racy floor", hb_h2d / fbr_h2d},
                       {"api calls/apply uva idle", c_uva.total}, {"api calls/apply uva behind", c_uva_behind.total},
                       {"api calls/apply h2d idle", c_h2d.total}, {"api calls/apply h2d behind", c_h2d_behind.total},
                       {"event calls/apply (worst of 4)", event_calls},
                       {"api calls uva idle", c_uva.names()}, {"api calls h2d idle", c_h2d.names()},
                       {"dev uva_direct us", d_uva}, {"dev h2d_copy us", d_h2d}, {"dev threshold us", d_thr},
                       {"h2d/uva", d_h2d / d_uva},
                       {"naive uva /ferry", d_naive_uva / d_uva}, {"naive h2d /ferry", d_naive_h2d / d_uva},
                       {"cub uva /ferry", d_cub_uva / d_uva}, {"cub h2d /ferry", d_cub_h2d / d_uva},
                       {"bare kernel dev us", d_kernel}, {"inline", inline_point ? 1.0 : 0.0},
                       {"device gates cut", cut_here}, {"behind: gates cut", behind_cut},
                       {"bursts idle", double(idle_budget.rounds)}, {"bursts behind", double(behind_budget.rounds)},
                       {"host timing s", idle_budget.seconds_used + behind_budget.seconds_used},
                       {"point s", seconds_since(point_start)}, {"run s", seconds_since(run_start)}, {"allocs in host timing", host_allocs},
                       {"floor ring growth in host timing", ring_growth},
                       {"allocs in device timing", dev_allocs}};
    {
      // The target compares the PyTorch way with ferry's way of doing the same job: the
      // block_table preset (device target, contents read in place, uva_direct); the floor's ratio
      // beside it. The slower h2d_copy configuration is shown too.
      torch_ratios[0].push_back(h[8] / h_uva);
      torch_ratios[1].push_back(h.twin[8] / h.twin[0]);
      torch_floor_ratios.push_back(h[8] / f_uva);
      r.insert(r.end(), {{"torch host us (Python)", h[8]}, {"torch A/A", h.aa(8)}, {"torch/ferry uva host", h[8] / h_uva},
                         {"torch/floor uva host", h[8] / f_uva}, {"torch/ferry h2d host", h[8] / h_h2d},
                         {"torch dev us (Python)", torch.ask("device", torch_case, 8)}});
    }
    rep.add(std::move(r));
  }
  // Host time / floor over every point and both configurations (uva_direct, h2d_copy): the
  // median and the worst of the ratios, idle and with the GPU behind (SPEC §10); each target also
  // from the twins' ratios (A/A).
  auto worst = [](const std::vector<double>& v) { return v.empty() ? nan_value : *std::max_element(v.begin(), v.end()); };
  auto least = [](const std::vector<double>& v) { return v.empty() ? nan_value : *std::min_element(v.begin(), v.end()); };
  auto target = [&](const char* name, auto&& of, const std::vector<double>(&v)[2], const char* op, double goal) {
    rep.add_target(name, of(v[0]), op, goal, of(v[1]));
  };
  target("host_vs_floor_median", ferry_bench::median, host_floor_ratios, "<=", 1.15);
  target("host_vs_floor_worst", worst, host_floor_ratios, "<=", 1.3);
  target("host_vs_floor_median_behind", ferry_bench::median, behind_floor_ratios, "<=", 1.15);
  target("host_vs_floor_worst_behind", worst, behind_floor_ratios, "<=", 1.3);
  rep.add_target("event_calls_per_apply", worst_event_calls, "<=", 0);
  // PyTorch + Triton host time / ferry's (block_table preset), the least over the points, beside
  // the floor's: missing (NaN, null in the JSON) unless every point has its PyTorch figure.
  auto least_all = [&](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }) ? least(v) : nan_value;
  };
  rep.add_peer_target("torch_vs_ferry_min_all_points", least_all(torch_ratios[0]), ">=", 20,
                      least_all(torch_floor_ratios), least_all(torch_ratios[1]));
  target("device_h2d_vs_uva_min", least, uva_h2d_ratios, ">=", 0.95);
  target("device_h2d_vs_uva_median", ferry_bench::median, uva_h2d_ratios, ">=", 1.3);
  rep.add_target("large_apply_vs_zero_copy_read", large_fraction[0], ">=", 0.9, large_fraction[1]);
  std::cout << "zero-copy read bandwidth (the target's denominator): " << zero_copy_gbps << " GB/s\n";
  if (device_cut > 0)
    std::cout << "WARNING: " << device_cut
              << " device-time gates reached their cap before the host opened them: those device times measure the host\n";
  rep.print();
  std::cout << "time: " << seconds_since(run_start) << " s in all (set-up included), stream gates cut by their cap: " << gate.cut()
            << " (0: every burst measured behind was queued whole)\n";
  if (!torch.why().empty()) std::cout << "PyTorch + Triton in Python: not measured (" << torch.why() << ")\n";
  rep.write_json(o.json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ferry_bench::bench_main("bench.staged_write", argc, argv, run); }
