// The nvcc-compiled half of the extension: making ferry's staged-write tensor (which loads its
// kernel) and launching its apply.
#pragma once

#include <ferry/ferry.hpp>

#include <cstddef>

namespace ferry_torch {

/// What torch.classes.ferry.StagedWrite writes through: a staged_write_tensor<float> whose target
/// is a torch tensor's device memory, adopted (the tensor's owner keeps the memory alive).
using staged_target = ferry::staged_write_tensor<float>;

/// A staged_target over `memory`, rows x cols (defined in apply.cu: constructed where nvcc built
/// the kernel, so that it is loaded now rather than in the first apply). Call with the memory's
/// device current.
staged_target make_target(ferry::device_span<float> memory, std::size_t rows, std::size_t cols);

/// target.apply_write(s): one kernel launch for every staged write (defined in apply.cu).
void apply_write(staged_target& target, ferry::stream_ref<ferry::backend::cuda> s);

}  // namespace ferry_torch
