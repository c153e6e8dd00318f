// ferry/detail/ring.hpp: a FIFO that reuses its storage (no allocation once it has grown
// to the largest depth seen).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ferry::detail {

/// The storage is a power of two (8, then doubled), so that an index wraps with a mask, not a
/// division: the rings of the reuse core are indexed on every acquire.
template <class T>
class ring {
 public:
  ring() = default;
  ring(const ring&) = default;
  ring& operator=(const ring&) = default;
  /// Leaves `o` empty, with no storage (its next push_back allocates).
  ring(ring&& o) noexcept : slots_(std::move(o.slots_)), mask_(o.mask_), head_(o.head_), size_(o.size_) {
    o.forget();
  }
  ring& operator=(ring&& o) noexcept {
    if (this != &o) {
      slots_ = std::move(o.slots_);
      mask_ = o.mask_;
      head_ = o.head_;
      size_ = o.size_;
      o.forget();
    }
    return *this;
  }

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The elements it holds before push_back() allocates.
  [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }
  T& front() noexcept { return slots_[head_]; }
  const T& front() const noexcept { return slots_[head_]; }
  T& back() noexcept { return (*this)[size_ - 1]; }
  const T& back() const noexcept { return (*this)[size_ - 1]; }
  /// The i-th element from the front.
  T& operator[](std::size_t i) noexcept { return slots_[(head_ + i) & mask()]; }
  const T& operator[](std::size_t i) const noexcept { return slots_[(head_ + i) & mask()]; }

  void push_back(T v) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & mask()] = std::move(v);
    ++size_;
  }
  T pop_front() noexcept {
    T v = std::move(slots_[head_]);
    head_ = (head_ + 1) & mask();
    --size_;
    return v;
  }
  /// Removes the i-th element (order of the others kept), moving the shorter side: taking one of
  /// the newest or of the oldest moves a few elements, however long the ring.
  T take(std::size_t i) {
    T v = std::move((*this)[i]);
    if (i < size_ / 2) {
      for (; i > 0; --i) (*this)[i] = std::move((*this)[i - 1]);
      head_ = (head_ + 1) & mask();
    } else {
      for (; i + 1 < size_; ++i) (*this)[i] = std::move((*this)[i + 1]);
    }
    --size_;
    return v;
  }
  /// Inserts `v` before the i-th element (i <= size()), moving the elements after it.
  void insert(std::size_t i, T v) {
    push_back(std::move(v));
    for (std::size_t k = size_ - 1; k > i; --k) std::swap((*this)[k], (*this)[k - 1]);
  }
  /// Empties the ring (its storage stays).
  void clear() noexcept {
    head_ = 0;
    size_ = 0;
  }
  void reserve(std::size_t n) {
    while (slots_.size() < n) grow();
  }

 private:
  [[nodiscard]] std::size_t mask() const noexcept { return mask_; }
  void forget() noexcept {
    slots_.clear();  // a moved-from vector is valid, not necessarily empty
    mask_ = head_ = size_ = 0;
  }
  void grow() {
    std::vector<T> next(slots_.empty() ? 8 : slots_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) next[i] = std::move((*this)[i]);
    slots_ = std::move(next);
    mask_ = slots_.size() - 1;
    head_ = 0;
  }
  std::vector<T> slots_;
  std::size_t mask_ = 0;  // slots_.size() - 1, kept: every index is masked with it
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace ferry::detail
