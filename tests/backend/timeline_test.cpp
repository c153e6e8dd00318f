// Tests for include/ferry/backend/detail/timeline.hpp, the reuse core: a property test with random
// clients (arena blocks, direct stamps) on several streams whose readers are held behind gates,
// the recycling of a destroyed stream's line, a wait that leaves the core to other threads, and
// the events of a line that is marked but never asked about.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace {

// The word `i` of the contents written for generation `gen` (never all zeros).
std::uint64_t word(std::uint64_t gen, std::size_t i) {
  std::uint64_t z = gen * 0x9E3779B97F4A7C15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// What every task of the test found; shared with the tasks, which may outlive a failed case.
struct findings {
  std::atomic<std::uint64_t> rewritten{0};  // a reader saw its block rewritten under it
  std::atomic<std::uint64_t> misordered{0};  // an order_after task ran before the work it follows
  std::deque<std::atomic<bool>> ran;         // per direct stamp: its covered task has run (tasks
                                             // hold pointers: the deque grows on the test's thread)
};

}  // namespace

// Random clients of the core on three streams. Invariants: a block is never handed out again
// (so rewritten) before the reader that its release covers has run; a direct stamp is never
// reported passed or known, nor waited past, nor ordered after, before the task it covers ran;
// after warm-up the arena allocates nothing (every block comes back once its stamp has passed).
TEMPLATE_TEST_CASE("the reuse core never reports a stamp passed before the work it covers ran",
                   "[timeline]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  auto& core = ferry::detail::shared_timeline<B>();
  constexpr std::size_t n_streams = 3;
  constexpr std::size_t round_ops = 48;
  constexpr std::array<std::size_t, 3> sizes = {256, 1024, 4096};
  std::array<ferry::stream<B>, n_streams> streams;
  ferry::pinned_arena<B> arena;
  auto found = std::make_shared<findings>();
  std::mt19937_64 rng(20261201);
  std::uint64_t generation = 0;

  // Gates closed on each stream (opened in random order); none is waited past while one is closed
  // (CUDA host functions of all streams share one thread, so a closed gate holds every stream).
  std::array<std::vector<std::unique_ptr<ferry_test::gate<B>>>, n_streams> closed;
  auto any_closed = [&] {
    for (const auto& c : closed)
      if (!c.empty()) return true;
    return false;
  };
  auto open_all = [&] {
    for (auto& c : closed) c.clear();  // a gate opens when destroyed
    for (auto& s : streams) s.synchronize();
  };

  // A block of `bytes`, filled for a new generation, read on stream i behind everything enqueued
  // there, then given back on that stream.
  auto use_block = [&](std::size_t i, std::size_t bytes) {
    const ferry::pinned_block b = arena.acquire(bytes);
    const std::uint64_t gen = ++generation;
    auto* words = reinterpret_cast<std::uint64_t*>(b.data);
    const std::size_t n = bytes / sizeof(std::uint64_t);
    for (std::size_t k = 0; k < n; ++k) words[k] = word(gen, k);
    ferry::enqueue_host(streams[i], [found, words, n, gen] {
      for (std::size_t k = 0; k < n; ++k)
        if (words[k] != word(gen, k)) {
          found->rewritten.fetch_add(1);
          return;
        }
    });
    arena.release(b, streams[i]);
  };

  struct direct {
    ferry::detail::stamp at;
    const std::atomic<bool>* ran;  // in found->ran
  };
  std::vector<direct> stamps;
  std::uint64_t early = 0;  // stamps reported passed or known before their task ran
  auto covered_ran = [](const direct& d) { return d.ran->load(std::memory_order_acquire); };

  // Warm-up: every block of a round in flight at once (all streams held), then all passed.
  for (std::size_t i = 0; i < n_streams; ++i) closed[i].push_back(std::make_unique<ferry_test::gate<B>>(streams[i]));
  for (std::size_t k = 0; k < round_ops; ++k)
    for (const std::size_t bytes : sizes) use_block(k % n_streams, bytes);
  open_all();
  const ferry::arena_stats warm = arena.stats();
  CHECK(warm.allocations == round_ops * sizes.size());

  for (int round = 0; round < 30; ++round) {
    for (std::size_t op = 0; op < round_ops; ++op) {
      const std::size_t i = rng() % n_streams;
      switch (rng() % 7) {
        case 0:
        case 1:
          use_block(i, sizes[rng() % sizes.size()]);
          break;
        case 2: {  // a direct stamp covering a task
          std::atomic<bool>* ran = &found->ran.emplace_back(false);
          ferry::enqueue_host(streams[i], [found, ran] { ran->store(true, std::memory_order_release); });
          stamps.push_back({core.mark(streams[i]), ran});
          break;
        }
        case 3:
          if (closed[i].size() < 2) closed[i].push_back(std::make_unique<ferry_test::gate<B>>(streams[i]));
          break;
        case 4:
          if (!closed[i].empty()) closed[i].erase(closed[i].begin() + static_cast<std::ptrdiff_t>(rng() % closed[i].size()));
          break;
        case 5:  // ask about random stamps
          for (int k = 0; k < 4 && !stamps.empty(); ++k) {
            const direct& d = stamps[rng() % stamps.size()];
            if ((core.known(d.at) || core.passed(d.at)) && !covered_ran(d)) ++early;
          }
          break;
        case 6:
          if (stamps.empty()) break;
          if (const direct& d = stamps[rng() % stamps.size()]; !any_closed() && rng() % 2 == 0) {
            core.wait(d.at);
            if (!covered_ran(d)) ++early;
          } else {  // stream i waits for d's stream, without blocking the host
            core.order_after(streams[i], d.at);
            ferry::enqueue_host(streams[i], [found, ran = d.ran] {
              if (!ran->load(std::memory_order_acquire)) found->misordered.fetch_add(1);
            });
          }
          break;
      }
    }
    open_all();
    for (const direct& d : stamps) CHECK(core.passed(d.at));
    stamps.clear();
  }
  CHECK(early == 0);
  CHECK(found->rewritten.load() == 0);
  CHECK(found->misordered.load() == 0);
  const ferry::arena_stats after = arena.stats();
  CHECK(after.allocations == warm.allocations);  // steady state: every block reused
  CHECK(after.reuses > warm.reuses);
  CHECK(after.bytes_in_use == 0);
}

