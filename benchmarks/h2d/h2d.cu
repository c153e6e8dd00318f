// bench.h2d — SPEC §10 host-to-device uploads, ferry beside its baselines in one run:
//  - small upload: 1024 int32 from a std::vector with ferry::async_h2d, beside the correct floor
//    (the same upload by hand: memcpy from the vector into a ring of pinned blocks, one
//    cudaMemcpyAsync, one event record, the ring's queries amortized as ferry's arena amortizes
//    them: support/fence.hpp), the bare pinned cudaMemcpyAsync of the same 4 KiB already pinned (the
//    physical bound: no staging, no fence), a raw pageable cudaMemcpyAsync, libtorch's
//    out.copy_(pinned, non_blocking=true) in this process (where CMake found Torch:
//    support/libtorch_peer.hpp), and three PyTorch-in-Python uploads (--torch: support/torch_peer.hpp,
//    a Python process asked for one burst per round);
//  - packed upload: 8 arrays of 256 B to 4 KiB with one ferry::async_h2d_packed, beside its correct
//    floor (packed into a ring of pinned slots, one copy, one event, queries amortized), 8 bare
//    pinned copies and one cudaMemcpyBatchAsync of the 8 pinned parts (the physical bounds);
//  - the CUDA runtime calls per small and packed upload in steady state (support/runtime_calls.hpp);
//  - large pageable upload: 256 MiB from a std::vector on an idle stream with ferry::async_h2d (the
//    default copy_pool), beside a plain pageable cudaMemcpyAsync and SPEC §10's two limits measured
//    in the same rounds: the pinned DMA bandwidth and the best host copy into pinned memory with any
//    thread count (teams of 2-16 persistent threads, each printed), and the DMA and an 8-thread copy
//    at once (what the pipeline's two halves reach when they share the host's memory).
// Host times in interleaved rounds (support/bench.hpp; with --aa, every row beside its twin, column
// "A/A"), device times behind a gate (support/gpu.cuh). Column ferry_x: how many times faster
// ferry is than the row. Targets: small upload <= 1.15x its correct floor and >= 1.0x libtorch's
// copy_ (a peer ratio: reported where the floor misses it too); packed <= 1.15x its correct floor;
// 256 MiB pageable >= 0.9x the limit.
#include <ferry/ferry.hpp>

