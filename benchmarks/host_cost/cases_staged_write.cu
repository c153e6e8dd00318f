// probe.host_cost's bench.staged_write cases (cases.hpp).
#include "cases.hpp"

#include <ferry/backend/event.hpp>
#include <ferry/policies.hpp>
#include <ferry/staged/staged_write_tensor.hpp>

namespace host_cost {
namespace {

// bench.staged_write's ferry row at one point: W stage_write calls of `per` elements, then
// apply_write (presets::block_table: the kernel reads the pinned slot in place), then an event
// (named_case::launches_kernel).
call_case staged(ferry::stream<B>& s, int W, int per) {
  constexpr std::size_t rows = 1024, cols = 4096;
  struct st {
    std::unique_ptr<ferry::staged_write_tensor<T, B, ferry::presets::block_table>> t;
    std::vector<T> vals;
    ferry::event<B> after;
  };
  auto x = std::make_shared<st>();
  x->t = std::make_unique<ferry::staged_write_tensor<T, B, ferry::presets::block_table>>(rows, cols, s, 8);
  x->t->reserve(256, 256 * 4096);
  x->vals = values(static_cast<std::size_t>(per), 7);
  return make(x, [&s, W](st& y, std::size_t) {
    for (int w = 0; w < W; ++w) y.t->stage_write(static_cast<std::size_t>((w * 7) % 1024), 0, y.vals);
    y.t->apply_write(s);
    y.after.record(s);
  });
}

}  // namespace

std::vector<named_case> staged_write_cases() {
  return {{"staged_write.256x8", [](ferry::stream<B>& s) { return staged(s, 256, 8); }, true},
          {"staged_write.8x8", [](ferry::stream<B>& s) { return staged(s, 8, 8); }, true},
          {"staged_write.1x1024", [](ferry::stream<B>& s) { return staged(s, 1, 1024); }, true},
          {"staged_write.256x64", [](ferry::stream<B>& s) { return staged(s, 256, 64); }, true}};
}

}  // namespace host_cost
