// ferry/transfer/detail/copy_tuning.hpp: how default_copy_pool() chooses its threads and chunk size
// from what the host measures (docs/transfers.md, "Large pageable sources: the copy pool"): the
// choice, a pure function of measured copy rates; the measurement; and the environment's
// overrides. The constants they use (copy_team_sizes, copy_knee_fraction, copy_chunk_seconds,
// copy_chunk_min/max, copy_calibration_*) are in detail/tuning.hpp.
#pragma once

#include <ferry/detail/tuning.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace ferry::detail {

// ---- The choice ---------------------------------------------------------------------------------

/// A copy_pool's structure.
struct copy_config {
  std::size_t threads;
  std::size_t chunk_bytes;
  friend bool operator==(const copy_config&, const copy_config&) = default;
};

/// One measured team: `threads` threads together copied host memory at `gbps` (10^9 bytes/s).
struct copy_rate {
  std::size_t threads;
  double gbps;
};

/// The power of two nearest to `x` on a log scale (x >= 1).
inline std::size_t nearest_power_of_two(double x) {
  const auto lo = std::bit_floor(static_cast<std::size_t>(x));
  const double hi = 2.0 * static_cast<double>(lo);
  return x / static_cast<double>(lo) <= hi / x ? lo : 2 * lo;
}

/// The pool's structure from measured copy rates: the fewest threads whose rate is at least
/// copy_knee_fraction of the fastest team's (or `threads`, when not 0: then the rate of the
/// largest measured team no larger, else of the smallest team, sizes the chunk); chunks of what
/// those threads copy in copy_chunk_seconds, to the nearest power of two within
/// [copy_chunk_min, copy_chunk_max]. Teams with a rate that is not a positive finite number, or
/// with 0 threads, are ignored; none left → std::invalid_argument.
inline copy_config choose_copy_config(std::span<const copy_rate> rates, std::size_t threads = 0) {
  auto usable = [](const copy_rate& r) { return r.threads > 0 && std::isfinite(r.gbps) && r.gbps > 0; };
  double best = 0;
  for (const auto& r : rates)
    if (usable(r)) best = std::max(best, r.gbps);
  if (best == 0)
    throw std::invalid_argument("ferry: choosing a copy pool needs at least one measured team with a positive rate (got " +
                                std::to_string(rates.size()) + " teams)");
  const copy_rate* pick = nullptr;
  if (threads == 0) {
    for (const auto& r : rates)
      if (usable(r) && r.gbps >= copy_knee_fraction * best && (!pick || r.threads < pick->threads)) pick = &r;
  } else {
    const copy_rate* smallest = nullptr;
    for (const auto& r : rates) {
      if (!usable(r)) continue;
      if (!smallest || r.threads < smallest->threads) smallest = &r;
      if (r.threads <= threads && (!pick || r.threads > pick->threads)) pick = &r;
    }
    if (!pick) pick = smallest;
  }
  const double bytes = pick->gbps * 1e9 * copy_chunk_seconds;
  const std::size_t chunk = std::clamp(nearest_power_of_two(std::max(bytes, 1.0)), copy_chunk_min, copy_chunk_max);
  return {threads == 0 ? pick->threads : threads, chunk};
}

// ---- The measurement ----------------------------------------------------------------------------

/// Seconds for `threads` threads to copy `src` into `dst` (dst.size() <= src.size()) as the
/// pipeline's slices do: thread t copies bytes [t * c / n, (t + 1) * c / n) of every
/// dst-sized piece of the source (c = dst.size(), n = threads). Timed from the release of threads
/// already started to the last one's end.
inline double time_copy_team(std::span<const std::byte> src, std::span<std::byte> dst, std::size_t threads) {
  const std::size_t c = dst.size();
  std::atomic<bool> go{false};
  std::atomic<std::size_t> ready{0};
  std::vector<std::thread> team;
  team.reserve(threads);
  try {
    for (std::size_t t = 0; t < threads; ++t)
      team.emplace_back([&, t] {
        ready.fetch_add(1, std::memory_order_relaxed);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        const std::size_t lo = t * c / threads, hi = (t + 1) * c / threads;
        for (std::size_t base = 0; base < src.size(); base += c) {
          const std::size_t end = std::min(base + hi, src.size());
          if (base + lo < end) std::memcpy(dst.data() + lo, src.data() + base + lo, end - base - lo);
        }
      });
  } catch (...) {
    go.store(true, std::memory_order_release);
    for (auto& th : team) th.join();
    throw;
  }
  while (ready.load(std::memory_order_relaxed) < threads) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : team) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// This host's copy rate for each team size of copy_team_sizes up to `hardware_threads` - 1 (at
