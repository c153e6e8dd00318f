// Test support for staged writes: random element values (bit patterns, so that every element
// type, __half included, is covered without conversions), a host model of a target, memory the
// caller owns for a tensor to adopt, and reading a target back.
#pragma once

#include <support/backends.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

/// The backends of staged-write tests: kernel-launching CUDA cases need nvcc, so a .cu built as
/// C++ (no nvcc) tests the host backend only.
#if defined(__CUDACC__)
#define STAGED_BACKENDS ferry::backend::host, ferry::backend::cuda
#else
#define STAGED_BACKENDS ferry::backend::host
#endif

namespace ferry_test {

/// n random elements of T made from random bits (bitwise comparisons only).
template <class T>
std::vector<T> random_bits(std::size_t n, std::mt19937_64& rng) {
  std::vector<T> v(n);
  for (auto& x : v) {
    const std::uint64_t bits = rng() | 1;  // never all zeros
    std::memcpy(static_cast<void*>(&x), &bits, sizeof(T));
  }
  return v;
}

/// The host model of a rows x cols target: a row-major copy, zero at first.
template <class T>
struct model {
  std::size_t rows, cols;
  std::vector<T> data;
  model(std::size_t r, std::size_t c) : rows(r), cols(c), data(r * c) {
    std::memset(static_cast<void*>(data.data()), 0, data.size() * sizeof(T));
  }
  void write(std::size_t row, std::size_t start, const std::vector<T>& v) {
    if (v.empty()) return;
    std::memcpy(static_cast<void*>(data.data() + row * cols + start), v.data(), v.size() * sizeof(T));
  }
};

/// Stages `writes` random writes (ragged, overlapping, 1 to `max_len` elements) into `t` and the
/// host model `ref`.
template <class T, class Tensor>
void stage_random_writes(Tensor& t, model<T>& ref, std::mt19937_64& rng, std::size_t writes,
                         std::size_t max_len) {
  for (std::size_t w = 0; w < writes; ++w) {
    const std::size_t len = 1 + rng() % std::min(max_len, ref.cols);
    const std::size_t row = rng() % ref.rows, start = rng() % (ref.cols - len + 1);
    auto v = random_bits<T>(len, rng);
    t.stage_write(row, start, v);
    ref.write(row, start, v);
  }
}

/// The whole target, read back through a stream-ordered copy into pinned memory.
template <class T, class B, class Tensor>
std::vector<T> read_back(const Tensor& t, ferry::stream_ref<B> s) {
  ferry::pinned_buffer<T, B> out(t.size(), ferry::copies_only);
  ferry::async_d2h(t.span(), out.host(), s);
  s.synchronize();
  return std::vector<T>(out.host().begin(), out.host().end());
}

/// Memory the caller owns, for a tensor of type Tensor to adopt: a device_buffer (target::device)
/// or a pinned_buffer (target::uva), filled with `init` through ferry's public copies.
template <class Tensor>
struct caller_memory {
  using T = typename Tensor::value_type;
  using B = typename Tensor::backend_type;
  static constexpr bool uva = Tensor::target_kind::memory == ferry::memory_kind::uva;
  std::conditional_t<uva, ferry::pinned_buffer<T, B>, ferry::device_buffer<T, B>> buffer;

  caller_memory(const std::vector<T>& init, ferry::stream_ref<B> s) : buffer(init.size()) {
    ferry::async_h2d(init, device(), s);
    s.synchronize();
  }
  /// What the tensor adopts: the device_span, or the pinned_span of the host memory.
  auto adoptable() const {
    if constexpr (uva)
      return buffer.host();
    else
      return buffer.span();
  }
  /// The memory's device-accessible address, as the tensor's span() gives it.
  ferry::device_span<T> device() const {
    if constexpr (uva)
      return buffer.device();
    else
      return buffer.span();
  }
  /// The memory as it is once `s` has passed the work enqueued so far.
  std::vector<T> read(ferry::stream_ref<B> s) const {
    ferry::pinned_buffer<T, B> out(buffer.size(), ferry::copies_only);
    ferry::async_d2h(device(), out.host(), s);
    s.synchronize();
    return std::vector<T>(out.host().begin(), out.host().end());
  }
};

/// Bitwise equality of two element vectors (empty ones included).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// The first differing element index, or -1 (for messages).
template <class T>
long long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long long>(i);
  return a.size() == b.size() ? -1 : static_cast<long long>(std::min(a.size(), b.size()));
}

/// Destroys `owner` while its stream work is held behind `g`, which a helper thread opens once the
/// destructor has shown that it waits: within a short bound it has neither returned nor handed a
/// block back to the default arena. Before opening, the helper rewrites every free arena block of
/// `slot_bytes` (host backend), as the next staging anywhere would; zeros, so that a rewritten
/// chunk table copies nothing. Returns whether the destructor returned before the gate opened.
template <class B, class Owner>
bool destroy_behind_gate(std::unique_ptr<Owner>& owner, gate<B>& g, std::size_t slot_bytes) {
  auto& arena = ferry::default_arena<B>();
  const std::size_t in_use = arena.stats().bytes_in_use;
  std::atomic<bool> returned{false};
  bool returned_before_open = false;
  std::thread helper([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!returned.load() && arena.stats().bytes_in_use >= in_use &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    if constexpr (std::is_same_v<B, ferry::backend::host>) {
      std::vector<ferry::pinned_block> taken;
      for (;;) {
        const auto made = arena.stats().allocations;
        taken.push_back(arena.acquire(slot_bytes));
        if (arena.stats().allocations != made) break;  // no free block of that size left
        std::memset(static_cast<void*>(taken.back().data), 0, taken.back().capacity);
      }
      for (const auto& b : taken) arena.release(b);
    }
    returned_before_open = returned.load();
    g.open();
  });
  owner.reset();
  returned.store(true);
  helper.join();
  return returned_before_open;
}

}  // namespace ferry_test
