// bench.uva_pool (SPEC §6, §10). Host time per call (bursts of operations, the stream drained
// between bursts, median over bursts; the variants of each table in interleaved bursts) of:
//   - ferry::uva_pool::copy_to_uva (event_fenced, the default; and caller_fenced) of 64, 1024 and
//     65536 int32 from a std::vector,
//   - a bare cudaMemcpyAsync of the same bytes from pinned memory into device memory (what a
//     hand-written H2D upload costs the host),
//   - a plain memcpy into pinned memory (the true floor of a UVA write: what copy_to_uva must do
//     at the least),
// printed side by side as ratios; then copy_to_uva of 1024 int32, event-fenced against
// caller-fenced, with the GPU idle (the default ring of 2 slots, and a deep ring of 8) and with
// the GPU at least two calls behind on the deep ring (each call followed by a reader kernel slower
// than the host's loop), beside the least a fence can cost measured in the same rounds (one
// cudaEventRecord + one cudaEventQuery of the record 7 calls before: on a ring of 8 the slot about
// to be reused, whose event has completed, the kind of event ferry must query; a pending event
// answers in a sixth of the time, and a fence that only ever met pending events would never
// free a slot), with the CUDA runtime calls
// each copy_to_uva makes in steady state (support/runtime_calls.hpp: CUPTI, 1000 calls counted
// after 1000 uncounted ones, in a separate, untimed pass); targets (SPEC §10): the event fence's
// cost above the caller-fenced call <= 1.3x record + query, idle (default ring) and behind; the
// deep ring's call <= 2.5x the caller-fenced one; and that the GPU was indeed >= 2 calls behind;
// then syncs and allocations over 10,000 steady-state steps (each step: copy_to_uva and a kernel
// that reads the view), counted by the backend's counters (targets 0 and 0); then the host cost of
// a growth event (64 → 65536 elements), with the block from the arena and with a fresh pinned
// allocation.
#include <support/gpu.cuh>
#include <support/runtime_calls.hpp>

#include <ferry/ferry.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using B = ferry::backend::cuda;

__global__ void consume_view_kernel(ferry::device_span<const std::int32_t> v, std::int32_t* sink) {
  if (threadIdx.x == 0 && v.size() != 0) sink[0] = v[0] + v[v.size() - 1];
}

std::vector<std::int32_t> values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(rng() | 1u);
  return v;
}

/// A reader slower than the host's loop: spins about `spin_ns` (clock64 at ~2 GHz, as
/// hold_kernel), reads the view, then stores its step number `r` into mapped memory.
__global__ void slow_reader_kernel(ferry::device_span<const std::int32_t> v, unsigned long long spin_ns,
                                   unsigned long long r, unsigned long long* done, std::int32_t* sink) {
  const unsigned long long t0 = clock64();
  while (clock64() - t0 < spin_ns * 2) {
  }
  if (v.size() != 0) sink[0] = v[0] + v[v.size() - 1];
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(done) = r;
}

