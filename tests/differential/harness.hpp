// The differential harness: seeded episodes of random operations on one component, checked
// against a host model. Every check of a view runs in stream order, on the stream that reads it
// (a host task; on CUDA behind a stream-ordered copy into pinned memory), so a slot or block
// reused before its reader ran shows up as a mismatch. Mismatches are collected with the seed and
// the operation index and reported on the test thread.
#pragma once

#include <support/backends.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <sanitizer/common_interface_defs.h>
#define DIFF_SANITIZED 1
#endif

namespace diff {

/// Operations per episode: each episode has its own seed (base seed + episode index), policy
/// combination and objects, so FERRY_DIFF_SEED=<seed> FERRY_DIFF_OPS=<ops> replays one episode.
inline constexpr std::uint64_t episode_ops = 500;
inline constexpr std::uint64_t default_seed = 20261201;

inline std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

template <class B>
const char* backend_name() {
  return std::is_same_v<B, ferry::backend::host> ? "host" : "cuda";
}

/// Where the run is (for reports from a sanitizer, which end the process).
struct position {
  std::atomic<const char*> component{"-"};
  std::atomic<std::uint64_t> seed{0};
  std::atomic<std::uint64_t> op{0};
};
inline position& now() {
  static position p;
  return p;
}

#if defined(DIFF_SANITIZED)
inline const bool death_note_installed = [] {
  __sanitizer_set_death_callback(+[] {
    std::fprintf(stderr,
                 "differential: stopped in %s, seed %llu, operation %llu "
                 "(replay: FERRY_DIFF_SEED=%llu FERRY_DIFF_OPS=%llu)\n",
                 now().component.load(), static_cast<unsigned long long>(now().seed.load()),
                 static_cast<unsigned long long>(now().op.load()),
                 static_cast<unsigned long long>(now().seed.load()),
                 static_cast<unsigned long long>(now().op.load() + 1));
  });
  return true;
}();
#endif

/// Operations run per component (printed at the end of the run).
struct tally {
  std::mutex m;
  std::map<std::string, std::uint64_t> ops;
  void add(const std::string& what, std::uint64_t n) {
    std::lock_guard lock(m);
    ops[what] += n;
  }
};
inline tally& counts() {
  static tally t;
  return t;
}

/// Mismatches found by stream-ordered checks (written from worker threads).
struct mismatch_log {
  std::mutex m;
  std::vector<std::string> entries;
  void add(std::string s) {
    std::lock_guard lock(m);
    entries.push_back(std::move(s));
  }
  std::vector<std::string> take() {
    std::lock_guard lock(m);
    return std::exchange(entries, {});
  }
};

/// Pinned buffers for the CUDA checks, recycled by the check task once it has compared them
/// (a host task must not call CUDA, so nothing is freed there).
template <class B>
class scratch_pool {
 public:
  using buffer = ferry::pinned_buffer<std::uint64_t, B>;
  buffer* take(std::size_t bytes) {
    const std::size_t words = std::max<std::size_t>((bytes + 7) / 8, 8192);
    std::lock_guard lock(m_);
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i]->size() >= words) {
        buffer* b = free_[i];
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    all_.push_back(std::make_unique<buffer>(words));
    return all_.back().get();
  }
  void give(buffer* b) {
    std::lock_guard lock(m_);
    free_.push_back(b);
  }

 private:
  std::mutex m_;
  std::vector<std::unique_ptr<buffer>> all_;
  std::vector<buffer*> free_;
};

