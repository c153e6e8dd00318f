// Fuzz target: staged_write_tensor (host backend), sequences of stage_write / stage_write_elem /
// clear / reserve / apply_write decoded from the input, under growth::pow2 and growth::fixed,
// owned and adopted targets, checked against a host model of the target after every
// synchronization (staged_model.hpp). Out-of-bounds writes must throw std::out_of_range and keep
// the staged writes; only growth::fixed beyond its reserve(), or the arena's byte cap when a write
// needs a new staging slot, may refuse a write (ferry::capacity_error, nothing recorded).
#include "staged_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ferry_fuzz;
  input in(data, size);
  ferry::pinned_arena<host> arena(64u << 20);  // a request past 64 MiB is ferry::capacity_error
  const std::uint8_t kind = in.byte();
  const bool fixed = (kind & 1) != 0;
  switch ((kind >> 1) % 3) {
    case 0:
      fixed ? run_staged<std::uint8_t, ferry::growth::fixed>(in, arena)
            : run_staged<std::uint8_t, ferry::growth::pow2>(in, arena);
      break;
    case 1:
      fixed ? run_staged<std::int32_t, ferry::growth::fixed>(in, arena)
            : run_staged<std::int32_t, ferry::growth::pow2>(in, arena);
      break;
    default:
      fixed ? run_staged<std::uint64_t, ferry::growth::fixed>(in, arena)
            : run_staged<std::uint64_t, ferry::growth::pow2>(in, arena);
      break;
  }
  return 0;
}