int run(const ferry_bench::options& o) {
  ferry_bench::report rep("uva_pool", o);
  rep.machine = ferry_bench::gpu_name();
  ferry::stream<B> s;
  auto drain = [&] { s.synchronize(); };

  // ---- steady-state host time per call --------------------------------------------------
  for (const std::size_t n : {std::size_t{64}, std::size_t{1024}, std::size_t{65536}}) {
    const auto src = values(n, static_cast<unsigned>(n));
    const std::size_t bytes = n * sizeof(std::int32_t);
    ferry::pinned_arena<B> arena;
    arena.reserve(bytes, 16);
    ferry::uva_pool<std::int32_t, B> pool(n, 2, 8, arena);
    ferry::uva_pool<std::int32_t, ferry::reuse::caller_fenced, B> caller(n, 2, 8, arena);
    ferry::pinned_buffer<std::int32_t, B> pinned_src(n);
    ferry::pinned_buffer<std::int32_t, B> pinned_dst(n);
    ferry::device_buffer<std::int32_t, B> dev(n);
    std::memcpy(pinned_src.host().data(), src.data(), bytes);

    // The plain memcpy needs no drain; it gets one as the others do (untimed).
    const auto us = ferry_bench::host_us_interleaved(
        o,
        {[&](std::size_t) { (void)pool.copy_to_uva(src, s); },
         [&](std::size_t) { (void)caller.copy_to_uva(src, s); },
         [&](std::size_t) {
           BENCH_CUDA(cudaMemcpyAsync(dev.data(), pinned_src.host().data(), bytes, cudaMemcpyHostToDevice, s.get()));
         },
         [&](std::size_t) {
           std::memcpy(pinned_dst.host().data(), src.data(), bytes);
           asm volatile("" ::: "memory");  // keep every copy
         }},
        drain);
    const double ferry_us = us[0], caller_us = us[1], bare_us = us[2], memcpy_us = us[3];
    rep.add({{"case", std::string("steady copy_to_uva")},
             {"elements", static_cast<double>(n)},
             {"bytes", static_cast<double>(bytes)},
             {"ferry_us", ferry_us},
             {"A/A", us.aa(0)},
             {"ferry_caller_fenced_us", caller_us},
             {"bare_cudaMemcpyAsync_us", bare_us},
             {"memcpy_into_pinned_us", memcpy_us},
             {"ferry/cudaMemcpyAsync", ferry_us / bare_us},
             {"ferry/memcpy", ferry_us / memcpy_us},
             {"caller_fenced/memcpy", caller_us / memcpy_us}});
  }

  // ---- copy_to_uva of 1024 int32, event-fenced vs caller-fenced: GPU idle and GPU behind -----
  {
    constexpr std::size_t n = 1024;
    const auto src = values(n, 1025);
    ferry::pinned_arena<B> arena;
    arena.reserve(n * sizeof(std::int32_t), 24);
    using fenced_pool = ferry::uva_pool<std::int32_t, B>;
    using caller_pool = ferry::uva_pool<std::int32_t, ferry::reuse::caller_fenced, B>;
    fenced_pool fenced2(n, 2, 8, arena);
    caller_pool caller2(n, 2, 8, arena);
    fenced_pool fenced8(n, 8, 8, arena);  // a deep ring: 8 slots from the start
    caller_pool caller8(n, 8, 8, arena);
    ferry::device_buffer<std::int32_t, B> sink(1);
    ferry::pinned_buffer<unsigned long long, B> done(1);  // the last reader step finished
    const volatile unsigned long long* const finished = done.host().data();
    unsigned long long issued = 0;  // reader steps launched, numbered from 1
    // Readers in flight when a call is made: one running and two queued, so the GPU is at least
    // two calls behind; the reader (20 µs) outlasts the host's loop (a launch and a call).
    constexpr unsigned long long in_flight = 3;
    constexpr unsigned long long spin_ns = 20'000;
    std::vector<double> behind_by;
    ferry_bench::runtime_calls* counter = nullptr;  // set for the counting pass only

    auto call = [&](auto& pool) {
      if (!counter) return pool.copy_to_uva(src, s);
      ferry::device_span<const std::int32_t> v;
      counter->count([&] { v = pool.copy_to_uva(src, s); });
      return v;
    };
    auto idle = [&](auto& pool) { return ferry_bench::host_burst([&, p = &pool](std::size_t) { (void)call(*p); }); };
    // The op timed with the GPU behind: `op()` returns the view the reader reads.
    auto behind_op = [&](std::function<ferry::device_span<const std::int32_t>()> op) -> ferry_bench::timed_burst {
      return [&, op = std::move(op)](std::size_t count) {
        double us = 0;
        for (std::size_t k = 0; k < count; ++k) {
          while (issued - *finished > in_flight) {
          }
          behind_by.push_back(static_cast<double>(issued - *finished));
          const auto t0 = std::chrono::steady_clock::now();
          const auto v = op();
          us += ferry_bench::micros(t0, std::chrono::steady_clock::now());
          slow_reader_kernel<<<1, 1, 0, s.get()>>>(v, spin_ns, ++issued, done.device().data(), sink.data());
          BENCH_CUDA(cudaPeekAtLastError());  // a failed launch would never finish: stop here
        }
        return us / static_cast<double>(count);
      };
    };
    auto behind = [&](auto& pool) { return behind_op([&, p = &pool] { return call(*p); }); };
    // The least a fence can cost (SPEC §10): one cudaEventRecord after the use, one
    // cudaEventQuery of the record made 7 calls before (the slot about to be reused on a ring of
    // 8: completed, idle and behind, as the events ferry's deep ring queries), measured in the same
    // rounds as copy_to_uva.
    std::array<cudaEvent_t, 8> fence_events{};
    for (auto& e : fence_events) BENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::size_t fence_calls = 0;
    auto record_query = [&] {
      BENCH_CUDA(cudaEventRecord(fence_events[fence_calls % 8], s.get()));
      const cudaError_t q = cudaEventQuery(fence_events[(fence_calls + 1) % 8]);
      if (q != cudaErrorNotReady) BENCH_CUDA(q);
      ++fence_calls;
    };
    auto record_query_behind = behind_op([&] {
      record_query();
      return ferry::device_span<const std::int32_t>{};
    });

    const auto idle_t = ferry_bench::interleaved(
        o, {idle(fenced2), idle(caller2), idle(fenced8), idle(caller8), ferry_bench::host_burst([&](std::size_t) { record_query(); })},
        drain);
    behind_by.clear();
    const auto behind_t = ferry_bench::interleaved(o, {behind(fenced8), behind(caller8), record_query_behind}, drain);
    const double calls_behind = ferry_bench::median(behind_by);  // readers unfinished at a call
    for (auto e : fence_events) BENCH_CUDA(cudaEventDestroy(e));

    // The runtime calls of copy_to_uva in steady state: an untimed pass of the same loops, 1000
    // calls counted after 1000 uncounted ones (CUPTI subscribed for this pass only).
    ferry_bench::calls_per_op calls[6];
    {
      ferry_bench::runtime_calls rc;
      const std::size_t ops = o.quick ? 256 : 1000;
      auto per_call = [&](auto&& op) {
        (void)op(ops);  // steady state before counting
        drain();
        rc.reset();
        counter = &rc;
        (void)op(ops);
        counter = nullptr;
        drain();
        return rc.per_op(ops);
      };
      calls[0] = per_call(idle(fenced2));
      calls[1] = per_call(idle(caller2));
      calls[2] = per_call(idle(fenced8));
      calls[3] = per_call(idle(caller8));
      calls[4] = per_call(behind(fenced8));
      calls[5] = per_call(behind(caller8));
    }
    // A row: event-fenced variant e, caller-fenced c, the record + query f of timings t.
    auto add = [&](const char* what, double gpu_behind, const ferry_bench::timings& t, std::size_t e, std::size_t f,
                   int c) {
      rep.add({{"case", std::string("copy_to_uva 1024 int32, ") + what},
               {"elements", static_cast<double>(n)},
               {"ferry_us", t[e]},
               {"ferry_caller_fenced_us", t[e + 1]},
               {"A/A", t.aa(e)},
               {"event/caller_fenced", t[e] / t[e + 1]},
               {"record_query_us", t[f]},
               {"(event - caller_fenced)/record_query", (t[e] - t[e + 1]) / t[f]},
               {"gpu_calls_behind", gpu_behind},
               {"runtime_calls_per_call", calls[c].total},
               {"runtime_calls_per_call_caller_fenced", calls[c + 1].total},
               {"runtime_calls", calls[c].names()},
               {"runtime_calls_caller_fenced", calls[c + 1].names()}});
    };
    add("GPU idle, ring of 2 (default)", 0, idle_t, 0, 4, 0);
    add("GPU idle, ring of 8", 0, idle_t, 2, 4, 2);
    add("GPU behind, ring of 8", calls_behind, behind_t, 0, 2, 4);
    rep.add({{"case", std::string("one cudaEventRecord + one cudaEventQuery (the least a fence costs), GPU idle")},
             {"record_query_us", idle_t[4]}, {"A/A", idle_t.aa(4)}});
    rep.add({{"case", std::string("one cudaEventRecord + one cudaEventQuery (the least a fence costs), GPU behind")},
             {"gpu_calls_behind", calls_behind}, {"record_query_us", behind_t[2]}, {"A/A", behind_t.aa(2)}});
    // SPEC §10: the event fence's cost above the caller-fenced call <= 1.3x one cudaEventRecord +
    // one cudaEventQuery measured in the same rounds (the least a fence can cost), idle and
    // behind; on a deep ring the whole call <= 2.5x the caller-fenced one. Each target also from
    // the twins (A/A).
    auto extra = [](const std::vector<double>& v, std::size_t e, std::size_t f) { return (v[e] - v[e + 1]) / v[f]; };
    rep.add_target("event_extra_vs_record_query", extra(idle_t.us, 0, 4), "<=", 1.3, extra(idle_t.twin, 0, 4));
    rep.add_target("event_extra_vs_record_query_behind", extra(behind_t.us, 0, 2), "<=", 1.3, extra(behind_t.twin, 0, 2));
    rep.add_target("event_vs_caller_fenced_deep_ring", idle_t[2] / idle_t[3], "<=", 2.5, idle_t.twin[2] / idle_t.twin[3]);
    // The behind figures hold only if the GPU was behind: readers unfinished at a call, median.
    rep.add_target("copy_to_uva_behind_case_gpu_calls_behind", calls_behind, ">=", 2);
  }

  // ---- syncs and allocations over 10,000 steady-state steps ---------------------------------
  {
    const std::size_t sizes[] = {64, 1024, 65536};
    std::vector<std::vector<std::int32_t>> srcs;
    ferry::pinned_arena<B> arena;
    for (auto n : sizes) {
      srcs.push_back(values(n, static_cast<unsigned>(n) + 1));
      arena.reserve(n * sizeof(std::int32_t), 8);  // every block an inserted slot could need
    }
    ferry::uva_pool<std::int32_t, B> pool(64, 2, 8, arena);
    ferry::device_buffer<std::int32_t, B> sink(1);
    auto step = [&](std::size_t i) {
      const auto v = pool.copy_to_uva(srcs[i % 3], s);
      consume_view_kernel<<<1, 32, 0, s.get()>>>(v, sink.data());
    };
    for (std::size_t i = 0; i < 1000; ++i) step(i);  // warm-up: both slots at 65536
    s.synchronize();
    const auto before = ferry::backend_stats_of<B>();
    const auto pool_before = pool.stats();
    const std::size_t n_steps = o.quick ? 1000 : 10000;
    for (std::size_t i = 0; i < n_steps; ++i) step(i);
    const auto after = ferry::backend_stats_of<B>();
    const auto pool_after = pool.stats();
    BENCH_CUDA(cudaPeekAtLastError());
    s.synchronize();
    const double syncs = static_cast<double>(after.synchronizations - before.synchronizations);
    const double allocs = static_cast<double>(
        (after.pinned_allocations - before.pinned_allocations) +
        (after.device_allocations - before.device_allocations));
    rep.add({{"case", std::string("steady state: copy_to_uva + kernel, ") + std::to_string(n_steps) + " steps"},
             {"syncs", syncs},
             {"allocations", allocs},
             {"inserted_slots", static_cast<double>(pool_after.inserted - pool_before.inserted)},
             {"fence_hits", static_cast<double>(pool_after.fence_hits - pool_before.fence_hits)},
             {"slots", static_cast<double>(pool_after.slots)}});
    rep.add_target("steady_state_syncs", syncs, "<=", 0);
    rep.add_target("steady_state_allocations", allocs, "<=", 0);
  }

  // ---- the cost of a growth event (64 → 65536 int32 in one slot) ---------------------------
  {
    const auto small = values(64, 3);
    const auto big = values(65536, 4);
    std::vector<double> hit, miss, same;
    const int reps = o.quick ? 3 : 40;
    for (int r = 0; r < reps; ++r) {
      {
        ferry::pinned_arena<B> arena;
        arena.reserve(big.size() * sizeof(std::int32_t), 2);
        ferry::uva_pool<std::int32_t, B> pool(64, 2, 8, arena);
        (void)pool.copy_to_uva(small, s);
        (void)pool.copy_to_uva(small, s);
        s.synchronize();
        auto t0 = std::chrono::steady_clock::now();
        (void)pool.copy_to_uva(big, s);  // slot 1 grows; the block comes from the arena
        auto t1 = std::chrono::steady_clock::now();
        hit.push_back(ferry_bench::micros(t0, t1));
        (void)pool.copy_to_uva(big, s);  // slot 0 grows too
        s.synchronize();
        t0 = std::chrono::steady_clock::now();
        (void)pool.copy_to_uva(big, s);  // the same call without growth
        t1 = std::chrono::steady_clock::now();
        same.push_back(ferry_bench::micros(t0, t1));
        s.synchronize();
      }
      {
        ferry::pinned_arena<B> arena;  // empty: the growth allocates pinned memory
        ferry::uva_pool<std::int32_t, B> pool(64, 2, 8, arena);
        (void)pool.copy_to_uva(small, s);
        (void)pool.copy_to_uva(small, s);
        s.synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        (void)pool.copy_to_uva(big, s);
        const auto t1 = std::chrono::steady_clock::now();
        miss.push_back(ferry_bench::micros(t0, t1));
        s.synchronize();
      }
    }
    const double same_us = ferry_bench::median(same);
    const double hit_us = ferry_bench::median(hit);
    const double miss_us = ferry_bench::median(miss);
    rep.add({{"case", std::string("growth 64->65536, block from the arena")},
             {"elements", 65536.0}, {"ferry_us", hit_us}, {"growth/no_growth", hit_us / same_us}});
    rep.add({{"case", std::string("growth 64->65536, new pinned block (cudaHostAlloc)")},
             {"elements", 65536.0}, {"ferry_us", miss_us}, {"growth/no_growth", miss_us / same_us}});
    rep.add({{"case", std::string("same call, no growth")}, {"elements", 65536.0}, {"ferry_us", same_us}});
  }

  rep.print();
  rep.write_json(o.json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ferry_bench::bench_main("bench.uva_pool", argc, argv, run); }