/// The streams of an episode, each optionally held closed behind a gate. `epoch[i]` counts the
/// synchronizations of stream i (work enqueued before epoch e is known done once epoch > e).
template <class B>
class lanes {
 public:
  explicit lanes(std::size_t n) : gates_(n), epoch(n, 0) {
    for (std::size_t i = 0; i < n; ++i) streams_.push_back(std::make_unique<ferry::stream<B>>());
  }
  ferry::stream_ref<B> operator[](std::size_t i) const { return *streams_[i]; }
  std::size_t size() const noexcept { return streams_.size(); }
  bool held(std::size_t i) const noexcept { return gates_[i] != nullptr; }
  /// Holds stream i behind a gate. Host backend only: CUDA runs host functions on one thread, so
  /// a gate held on one stream would stall every other stream's host tasks (the checks), and a
  /// wait on those streams would never end; on CUDA the GPU's own asynchrony is the race.
  void hold(std::size_t i) {
    if constexpr (std::is_same_v<B, ferry::backend::host>) {
      if (!gates_[i]) gates_[i] = std::make_unique<ferry_test::gate<B>>(*streams_[i]);
    }
  }
  void open(std::size_t i) { gates_[i].reset(); }
  void open_all() {
    for (auto& g : gates_) g.reset();
  }
  /// Streams wait on each other (cross-stream order), so every gate opens first.
  void sync(std::size_t i) {
    open_all();
    streams_[i]->synchronize();
    ++epoch[i];
  }
  void sync_all() {
    open_all();
    for (std::size_t i = 0; i < size(); ++i) sync(i);
  }
  /// True once work enqueued on stream i at epoch e is known complete.
  bool done(std::size_t i, std::uint64_t e) const noexcept { return epoch[i] > e; }
  /// Stream `to` waits for everything enqueued on `from` so far.
  void after(std::size_t to, std::size_t from) {
    if (to == from) return;
    ferry::event<B> e;
    e.record(*streams_[from]);
    streams_[to]->wait(e);
  }
  /// Runs `destroy` while another thread opens every gate: an object that must wait for work
  /// behind a gate does, one that does not is caught using memory it already freed.
  template <class F>
  void racing_open(F&& destroy) {
    std::vector<std::unique_ptr<ferry_test::gate<B>>> held = std::move(gates_);
    gates_.clear();
    gates_.resize(held.size());
    std::thread opener([&held] {
      for (auto& g : held)
        if (g) g->open();
    });
    destroy();
    opener.join();
  }

 private:
  std::vector<std::unique_ptr<ferry::stream<B>>> streams_;
  std::vector<std::unique_ptr<ferry_test::gate<B>>> gates_;

 public:
  std::vector<std::uint64_t> epoch;
};

/// Stream order of one memory region that several streams read and write: a write waits for the
/// last write and every read since; a read waits for the last write.
template <class B>
struct region_order {
  std::optional<std::size_t> writer;
  std::vector<std::size_t> readers;
  void write(lanes<B>& l, std::size_t lane) {
    if (writer) l.after(lane, *writer);
    for (std::size_t r : readers) l.after(lane, r);
    readers.clear();
    writer = lane;
  }
  void read(lanes<B>& l, std::size_t lane) {
    if (writer) l.after(lane, *writer);
    if (std::find(readers.begin(), readers.end(), lane) == readers.end()) readers.push_back(lane);
  }
};

/// The value of element i of generation `gen`: never zero, different per (seed, gen, i).
template <class E>
E stamp(std::uint64_t seed, std::uint64_t gen, std::size_t i) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + gen * 0xBF58476D1CE4E5B9ull + i;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  x |= 1;
  E e;
  std::memcpy(static_cast<void*>(&e), &x, sizeof(E));
  return e;
}

/// One episode's state: its seed, generator, streams and mismatch log.
template <class B>
class bench {
 public:
  bench(const char* component, std::uint64_t seed, std::size_t lane_count)
      : component(component), seed(seed), rng(seed), log(std::make_shared<mismatch_log>()),
        scratch(std::make_shared<scratch_pool<B>>()), lane(lane_count) {
    now().component.store(component);
    now().seed.store(seed);
  }
  bench(const bench&) = delete;
  ~bench() { lane.open_all(); }