/// least 1, at most the largest team size; available_cpus() for the default pool), and that bound itself: `bytes` of pageable memory through a destination of `chunk`
/// bytes, the best of `reps` runs each. The destination is ordinary host memory: pinning only
/// locks pages, so a host copy into pinned staging runs at the same rate.
inline std::vector<copy_rate> measure_host_copy_rates(std::size_t hardware_threads,
                                                      std::size_t bytes = copy_calibration_bytes,
                                                      std::size_t chunk = copy_calibration_chunk,
                                                      int reps = copy_calibration_reps) {
  const std::size_t most = std::min<std::size_t>(hardware_threads > 1 ? hardware_threads - 1 : 1,
                                                 copy_team_sizes[std::size(copy_team_sizes) - 1]);
  std::vector<std::size_t> teams;
  for (const std::size_t n : copy_team_sizes)
    if (n < most) teams.push_back(n);
  teams.push_back(most);
  std::vector<std::byte> src(bytes), dst(std::min(chunk, bytes));  // zeroed: every page touched
  for (std::size_t i = 0; i < src.size(); i += 4096) src[i] = static_cast<std::byte>(i >> 12);
  std::vector<copy_rate> rates;
  for (const std::size_t n : teams) {
    double best = 0;
    for (int r = 0; r < reps; ++r) {
      const double s = time_copy_team(src, dst, n);
      if (s > 0) best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    }
    rates.push_back({n, best});
  }
  return rates;
}

/// The CPUs this process may run on: its affinity mask where the system has one (a container's
/// cpuset, taskset), else std::thread::hardware_concurrency() (0 when unknown).
inline std::size_t available_cpus() noexcept {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<std::size_t>(n);
  }
#endif
  return std::thread::hardware_concurrency();
}

// ---- The default pool's configuration -----------------------------------------------------------

/// A positive whole number from environment variable `name` (its value `text`), at most `most`;
/// anything else → std::invalid_argument naming both.
inline std::size_t env_count(const char* name, const char* text, std::size_t most) {
  std::size_t v = 0;
  const char* end = text + std::strlen(text);
  const auto [p, ec] = std::from_chars(text, end, v);
  if (ec != std::errc{} || p != end || v == 0 || v > most)
    throw std::invalid_argument(std::string("ferry: ") + name + "=\"" + text + "\" is not a whole number in [1, " +
                                std::to_string(most) + "]");
  return v;
}

/// The default copy pool's structure: FERRY_COPY_THREADS (threads) and FERRY_COPY_CHUNK_MIB (chunk
/// size in MiB), given as `threads_env` and `chunk_env` (null where unset), override the choice;
/// what they leave open is chosen from `measure()` (choose_copy_config; the chunk for the threads
/// given, where FERRY_COPY_THREADS is set), which runs only then.
/// Should the measurement fail (throw, or give no usable rate), `fallback` fills in. A malformed
/// override → std::invalid_argument.
template <class Measure>
copy_config resolve_copy_config(const char* threads_env, const char* chunk_env, Measure&& measure,
                                copy_config fallback) {
  copy_config c = fallback;
  const bool threads_set = threads_env != nullptr, chunk_set = chunk_env != nullptr;
  if (threads_set) c.threads = env_count("FERRY_COPY_THREADS", threads_env, 1024);
  if (chunk_set) c.chunk_bytes = env_count("FERRY_COPY_CHUNK_MIB", chunk_env, 4096) << 20;
  if (threads_set && chunk_set) return c;
  copy_config chosen = fallback;
  try {
    const std::vector<copy_rate> rates = measure();
    chosen = choose_copy_config(rates, threads_set ? c.threads : 0);
  } catch (...) {  // no measurement: the fixed defaults
  }
  if (!threads_set) c.threads = chosen.threads;
  if (!chunk_set) c.chunk_bytes = chosen.chunk_bytes;
  return c;
}

}  // namespace ferry::detail
