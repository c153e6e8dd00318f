// Test support: the backends every typed suite is instantiated for, and the GPU gate.
#pragma once

#include <ferry/ferry.hpp>

#if FERRY_HAS_CUDA
#include <cuda.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define FERRY_TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_TEST_LSAN 1
#endif
#endif
#if defined(FERRY_TEST_LSAN)
#include <sanitizer/lsan_interface.h>
#endif

#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <source_location>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

/// The backends every typed suite is instantiated for:
/// TEMPLATE_TEST_CASE("...", "[tag]", FERRY_TEST_BACKENDS).
#if FERRY_HAS_CUDA
#define FERRY_TEST_BACKENDS ferry::backend::host, ferry::backend::cuda
#else
#define FERRY_TEST_BACKENDS ferry::backend::host
#endif

namespace ferry_test {

/// CUDA loads a kernel's module at its first launch (CUDA_MODULE_LOADING=LAZY, the default), and
/// loading may wait for the whole context: a test whose first launch of a kernel is enqueued
/// behind a closed gate waits for the gate (CUDA's documented lazy-loading hazard; seen on the
/// H200 when the held-reader test ran alone, without the earlier cases that had launched its
/// kernel). Every test process loads its modules at start-up instead, before CUDA initializes.
inline const bool eager_module_loading = [] {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  return true;
}();

inline bool gpu_required() {
  const char* v = std::getenv("FERRY_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

inline bool gpu_present() {
#if FERRY_HAS_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

}  // namespace ferry_test

/// First line of every backend-typed test: on the CUDA backend without a GPU the test is skipped,
/// or fails when FERRY_REQUIRE_GPU=1 (so a detection glitch on the GPU machine cannot pass).
#define FERRY_REQUIRE_BACKEND(B)                                                            \
  do {                                                                                      \
    if constexpr (!std::is_same_v<B, ferry::backend::host>) {                               \
      if (!ferry_test::gpu_present()) {                                                     \
        if (ferry_test::gpu_required()) FAIL("FERRY_REQUIRE_GPU=1 but no CUDA device found"); \
        SKIP("no CUDA device on this machine");                                             \
      }                                                                                     \
    }                                                                                       \
  } while (0)

namespace ferry_test {

/// Random values of T (never all zeros) from a seeded generator.
template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>)
      x = static_cast<T>(std::uniform_real_distribution<double>(-1000.0, 1000.0)(rng));
    else
      x = static_cast<T>(rng());
  }
  return v;
}

/// The number of operations ferry has put on streams of backend B so far (backend_stats::enqueues:
/// copies, fills, kernel and graph launches, host functions, event records and waits), counted at
/// the backend on both backends. It counts over every stream of B, `s` included: a test that
/// compares two readings around calls on `s` made from its own thread proves that those calls
/// enqueued nothing (or exactly so much) anywhere.
template <class B>
std::uint64_t enqueued(ferry::stream_ref<B> /*s*/) {
  return ferry::backend_stats_of<B>().enqueues;
}

/// Waits until `s` has run everything enqueued so far without telling ferry (CUDA: a bare
/// cudaStreamSynchronize), as an engine's own synchronization would; the host backend's reuse core
/// reads its queues' counters, so there it is the stream's synchronize().
template <class B>
void bare_synchronize(ferry::stream_ref<B> s) {
#if FERRY_HAS_CUDA
  if constexpr (std::is_same_v<B, ferry::backend::cuda>) {
    if (cudaStreamSynchronize(s.get()) != cudaSuccess) throw std::runtime_error("cudaStreamSynchronize failed");
    return;
  }
#endif
  s.synchronize();
}

/// Seconds after which a gate opens itself (FERRY_GATE_WATCHDOG_S; 0, the default: never). Only
/// the compute-sanitizer pass sets it: memcheck may hold a call until work that a gate holds has run,
/// and the test thread would then wait forever for itself.
inline unsigned gate_watchdog_seconds() {
  const char* v = std::getenv("FERRY_GATE_WATCHDOG_S");
  return v ? static_cast<unsigned>(std::strtoul(v, nullptr, 10)) : 0U;
}

#if FERRY_HAS_CUDA
namespace detail {
/// The flags CUDA gates wait on: one pinned, mapped page that lives as long as the process (a gate's
/// wait may still be queued when its gate is destroyed). Gate k waits until flags[k % size] reaches
/// its ticket; tickets only grow, so a later gate on the same flag is never opened by an earlier one.
struct gate_flags {
  static constexpr std::uint32_t size = 4096;
  std::uint32_t* host = nullptr;
  CUdeviceptr device = 0;
  CUresult (*wait_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned) = nullptr;
  std::atomic<std::uint32_t> next{0};

