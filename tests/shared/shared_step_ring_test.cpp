// Tests of include/ferry/shared/shared_step_ring.hpp on the host backend: one writer, readers in
// forked processes (the parent forks before it starts any thread; a child only reads, checks and
// exits with _exit), readers held behind gates that the writer opens only when it needs their slot,
// every value of every step checked against the writer's reference when the slot is about to be
// reused; a reader killed mid-run and named by the writer's timeout; a late joiner; an explicit
// leave; bad input refused with nothing changed.
#include <ferry/shared/shared_step_ring.hpp>

#include <ferry/ferry.hpp>
#include <support/backends.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using B = ferry::backend::host;
using writer = ferry::shared_step_writer<std::uint64_t, B>;
using reader = ferry::shared_step_reader<std::uint64_t, B>;
using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::MessageMatches;
using Catch::Matchers::StartsWith;

std::string unique_name(const char* tag) {
  static int n = 0;
  return "/ferry-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(n++);
}

// The writer's value `i` of step `step`: every step and every position differ.
std::uint64_t value_of(std::uint64_t step, std::size_t i) {
  std::uint64_t x = step * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
  x ^= x >> 31;
  return x * 0x94d049bb133111ebull;
}
std::vector<std::uint64_t> reference(std::uint64_t step, std::size_t n) {
  std::vector<std::uint64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value_of(step, i);
  return v;
}
bool matches(const ferry::shared_step<std::uint64_t>& s) {
  for (std::size_t i = 0; i < s.size; ++i)
    if (s[i] != value_of(s.step, i)) return false;
  return true;
}

constexpr std::uint32_t max_ranks = 8;

// What the processes of a test share besides the ring: gates the parent opens, and what each
// reader counted. Anonymous shared memory, mapped before fork.
struct board {
  std::atomic<std::uint64_t> gate[max_ranks];     // rank r may pass steps below gate[r]
  std::atomic<std::uint64_t> checked[max_ranks];  // steps rank r checked
  std::atomic<std::uint64_t> bad[max_ranks];      // steps whose values differed, gates never opened
  std::atomic<std::uint64_t> reached[max_ranks];  // the step rank r has acquired last, + 1
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

struct shared_board {
  board* b = nullptr;
  shared_board() {
    void* p = ::mmap(nullptr, sizeof(board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    b = new (p) board{};
  }
  ~shared_board() { ::munmap(b, sizeof(board)); }
  board* operator->() const { return b; }
};

// Runs `child` in a forked process, which exits with its return value (never returning here).
template <class F>
pid_t spawn(F&& child) {
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 3;
    try {
      code = child();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
      code = 2;
    }
    std::fflush(stderr);
    ::_exit(code);
  }
  return pid;
}

int exit_code(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Polls `ok` for up to `bound`.
template <class F>
bool eventually(F&& ok, std::chrono::nanoseconds bound = 10s) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(50us);
  }
  return true;
}

}  // namespace

TEST_CASE("shared step ring: every rank reads every step once written, readers held behind gates",
          "[shared_step_ring]") {
  constexpr std::uint32_t ranks = 3, slots = 3;
  constexpr std::size_t elements = 257;
  constexpr std::uint64_t steps = 96;
  const ferry::shared_step_layout layout{elements, slots, ranks};
  shared_board board;
  writer w(unique_name("gates"), layout, 10s);
  std::vector<pid_t> children;
  for (std::uint32_t r = 0; r < ranks; ++r)
    children.push_back(spawn([&, r] {
      reader rd(w.name(), layout, r, 10s);
      ferry::stream<B> s;
      for (std::uint64_t i = 0; i < steps; ++i) {
        const auto st = rd.acquire();
        if (st.step != i) return 4;
        board->reached[r].store(i + 1);
        // The values are read when the gate opens: when the writer needs this slot for a new step.
        ferry::enqueue_host(s, [st, r, b = board.b] {
          if (!eventually([&] { return b->gate[r].load() > st.step; })) b->bad[r].fetch_add(1);
          if (!matches(st)) b->bad[r].fetch_add(1);
          b->checked[r].fetch_add(1);
        });
        rd.pass(s, st);
      }
      s.synchronize();
      rd.leave();
      return 0;
    }));
  REQUIRE(eventually([&] {
    for (std::uint32_t r = 0; r < ranks; ++r)
      if (w.rank_state(r) != ferry::shared_rank_state::active) return false;
    return true;
  }));
  std::uint64_t held = 0;  // steps whose slot a rank still held when the writer came to it
  std::uint32_t next_gate = 0;
  for (std::uint64_t i = 0; i < steps; ++i) {
    const auto data = reference(i, elements);
    bool was_held = false;
    while (!w.try_publish(data)) {
      was_held = true;
      // Open one rank's gate for the step whose slot step i reuses, in turn.
      const std::uint32_t r = next_gate++ % ranks;
      if (board->gate[r].load() <= i - slots) board->gate[r].store(i - slots + 1);
      std::this_thread::sleep_for(20us);
    }
    held += was_held;
  }
  for (std::uint32_t r = 0; r < ranks; ++r) board->gate[r].store(steps);
  for (const pid_t pid : children) CHECK(exit_code(pid) == 0);
  for (std::uint32_t r = 0; r < ranks; ++r) {
    CHECK(board->checked[r].load() == steps);
    CHECK(board->bad[r].load() == 0);
    CHECK(w.rank_state(r) == ferry::shared_rank_state::absent);  // each left
  }
  CHECK(w.steps() == steps);
  CHECK(held == steps - slots);  // every slot was reused only once its gates opened
}

