// probe.host_cost: ferry's own host work per call, counted in instructions, with no GPU and no
// driver. It links stub_cuda_runtime.cpp in place of the CUDA runtime (every runtime call returns
// at once), so that tools/host-cost, which runs it under valgrind twice with different numbers of
// calls, reads what one call costs in ferry's code alone: a count that does not move from run to
// run, where a time on the H200 moves by a tenth between runs (docs/contributing.md, "Host work in
// instructions"). Built against a before tree too (probe.host_cost.before, as the benchmarks),
// the two counts are the same call of two libraries.
//
//   probe.host_cost CASE CALLS   warms CASE up, then makes CALLS calls of it
//   probe.host_cost --list       the cases, a line each: its name, then "kernel" if it launches one
//   probe.host_cost --all CALLS  every case in turn (a test: the stand-in answers all they call)
//
// Each case is a row of a benchmark that measures it in time on the H200, with that row's data, and
// is named after it: BENCHMARK.ROW.
#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using B = ferry::backend::cuda;
using T = std::int32_t;

std::vector<T> values(std::size_t n, unsigned seed) {
  std::vector<T> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& e : v) e = static_cast<T>(x = x * 1664525u + 1013904223u);
  return v;
}

// One case: what it holds, and the call. Made once; the call is made warm-up + CALLS times.
struct call_case {
  std::shared_ptr<void> state;
  std::function<void(std::size_t)> call;
};

template <class State, class Call>
call_case make(std::shared_ptr<State> st, Call c) {
  return {st, [st = st.get(), c](std::size_t i) { c(*st, i); }};
}

// bench.h2d's small upload: 1024 int32 from a std::vector, ferry::async_h2d into a device span.
call_case h2d_small(ferry::stream<B>& s) {
  struct st {
    std::vector<T> v = values(1024, 1);
    ferry::device_buffer<T, B> dev{1024};
  };
  ferry::default_arena<B>().reserve(1024 * sizeof(T), 64);
  return make(std::make_shared<st>(), [&s](st& x, std::size_t i) {
    x.v[0] = static_cast<T>(i);
    ferry::async_h2d(x.v, x.dev.span(), s);
  });
}

// bench.h2d's packed upload: 8 arrays of 256 B to 4 KiB, one ferry::async_h2d_packed.
call_case h2d_packed(ferry::stream<B>& s) {
  struct st {
    std::vector<std::vector<T>> parts;
    std::unique_ptr<ferry::device_buffer<T, B>> dev;
  };
  auto x = std::make_shared<st>();
  std::size_t n = 0;
  for (const std::size_t bytes : {256, 512, 1024, 2048, 4096, 256, 1024, 4096}) {
    x->parts.push_back(values(bytes / sizeof(T), static_cast<unsigned>(bytes)));
    n += bytes / sizeof(T);
  }
  x->dev = std::make_unique<ferry::device_buffer<T, B>>(n);
  ferry::default_arena<B>().reserve(n * sizeof(T), 64);
  return make(x, [&s](st& y, std::size_t) {
    auto& p = y.parts;
    (void)ferry::async_h2d_packed(y.dev->span(), s, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
  });
}

// bench.uva_pool's copy_to_uva of 1024 int32: a ring of `slots` (growing up to 8), event-fenced
// (the default) or caller-fenced.
template <class... Reuse>
call_case uva_copy(ferry::stream<B>& s, std::size_t slots) {
  struct st {
    std::vector<T> src = values(1024, 1025);
    ferry::pinned_arena<B> arena;
    std::unique_ptr<ferry::uva_pool<T, Reuse..., B>> pool;
  };
  auto x = std::make_shared<st>();
  x->arena.reserve(1024 * sizeof(T), 24);
  x->pool = std::make_unique<ferry::uva_pool<T, Reuse..., B>>(1024, slots, 8, x->arena);
  return make(x, [&s](st& y, std::size_t) { (void)y.pool->copy_to_uva(y.src, s); });
}

// bench.staged_write's ferry row at one point: W stage_write calls of `per` elements, then
// apply_write (presets::block_table: the kernel reads the pinned slot in place). A ferry::event is
// recorded after each apply: the stub never runs the kernel that would mark its slot passed, and a
// slot is reused once an event recorded after its kernel has passed (the same record in both
// builds).
call_case staged(ferry::stream<B>& s, int W, int per) {
  constexpr std::size_t rows = 1024, cols = 4096;
  struct st {
    std::unique_ptr<ferry::staged_write_tensor<T, B, ferry::presets::block_table>> t;
    std::vector<T> vals;
    ferry::event<B> after;
  };
  auto x = std::make_shared<st>();
  x->t = std::make_unique<ferry::staged_write_tensor<T, B, ferry::presets::block_table>>(rows, cols, s, 8);
  x->t->reserve(256, 256 * 4096);
  x->vals = values(static_cast<std::size_t>(per), 7);
  return make(x, [&s, W](st& y, std::size_t) {
    for (int w = 0; w < W; ++w) y.t->stage_write(static_cast<std::size_t>((w * 7) % 1024), 0, y.vals);
    y.t->apply_write(s);
    y.after.record(s);
  });
}

struct named_case {
  std::string_view name;
  call_case (*make)(ferry::stream<B>&);
  // Launches a kernel: its slot passes only through the event recorded after it (the stand-in's
  // kernels store no mark), so a GPU "behind" would cost it queries that a GPU's mark saves.
  bool launches_kernel = false;
};

const named_case cases[] = {
    {"h2d.small_1024", h2d_small},
    {"h2d.packed_8", h2d_packed},
    {"uva_pool.event_ring2", [](ferry::stream<B>& s) { return uva_copy<>(s, 2); }},
    {"uva_pool.event_ring8", [](ferry::stream<B>& s) { return uva_copy<>(s, 8); }},
    {"uva_pool.caller_ring2", [](ferry::stream<B>& s) { return uva_copy<ferry::reuse::caller_fenced>(s, 2); }},
    {"staged_write.256x8", [](ferry::stream<B>& s) { return staged(s, 256, 8); }, true},
    {"staged_write.8x8", [](ferry::stream<B>& s) { return staged(s, 8, 8); }, true},
    {"staged_write.1x1024", [](ferry::stream<B>& s) { return staged(s, 1, 1024); }, true},
    {"staged_write.256x64", [](ferry::stream<B>& s) { return staged(s, 256, 64); }, true},
};

}  // namespace

int main(int argc, char** argv) try {
  const std::string_view what = argc > 1 ? argv[1] : "";
  if (what == "--list") {
    for (const auto& c : cases)
      std::printf("%.*s %s\n", static_cast<int>(c.name.size()), c.name.data(), c.launches_kernel ? "kernel" : "-");
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: probe.host_cost CASE CALLS | --all CALLS | --list\n");
    return 2;
  }
  const std::size_t calls = std::strtoull(argv[2], nullptr, 10);
  bool found = false;
  for (const auto& c : cases) {
    if (c.name != what && what != "--all") continue;
    found = true;
    ferry::stream<B> s;
    call_case k = c.make(s);
    constexpr std::size_t warm_up = 64;  // every slot, block and event the case needs is made here
    for (std::size_t i = 0; i < warm_up; ++i) k.call(i);
    s.synchronize();
    for (std::size_t i = 0; i < calls; ++i) k.call(warm_up + i);
    s.synchronize();
  }
  if (!found) {
    std::fprintf(stderr, "probe.host_cost: no case %s (--list names them)\n", argv[1]);
    return 2;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "probe.host_cost: %s\n", e.what());
  return 1;
}
