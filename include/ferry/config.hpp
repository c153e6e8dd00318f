// ferry/config.hpp: build configuration shared by every ferry header.
#pragma once

// FERRY_DEFAULT_BACKEND names the backend used when a component is given none: `cuda` or `host`.
// The ferry::ferry CMake target sets it once for the whole build (cuda when the CUDA toolkit was
// found, host otherwise), so that every translation unit agrees. Without CMake, pass it on every
// compile line (docs/consuming.md, "Without CMake").
#ifndef FERRY_DEFAULT_BACKEND
#error "FERRY_DEFAULT_BACKEND is not set: link the ferry::ferry CMake target, or define FERRY_DEFAULT_BACKEND to cuda or host identically for every translation unit (-DFERRY_DEFAULT_BACKEND=host)."
#endif

#define FERRY_PP_CAT_(a, b) a##b
#define FERRY_PP_CAT(a, b) FERRY_PP_CAT_(a, b)

// Which backend FERRY_DEFAULT_BACKEND names, as a number the preprocessor can compare.
#define FERRY_BACKEND_ID_host 1
#define FERRY_BACKEND_ID_cuda 2
#define FERRY_DEFAULT_BACKEND_ID FERRY_PP_CAT(FERRY_BACKEND_ID_, FERRY_DEFAULT_BACKEND)
#if FERRY_DEFAULT_BACKEND_ID != 1 && FERRY_DEFAULT_BACKEND_ID != 2
#error "FERRY_DEFAULT_BACKEND must be cuda or host (lower case): -DFERRY_DEFAULT_BACKEND=host or -DFERRY_DEFAULT_BACKEND=cuda."
#endif

// FERRY_HAS_CUDA is 1 when the CUDA backend is built: its runtime headers are on the include path
// and the program links the CUDA runtime (set by the ferry::ferry target). When not given, it
// follows FERRY_DEFAULT_BACKEND: 1 for cuda, 0 for host (a host-default build that also uses
// backend::cuda passes -DFERRY_HAS_CUDA=1).
#ifndef FERRY_HAS_CUDA
#if FERRY_DEFAULT_BACKEND_ID == 2
#define FERRY_HAS_CUDA 1
#else
#define FERRY_HAS_CUDA 0
#endif
#endif
#if FERRY_DEFAULT_BACKEND_ID == 2 && !FERRY_HAS_CUDA
#error "FERRY_DEFAULT_BACKEND is cuda but FERRY_HAS_CUDA is 0: define FERRY_HAS_CUDA=1 (or leave it undefined) for the CUDA backend, or FERRY_DEFAULT_BACKEND=host for the host backend."
#endif
#if FERRY_HAS_CUDA && !__has_include(<cuda_runtime_api.h>)
#error "FERRY_HAS_CUDA is 1 (or FERRY_DEFAULT_BACKEND is cuda) but <cuda_runtime_api.h> is not on the include path: compile with nvcc, or add -I/usr/local/cuda/include (and link -lcudart), or use FERRY_DEFAULT_BACKEND=host."
#endif

// FERRY_CHECKED_VIEWS 1: the views of rotating slots (uva_pool, uva_backed, step_batch
// publishes; device_span and the 2-D staged_view of rows) carry their slot's generation, and a host read through a view whose slot has been
// handed out again throws ferry::error (docs/troubleshooting.md, "Checked views"). A debugging
// mode: the views grow by two words and each host read compares; 0 (the default) keeps them a
// pointer and a size. Like FERRY_DEFAULT_BACKEND, it must be the same in every translation unit
// (the CMake option FERRY_CHECKED_VIEWS sets it on ferry::ferry); a program that mixes them fails
// to link, since checked views have their own mangled names.
#ifndef FERRY_CHECKED_VIEWS
#define FERRY_CHECKED_VIEWS 0
#endif

#if defined(__CUDACC__)
#define FERRY_HOST_DEVICE __host__ __device__
#else
#define FERRY_HOST_DEVICE
#endif

// Kernels and their launch stubs live in an inline namespace named after the target
// architectures (as CUB does), so that two shared objects built for different architectures never
// share a kernel stub, and have hidden visibility.
#define FERRY_PP_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, n, ...) n
#define FERRY_PP_NARGS(...) FERRY_PP_NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define FERRY_PP_JOIN_1(a) a
#define FERRY_PP_JOIN_2(a, ...) FERRY_PP_CAT(a, FERRY_PP_CAT(_, FERRY_PP_JOIN_1(__VA_ARGS__)))
#define FERRY_PP_JOIN_3(a, ...) FERRY_PP_CAT(a, FERRY_PP_CAT(_, FERRY_PP_JOIN_2(__VA_ARGS__)))
#define FERRY_PP_JOIN_4(a, ...) FERRY_PP_CAT(a, FERRY_PP_CAT(_, FERRY_PP_JOIN_3(__VA_ARGS__)))
#define FERRY_PP_JOIN_5(a, ...) FERRY_PP_CAT(a, FERRY_PP_CAT(_, FERRY_PP_JOIN_4(__VA_ARGS__)))
#define FERRY_PP_JOIN_6(a, ...) FERRY_PP_CAT(a, FERRY_PP_CAT(_, FERRY_PP_JOIN_5(__VA_ARGS__)))
#define FERRY_PP_JOIN_7(a, ...) FERRY_PP_CAT(a, FERRY_PP_CAT(_, FERRY_PP_JOIN_6(__VA_ARGS__)))
#define FERRY_PP_JOIN_8(a, ...) FERRY_PP_CAT(a, FERRY_PP_CAT(_, FERRY_PP_JOIN_7(__VA_ARGS__)))
#define FERRY_PP_JOIN(...) FERRY_PP_CAT(FERRY_PP_JOIN_, FERRY_PP_NARGS(__VA_ARGS__))(__VA_ARGS__)

#if defined(__CUDA_ARCH_LIST__)
#define FERRY_KERNEL_NAMESPACE FERRY_PP_CAT(kernels_sm_, FERRY_PP_JOIN(__CUDA_ARCH_LIST__))
#else
#define FERRY_KERNEL_NAMESPACE kernels_host
#endif
#define FERRY_KERNEL_VISIBILITY __attribute__((visibility("hidden")))

// Error paths out of line (a throw builds its message there), so that the checks guarding them
// stay a compare and a branch inside the hot loops that call them (stage_write runs once a write).
#define FERRY_COLD __attribute__((cold, noinline))
// Inlined into the caller whatever the optimizer's budget: the per-element hot paths
// (stage_write), whose call overhead would be a large part of their cost.
#define FERRY_FORCE_INLINE __attribute__((always_inline))

namespace ferry::detail {
// A false that depends on a template parameter, for static_asserts in discarded branches.
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace ferry::detail
