// The consumer's nvcc translation unit: a kernel of its own that reads ferry's device_span and
// staged_view, and the launchers main_model.cpp calls.
#include <ferry/ferry.cuh>

#include "model.hpp"

#include <stdexcept>
#include <string>

namespace {

__global__ void model_kernel(ferry::device_span<int> ids, ferry::staged_view<int> table,
                             ferry::device_span<const std::int64_t> pos,
                             ferry::device_span<std::int64_t> out) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < out.size())
    out[i] = std::int64_t{ids[i]} * 1000 + table(i % table.extent(0), i % table.extent(1)) + pos[i];
}

}  // namespace

model_table make_table(std::size_t rows, std::size_t cols) { return model_table(rows, cols); }

void apply_table(model_table& table, ferry::stream_ref<ferry::backend::cuda> stream) {
  table.apply_write(stream);
}

void launch_model(ferry::stream_ref<ferry::backend::cuda> stream, ferry::device_span<int> ids,
                  ferry::staged_view<int> table, ferry::device_span<const std::int64_t> pos,
                  ferry::device_span<std::int64_t> out) {
  const unsigned blocks = static_cast<unsigned>((out.size() + 127) / 128);
  model_kernel<<<blocks, 128, 0, stream.get()>>>(ids, table, pos, out);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("model_kernel: ") + cudaGetErrorString(e));
}