#include "support/fence.hpp"
#include "support/gpu.cuh"
#include "support/runtime_calls.hpp"
#include "support/torch_peer.hpp"
#if FERRY_BENCH_LIBTORCH
#include "support/libtorch_peer.hpp"
#endif

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace {

using B = ferry::backend::cuda;
using ferry_bench::nan;

// Persistent host threads (started before any timing): run(f) has thread t call f(t), returns once
// all have.
class host_team {
 public:
  explicit host_team(std::size_t n) {
    for (std::size_t t = 0; t < n; ++t)
      threads_.emplace_back([this, t] {
        for (std::uint64_t seen = 0;;) {
          std::unique_lock l(m_);
          cv_.wait(l, [&] { return stop_ || gen_ != seen; });
          if (stop_) return;
          seen = gen_;
          l.unlock();
          (*f_)(t);
          l.lock();
          if (++done_ == threads_.size()) done_cv_.notify_all();
        }
      });
  }
  host_team(const host_team&) = delete;
  host_team& operator=(const host_team&) = delete;
  ~host_team() {
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(const std::function<void(std::size_t)>& f) {
    std::unique_lock l(m_);
    f_ = &f;
    done_ = 0;
    ++gen_;
    cv_.notify_all();
    done_cv_.wait(l, [&] { return done_ == threads_.size(); });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(std::size_t)>* f_ = nullptr;
  std::uint64_t gen_ = 0;
  std::size_t done_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

int run(const ferry_bench::options& o) {
  ferry_bench::report rep("h2d", o);
  rep.machine = ferry_bench::gpu_name();
  ferry::stream<B> s;
  const cudaStream_t cs = s.get();
  auto drain = [&] { BENCH_CUDA(cudaStreamSynchronize(cs)); };
  ferry_bench::stream_gate gate(cs);
  auto& arena = ferry::default_arena<B>();
  const std::size_t ring_capacity = static_cast<std::size_t>(o.burst) * 2 + 16;  // as many as ferry's arena reserves
  ferry_bench::torch_peer torch(o.torch);

  // ---- small upload: 1024 int32 ----
  constexpr std::size_t n_small = 1024, small_bytes = n_small * sizeof(std::int32_t);
  std::vector<std::int32_t> v(n_small);
  for (std::size_t i = 0; i < n_small; ++i) v[i] = static_cast<std::int32_t>(i * 7 + 1);
  ferry::device_buffer<std::int32_t, B> dev_small(n_small);
  ferry::pinned_buffer<std::int32_t, B> pinned_small(n_small);
  std::memcpy(pinned_small.host().data(), v.data(), small_bytes);
  arena.reserve(small_bytes, ring_capacity);
  ferry_bench::event_ring small_ring(ring_capacity);
  ferry::pinned_buffer<std::int32_t, B> small_blocks(n_small * ring_capacity);
  const std::vector<std::function<void(std::size_t)>> small_ops{
      [&](std::size_t i) {
        v[0] = static_cast<std::int32_t>(i);
        ferry::async_h2d(v, dev_small.span(), s);
      },
      [&](std::size_t i) {  // the correct floor
        v[0] = static_cast<std::int32_t>(i);
        std::int32_t* block = small_blocks.host().data() + small_ring.acquire() * n_small;
        std::memcpy(block, v.data(), small_bytes);
        BENCH_CUDA(cudaMemcpyAsync(dev_small.data(), block, small_bytes, cudaMemcpyHostToDevice, cs));
        small_ring.release(cs);
      },
      [&](std::size_t) {
        BENCH_CUDA(cudaMemcpyAsync(dev_small.data(), pinned_small.host().data(), small_bytes, cudaMemcpyHostToDevice, cs));
      },
      [&](std::size_t) { BENCH_CUDA(cudaMemcpyAsync(dev_small.data(), v.data(), small_bytes, cudaMemcpyHostToDevice, cs)); }};
  std::vector<ferry_bench::timed_burst> small_host;
  for (const auto& op : small_ops) small_host.push_back(ferry_bench::host_burst(op));
  const std::pair<const char*, const char*> torch_rows[] = {
      {"copy_pinned", "out.copy_(pinned, non_blocking=True), data already pinned"},
      {"tensor_pinned", "torch.tensor(list, pin_memory=True).to(cuda, non_blocking=True)"},
      {"pageable", "pageable_tensor.to(cuda, non_blocking=True)"}};
  for (const auto& r : torch_rows) small_host.push_back(torch.host(r.first));
  // libtorch's out.copy_(pinned, non_blocking=True) in this process, on its own stream, drained with ferry's.
  std::string libtorch_why = "this build has no libtorch (CMake found no Torch config: set FERRY_BENCH_TORCH_PREFIX)";
  std::function<void()> drain_small = drain;
#if FERRY_BENCH_LIBTORCH
  std::unique_ptr<ferry_bench::libtorch_peer::pinned_copy> torch_copy;
  try {
    torch_copy = std::make_unique<ferry_bench::libtorch_peer::pinned_copy>(n_small);
    torch_copy->copy();
    if (const char* bad = torch_copy->check()) throw std::runtime_error(std::string("check: ") + bad);
    small_host.push_back(ferry_bench::host_burst([&](std::size_t) { torch_copy->copy(); }));
    drain_small = [&] { drain(); torch_copy->synchronize(); };
    libtorch_why.clear();
  } catch (const std::exception& e) {
    libtorch_why = std::string("libtorch in process failed: ") + e.what();
  }
#endif
  const auto small = ferry_bench::interleaved(o, small_host, drain_small);
  const std::size_t lt = 4 + std::size(torch_rows);  // libtorch's variant, after Python's
  const double libtorch_copy = small.size() > lt ? small[lt] : nan, libtorch_twin = small.size() > lt ? small.twin[lt] : nan;
  std::vector<ferry_bench::timed_burst> small_dev;
  for (std::size_t k = 0; k < 3; ++k) small_dev.push_back(ferry_bench::device_burst(gate, small_ops[k]));
  const auto small_device = ferry_bench::interleaved(o, small_dev, drain, 1);

  // ---- packed upload: 8 arrays of 256 B .. 4 KiB ----
  const std::size_t part_bytes[8] = {256, 512, 1024, 2048, 4096, 256, 1024, 4096};
  std::vector<std::vector<std::int32_t>> parts;
  std::size_t packed_elems = 0;
  for (const auto b : part_bytes) {
    parts.emplace_back(b / 4, static_cast<std::int32_t>(b));
    packed_elems += b / 4;
  }
  ferry::device_buffer<std::int32_t, B> dev_packed(packed_elems);
  ferry::pinned_buffer<std::int32_t, B> pinned_packed(packed_elems);
  arena.reserve(packed_elems * 4, ring_capacity);
  ferry_bench::event_ring packed_ring(ring_capacity);
  ferry::pinned_buffer<std::int32_t, B> packed_slots(packed_elems * ring_capacity);
  std::vector<std::function<void(std::size_t)>> packed_ops{
      [&](std::size_t) {
        (void)ferry::async_h2d_packed(dev_packed.span(), s, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5],
                                      parts[6], parts[7]);
      },
      [&](std::size_t) {  // the correct floor
        std::int32_t* slot = packed_slots.host().data() + packed_ring.acquire() * packed_elems;
        for (std::size_t off = 0; const auto& p : parts) {
          std::memcpy(slot + off, p.data(), p.size() * 4);
          off += p.size();
        }
        BENCH_CUDA(cudaMemcpyAsync(dev_packed.data(), slot, packed_elems * 4, cudaMemcpyHostToDevice, cs));
        packed_ring.release(cs);
      },
      [&](std::size_t) {
        for (std::size_t off = 0; const auto& p : parts) {
          BENCH_CUDA(cudaMemcpyAsync(dev_packed.data() + off, pinned_packed.host().data() + off, p.size() * 4,
                                     cudaMemcpyHostToDevice, cs));
          off += p.size();
        }
      }};
  std::vector<void*> batch_dst;
  std::vector<const void*> batch_src;
  std::vector<std::size_t> batch_bytes;
  for (std::size_t off = 0; const auto& p : parts) {
    batch_dst.push_back(dev_packed.data() + off);
    batch_src.push_back(pinned_packed.host().data() + off);
    batch_bytes.push_back(p.size() * 4);
    off += p.size();
  }
  cudaMemcpyAttributes batch_attr{};
  batch_attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t batch_attr_index = 0;  // every copy uses attribute 0
  packed_ops.push_back([&](std::size_t) {
    BENCH_CUDA(cudaMemcpyBatchAsync(batch_dst.data(), batch_src.data(), batch_bytes.data(), batch_dst.size(),
                                    &batch_attr, &batch_attr_index, 1, cs));
  });
  const auto packed = ferry_bench::host_us_interleaved(o, packed_ops, drain);

  // Runtime calls per upload in steady state: the timing's loop (drained every burst), counted.
  const std::size_t counted = o.quick ? 64 : 1000;
  auto calls_of = [&](const std::function<void(std::size_t)>& op) {
    const auto r = ferry_bench::steady_calls(
        op, [&](std::size_t i) { if (i % static_cast<std::size_t>(o.burst) == 0) drain(); }, counted, counted);
    drain();
    return r;
  };
  auto calls = [&](const std::function<void(std::size_t)>& op) -> ferry_bench::row {
    const auto c = calls_of(op);
    return {{"runtime_calls_per_op", c.total}, {"runtime_calls", c.names()}};
  };
  auto add = [&](const std::string& c, const std::string& variant, const ferry_bench::timings& t, std::size_t k,
                 ferry_bench::row more = {}) {
    ferry_bench::row r{{"case", c}, {"variant", variant}, {"host_us", t[k]}, {"A/A", t.aa(k)}, {"ferry_x", t[k] / t[0]}};
    r.insert(r.end(), more.begin(), more.end());
    rep.add(std::move(r));
  };
  const std::string small_case = "small upload 1024 int32", packed_case = "packed 8 arrays 256B-4KiB";
  auto device = [&](std::size_t k) { return ferry_bench::row{{"device_us", small_device[k]}}; };
  auto with = [](ferry_bench::row a, const ferry_bench::row& b) { a.insert(a.end(), b.begin(), b.end()); return a; };
  add(small_case, "ferry::async_h2d (vector)", small, 0, with(device(0), calls(small_ops[0])));
  add(small_case, "correct floor: memcpy into a ring of pinned blocks + cudaMemcpyAsync + event record, queries amortized",
      small, 1, with(device(1), calls(small_ops[1])));
  add(small_case, "bare pinned cudaMemcpyAsync (physical bound: data already pinned, no fence)", small, 2,
      with(device(2), calls(small_ops[2])));
  add(small_case, "raw pageable cudaMemcpyAsync", small, 3);
  for (std::size_t k = 0; k < std::size(torch_rows); ++k) add(small_case, torch.label(torch_rows[k].second), small, 4 + k);
  if (libtorch_why.empty()) add(small_case, "libtorch out.copy_(pinned, non_blocking=true), in process", small, lt);
  else rep.add({{"case", small_case}, {"variant", "libtorch out.copy_(pinned, non_blocking=true): absent (" + libtorch_why + ")"}});
  add(packed_case, "ferry::async_h2d_packed (vectors)", packed, 0, calls(packed_ops[0]));
  add(packed_case, "correct floor: pack into a ring of pinned slots + 1 cudaMemcpyAsync + event record, checked before reuse",
      packed, 1, calls(packed_ops[1]));
  add(packed_case, "8 bare pinned cudaMemcpyAsync (physical bound: data already pinned, no fence)", packed, 2);
  add(packed_case, "cudaMemcpyBatchAsync of 8 pinned parts", packed, 3);

  // ---- 256 MiB pageable upload on an idle stream ----
  // Every figure in the same rounds (o.quick: 2, else 15; one burst of one upload per variant and
  // round, after a warm-up round that allocates the arena's chunk blocks): 256 MiB / the median
  // time of the op and its drain.
  constexpr std::size_t big_bytes = std::size_t{256} << 20;
  std::vector<std::uint8_t> big(big_bytes);  // value-initialized: every page touched
  for (std::size_t i = 0; i < big_bytes; i += 4096) big[i] = static_cast<std::uint8_t>(i >> 12);
  ferry::device_buffer<std::uint8_t, B> dev_big(big_bytes);
  auto& pool = ferry::default_copy_pool();
  const std::size_t chunk = pool.chunk_bytes();
  ferry::pinned_buffer<std::uint8_t, B> pinned_big(big_bytes), team_chunk(chunk);
  // Thread t of `threads` copies bytes [t * chunk / threads, (t + 1) * chunk / threads) of every
  // chunk of the source into the chunk-sized pinned buffer at `dst`.
  auto slices_into = [&](std::uint8_t* dst, std::size_t threads) {
    return std::function<void(std::size_t)>([&, dst, threads](std::size_t t) {
      const std::size_t lo = t * chunk / threads, hi = (t + 1) * chunk / threads;
      for (std::size_t base = 0; base < big_bytes; base += chunk) {
        const std::size_t end = std::min(base + hi, big_bytes);
        if (base + lo < end) std::memcpy(dst + lo, big.data() + base + lo, end - base - lo);
      }
    });
  };
  const std::vector<std::size_t> team_sizes = o.quick ? std::vector<std::size_t>{8} : std::vector<std::size_t>{2, 4, 8, 12, 16};
  std::vector<std::unique_ptr<host_team>> teams;
  std::vector<std::function<void(std::size_t)>> team_copies;
  for (const std::size_t n : team_sizes) {
    teams.push_back(std::make_unique<host_team>(n));
    team_copies.push_back(slices_into(pinned_big.host().data(), n));
  }
  host_team team8(8);
  const auto copy_aside = slices_into(team_chunk.host().data(), 8);
  auto pinned_dma = [&] {
    BENCH_CUDA(cudaMemcpyAsync(dev_big.data(), pinned_big.host().data(), big_bytes, cudaMemcpyHostToDevice, cs));
  };
  std::vector<std::function<void()>> big_ops{
      [&] { ferry::async_h2d(big, dev_big.span(), s, arena, pool); },
      [&] { BENCH_CUDA(cudaMemcpyAsync(dev_big.data(), big.data(), big_bytes, cudaMemcpyHostToDevice, cs)); },
      pinned_dma, [&] { pinned_dma(); team8.run(copy_aside); }};
  for (std::size_t k = 0; k < teams.size(); ++k) big_ops.push_back([&, k] { teams[k]->run(team_copies[k]); });
  std::vector<ferry_bench::timed_burst> big_bursts;
  for (auto& op : big_ops)
    big_bursts.push_back([&](std::size_t) {
      const auto t0 = std::chrono::steady_clock::now();
      op();
      drain();
      return ferry_bench::micros(t0, std::chrono::steady_clock::now());
    });
  ferry_bench::options big_o = o;
  big_o.bursts = o.quick ? 2 : 15;
  big_o.burst = 1;
  const auto big_us = ferry_bench::interleaved(big_o, big_bursts, [] {}, 1);
  auto gbps = [&](std::size_t k, bool twin = false) { return static_cast<double>(big_bytes) / 1e3 / (twin ? big_us.twin[k] : big_us[k]); };
  // The host-copy limit: the fastest team (of the twins too, for the A/A figure).
  auto limit = [&](bool twin) {
    double best = 0;
    for (std::size_t k = 0; k < teams.size(); ++k) best = std::max(best, gbps(4 + k, twin));
    return std::min(gbps(2, twin), best);
  };
  const std::string big_case = "pageable 256 MiB idle stream";
  auto add_big = [&](const std::string& variant, std::size_t k) {
    rep.add({{"case", big_case}, {"variant", variant}, {"GBps", gbps(k)}, {"A/A", big_us.aa(k)}, {"ferry_x", gbps(0) / gbps(k)}});
  };
  add_big("ferry::async_h2d (default pool: " + std::to_string(chunk >> 20) + " MiB x " + std::to_string(pool.threads()) + " threads)", 0);
  add_big("plain pageable cudaMemcpyAsync", 1);
  add_big("pinned DMA cudaMemcpyAsync (limit)", 2);
  add_big("pinned DMA and 8-thread memcpy at once, each of 256 MiB (not a limit: contention)", 3);
  for (std::size_t k = 0; k < teams.size(); ++k) add_big(std::to_string(team_sizes[k]) + "-thread memcpy into chunk-sized pinned", 4 + k);

  // ---- targets ----
  rep.add_target("small_upload_vs_correct_floor", small[0] / small[1], "<=", 1.15, small.twin[0] / small.twin[1]);
  // Without libtorch in this build the figure is missing (NaN, null in the JSON), never taken from another run.
  rep.add_peer_target("small_upload_vs_libtorch_copy", libtorch_copy / small[0], ">=", 1.0, libtorch_copy / small[1],
                      libtorch_twin / small.twin[0]);
  rep.add_target("packed_vs_correct_floor", packed[0] / packed[1], "<=", 1.15, packed.twin[0] / packed.twin[1]);
  rep.add_target("pageable_256MiB_GBps_vs_limit", gbps(0) / limit(false), ">=", 0.9, gbps(0, true) / limit(true));
  rep.print();
  if (!libtorch_why.empty()) std::cout << "note: small_upload_vs_libtorch_copy is missing: " << libtorch_why << "\n";
  const auto ps = pool.stats();
  std::cout << "copy_pool: " << ps.copies << " pipelined copies, " << ps.chunks << " chunks, " << ps.waits
            << " waits; limit " << limit(false) << " GB/s = min(pinned DMA, the fastest host-copy team)\n";
  rep.write_json(o.json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ferry_bench::bench_main("bench.h2d", argc, argv, run); }