TEST_CASE("shared step ring: a reader killed mid-run is named by the writer's timeout, then dropped",
          "[shared_step_ring]") {
  constexpr std::size_t elements = 64;
  constexpr std::uint64_t steps = 12, killed_at = 3;
  const ferry::shared_step_layout layout{elements, 2, 2};
  shared_board board;
  writer w(unique_name("killed"), layout, 300ms);
  // Rank 0 passes steps 0..2, acquires step 3 and stops there until it is killed.
  const pid_t victim = spawn([&] {
    reader rd(w.name(), layout, 0, 10s);
    for (;;) {
      const auto st = rd.acquire();
      board->reached[0].store(st.step + 1);
      if (st.step == killed_at) ::pause();
      if (!matches(st)) return 5;
      st.pass();
    }
  });
  // Rank 1 checks every step, passing each when the parent lets it.
  const pid_t survivor = spawn([&] {
    reader rd(w.name(), layout, 1, 10s);
    for (std::uint64_t i = 0; i < steps; ++i) {
      const auto st = rd.acquire();
      if (st.step != i || !matches(st)) return 6;
      board->checked[1].fetch_add(1);
      st.pass();
    }
    return 0;
  });
  REQUIRE(eventually([&] {
    return w.rank_state(0) == ferry::shared_rank_state::active && w.rank_state(1) == ferry::shared_rank_state::active;
  }));
  for (std::uint64_t i = 0; i <= killed_at + 1; ++i) w.publish(reference(i, elements));  // step 4 reuses step 2's slot
  REQUIRE(eventually([&] { return board->reached[0].load() == killed_at + 1; }));
  REQUIRE(::kill(victim, SIGKILL) == 0);
  CHECK(exit_code(victim) == 128 + SIGKILL);
  REQUIRE(eventually([&] { return w.rank_passed(1) == killed_at + 2; }));
  // Step 5 reuses step 3's slot, which the dead rank 0 never passed.
  CHECK_THROWS_MATCHES(w.publish(reference(killed_at + 2, elements)), ferry::timeout_error,
                       MessageMatches(StartsWith("ferry: ") && ContainsSubstring("rank 0 has not passed step 3")));
  CHECK(w.steps() == killed_at + 2);  // nothing published
  CHECK(w.rank_passed(0) == killed_at);
  w.drop_rank(0);
  CHECK(w.rank_state(0) == ferry::shared_rank_state::dropped);
  for (std::uint64_t i = killed_at + 2; i < steps; ++i) w.publish(reference(i, elements));
  CHECK(exit_code(survivor) == 0);
  CHECK(board->checked[1].load() == steps);
}

