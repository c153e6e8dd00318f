// torch.ops.ferry.async_h2d(src, dst): ferry::async_h2d from a CPU tensor (pageable or pinned)
// into a CUDA tensor, on torch's current stream. torch.classes.ferry.StagedWrite(rows, cols): a
// ferry::staged_write_tensor<float>; stage_write(row, start, values) records a write,
// apply_write() applies all of them on torch's current stream with one launch, and tensor() is
// the target viewed as a torch tensor (which keeps the ferry object alive).
#include <ferry/ferry.hpp>
#include <ferry/interop/torch.hpp>

#include "apply.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdint>

namespace ferry_torch {
namespace {

template <class T>
void h2d(const at::Tensor& src, const at::Tensor& dst) {
  TORCH_CHECK(src.is_cpu(), "ferry: async_h2d: the source must be a CPU tensor, got ", src.device());
  // The destination's device is the op's device, as for torch's own ops; from_torch checks the rest.
  const auto out = ferry::from_torch<T>(dst, dst.get_device());
  TORCH_CHECK(dst.is_cuda(), "ferry: async_h2d: the destination must be a CUDA tensor, got ", dst.device());
  const c10::cuda::CUDAGuard on_device(dst.device());
  const auto stream = ferry::from_torch(c10::cuda::getCurrentCUDAStream());
  if (src.is_pinned()) {
    // Copied in place by DMA: the caller leaves `src` unmodified until the stream has passed it.
    ferry::async_h2d(ferry::from_torch_pinned<const T>(src), out, stream);
  } else {
    // Pageable memory: ferry stages it; the source is consumed when async_h2d returns.
    ferry::async_h2d(ferry::from_torch_host<const T>(src), out, stream);
  }
}

void async_h2d(const at::Tensor& src, const at::Tensor& dst) {
  switch (dst.scalar_type()) {
    case at::kFloat: return h2d<float>(src, dst);
    case at::kLong: return h2d<std::int64_t>(src, dst);
    case at::kInt: return h2d<std::int32_t>(src, dst);
    case at::kBFloat16: return h2d<__nv_bfloat16>(src, dst);
    default: TORCH_CHECK(false, "ferry: async_h2d: no example instantiation for ", dst.scalar_type());
  }
}

struct StagedWrite : torch::CustomClassHolder {
  StagedWrite(std::int64_t rows, std::int64_t cols)
      : target(static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)), rows(rows), cols(cols) {}

  void stage_write(std::int64_t row, std::int64_t start, const at::Tensor& values) {
    TORCH_CHECK(row >= 0 && start >= 0, "ferry: stage_write: negative row ", row, " or start ", start);
    target.stage_write(static_cast<std::size_t>(row), static_cast<std::size_t>(start),
                       ferry::from_torch_host<const float>(values));
  }
  void apply() {
    const c10::cuda::CUDAGuard on_device(device);
    apply_write(target, ferry::from_torch(c10::cuda::getCurrentCUDAStream()));
  }
  std::int64_t pending() const { return static_cast<std::int64_t>(target.pending()); }
  at::Tensor tensor() {
    auto self = c10::intrusive_ptr<StagedWrite>::reclaim_copy(this);
    return at::from_blob(
        target.span().data(), {rows, cols}, [self](void*) {},
        at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device));
  }

  staged_target target;
  std::int64_t rows;
  std::int64_t cols;
  c10::DeviceIndex device = c10::cuda::current_device();  // where `target` was made
};

}  // namespace

TORCH_LIBRARY(ferry, m) {
  m.def("async_h2d(Tensor src, Tensor(a!) dst) -> ()", &async_h2d);
  m.class_<StagedWrite>("StagedWrite")
      .def(torch::init<std::int64_t, std::int64_t>())
      .def("stage_write", &StagedWrite::stage_write)
      .def("apply_write", &StagedWrite::apply)
      .def("pending", &StagedWrite::pending)
      .def("tensor", &StagedWrite::tensor);
}

}  // namespace ferry_torch
