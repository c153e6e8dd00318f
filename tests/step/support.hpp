// Helpers shared by the step tests (step_batch_test.cu, step_engine_test.cu): device data read
// back and randomized in stream order (a call timed against a gate: support/backends.hpp).
#pragma once

#include <staged/support.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ferry_test {

/// The elements of `v`, read back through a stream-ordered copy into pinned memory kept between
/// calls (a pinned allocation per read would dominate 1000 checked steps); synchronizes `s`.
template <class T, class B>
std::vector<T> read(ferry::device_span<const T> v, ferry::stream_ref<B> s) {
  if (v.empty()) return {};
  static ferry::pinned_buffer<std::uint64_t, B>* buf = nullptr;  // left at exit, as ferry's arena
  const std::size_t words = (v.size() * sizeof(T) + 7) / 8;
  if (!buf || buf->size() < words) {
    delete buf;
    buf = new ferry::pinned_buffer<std::uint64_t, B>(std::max<std::size_t>(words, 1 << 16));
  }
  const auto out = ferry::assume_pinned(std::span<T>(reinterpret_cast<T*>(buf->host().data()), v.size()));
  ferry::async_d2h(v, out, s);
  s.synchronize();
  return {out.begin(), out.end()};
}

/// `buf` set to random bits (stream-ordered on `s`); returns them.
template <class T, class B>
std::vector<T> randomize(ferry::device_buffer<T, B>& buf, ferry::stream_ref<B> s, std::mt19937_64& rng) {
  auto v = random_bits<T>(buf.size(), rng);
  ferry::async_h2d(v, buf.span(), s);
  return v;
}

}  // namespace ferry_test