  static gate_flags& get() {
    static gate_flags f;
    return f;
  }

 private:
  gate_flags() {
    void* p = nullptr;
    if (cudaHostAlloc(&p, size * sizeof(std::uint32_t), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
      throw std::runtime_error("ferry_test::gate: cudaHostAlloc failed");
    host = static_cast<std::uint32_t*>(p);
    std::memset(p, 0, size * sizeof(std::uint32_t));
    void* d = nullptr;
    if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess)
      throw std::runtime_error("ferry_test::gate: cudaHostGetDevicePointer failed");
    device = reinterpret_cast<CUdeviceptr>(d);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      throw std::runtime_error("ferry_test::gate: no cuStreamWaitValue32 in this driver");
    wait_value = reinterpret_cast<decltype(wait_value)>(fn);
  }
};
}  // namespace detail
#endif

/// A gate the test holds closed: work enqueued behind it cannot run until open() (not a sleep).
/// With FERRY_GATE_WATCHDOG_S set it opens itself after that long, saying so on stderr with the
/// place it was made (the test's later checks then judge a gate opened early).
///
/// On the host backend the gate is a host function that blocks its stream's worker. On CUDA it is
/// a stream wait on a pinned flag (cuStreamWaitValue32), with a host function before it that marks
/// the stream's arrival: CUDA runs host functions of different streams on one thread and "may
/// serialize" them (cudaLaunchHostFunc), so a blocking host function would also hold every other
/// stream's host functions, and a test holding two gates could wait on itself.
template <class B>
class gate {
 public:
  explicit gate(ferry::stream_ref<B> s, std::source_location where = std::source_location::current())
      : state_(std::make_shared<state>()) {
    state_->where = where;
#if FERRY_HAS_CUDA
    if constexpr (std::is_same_v<B, ferry::backend::cuda>) {
      auto& flags = detail::gate_flags::get();
      const std::uint32_t ticket = flags.next.fetch_add(1) + 1;
      state_->flag = &flags.host[ticket % detail::gate_flags::size];
      state_->ticket = ticket;
      ferry::enqueue_host(s, [st = state_] {
        std::lock_guard lock(st->m);
        st->entered = true;
        st->cv.notify_all();
      });
      if (flags.wait_value(reinterpret_cast<CUstream>(s.get()),
                           flags.device + (ticket % detail::gate_flags::size) * sizeof(std::uint32_t), ticket,
                           CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
        throw std::runtime_error("ferry_test::gate: cuStreamWaitValue32 failed");
      if (const unsigned limit = gate_watchdog_seconds(); limit != 0)
        state_->watchdog = std::thread([st = state_, limit] { watch(*st, limit); });
      return;
    }
#endif
    ferry::enqueue_host(s, [st = state_, limit = gate_watchdog_seconds()] {
      std::unique_lock lock(st->m);
      st->entered = true;
      st->cv.notify_all();
      const auto is_open = [&] { return st->open; };
      if (limit == 0) {
        st->cv.wait(lock, is_open);
      } else if (!st->cv.wait_for(lock, std::chrono::seconds(limit), is_open)) {
        report_watchdog(*st, limit);
        st->open = true;
      }
    });
  }
  gate(const gate&) = delete;
  ~gate() {
    open();
    if (state_->watchdog.joinable()) state_->watchdog.join();
  }
  void open() {
    std::lock_guard lock(state_->m);
    release(*state_);
    state_->cv.notify_all();
  }
  /// Blocks until the stream has reached the gate.
  void wait_entered() {
    std::unique_lock lock(state_->m);
    state_->cv.wait(lock, [&] { return state_->entered; });
  }

 private:
  struct state {
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    bool entered = false;
    std::source_location where;
    std::uint32_t* flag = nullptr;  // CUDA: the pinned flag the stream waits on, and its ticket
    std::uint32_t ticket = 0;
    std::thread watchdog;
  };
  // Called with st.m held.
  static void release(state& st) {
    st.open = true;
    if (st.flag != nullptr) std::atomic_ref<std::uint32_t>(*st.flag).store(st.ticket, std::memory_order_release);
  }
  static void report_watchdog(const state& st, unsigned limit) {
    std::fprintf(stderr, "ferry_test::gate (%s:%u): opened by the watchdog after %u s\n", st.where.file_name(),
                 static_cast<unsigned>(st.where.line()), limit);
  }
  static void watch(state& st, unsigned limit) {
    std::unique_lock lock(st.m);
    if (!st.cv.wait_for(lock, std::chrono::seconds(limit), [&] { return st.open; })) {
      report_watchdog(st, limit);
      release(st);
    }
  }
  std::shared_ptr<state> state_;
};

/// While alive, LeakSanitizer does not report the memory this thread allocates: for the tests of a
/// destructor past its wait bound, which leaks on purpose what held work may still read.
class leaks_expected {
 public:
  leaks_expected() {
#if defined(FERRY_TEST_LSAN)
    __lsan_disable();
#endif
  }
  ~leaks_expected() {
#if defined(FERRY_TEST_LSAN)
    __lsan_enable();
#endif
  }
  leaks_expected(const leaks_expected&) = delete;
  leaks_expected& operator=(const leaks_expected&) = delete;
};

/// While alive, the process-wide wait bound (ferry::set_wait_timeout) is `bound`; the one before
/// it is restored at the end.
class wait_bound {
 public:
  explicit wait_bound(std::chrono::nanoseconds bound) : before_(ferry::wait_timeout()) {
    ferry::set_wait_timeout(bound);
  }
  ~wait_bound() { ferry::set_wait_timeout(before_); }
  wait_bound(const wait_bound&) = delete;
  wait_bound& operator=(const wait_bound&) = delete;

 private:
  std::chrono::nanoseconds before_;
};

/// While alive, ferry's mapping probe finds every device's mapping of pinned memory dead (its test
/// hook: the probe still runs), as on a machine under Confidential Computing or WSL2; the verdicts
/// are forgotten on the way in and out, so that the next component probes again.
template <class B>
class dead_mapping {
 public:
  dead_mapping() { set(true); }
  ~dead_mapping() { set(false); }
  dead_mapping(const dead_mapping&) = delete;
  dead_mapping& operator=(const dead_mapping&) = delete;

 private:
  static void set(bool dead) {
    ferry::detail::mapping_probe_fails().store(dead);
    ferry::detail::mapping_verdicts<B>::instance().forget();
  }
};

/// Runs `call`, which must wait for work held behind `g` (a full ring's back-pressure), while a
/// helper thread opens the gate after `after`: true when `call` returned only once the gate was
/// open, that is, when it waited for the held work.
template <class B, class F>
bool returns_after_open(gate<B>& g, F&& call, std::chrono::milliseconds after = std::chrono::milliseconds(50)) {
  std::atomic<bool> opened{false};
  std::thread helper([&] {
    std::this_thread::sleep_for(after);
    opened.store(true);
    g.open();
  });
  struct joiner {
    std::thread& t;
    ~joiner() { t.join(); }
  } join{helper};
  call();
  return opened.load();
}

}  // namespace ferry_test