TEMPLATE_TEST_CASE("a destroyed stream's stamps stay passed when its line serves new streams",
                   "[timeline]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using ops = ferry::detail::backend_ops<TestType>;
  auto& core = ferry::detail::shared_timeline<TestType>();
  std::vector<ferry::detail::stamp> old;
  for (int i = 0; i < 8; ++i) {
    ops::synchronize_device(ops::current_device());  // CUDA: destroying a stream does not wait
    ferry::stream<TestType> s;
    ferry_test::gate<TestType> g(s);
    const auto at = core.mark(s);  // may take over the line of a destroyed stream
    CHECK_FALSE(core.passed(at));
    CHECK_FALSE(core.known(at));
    for (const auto o : old) CHECK(core.passed(o));
    old.push_back(at);
  }  // the gate opens, then the stream is destroyed
  ops::synchronize_device(ops::current_device());
  for (const auto o : old) CHECK(core.passed(o));
}

TEMPLATE_TEST_CASE("a thread blocked in wait() does not hold the reuse core from other streams",
                   "[timeline]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  auto& core = ferry::detail::shared_timeline<B>();
  ferry::stream<B> held;
  ferry::stream<B> other;
  auto g = std::make_unique<ferry_test::gate<B>>(held);
  const auto at = core.mark(held);
  REQUIRE_FALSE(core.passed(at));
  const auto syncs = ferry::backend_stats_of<B>().synchronizations;
  std::thread waiter([&] { CHECK(core.wait(at)); });
  while (ferry::backend_stats_of<B>().synchronizations == syncs) std::this_thread::yield();  // it blocks
  auto marked = std::async(std::launch::async, [&] { return core.mark(other); });
  // Bounded only so that a core held by the waiter fails the case instead of hanging it.
  const bool free = marked.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  g.reset();  // opens the gate: the waiter returns
  waiter.join();
  CHECK(free);
  other.synchronize();
  CHECK(core.passed(marked.get()));
  CHECK(core.passed(at));
}

#if FERRY_HAS_CUDA
TEST_CASE("marks nobody asks about reuse their events instead of piling them up", "[timeline]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  auto& core = ferry::detail::shared_timeline<B>();
  ferry::stream<B> s;
  const std::size_t before = core.events_pending();
  for (int i = 0; i < 2000; ++i) {
    (void)core.mark(s);
    if (i % 100 == 99) s.synchronize();  // the stream keeps up: every mark passes soon
  }
  // Without reclaiming, the line would hold 2000 recorded events (one created per mark).
  CHECK(core.events_pending() <= before + 64 + 100);
}
#endif
