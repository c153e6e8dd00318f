// Sequences of staged_write_tensor calls decoded from the fuzz input, checked against a host model
// of the target (the writes of one apply land in staging order: the later write wins). Shared by
// the staged-writes target (growth::pow2, growth::fixed) and the growth target (input_growth).
#pragma once

#include "fuzz_input.hpp"

#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <ranges>
#include <string>
#include <vector>

namespace ferry_fuzz {

using host = ferry::backend::host;

/// Distinct nonzero values, so that a write landing in the wrong place or order shows.
template <class T>
T next_value(std::uint64_t& counter) {
  std::uint64_t v = ++counter * 0x9E3779B97F4A7C15ull;
  v ^= v >> 29;
  const T t = static_cast<T>(v);
  return t == T{} ? T{1} : t;
}

/// One row-segment write decoded from the input: usually in bounds, sometimes not (an edge value
/// in any of row, start and length, the length up to 2^64 - 1).
struct write_args {
  std::size_t row, start, len;
  bool contiguous;
  [[nodiscard]] bool in_bounds(std::size_t rows, std::size_t cols) const {
    return row < rows && start <= cols && len <= cols - start;
  }
  [[nodiscard]] std::string str() const {
    return "row " + std::to_string(row) + " start " + std::to_string(start) + " len " + std::to_string(len);
  }
};
inline write_args decode_write(input& in, std::size_t rows, std::size_t cols) {
  write_args w{};
  w.row = in.below(8) == 0 ? in.size(rows + 2) : in.below(rows);
  w.start = in.below(8) == 0 ? in.size(cols + 2) : in.below(cols + 1);
  w.len = in.below(8) == 0 ? in.size(cols + 2) : in.below(cols - std::min(w.start, cols) + 1);
  w.contiguous = in.flag();
  return w;
}

/// A sized forward range of n elements, element i being `at(i)` (not contiguous: a component
/// gathers it element by element). Written by hand: clang 14 cannot compile libstdc++ 12's views.
template <class T, class At>
class index_range {
 public:
  class iterator {
   public:
    using iterator_concept = std::forward_iterator_tag;
    using iterator_category = std::input_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const At* at, std::size_t i) : at_(at), i_(i) {}
    T operator*() const { return (*at_)(i_); }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    iterator operator++(int) {
      iterator old = *this;
      ++i_;
      return old;
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.i_ == b.i_; }

   private:
    const At* at_ = nullptr;
    std::size_t i_ = 0;
  };
  index_range(std::size_t n, At at) : n_(n), at_(std::move(at)) {}
  [[nodiscard]] iterator begin() const { return {&at_, 0}; }
  [[nodiscard]] iterator end() const { return {&at_, n_}; }
  [[nodiscard]] std::size_t size() const { return n_; }

 private:
  std::size_t n_;
  At at_;
};

/// Calls `f(range)` with a range of `values` (contiguous, or a non-contiguous sized range that the
/// component gathers), or, for a length no vector could hold, a sized range of `len` elements
/// that must never be read (its bounds are checked first).
template <class T, class F>
void with_range(const write_args& w, const std::vector<T>& values, F&& f) {
  if (w.len != values.size()) {
    const index_range<T, T (*)(std::size_t)> huge(w.len, +[](std::size_t) -> T {
      finding("an out-of-bounds write's source was read");
    });
    static_assert(std::ranges::forward_range<decltype(huge)> && std::ranges::sized_range<decltype(huge)>);
    f(huge);
  } else if (w.contiguous) {
    f(values);
  } else {
    auto at = [&values](std::size_t i) { return values[i]; };
    f(index_range<T, decltype(at)>(values.size(), at));
  }
}

/// `n` distinct values.
template <class T>
std::vector<T> values_of(std::size_t n, std::uint64_t& counter) {
  std::vector<T> v(n);
  for (auto& x : v) x = next_value<T>(counter);
  return v;
}

/// Values for a write: `len` of them when that is small, else none (the write is out of bounds).
template <class T>
std::vector<T> values_for(const write_args& w, std::uint64_t& counter) {
  return w.len <= 4096 ? values_of<T>(w.len, counter) : std::vector<T>{};
}

/// A staged write the model holds until the apply.
template <class T>
struct model_write {
  using value_type = T;
  std::size_t row, start;
  std::vector<T> values;
};

