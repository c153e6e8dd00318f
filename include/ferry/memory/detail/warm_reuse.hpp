// ferry/memory/detail/warm_reuse.hpp: the warm-reuse rule, one for every component that reuses
// memory behind a stamp (the slot ring, the pinned arena; docs/design.md, "The slot ring").
#pragma once

#include <ferry/detail/tuning.hpp>  // warm_slots: how many recently used ones count as warm

#include <cstddef>

namespace ferry::detail {

/// The warm-reuse rule, one for every component that reuses memory behind a stamp. Of `n` used
/// things, oldest first, of which `passed(k)` says whether the k-th may be reused: the newest of
/// the `warm` newest that has passed (still in the host's caches), else the oldest that has;
/// `n` when none has. `warm == 0` is plain rotation (the oldest that has passed). Asks `passed`
/// at most once per thing.
template <class Passed>
std::size_t take_warmest(std::size_t n, Passed&& passed, std::size_t warm = warm_slots) {
  const std::size_t hot = warm < n ? warm : n;
  for (std::size_t k = n; k-- > n - hot;)
    if (passed(k)) return k;
  for (std::size_t k = 0; k < n - hot; ++k)
    if (passed(k)) return k;
  return n;
}

}  // namespace ferry::detail
