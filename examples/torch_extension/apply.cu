// The members of ferry's staged-write tensor that load or launch its kernel need nvcc
// (<ferry/ferry.cuh>).
#include <ferry/ferry.cuh>

#include "apply.hpp"

namespace ferry_torch {

staged_target make_target(ferry::device_span<float> memory, std::size_t rows, std::size_t cols) {
  return staged_target(memory, rows, cols);
}

void apply_write(staged_target& target, ferry::stream_ref<ferry::backend::cuda> s) { target.apply_write(s); }

}  // namespace ferry_torch
