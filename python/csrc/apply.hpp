// The half of ferry_vllm that constructs ferry's kernel-loading components and launches their
// kernels, for each backend the build holds: ferry's host backend always (device="cpu"), its CUDA
// backend in a CUDA build (device="cuda"). Compiled by nvcc in the CUDA build (ferry's kernel
// members are visible only where <ferry/ferry.cuh> built them; apply.cu) and by the host compiler
// in a host-only build (apply_host.cpp). Includes no torch header.
#pragma once

#include "epilogue.hpp"

#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace ferry_vllm {

using host_backend = ferry::backend::host;
#if FERRY_HAS_CUDA
using cuda_backend = ferry::backend::cuda;
#endif

template <class B>
using stream_t = ferry::stream_ref<B>;

/// A staged-write tensor whose target is device memory the caller owns (a torch tensor).
template <class T, class B>
using device_target = ferry::staged_write_tensor<T, ferry::target::device, B>;
/// A staged-write tensor whose target is pinned, mapped host memory the caller owns (UVA).
template <class T, class B>
using uva_target = ferry::staged_write_tensor<T, ferry::target::uva, B>;
/// The writer that applies several tensors of element type T with one launch.
template <class T, class B>
using fused_writer = ferry::fused_staged_writer<T, B>;

/// The most tensors of one target kind one fused launch takes (more are applied in groups).
inline constexpr std::size_t fused_group = 64;

/// A whole step in one launch: slots grow to the largest step, are fenced on the stream that read
/// them; each step is one kernel launch that ends with the epilogue the batch chose.
template <class B>
using step_batch = ferry::step_batch<ferry::growth::pow2, ferry::reuse::event_fenced, ferry::launch::kernel,
                                     ferry::epilogue::functor<step_epilogue>, B>;

// Construction loads the kernels where they were built; defined in apply.inc for every backend the
// build holds.
template <class T, class B>
device_target<T, B> make_device_target(ferry::device_span<T> memory, std::size_t rows, std::size_t cols,
                                       std::size_t slots);
template <class T, class B>
uva_target<T, B> make_uva_target(ferry::pinned_span<T> memory, std::size_t rows, std::size_t cols, std::size_t slots);
template <class T, class B>
std::unique_ptr<fused_writer<T, B>> make_fused_writer(std::size_t max_tensors, std::size_t slots);
template <class T, class B>
void apply(device_target<T, B>& t, stream_t<B> s);
template <class T, class B>
void apply(uva_target<T, B>& t, stream_t<B> s);
/// writer.apply(s, ts): one launch for ts (all of one kind, at most fused_group).
template <class T, class B>
void apply_fused(fused_writer<T, B>& writer, std::span<device_target<T, B>* const> ts, stream_t<B> s);
template <class T, class B>
void apply_fused(fused_writer<T, B>& writer, std::span<uva_target<T, B>* const> ts, stream_t<B> s);

// A step_batch of `slots` slots, up to the larger of slots and ferry's default max_slots (its
// construction loads the step kernel), and its submit (which launches it).
// The plan, begin(), the handles, cancel() and the destruction are called from module.cpp
// (docs/step_batch.md).
template <class B>
std::unique_ptr<step_batch<B>> make_step_batch(std::size_t slots);
template <class B>
void submit_step(step_batch<B>& b, stream_t<B> s);

/// A whole step inside the engine's CUDA graph (docs/step_batch.md, launch::capture): fixed
/// capacities (the plan's maxima), the step kernel recorded once into the engine's capture, each
/// step committed with no CUDA call and run by the engine's replay.
template <class B>
using capture_batch = ferry::step_batch<ferry::presets::graph_safe, ferry::launch::capture,
                                        ferry::epilogue::functor<step_epilogue>, B>;

// A capture_batch as make_step_batch makes a step_batch; record_step records its step into the
// capture on `s` (CUDA), replay_step enqueues the host backend's stand-in for one replay of the
// engine's graph on `s`. begin(), the handles, commit() and check_replayed() are called from
// prep.cpp.
template <class B>
std::unique_ptr<capture_batch<B>> make_capture_batch(std::size_t slots);
#if FERRY_HAS_CUDA
void record_step(capture_batch<cuda_backend>& b, stream_t<cuda_backend> s);
#endif
void replay_step(capture_batch<host_backend>& b, stream_t<host_backend> s);

}  // namespace ferry_vllm
