// torch.ops.ferry.async_h2d(src, dst): ferry::async_h2d from a CPU tensor (pageable or pinned)
// into a CUDA tensor, on torch's current stream. torch.classes.ferry.StagedWrite(target): a
// ferry::staged_write_tensor<float> that writes into `target`, a 2-D, contiguous float32 CUDA
// tensor the caller made (its contents are kept; the object holds the tensor, so the memory lives
// at least as long as the object); stage_write(row, start, values) records a write, apply_write()
// applies all of them on torch's current stream with one launch, and tensor() is `target` itself.
#include <ferry/ferry.hpp>
#include <ferry/interop/torch.hpp>

#include "apply.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ferry_torch {
namespace {

// [upload]
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
// [/upload]

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
  explicit StagedWrite(at::Tensor target) : memory(std::move(target)), writer(adopt(memory)) {}

  void stage_write(std::int64_t row, std::int64_t start, const at::Tensor& values) {
    TORCH_CHECK(row >= 0 && start >= 0, "ferry: stage_write: negative row ", row, " or start ", start);
    writer.stage_write(static_cast<std::size_t>(row), static_cast<std::size_t>(start),
                       ferry::from_torch_host<const float>(values));
  }
  void apply() {
    const c10::cuda::CUDAGuard on_device(memory.device());
    apply_write(writer, ferry::from_torch(c10::cuda::getCurrentCUDAStream()));
  }
  std::int64_t pending() const { return static_cast<std::int64_t>(writer.pending()); }
  at::Tensor tensor() const { return memory; }

  // StagedWrite asks for a CUDA tensor of two dimensions; from_torch checks the rest (defined,
  // dtype, strided layout, contiguity; it would also take a pinned CPU tensor, through UVA).
  static staged_target adopt(const at::Tensor& t) {
    TORCH_CHECK(t.defined() && t.is_cuda(), "ferry: StagedWrite: the target must be a CUDA tensor, got ",
                t.defined() ? t.device().str() : std::string("an undefined tensor"));
    TORCH_CHECK(t.dim() == 2, "ferry: StagedWrite: the target must be a 2-D tensor, got ",
                static_cast<long long>(t.dim()), " dimensions");
    const auto span = ferry::from_torch<float>(t, t.get_device());
    const c10::cuda::CUDAGuard on_device(t.device());  // ferry's tensor is of the current device
    return make_target(span, static_cast<std::size_t>(t.size(0)), static_cast<std::size_t>(t.size(1)));
  }

  at::Tensor memory;     // the target; destroyed after `writer`, which waits for its applies
  staged_target writer;  // writes into memory's elements
};

}  // namespace

TORCH_LIBRARY(ferry, m) {
  m.def("async_h2d(Tensor src, Tensor(a!) dst) -> ()", &async_h2d);
  m.class_<StagedWrite>("StagedWrite")
      .def(torch::init<at::Tensor>())
      .def("stage_write", &StagedWrite::stage_write)
      .def("apply_write", &StagedWrite::apply)
      .def("pending", &StagedWrite::pending)
      .def("tensor", &StagedWrite::tensor);
}

}  // namespace ferry_torch
