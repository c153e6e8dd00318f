// The CUDA build's kernel half: ferry's kernels built here by nvcc, for the CUDA backend and (as
// host loops) for the host backend.
#include <ferry/ferry.cuh>

#include "apply.inc"
