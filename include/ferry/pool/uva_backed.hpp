// ferry/pool/uva_backed.hpp: uva_backed<T, Policies...>, host-owned state that kernels read
// through UVA: the host keeps the truth in ordinary memory and publishes a snapshot each step.
#pragma once

#include <ferry/pool/uva_pool.hpp>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry {

/// `size` elements of host-owned state (ordinary, zero-filled host memory: `host()`), published
/// to kernels by copying a prefix into the next slot of a ferry::uva_pool.
///
/// The host owns the truth: write `host()` freely at any time; `publish(n, stream)` snapshots its
/// first n elements (the snapshot is complete when publish returns, so `host()` may be rewritten
/// at once) and returns a view for kernels on `stream`.
///
/// **The address changes on every publish** (each publish uses the next slot): pass the view to
/// kernels as an argument each step, and never bake it into a CUDA graph.
///
/// Lifetime rule (as uva_pool): a view stays valid for GPU work enqueued before the pool's next
/// use of that slot; under reuse::event_fenced (default) readers on a stream other than the next
/// publish's call record_use(stream). Policies: GrowthPolicy, ReusePolicy, Backend (as uva_pool;
/// every slot holds `size` elements from the start, so publishing never grows, and
/// growth::fixed gives a pool that never inserts slots either). Move-only; moving keeps host().
///
/// Made with ferry::row_width{w}, the state is `rows` rows of w elements: publish_rows(n) gives
/// the first n rows as a 2-D view, and publish(n) takes whole rows only (n a multiple of w).
template <class T, class... Policies>
class uva_backed {
  using pool_type = uva_pool<T, Policies...>;

 public:
  using value_type = T;                                   ///< The element type.
  using backend_type = typename pool_type::backend_type;  ///< The backend (Backend policy).

  /// Zero-filled host state of `size` elements, published through `slots` rotating slots
  /// (std::invalid_argument when slots == 0 or slots > max_slots).
  explicit uva_backed(std::size_t size, std::size_t slots = 2,
                      std::size_t max_slots = pool_type::default_max_slots)
      : uva_backed(size, slots, max_slots, default_arena<backend_type>()) {}
  /// The same, with slot blocks from `arena` (which must outlive this object).
  uva_backed(std::size_t size, std::size_t slots, std::size_t max_slots,
             pinned_arena<backend_type>& arena)
      : pool_(named(), row_width{}, size, slots, max_slots, arena), host_(size) {}
  /// Zero-filled host state of `rows` rows of `width.value` elements (std::invalid_argument when
  /// the width is 0, slots == 0 or slots > max_slots).
  uva_backed(row_width width, std::size_t rows, std::size_t slots = 2,
             std::size_t max_slots = pool_type::default_max_slots)
      : uva_backed(width, rows, slots, max_slots, default_arena<backend_type>()) {}
  /// The same, with slot blocks from `arena` (which must outlive this object).
  uva_backed(row_width width, std::size_t rows, std::size_t slots, std::size_t max_slots,
             pinned_arena<backend_type>& arena)
      : pool_(named(), width, rows, slots, max_slots, arena), host_(rows * width.value) {}

  /// The host's state: ordinary memory, mutable at any time.
  [[nodiscard]] std::span<T> host() noexcept { return {host_.data(), host_.size()}; }
  /// The host's state, read-only.
  [[nodiscard]] std::span<const T> host() const noexcept { return {host_.data(), host_.size()}; }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return host_.size(); }
  /// Elements per row (1 unless made with a ferry::row_width).
  [[nodiscard]] std::size_t width() const noexcept { return pool_.width(); }
  /// The number of rows: size() / width().
  [[nodiscard]] std::size_t rows() const noexcept { return host_.size() / pool_.width(); }

  /// Copies host()[0, n) into the next slot and returns its view for kernels on `stream` (a new
  /// address every time: never bake it into a CUDA graph). n > size() → std::out_of_range and
  /// nothing changes; n == 0 rotates and returns an empty view. Other errors as
  /// uva_pool::copy_to_uva.
  [[nodiscard]] device_span<const T> publish(std::size_t n, stream_ref<backend_type> stream) {
    if (n > host_.size())
      throw std::out_of_range("ferry: uva_backed::publish: n = " + std::to_string(n) +
                              " exceeds size " + std::to_string(host_.size()));
    return pool_.copy_to_uva(std::span<const T>(host_.data(), n), stream);
  }
  /// publish() of the first n rows, viewed as n rows of width() elements. n > rows() →
  /// std::out_of_range and nothing changes.
  [[nodiscard]] staged_view<const T> publish_rows(std::size_t n, stream_ref<backend_type> stream) {
    if (n > rows())
      throw std::out_of_range("ferry: uva_backed::publish_rows: n = " + std::to_string(n) +
                              " exceeds rows " + std::to_string(rows()));
    return pool_.copy_rows_to_uva(std::span<const T>(host_.data(), n * pool_.width()), stream);
  }

  /// uva_pool::record_use: readers of the last published view on `stream` are fenced too.
  void record_use(stream_ref<backend_type> stream) { pool_.record_use(stream); }

  /// The pool's counters (see ferry::pool_stats).
  [[nodiscard]] pool_stats stats() const noexcept { return pool_.stats(); }

 private:
  // The pool reports errors as this object's ("ferry: uva_backed: ...").
  static typename pool_type::named named() noexcept { return {"uva_backed"}; }

  pool_type pool_;  // first: it checks the width and size that host_ is made with
  std::vector<T> host_;
};

}  // namespace ferry
