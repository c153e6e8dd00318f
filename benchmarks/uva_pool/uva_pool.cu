// bench.uva_pool (SPEC §6, §10). Host time per call (bursts of operations, the stream drained
// between bursts, median over bursts) of:
//   - ferry::uva_pool::copy_to_uva (event_fenced, the default; and caller_fenced) of 64, 1024 and
//     65536 int32 from a std::vector,
//   - a bare cudaMemcpyAsync of the same bytes from pinned memory into device memory (what a
//     hand-written H2D upload costs the host),
//   - a plain memcpy into pinned memory (the true floor of a UVA write: what copy_to_uva must do
//     at the least),
// printed side by side as ratios; then syncs and allocations over 10,000 steady-state steps
// (each step: copy_to_uva and a kernel that reads the view), counted by the backend's counters
// (targets 0 and 0); then the host cost of a growth event (64 → 65536 elements), with the block
// from the arena and with a fresh pinned allocation.
#include <support/bench.hpp>
#include <support/gpu.cuh>

#include <ferry/ferry.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
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

double elapsed_us(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  const auto o = ferry_bench::parse(argc, argv);
  ferry_bench::report rep("uva_pool");
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

    const double ferry_us = ferry_bench::host_us(o, [&](std::size_t) { (void)pool.copy_to_uva(src, s); }, drain);
    const double caller_us =
        ferry_bench::host_us(o, [&](std::size_t) { (void)caller.copy_to_uva(src, s); }, drain);
    const double bare_us = ferry_bench::host_us(
        o,
        [&](std::size_t) {
          BENCH_CUDA(cudaMemcpyAsync(dev.data(), pinned_src.host().data(), bytes,
                                     cudaMemcpyHostToDevice, s.get()));
        },
        drain);
    const double memcpy_us = ferry_bench::host_us(
        o,
        [&](std::size_t) {
          std::memcpy(pinned_dst.host().data(), src.data(), bytes);
          asm volatile("" ::: "memory");  // keep every copy
        },
        [] {});
    rep.add({{"case", std::string("steady copy_to_uva")},
             {"elements", static_cast<double>(n)},
             {"bytes", static_cast<double>(bytes)},
             {"ferry_us", ferry_us},
             {"ferry_caller_fenced_us", caller_us},
             {"bare_cudaMemcpyAsync_us", bare_us},
             {"memcpy_into_pinned_us", memcpy_us},
             {"ferry/cudaMemcpyAsync", ferry_us / bare_us},
             {"ferry/memcpy", ferry_us / memcpy_us},
             {"caller_fenced/memcpy", caller_us / memcpy_us}});
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
        hit.push_back(elapsed_us(t0, t1));
        (void)pool.copy_to_uva(big, s);  // slot 0 grows too
        s.synchronize();
        t0 = std::chrono::steady_clock::now();
        (void)pool.copy_to_uva(big, s);  // the same call without growth
        t1 = std::chrono::steady_clock::now();
        same.push_back(elapsed_us(t0, t1));
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
        miss.push_back(elapsed_us(t0, t1));
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
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench.uva_pool: %s\n", e.what());
  return 1;
}
