// The kernel-launching member of ferry's staged-write tensor needs nvcc (<ferry/ferry.cuh>).
#include <ferry/ferry.cuh>

#include "apply.hpp"

namespace ferry_torch {

void apply_write(staged_target& target, ferry::stream_ref<ferry::backend::cuda> s) { target.apply_write(s); }

}  // namespace ferry_torch