TEST_CASE("shared step ring: a rank that joins late starts at the current step", "[shared_step_ring]") {
  constexpr std::size_t elements = 5;
  const ferry::shared_step_layout layout{elements, 3, 2};
  writer w(unique_name("late"), layout, 1s);
  for (std::uint64_t i = 0; i < 7; ++i) CHECK(w.publish(reference(i, elements)) == i);  // nobody reads: no wait
  CHECK(w.waits() == 0);
  reader rd(w.name(), layout, 1, 1s);
  CHECK(rd.next_step() == 6);
  CHECK(w.rank_state(1) == ferry::shared_rank_state::active);
  CHECK(w.rank_passed(1) == 6);
  const auto st = rd.acquire();
  CHECK(st.step == 6);
  CHECK(matches(st));
  CHECK(rd.try_acquire() == std::nullopt);  // step 7 is not published yet
  CHECK(w.publish(reference(7, elements)) == 7);
  CHECK(w.publish(reference(8, elements)) == 8);
  CHECK(w.try_publish(reference(9, elements)) == std::nullopt);  // step 9 reuses step 6's slot
  CHECK(w.steps() == 9);
  ferry::stream<B> s;
  rd.pass(s, st);
  s.synchronize();
  CHECK(w.rank_passed(1) == 7);
  CHECK(w.try_publish(reference(9, elements)) == 9);
  const auto st7 = rd.acquire();
  CHECK((st7.step == 7 && matches(st7)));
  // A second reader of the same rank is refused; the first keeps it.
  CHECK_THROWS_MATCHES(reader(w.name(), layout, 1, 1s), std::invalid_argument,
                       MessageMatches(ContainsSubstring("rank 1 is taken by another reader")));
  CHECK(w.rank_state(1) == ferry::shared_rank_state::active);
  // Dropped by the writer: the reader is refused from its next acquire on.
  w.drop_rank(1);
  CHECK_THROWS_MATCHES(rd.try_acquire(), ferry::error, MessageMatches(ContainsSubstring("the writer dropped rank 1")));
  // ...and the rank can be joined again, at the current step.
  reader again(w.name(), layout, 1, 1s);
  CHECK(again.next_step() == 9);
}

TEST_CASE("shared step ring: a rank that leaves is no longer waited for", "[shared_step_ring]") {
  constexpr std::size_t elements = 3;
  const ferry::shared_step_layout layout{elements, 2, 1};
  writer w(unique_name("leave"), layout, 1s);
  reader rd(w.name(), layout, 0, 100ms);
  w.publish(reference(0, elements));
  w.publish(reference(1, elements));
  const auto s0 = rd.acquire();
  CHECK(matches(s0));
  CHECK(w.try_publish(reference(2, elements)) == std::nullopt);  // rank 0 holds step 0
  // A pass held on its stream: leave() waits for it, past its bound throws, the rank kept.
  ferry::stream<B> s;
  std::atomic<bool> open{false};
  ferry::enqueue_host(s, [&] {
    while (!open.load()) std::this_thread::sleep_for(100us);
  });
  rd.pass(s, s0);
  CHECK_THROWS_MATCHES(rd.leave(), ferry::timeout_error,
                       MessageMatches(StartsWith("ferry: ") && ContainsSubstring("rank 0 cannot leave: its pass of step 0")));
  CHECK(w.rank_state(0) == ferry::shared_rank_state::active);
  open.store(true);
  s.synchronize();
  CHECK(w.try_publish(reference(2, elements)) == 2);
  // Step 1 acquired, never passed: step 3 would reuse its slot, until the rank leaves.
  const auto s1 = rd.acquire();
  CHECK((s1.step == 1 && matches(s1)));
  CHECK(w.try_publish(reference(3, elements)) == std::nullopt);
  rd.leave();
  CHECK(w.rank_state(0) == ferry::shared_rank_state::absent);
  CHECK(w.try_publish(reference(3, elements)) == 3);
  CHECK_THROWS_MATCHES(rd.acquire(), ferry::error, MessageMatches(ContainsSubstring("rank 0 has left the ring")));
  CHECK_THROWS_AS(rd.leave(), ferry::error);
  reader again(w.name(), layout, 0, 100ms);
  CHECK(again.next_step() == 3);
  const auto s3 = again.acquire();
  CHECK((s3.step == 3 && matches(s3)));
}

