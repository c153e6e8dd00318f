// The same consumer built by nvcc, plus a kernel of the consumer's own that takes a device_span.
#include <ferry/ferry.hpp>

__global__ void consumer_fill(ferry::device_span<int> out) {
  const auto i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < out.size()) out[i] = static_cast<int>(i);
}

#include "main.cpp"
