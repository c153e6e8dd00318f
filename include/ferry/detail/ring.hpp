// ferry/detail/ring.hpp: a FIFO that reuses its storage (no allocation once it has grown
// to the largest depth seen).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class T>
class ring {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  T& front() noexcept { return slots_[head_]; }
  const T& front() const noexcept { return slots_[head_]; }
  T& back() noexcept { return (*this)[size_ - 1]; }
  const T& back() const noexcept { return (*this)[size_ - 1]; }
  /// The i-th element from the front.
  T& operator[](std::size_t i) noexcept { return slots_[(head_ + i) % slots_.size()]; }
  const T& operator[](std::size_t i) const noexcept { return slots_[(head_ + i) % slots_.size()]; }

  void push_back(T v) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) % slots_.size()] = std::move(v);
    ++size_;
  }
  T pop_front() noexcept {
    T v = std::move(slots_[head_]);
    head_ = (head_ + 1) % slots_.size();
    --size_;
    return v;
  }
  /// Removes the i-th element (order of the others kept).
  T take(std::size_t i) {
    T v = std::move((*this)[i]);
    for (; i > 0; --i) (*this)[i] = std::move((*this)[i - 1]);
    head_ = (head_ + 1) % slots_.size();
    --size_;
    return v;
  }
  void reserve(std::size_t n) {
    while (slots_.size() < n) grow();
  }

 private:
  void grow() {
    std::vector<T> next(slots_.empty() ? 8 : slots_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) next[i] = std::move((*this)[i]);
    slots_ = std::move(next);
    head_ = 0;
  }
  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace ferry::detail
