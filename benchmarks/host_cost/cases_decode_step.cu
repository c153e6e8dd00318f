// probe.host_cost's bench.decode_step cases (cases.hpp).
#include "cases.hpp"

#include <decode_step/decode_step.hpp>
#include <ferry/backend/event.hpp>

namespace host_cost {
namespace {

// bench.decode_step's ferry rows: the example's engine step (examples/decode_step/decode_step.hpp)
// as one step_batch, submitted as a kernel or as a graph replay, then an event
// (named_case::launches_kernel).
template <class Launch>
call_case engine_step(ferry::stream<B>& s) {
  struct st {
    explicit st(ferry::stream<B>& s) : step(s, 8) {}
    decode_step::ferry_step<B, Launch> step;
    ferry::event<B> after;
  };
  return make(std::make_shared<st>(s), [&s](st& y, std::size_t) {
    y.step.run(s);
    y.after.record(s);
  });
}

}  // namespace

std::vector<named_case> decode_step_cases() {
  return {{"decode_step.step_batch_kernel", engine_step<ferry::launch::kernel>, true},
          {"decode_step.step_batch_graph", engine_step<ferry::launch::graph>, true}};
}

}  // namespace host_cost