/// Applies writes in staging order to a row-major model target.
template <class T>
void apply_model(std::vector<T>& target, std::size_t cols, const std::vector<model_write<T>>& writes) {
  for (const auto& w : writes)
    for (std::size_t i = 0; i < w.values.size(); ++i) target[w.row * cols + w.start + i] = w.values[i];
}

template <class T>
void expect_equal(const T* got, const std::vector<T>& want, const std::string& what) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i]))
      finding(what + ": element " + std::to_string(i) + " differs from the model (got " +
              std::to_string(static_cast<std::uint64_t>(got[i])) + ", want " +
              std::to_string(static_cast<std::uint64_t>(want[i])) + ")");
}

/// Whether `o` is the arena's byte cap refusing a block (pinned_arena: "cap of ... reached"): a
/// write that needs a new staging slot while the last one is still read by an apply in flight (on
/// the stream's worker thread: whether it is still read depends on timing) asks the arena for one,
/// under every growth policy, and a slot sized by a large reserve() can pass the arena's cap.
inline bool arena_cap_reached(outcome o) {
  return o == outcome::capacity && last_message().starts_with("ferry: pinned_arena cap of ");
}

/// A sequence of staged_write_tensor<T, Growth> calls from `in`, with staging from `arena`.
/// growth::fixed: a write within the last reserve() must be recorded; beyond it
/// ferry::capacity_error is allowed. input_growth: any call that may grow may instead throw
/// ferry::capacity_error, losing nothing. Any write may meet the arena's cap (arena_cap_reached),
/// losing nothing.
template <class T, class Growth>
void run_staged(input& in, ferry::pinned_arena<host>& arena) {
  using tensor_type = ferry::staged_write_tensor<T, Growth, host>;
  constexpr bool fixed = std::is_same_v<Growth, ferry::growth::fixed>;
  constexpr bool fuzzed_growth = std::is_same_v<Growth, input_growth>;
  std::uint64_t counter = in.raw(2);

  std::size_t rows = in.size(17), cols = in.size(65);
  const bool adopt = in.flag();
  const std::size_t slots = 1 + in.below(3);
  const u128 bytes = static_cast<u128>(rows) * cols * sizeof(T);
  ferry::stream<host> s;
  const ferry::staging_memory<host> memory{&arena};
  if (bytes >> 64 != 0) {
    // rows x cols x sizeof(T) overflows: std::invalid_argument, nothing allocated.
    const std::string what = "staged_write_tensor(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
    T one{};
    const outcome o = attempt(what, [&] {
      if (adopt)
        tensor_type t(ferry::device_span<T>(&one, 1), rows, cols, slots, memory);
      else
        tensor_type t(rows, cols, s, slots, memory);
    });
    expect(o == outcome::invalid_argument, what + ": an overflowing size threw " + name(o));
    return;
  }
  if (rows * cols > 4096) rows %= 17, cols %= 65;

  std::vector<T> model(rows * cols), adopted;
  if (adopt) {
    adopted.resize(rows * cols);
    for (auto& x : adopted) x = next_value<T>(counter);
    model = adopted;  // adopted contents are kept
  }
  std::optional<tensor_type> t;
  const std::string made = "staged_write_tensor " + std::to_string(rows) + " x " + std::to_string(cols) +
                           (adopt ? " adopted" : "") + ", " + std::to_string(slots) + " slots";
  const outcome made_o = attempt(made, [&] {
    if (adopt)
      t.emplace(ferry::device_span<T>(adopted.data(), adopted.size()), rows, cols, slots, memory);
    else
      t.emplace(rows, cols, s, slots, memory);
  });
  if (fuzzed_growth && refused(made_o, true)) return;
  expect(made_o == outcome::ok, made + ": construction threw " + name(made_o));
  expect(t->rows() == rows && t->cols() == cols && t->size() == rows * cols, made + ": wrong shape");

  std::vector<model_write<T>> pending;
  std::size_t pending_elements = 0;
  std::optional<std::pair<std::size_t, std::size_t>> reserved;  // the last successful reserve
  auto check_pending = [&](const std::string& what) {
    expect(t->pending() == pending.size() && t->pending_elements() == pending_elements,
           what + ": pending() " + std::to_string(t->pending()) + " / pending_elements() " +
               std::to_string(t->pending_elements()) + ", the model has " + std::to_string(pending.size()) +
               " / " + std::to_string(pending_elements));
  };
  auto compare = [&](const std::string& what) {
    s.synchronize();
    expect(t->span().size() == model.size(), what + ": span() has the wrong size");
    expect_equal(t->span().data(), model, what + ": the target");
  };

  for (int op = 0; op < 64 && !in.empty(); ++op) {
    const std::string at = made + ", op " + std::to_string(op);
    switch (in.below(10)) {
      case 0:
      case 1:
      case 2:
      case 3: {
        const write_args w = decode_write(in, rows, cols);
        const std::vector<T> values = values_for<T>(w, counter);
        const std::string what = at + ": stage_write " + w.str();
        const outcome o = attempt(what, [&] { with_range(w, values, [&](auto&& r) { t->stage_write(w.row, w.start, r); }); });
        if (!w.in_bounds(rows, cols)) {
          expect(o == outcome::out_of_range, what + ": out of bounds, threw " + name(o));
        } else if (o == outcome::ok) {
          if (w.len != 0) {
            pending.push_back({w.row, w.start, values});
            pending_elements += w.len;
          }
        } else {
          const bool within = reserved && pending.size() + 1 <= reserved->first &&
                              pending_elements + w.len <= reserved->second;
          expect(arena_cap_reached(o) || (refused(o, fuzzed_growth) && (fuzzed_growth || (fixed && !within))),
                 what + ": in bounds, threw " + name(o));
        }
        check_pending(what);
        break;
      }
      case 4: {
        const std::size_t row = in.below(8) == 0 ? in.size(rows + 2) : in.below(rows);
        const T v = next_value<T>(counter);
        const std::string what = at + ": stage_write_elem row " + std::to_string(row);
        const outcome o = attempt(what, [&] { t->stage_write_elem(row, v); });
        if (row >= rows || cols == 0) {
          expect(o == outcome::out_of_range, what + ": out of bounds, threw " + name(o));
        } else if (o == outcome::ok) {
          pending.push_back({row, 0, {v}});
          pending_elements += 1;
        } else {
          const bool within =
              reserved && pending.size() + 1 <= reserved->first && pending_elements + 1 <= reserved->second;
          expect(arena_cap_reached(o) || (refused(o, fuzzed_growth) && (fuzzed_growth || (fixed && !within))),
                 what + ": in bounds, threw " + name(o));
        }
        check_pending(what);
        break;
      }
      case 5:
        t->clear();
        pending.clear();
        pending_elements = 0;
        check_pending(at + ": clear");
        break;
      case 6: {
        // Capacities up to 2^20, or past what any size_t byte count holds (no mid-size request
        // that would only exhaust memory).
        auto amount = [&] {
          const std::uint64_t v = in.size(64);
          return v <= (1u << 20) || v >= (std::uint64_t{1} << 62) ? v : v % (1u << 20);
        };
        const std::size_t w = amount(), e = amount();
        const std::string what = at + ": reserve(" + std::to_string(w) + ", " + std::to_string(e) + ")";
        const outcome o = attempt(what, [&] { t->reserve(w, e); });
        if (o == outcome::ok)
          reserved = {w, e};
        else
          expect(refused(o, fuzzed_growth), what + ": threw " + std::string(name(o)));
        check_pending(what);
        break;
      }
      case 7:
      case 8: {
        const std::string what = at + ": apply_write";
        const bool check = in.flag();
        const outcome o = attempt(what, [&] { t->apply_write(s); });
        if (o == outcome::ok) {
          apply_model(model, cols, pending);
          pending.clear();
          pending_elements = 0;
        } else {
          expect(refused(o, true) && fuzzed_growth, what + ": threw " + std::string(name(o)));
        }
        check_pending(what);
        if (check) compare(what);
        break;
      }
      default: compare(at + ": synchronize"); break;
    }
  }
  const std::string what = made + ", final apply_write";
  const outcome o = attempt(what, [&] { t->apply_write(s); });
  if (o == outcome::ok) {
    apply_model(model, cols, pending);
    pending.clear();
    pending_elements = 0;
  } else {
    expect(refused(o, true) && fuzzed_growth, what + ": threw " + std::string(name(o)));
  }
  check_pending(what);
  compare(what);
}

}  // namespace ferry_fuzz