  const char* component;
  std::uint64_t seed;
  std::uint64_t op = 0;
  std::mt19937_64 rng;
  std::shared_ptr<mismatch_log> log;
  /// Pinned buffers that stream work reads (checks, pinned sources): they outlive the streams.
  std::shared_ptr<scratch_pool<B>> scratch;
  lanes<B> lane;
  std::uint64_t gen = 0;
  /// Operations whose sizes overflow size_t arithmetic (FERRY_DIFF_OVERFLOW=0 leaves them out:
  /// where they are not rejected, they end the process).
  bool overflow_ops = env_or("FERRY_DIFF_OVERFLOW", 1) != 0;

  void at(std::uint64_t i) {
    op = i;
    now().op.store(i, std::memory_order_relaxed);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); }
  bool chance(unsigned percent) { return rng() % 100 < percent; }
  std::size_t any_lane() { return below(lane.size()); }

  /// A size in [0, max]: zero, one, powers of two and their neighbours, max, or uniform.
  std::size_t size_upto(std::size_t max) {
    const unsigned r = static_cast<unsigned>(rng() % 100);
    if (max == 0 || r < 6) return 0;
    if (r < 12) return std::min<std::size_t>(1, max);
    if (r < 20) return max;
    if (r < 45) {
      const std::size_t p = std::size_t{1} << below(std::bit_width(max));
      const std::size_t v = p - 1 + below(3);
      return std::min(std::max<std::size_t>(v, 1), max);
    }
    return 1 + below(max);
  }

  /// n elements of a fresh generation.
  template <class E>
  std::vector<E> fresh(std::size_t n) {
    ++gen;
    std::vector<E> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = stamp<E>(seed, gen, i);
    return v;
  }

  /// A mismatch seen on the test thread.
  void mismatch(const std::string& what) { log->add(where() + what); }
  std::string where() const {
    return std::string(component) + " [" + backend_name<B>() + "] seed " + std::to_string(seed) +
           " op " + std::to_string(op) + ": ";
  }

  /// Checks, when stream `lane_i` reaches this point, that `v` holds `want`.
  template <class E>
  void expect(std::size_t lane_i, ferry::device_span<const E> v, std::vector<E> want,
              const char* what) {
    auto report = [log = log, w = where() + what](const E* got, std::size_t n,
                                                  const std::vector<E>& want) {
      if (n != want.size()) {
        log->add(w + ": size " + std::to_string(n) + ", expected " + std::to_string(want.size()));
        return;
      }
      if (n == 0 || std::memcmp(got, want.data(), n * sizeof(E)) == 0) return;
      std::size_t i = 0;
      while (std::memcmp(got + i, want.data() + i, sizeof(E)) == 0) ++i;
      log->add(w + ": element " + std::to_string(i) + " of " + std::to_string(n) + " differs");
    };
    const ferry::stream_ref<B> s = lane[lane_i];
    if constexpr (std::is_same_v<B, ferry::backend::host>) {
      ferry::enqueue_host(s, [v, want = std::move(want), report] {
        report(v.data(), v.size(), want);
      });
    } else {
      auto* buf = scratch->take(v.size() * sizeof(E));
      E* dst = reinterpret_cast<E*>(buf->host().data());
      ferry::async_d2h(v, ferry::assume_pinned(std::span<E>(dst, v.size())), s);
      ferry::enqueue_host(s, [buf, pool = scratch.get(), dst, n = v.size(),
                              want = std::move(want), report] {
        report(dst, n, want);
        pool->give(buf);
      });
    }
  }

  /// Fails the test (every gate opened first) if a check found a mismatch.
  void verify() {
    auto e = log->take();
    if (e.empty()) return;
    lane.open_all();
    std::ostringstream msg;
    msg << e.size() << " mismatch(es); replay: FERRY_DIFF_SEED=" << seed
        << " FERRY_DIFF_OPS=" << op + 1 << "\n";
    for (std::size_t i = 0; i < e.size() && i < 8; ++i) msg << "  " << e[i] << "\n";
    FAIL(msg.str());
  }
  void sync(std::size_t i) {
    lane.sync(i);
    verify();
  }
  void sync_all() {
    lane.sync_all();
    verify();
  }

  /// Runs `step(i)` for i in [0, ops), then synchronizes every stream and verifies. Whatever
  /// throws opens every gate first, so that the episode's objects can be destroyed.
  template <class F>
  void run(std::uint64_t ops, F&& step) {
    try {
      for (std::uint64_t i = 0; i < ops; ++i) {
        at(i);
        step();
      }
      sync_all();
    } catch (...) {
      lane.open_all();
      throw;
    }
  }

  /// Holds, opens or synchronizes a random stream.
  void lane_op() {
    const std::size_t i = any_lane();
    const unsigned r = static_cast<unsigned>(rng() % 100);
    if (r < 50)
      lane.hold(i);
    else if (r < 80)
      lane.open(i);
    else
      sync(i);
  }

  /// Runs `f`, which must throw E (with a message starting "ferry: " unless it is bad_alloc).
  template <class Ex, class F>
  void expect_throw(F&& f, const char* what) {
    try {
      f();
    } catch (const Ex& e) {
      if constexpr (!std::is_same_v<Ex, std::bad_alloc>) {
        if (dynamic_cast<const std::bad_alloc*>(&e) == nullptr &&
            std::string_view(e.what()).substr(0, 7) != "ferry: ")
          mismatch(std::string(what) + ": message does not start with \"ferry: \": " + e.what());
      }
      return;
    }
    mismatch(std::string(what) + ": no exception");
  }
};

