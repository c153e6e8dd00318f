// The CUDA build's kernel half: ferry's apply kernels built here by nvcc.
#include <ferry/ferry.cuh>

#include "apply.inc"
