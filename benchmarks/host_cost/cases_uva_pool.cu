// probe.host_cost's bench.uva_pool cases (cases.hpp).
#include "cases.hpp"

#include <ferry/memory/pinned_arena.hpp>
#include <ferry/pool/uva_pool.hpp>

namespace host_cost {
namespace {

// bench.uva_pool's copy_to_uva of 1024 int32: a ring of `slots` (growing up to 8), event-fenced
// (the default) or caller-fenced.
template <class... Reuse>
call_case uva_copy(ferry::stream<B>& s, std::size_t slots) {
  struct st {
    std::vector<T> src = values(1024, 1025);
    ferry::pinned_arena<B> arena;
    std::unique_ptr<ferry::uva_pool<T, Reuse..., B>> pool;
  };
  auto x = std::make_shared<st>();
  x->arena.reserve(1024 * sizeof(T), 24);
  x->pool = std::make_unique<ferry::uva_pool<T, Reuse..., B>>(1024, slots, 8, x->arena);
  return make(x, [&s](st& y, std::size_t) { (void)y.pool->copy_to_uva(y.src, s); });
}

}  // namespace

std::vector<named_case> uva_pool_cases() {
  return {{"uva_pool.event_ring2", [](ferry::stream<B>& s) { return uva_copy<>(s, 2); }},
          {"uva_pool.event_ring8", [](ferry::stream<B>& s) { return uva_copy<>(s, 8); }},
          {"uva_pool.caller_ring2", [](ferry::stream<B>& s) { return uva_copy<ferry::reuse::caller_fenced>(s, 2); }}};
}

}  // namespace host_cost
