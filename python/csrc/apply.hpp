// The half of ferry_vllm that launches ferry's kernels: compiled by nvcc in the CUDA build
// (ferry's kernel members are visible only where <ferry/ferry.cuh> built them) and by the host
// compiler on the host backend. Includes no torch header.
#pragma once

#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace ferry_vllm {

using B = ferry::default_backend;
using stream_t = ferry::stream_ref<B>;

/// A staged-write tensor whose target is device memory the caller owns (a torch tensor).
template <class T>
using device_target = ferry::staged_write_tensor<T, ferry::target::device>;
/// A staged-write tensor whose target is pinned, mapped host memory the caller owns (UVA).
template <class T>
using uva_target = ferry::staged_write_tensor<T, ferry::target::uva>;
/// The writer that applies several tensors of element type T with one launch.
template <class T>
using fused_writer = ferry::fused_staged_writer<T>;

/// The most tensors of one target kind one fused launch takes (more are applied in groups).
inline constexpr std::size_t fused_group = 4;

/// A whole step's uploads and writes in one launch: slots grow to the largest step, are fenced on
/// the stream that read them, and each step is one kernel launch.
using step_batch = ferry::step_batch<ferry::growth::pow2, ferry::reuse::event_fenced, ferry::launch::kernel>;

// Construction loads the apply kernel where it was built; defined in apply.cu.
template <class T>
device_target<T> make_device_target(ferry::device_span<T> memory, std::size_t rows, std::size_t cols,
                                    std::size_t slots);
template <class T>
uva_target<T> make_uva_target(ferry::pinned_span<T> memory, std::size_t rows, std::size_t cols,
                              std::size_t slots);
template <class T>
std::unique_ptr<fused_writer<T>> make_fused_writer(std::size_t max_tensors, std::size_t slots);
template <class T>
void apply(device_target<T>& t, stream_t s);
template <class T>
void apply(uva_target<T>& t, stream_t s);
/// writer.apply(s, *ts[0], ..., *ts[n-1]) for 1 <= n <= fused_group (all of one kind).
template <class T>
void apply_fused(fused_writer<T>& writer, std::span<device_target<T>* const> ts, stream_t s);
template <class T>
void apply_fused(fused_writer<T>& writer, std::span<uva_target<T>* const> ts, stream_t s);

// A step_batch's construction (which loads the step kernel) and its submit (which launches it):
// defined in apply.inc, where nvcc builds them. The plan, begin(), the handles, cancel() and the
// destruction are called from module.cpp (docs/step_batch.md).
std::unique_ptr<step_batch> make_step_batch(std::size_t slots);
void submit_step(step_batch& b, stream_t s);

}  // namespace ferry_vllm
