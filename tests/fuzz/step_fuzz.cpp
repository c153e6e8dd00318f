// Fuzz target: step_batch (host backend), plans (add_upload / add_publish / add_writes /
// add_fill, with wrong and huge maxima) and steps (begin, span, stage_write, submit on a host
// stream, synchronize) decoded from the input, under growth::pow2 and growth::fixed, checked
// against a host model of every destination (step_model.hpp).
#include "step_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ferry_fuzz;
  input in(data, size);
  ferry::pinned_arena<host> arena(64u << 20);  // a request past 64 MiB is ferry::capacity_error
  if (in.flag())
    run_step<ferry::growth::fixed>(in, arena);
  else
    run_step<ferry::growth::pow2>(in, arena);
  return 0;
}
