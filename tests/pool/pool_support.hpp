// Support for the pool tests: generation-stamped values, reading a view on the host, readers
// held in stream order, and comparing pool stats.
#pragma once

#include <support/backends.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace pool_test {

/// The value of element i of generation `gen`: never zero, different for every (gen, i) pair
/// with i < 8192, exact in float.
template <class T>
T stamp(std::size_t gen, std::size_t i) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>((gen + 1) * 8192 + i + 1);
  else
    return static_cast<T>((gen + 1) * 1000003 + i * 7 + 1);
}

template <class T>
std::vector<T> generation(std::size_t gen, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = stamp<T>(gen, i);
  return v;
}

/// A pool slot is pinned, mapped host memory on both backends: the host may read it in place
/// (once no kernel writes it — pools are only ever written by the host).
template <class T>
std::vector<T> read(ferry::device_span<const T> v) {
  return std::vector<T>(v.data(), v.data() + v.size());
}

/// A reader in stream order: copies the view's elements when the stream reaches it (a host task,
/// on both backends), into `*out`.
template <class T, class B>
void enqueue_reader(ferry::stream_ref<B> s, ferry::device_span<const T> v, std::vector<T>* out) {
  ferry::enqueue_host(s, [v, out] { *out = read(v); });
}

/// Runs `destroy` (the end of a pool) while its reader is held behind `g`: a helper thread gives
/// it 100 ms to return, then opens the gate. True when `destroy` returned before the gate opened,
/// that is, without waiting for the held reader.
template <class B, class F>
bool returns_before_open(ferry_test::gate<B>& g, F&& destroy) {
  std::atomic<bool> returned{false};
  bool early = false;
  std::thread helper([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (!returned.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    early = returned.load();
    g.open();
  });
  destroy();
  returned.store(true);
  helper.join();
  return early;
}

inline bool same(const ferry::pool_stats& a, const ferry::pool_stats& b) {
  return a.slots == b.slots && a.max_slots == b.max_slots && a.calls == b.calls &&
         a.grows == b.grows && a.fence_hits == b.fence_hits && a.inserted == b.inserted &&
         a.fences == b.fences && a.full_waits == b.full_waits;
}

}  // namespace pool_test