TEST_CASE("shared step ring: bad input is refused with nothing changed", "[shared_step_ring]") {
  using ferry::shared_step_layout;
  constexpr std::size_t elements = 4;
  const shared_step_layout layout{elements, 2, 2};
  // Bad layouts and names: nothing created.
  CHECK_THROWS_MATCHES(writer(unique_name("bad"), shared_step_layout{elements, 1, 2}), std::invalid_argument,
                       MessageMatches(StartsWith("ferry: ") && ContainsSubstring("1 slots: a ring needs at least 2")));
  CHECK_THROWS_MATCHES(writer(unique_name("bad"), shared_step_layout{0, 2, 2}), std::invalid_argument,
                       MessageMatches(ContainsSubstring("a step of 0 elements")));
  CHECK_THROWS_MATCHES(writer(unique_name("bad"), shared_step_layout{elements, 2, 0}), std::invalid_argument,
                       MessageMatches(ContainsSubstring("0 ranks: from 1 to 1024")));
  CHECK_THROWS_MATCHES(writer(unique_name("bad"), shared_step_layout{std::size_t{1} << 62, 2, 2}), std::invalid_argument,
                       MessageMatches(ContainsSubstring("do not fit in memory")));
  for (const char* name : {"no-slash", "/a/b", "/"})
    CHECK_THROWS_MATCHES(writer(name, layout), std::invalid_argument,
                         MessageMatches(StartsWith("ferry: ") && ContainsSubstring("POSIX shm_open")));
  CHECK_THROWS_MATCHES(reader(unique_name("missing"), layout, 0), std::invalid_argument,
                       MessageMatches(StartsWith("ferry: ") && ContainsSubstring("no writer has created it")));

  writer w(unique_name("mismatch"), layout, 1s);
  w.publish(reference(0, elements));
  // A second writer of the name: refused, the first unharmed.
  CHECK_THROWS_MATCHES(writer(w.name(), layout), ferry::error, MessageMatches(ContainsSubstring("another writer")));
  // Readers of another shape, element type or rank: refused, naming what differs; no rank taken.
  CHECK_THROWS_MATCHES(reader(w.name(), shared_step_layout{elements + 1, 2, 2}, 0), std::invalid_argument,
                       MessageMatches(ContainsSubstring("slot bytes 32 in the shared memory, 40 in this process")));
  CHECK_THROWS_MATCHES(reader(w.name(), shared_step_layout{elements, 3, 2}, 0), std::invalid_argument,
                       MessageMatches(ContainsSubstring("slot count 2 in the shared memory, 3 in this process")));
  CHECK_THROWS_MATCHES(reader(w.name(), shared_step_layout{elements, 2, 3}, 0), std::invalid_argument,
                       MessageMatches(ContainsSubstring("rank count 2 in the shared memory, 3 in this process")));
  CHECK_THROWS_MATCHES((ferry::shared_step_reader<std::uint32_t, B>(w.name(), shared_step_layout{2 * elements, 2, 2}, 0)),
                       std::invalid_argument,
                       MessageMatches(ContainsSubstring("element size 8 in the shared memory, 4 in this process")));
  CHECK_THROWS_MATCHES(reader(w.name(), layout, 2), std::invalid_argument,
                       MessageMatches(ContainsSubstring("rank 2 out of range (the ring has 2 ranks)")));
  for (std::uint32_t r = 0; r < 2; ++r) CHECK(w.rank_state(r) == ferry::shared_rank_state::absent);
  // A step of the wrong size: nothing published.
  CHECK_THROWS_MATCHES(w.publish(reference(1, elements + 1)), std::invalid_argument,
                       MessageMatches(ContainsSubstring("a step of 5 values; the ring's steps have 4")));
  CHECK_THROWS_AS(w.try_publish(reference(1, elements - 1)), std::invalid_argument);
  CHECK(w.steps() == 1);
  // A fill that throws: nothing published, the ring goes on.
  CHECK_THROWS_AS(w.publish_with([](std::span<std::uint64_t>) { throw std::runtime_error("fill"); }), std::runtime_error);
  CHECK(w.steps() == 1);
  reader rd(w.name(), layout, 0, 1s);
  CHECK(rd.next_step() == 0);
  const auto s0 = rd.acquire();
  CHECK(matches(s0));
  // A pass of a step this rank did not acquire, or out of order: nothing enqueued.
  ferry::stream<B> s;
  auto later = s0;
  later.step = 1;
  CHECK_THROWS_MATCHES(rd.pass(s, later), std::invalid_argument,
                       MessageMatches(ContainsSubstring("pass of step 1, not a step rank 0 acquired")));
  CHECK(w.publish(reference(1, elements)) == 1);
  const auto s1 = rd.acquire();
  rd.pass(s, s1);
  CHECK_THROWS_MATCHES(rd.pass(s, s0), std::invalid_argument,
                       MessageMatches(ContainsSubstring("pass of step 0 after step 1 (steps are passed in order)")));
  s.synchronize();
  CHECK(w.rank_passed(0) == 2);

  // Shared memory of another layout version, or not a ring at all: refused when opened.
  {
    const std::string name = unique_name("version");
    writer other(name, layout);
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(p != MAP_FAILED);
    auto* h = static_cast<ferry::detail::shared_ring_header*>(p);
    h->version += 1;
    CHECK_THROWS_MATCHES(reader(name, layout, 0), std::invalid_argument,
                         MessageMatches(ContainsSubstring("written by layout version 2, this process reads version 1")));
    h->magic = 0;
    CHECK_THROWS_MATCHES(reader(name, layout, 0), std::invalid_argument,
                         MessageMatches(ContainsSubstring("not a ferry shared step ring")));
    ::munmap(p, 4096);
  }
  {
    const std::string name = unique_name("tiny");
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);  // 0 bytes
    CHECK_THROWS_MATCHES(reader(name, layout, 0), std::invalid_argument,
                         MessageMatches(ContainsSubstring("smaller than a ring's header")));
    ::shm_unlink(name.c_str());
  }
}
