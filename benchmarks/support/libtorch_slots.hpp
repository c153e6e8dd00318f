// Benchmark support for the libtorch peers (compiled with torch: libtorch_peer.cpp,
// engine_step/engine_step_torch.cpp): a step's ring of pinned slots, fenced by events as ferry fences
// (fence.hpp's event_ring), and for a peer at its best each slot's copy and ops captured once as a
// CUDA graph (at::cuda::CUDAGraph, one private pool shared by the slots' graphs, which replay one at
// a time on one stream), a step then the host's writes and one cudaGraphLaunch of that slot's
// executable.
#pragma once

#include <support/fence.hpp>

#include <ATen/cuda/CUDAGraph.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ferry_bench {

class libtorch_slots {
 public:
  /// `slots` zeroed pinned slots of `bytes` each.
  libtorch_slots(int slots, int64_t bytes) : bytes_(bytes), fence_(static_cast<std::size_t>(slots)) {
    pinned_ = torch::zeros({slots * bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    for (int64_t k = 0; k < slots; ++k) tensors_.push_back(pinned_.narrow(0, k * bytes, bytes));
  }
  /// Slot k's bytes, and the same as a pinned tensor (a copy's source).
  [[nodiscard]] uint8_t* host(std::size_t k) const { return pinned_.data_ptr<uint8_t>() + static_cast<int64_t>(k) * bytes_; }
  [[nodiscard]] const at::Tensor& tensor(std::size_t k) const { return tensors_[k]; }
  /// Slots used so far.
  [[nodiscard]] std::size_t used() const noexcept { return fence_.size(); }
  /// Captures `enqueue(tensor(k))` for every slot k, once (after an eager run of it, so that lazy
  /// initializations happen outside any capture), on the current stream.
  template <class Enqueue>
  void capture(Enqueue&& enqueue) {
    const auto pool = at::cuda::graph_pool_handle();
    for (const auto& t : tensors_) {
      graphs_.push_back(std::make_unique<at::cuda::CUDAGraph>());
      graphs_.back()->capture_begin(pool);
      enqueue(t);
      graphs_.back()->capture_end();
    }
  }
  /// One step on `s`: a free slot, `write(its bytes)`, then its graph replayed (once captured) or
  /// `enqueue(its tensor)`, and its fence.
  template <class Write, class Enqueue>
  void step(cudaStream_t s, Write&& write, Enqueue&& enqueue) {
    const std::size_t k = fence_.acquire();
    write(host(k));
    if (!graphs_.empty()) check_cuda(cudaGraphLaunch(graphs_[k]->raw_cuda_graph_exec(), s), "cudaGraphLaunch");
    else enqueue(tensors_[k]);
    fence_.release(s);
  }

 private:
  int64_t bytes_;
  event_ring fence_;
  at::Tensor pinned_;
  std::vector<at::Tensor> tensors_;
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> graphs_;
};

}  // namespace ferry_bench
