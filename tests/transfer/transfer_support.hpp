// Helpers shared by the transfer tests: reading device memory back, filling it, and proving that
// a call enqueued nothing.
#pragma once

#include <support/backends.hpp>

#include <ferry/ferry.hpp>

#include <cstdint>
#include <ranges>
#include <vector>

namespace ferry_test {

/// The contents of `d` (device memory), read back through a pinned buffer and a synchronize.
template <class T, class B>
std::vector<T> read_back(ferry::device_span<const T> d, ferry::stream_ref<B> s) {
  ferry::pinned_buffer<T, B> host(d.size());
  ferry::async_d2h(d, host.host(), s);
  s.synchronize();
  return std::vector<T>(host.host().begin(), host.host().end());
}
template <class T, class B>
std::vector<T> read_back(ferry::device_span<T> d, ferry::stream_ref<B> s) {
  return read_back(ferry::device_span<const T>(d), s);
}

/// Writes `v` into `d` (sizes equal) and waits.
template <class T, class B>
void fill_device(ferry::device_span<T> d, const std::vector<T>& v, ferry::stream_ref<B> s) {
  ferry::pinned_buffer<T, B> host(v.size());
  std::copy(v.begin(), v.end(), host.host().begin());
  ferry::async_h2d(ferry::pinned_span<const T>(host.host()), d, s);
  s.synchronize();
}

/// Arena statistics compared field by field.
inline bool same_stats(const ferry::arena_stats& a, const ferry::arena_stats& b) {
  return a.allocations == b.allocations && a.reuses == b.reuses &&
         a.bytes_reserved == b.bytes_reserved && a.bytes_in_use == b.bytes_in_use;
}

/// Calls f.template operator()<T>() for every element type ferry moves (bar the half types).
template <class F>
void for_each_element_type(F&& f) {
  f.template operator()<std::int8_t>();
  f.template operator()<std::uint8_t>();
  f.template operator()<std::int16_t>();
  f.template operator()<std::uint16_t>();
  f.template operator()<std::int32_t>();
  f.template operator()<std::uint32_t>();
  f.template operator()<std::int64_t>();
  f.template operator()<std::uint64_t>();
  f.template operator()<float>();
  f.template operator()<double>();
}

/// An input-only (single-pass, unsized) view over a vector, for the gathering paths.
template <class T>
class single_pass {
 public:
  explicit single_pass(const std::vector<T>& v) : v_(&v) {}
  struct iterator {
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;
    const std::vector<T>* v;
    std::size_t i;
    const T& operator*() const { return (*v)[i]; }
    iterator& operator++() {
      ++i;
      return *this;
    }
    void operator++(int) { ++i; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) { return it.i == it.v->size(); }
  };
  iterator begin() {
    if (begun_) throw std::logic_error("single_pass: begun twice");
    begun_ = true;
    return {v_, 0};
  }
  std::default_sentinel_t end() const { return {}; }

 private:
  const std::vector<T>* v_;
  bool begun_ = false;
};

/// A sized, non-contiguous view of `n` uint64 values that owns no memory (each element is
/// computed when read), for sizes whose bytes overflow size_t.
inline auto huge_source(std::size_t n) {
  return std::views::iota(std::size_t{0}, n) |
         std::views::transform([](std::size_t i) { return std::uint64_t{i * 0x9E3779B97F4A7C15ull}; });
}

/// 2^61 + 1 uint64: 2^64 + 8 bytes, which wrap to 8.
inline constexpr std::size_t wrapping_count = (std::size_t{1} << 61) + 1;

}  // namespace ferry_test