/// The caller's duty under reuse::caller_fenced towards a component that rotates through `slots`
/// slots: the slot of apply k is rewritten first by the batch of apply k + slots, so before a
/// batch is staged every apply but the newest slots - 1 has run. Which applies have run does not
/// follow apply order (they run on several streams): the oldest must have run even when a newer
/// one is known done, so the count of applies not known done is no measure.
template <class B>
class rotation {
 public:
  /// An apply that took a slot was enqueued on stream `lane`.
  void applied(const lanes<B>& l, std::size_t lane) { applies_.emplace_back(lane, l.epoch[lane]); }
  /// Makes sure every apply but the newest `keep` has run (synchronizing its stream if needed).
  void keep(bench<B>& b, std::size_t keep) {
    while (applies_.size() > keep) {
      const auto [lane, epoch] = applies_.front();
      applies_.pop_front();
      if (!b.lane.done(lane, epoch)) b.sync(lane);
    }
  }

 private:
  std::deque<std::pair<std::size_t, std::uint64_t>> applies_;
};

/// Runs `episode(bench, ops)` over episodes (each with min_lanes to min_lanes + 4 streams) until
/// FERRY_DIFF_OPS operations (default: a short run) have run; an unexpected exception fails the
/// test naming seed and operation.
template <class B, class Episode>
void run_component(const char* component, Episode episode, std::size_t min_lanes = 2) {
  const bool gpu = !std::is_same_v<B, ferry::backend::host>;
  const std::uint64_t total = env_or("FERRY_DIFF_OPS", gpu ? 200 : 3000);  // CUDA ops allocate and wait far more
  const std::uint64_t base = env_or("FERRY_DIFF_SEED", default_seed);
  std::uint64_t done = 0;
  for (std::uint64_t e = 0; done < total; ++e) {
    const std::uint64_t n = std::min(episode_ops, total - done);
    bench<B> b(component, base + e, min_lanes + static_cast<std::size_t>((base + e) % 5));
    try {
      episode(b, n);
    } catch (const std::exception& ex) {
      b.lane.open_all();
      FAIL(b.where() << "unexpected exception: " << ex.what() << "\nreplay: FERRY_DIFF_SEED="
                     << b.seed << " FERRY_DIFF_OPS=" << b.op + 1);
    }
    done += n;
  }
  counts().add(std::string(component) + " [" + backend_name<B>() + "]", done);
}

/// Picks one of the types Combos... by index at runtime and calls f.template operator()<C>().
template <class... Combos, class F>
void dispatch(std::size_t index, F&& f) {
  std::size_t i = 0;
  ((i++ == index % sizeof...(Combos) ? (f.template operator()<Combos>(), 0) : 0), ...);
}

}  // namespace diff
