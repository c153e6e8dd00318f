// <ferry/ferry.cuh>: everything in <ferry/ferry.hpp>, plus the CUDA kernels that ferry launches.
// Include it from translation units built by nvcc.
#pragma once

#if !defined(__CUDACC__)
#error "<ferry/ferry.cuh> holds CUDA kernels: build this translation unit with nvcc (or include <ferry/ferry.hpp> for the host-only surface)."
#endif

#include <ferry/ferry.hpp>

#include <ferry/backend/detail/mapping_probe.cuh>
#include <ferry/staged/detail/apply_kernel.cuh>
#include <ferry/step/detail/step_kernel.cuh>
