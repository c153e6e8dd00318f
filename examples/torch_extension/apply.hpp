// The nvcc-compiled half of the extension: launching ferry's staged-write kernel.
#pragma once

#include <ferry/ferry.hpp>

namespace ferry_torch {

/// The target that torch.classes.ferry.StagedWrite owns (float, in device memory).
using staged_target = ferry::staged_write_tensor<float>;

/// target.apply_write(s): one kernel launch for every staged write (defined in apply.cu).
void apply_write(staged_target& target, ferry::stream_ref<ferry::backend::cuda> s);

}  // namespace ferry_torch
