// ferry/sync/detail/cupti_hooks.hpp: what ferry::sync_guard hooks through CUPTI and how it
// classifies a call: the table of runtime-API callback ids, the callback (which only records into
// the guards of the calling thread), and the one process-wide, ref-counted CUPTI subscription.
#pragma once

#include <ferry/config.hpp>
#include <ferry/error.hpp>

#if FERRY_HAS_CUDA

#if !__has_include(<cupti.h>)
#error "ferry/sync/sync_guard.hpp needs CUPTI (cupti.h): link the ferry::sync_guard CMake target, which adds CUPTI's include directory and library."
#endif

#include <cuda_runtime_api.h>
#include <cupti.h>
// cupti.h brings the runtime API parameter structs (generated_cuda_runtime_api_meta.h, unguarded).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <string>

namespace ferry::detail {

// What a hooked runtime call is.
enum class sync_hook_kind : std::uint8_t {
  sync,      // always host-blocking: synchronize, synchronous memcpy/memset
  async,     // an async memcpy: host-blocking only when it touches pageable host memory
  allocate,  // allocation or freeing of device, pinned, managed or array memory
};

struct sync_hook {
  CUpti_CallbackId cbid;
  const char* name;  // the API's name as users write it (per-thread-stream variants share it)
  sync_hook_kind kind;
};

#define FERRY_SYNC_HOOK(id, kind) \
  sync_hook { CUPTI_RUNTIME_TRACE_CBID_##id, #id, sync_hook_kind::kind }

// Every runtime-API callback id sync_guard enables (and only these: each enabled id costs a
// callback per call). Names carry CUPTI's version suffix here; hook_name() strips it.
inline constexpr sync_hook sync_hooks[] = {
    // device, stream and event synchronization
    FERRY_SYNC_HOOK(cudaDeviceSynchronize_v3020, sync),
    FERRY_SYNC_HOOK(cudaThreadSynchronize_v3020, sync),
    FERRY_SYNC_HOOK(cudaStreamSynchronize_v3020, sync),
    FERRY_SYNC_HOOK(cudaStreamSynchronize_ptsz_v7000, sync),
    FERRY_SYNC_HOOK(cudaEventSynchronize_v3020, sync),
    // synchronous copies and fills
    FERRY_SYNC_HOOK(cudaMemcpy_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpy_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2D_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2D_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpy3D_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpy3D_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpyPeer_v4000, sync),
    FERRY_SYNC_HOOK(cudaMemcpy3DPeer_v4000, sync),
    FERRY_SYNC_HOOK(cudaMemcpy3DPeer_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpyToSymbol_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpyToSymbol_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpyFromSymbol_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpyFromSymbol_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpyToArray_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpyToArray_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpyFromArray_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpyFromArray_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2DToArray_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2DToArray_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2DFromArray_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2DFromArray_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpyArrayToArray_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpyArrayToArray_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2DArrayToArray_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemcpy2DArrayToArray_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemset_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemset_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemset2D_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemset2D_ptds_v7000, sync),
    FERRY_SYNC_HOOK(cudaMemset3D_v3020, sync),
    FERRY_SYNC_HOOK(cudaMemset3D_ptds_v7000, sync),
    // async copies: counted only when they touch pageable host memory
    FERRY_SYNC_HOOK(cudaMemcpyAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpyAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpy2DAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpy2DAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpy3DAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpy3DAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpyToSymbolAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpyToSymbolAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpyFromSymbolAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpyFromSymbolAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpyToArrayAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpyToArrayAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpyFromArrayAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpyFromArrayAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpy2DToArrayAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpy2DToArrayAsync_ptsz_v7000, async),
    FERRY_SYNC_HOOK(cudaMemcpy2DFromArrayAsync_v3020, async),
    FERRY_SYNC_HOOK(cudaMemcpy2DFromArrayAsync_ptsz_v7000, async),
#if CUDART_VERSION >= 13000
    FERRY_SYNC_HOOK(cudaMemcpyBatchAsync_v13000, async),
    FERRY_SYNC_HOOK(cudaMemcpyBatchAsync_ptsz_v13000, async),
#endif
    // allocation and freeing (device, stream-ordered, pinned, registered, managed, arrays)
    FERRY_SYNC_HOOK(cudaMalloc_v3020, allocate),
    FERRY_SYNC_HOOK(cudaMallocPitch_v3020, allocate),
    FERRY_SYNC_HOOK(cudaMalloc3D_v3020, allocate),
    FERRY_SYNC_HOOK(cudaMallocManaged_v6000, allocate),
    FERRY_SYNC_HOOK(cudaMallocArray_v3020, allocate),
    FERRY_SYNC_HOOK(cudaMalloc3DArray_v3020, allocate),
    FERRY_SYNC_HOOK(cudaMallocMipmappedArray_v5000, allocate),
    FERRY_SYNC_HOOK(cudaMallocAsync_v11020, allocate),
    FERRY_SYNC_HOOK(cudaMallocAsync_ptsz_v11020, allocate),
    FERRY_SYNC_HOOK(cudaMallocFromPoolAsync_v11020, allocate),
    FERRY_SYNC_HOOK(cudaMallocFromPoolAsync_ptsz_v11020, allocate),
    FERRY_SYNC_HOOK(cudaMallocHost_v3020, allocate),
    FERRY_SYNC_HOOK(cudaHostAlloc_v3020, allocate),
    FERRY_SYNC_HOOK(cudaHostRegister_v4000, allocate),
    FERRY_SYNC_HOOK(cudaFree_v3020, allocate),
    FERRY_SYNC_HOOK(cudaFreeAsync_v11020, allocate),
    FERRY_SYNC_HOOK(cudaFreeAsync_ptsz_v11020, allocate),
    FERRY_SYNC_HOOK(cudaFreeArray_v3020, allocate),
    FERRY_SYNC_HOOK(cudaFreeMipmappedArray_v5000, allocate),
    FERRY_SYNC_HOOK(cudaFreeHost_v3020, allocate),
    FERRY_SYNC_HOOK(cudaHostUnregister_v4000, allocate),
};
#undef FERRY_SYNC_HOOK

inline constexpr std::size_t sync_hook_count = std::size(sync_hooks);

// cbid -> position in sync_hooks (-1: not hooked), built at compile time.
inline constexpr auto sync_hook_index = [] {
  std::array<std::int16_t, CUPTI_RUNTIME_TRACE_CBID_SIZE> index{};
  for (auto& i : index) i = -1;
  for (std::size_t h = 0; h < sync_hook_count; ++h) index[sync_hooks[h].cbid] = static_cast<std::int16_t>(h);
  return index;
}();

// "cudaStreamSynchronize_ptsz_v7000" -> "cudaStreamSynchronize".
inline std::string sync_hook_name(std::size_t h) {
  std::string n = sync_hooks[h].name;
  for (const char* suffix : {"_ptsz_", "_ptds_", "_v"}) {
    if (auto p = n.rfind(suffix); p != std::string::npos) n.erase(p);
  }
  return n;
}

// One guard's counts, linked into the calling thread's list of active guards (innermost first).
struct sync_guard_node {
  sync_guard_node* outer = nullptr;
  std::array<std::atomic<std::uint64_t>, sync_hook_count> counts{};
};

// The calling thread's active guards, and the callback's own flags. Trivially constructible, so
// a thread_local access costs no initialization check.
struct sync_thread_state {
  sync_guard_node* innermost = nullptr;
  bool busy = false;     // inside the callback's own CUDA calls: ignore them (no recursion)
  bool probing = false;  // the subscription's self-test is running on this thread
  std::uint32_t probe_hits = 0;
};
inline sync_thread_state& sync_thread() noexcept {
  thread_local sync_thread_state state;
  return state;
}

// Does `p` point to pageable (not pinned, not registered, not managed, not device) host memory?
// cudaPointerGetAttributes is not a hooked call, so it does not call back into sync_guard; the
// caller also holds the thread's `busy` flag. It never disturbs the caller's CUDA error state:
// an error this query causes (old runtimes report unregistered host memory as an error) is
// cleared only when no error was pending before it.
inline bool is_pageable_host(const void* p) noexcept {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  const cudaError_t before = cudaPeekAtLastError();
  const cudaError_t r = cudaPointerGetAttributes(&attr, p);
  if (r != cudaSuccess) {
    if (before == cudaSuccess) (void)cudaGetLastError();
    return true;  // not known to CUDA: host memory the driver has to stage
  }
  return attr.type == cudaMemoryTypeUnregistered;
}

// An async copy touches pageable host memory when its host-side source or destination is
// pageable. A device-to-device copy never does; the kind says which side is host memory, and
// cudaMemcpyDefault / cudaMemcpyHostToHost make both sides candidates.
inline bool copy_touches_pageable(const void* dst, const void* src, cudaMemcpyKind kind) noexcept {
  switch (kind) {
    case cudaMemcpyDeviceToDevice: return false;
    case cudaMemcpyHostToDevice: return is_pageable_host(src);
    case cudaMemcpyDeviceToHost: return is_pageable_host(dst);
    default: return is_pageable_host(src) || is_pageable_host(dst);
  }
}

template <class P>
bool memcpy_params_touch_pageable(const void* params) noexcept {
  const auto* p = static_cast<const P*>(params);
  return copy_touches_pageable(p->dst, p->src, p->kind);
}
template <class P>
bool memcpy3d_params_touch_pageable(const void* params) noexcept {
  const cudaMemcpy3DParms* p = static_cast<const P*>(params)->p;
  if (p == nullptr) return false;
  const void* src = p->srcArray ? nullptr : p->srcPtr.ptr;
  const void* dst = p->dstArray ? nullptr : p->dstPtr.ptr;
  return copy_touches_pageable(dst, src, p->kind);
}
template <class P>
bool to_device_params_touch_pageable(const void* params) noexcept {  // src is the host side
  return is_pageable_host(static_cast<const P*>(params)->src);
}
template <class P>
bool from_device_params_touch_pageable(const void* params) noexcept {  // dst is the host side
  return is_pageable_host(static_cast<const P*>(params)->dst);
}
#if CUDART_VERSION >= 13000
template <class P>
bool batch_params_touch_pageable(const void* params) noexcept {
  const auto* p = static_cast<const P*>(params);
  if (p->dsts == nullptr || p->srcs == nullptr) return false;
  for (std::size_t i = 0; i < p->count; ++i)
    if (is_pageable_host(p->srcs[i]) || is_pageable_host(p->dsts[i])) return true;
  return false;
}
#endif

// For a hooked async copy: does this call touch pageable host memory (and so block the host)?
inline bool async_call_touches_pageable(CUpti_CallbackId cbid, const void* params) noexcept {
  if (params == nullptr) return false;
#define FERRY_SYNC_CASE(id, how) \
  case CUPTI_RUNTIME_TRACE_CBID_##id: return how<id##_params>(params);
  switch (cbid) {
    FERRY_SYNC_CASE(cudaMemcpyAsync_v3020, memcpy_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyAsync_ptsz_v7000, memcpy_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy2DAsync_v3020, memcpy_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy2DAsync_ptsz_v7000, memcpy_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy3DAsync_v3020, memcpy3d_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy3DAsync_ptsz_v7000, memcpy3d_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyToSymbolAsync_v3020, to_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyToSymbolAsync_ptsz_v7000, to_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyToArrayAsync_v3020, to_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyToArrayAsync_ptsz_v7000, to_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy2DToArrayAsync_v3020, to_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy2DToArrayAsync_ptsz_v7000, to_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyFromSymbolAsync_v3020, from_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyFromSymbolAsync_ptsz_v7000, from_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyFromArrayAsync_v3020, from_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyFromArrayAsync_ptsz_v7000, from_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy2DFromArrayAsync_v3020, from_device_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpy2DFromArrayAsync_ptsz_v7000, from_device_params_touch_pageable)
#if CUDART_VERSION >= 13000
    FERRY_SYNC_CASE(cudaMemcpyBatchAsync_v13000, batch_params_touch_pageable)
    FERRY_SYNC_CASE(cudaMemcpyBatchAsync_ptsz_v13000, batch_params_touch_pageable)
#endif
    default: return false;
  }
#undef FERRY_SYNC_CASE
}

// The CUPTI callback. It only records: it reads the calling thread's list of active guards and
// bumps their counters; it never throws (noexcept: nothing it calls throws) and never calls a
// hooked API.
inline void CUPTIAPI sync_guard_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                         const void* data) noexcept {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || data == nullptr) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_ENTER) return;
  sync_thread_state& t = sync_thread();
  if (t.busy) return;
  if (t.probing) {
    ++t.probe_hits;
    return;
  }
  if (t.innermost == nullptr || cbid >= CUPTI_RUNTIME_TRACE_CBID_SIZE) return;
  const int h = sync_hook_index[cbid];
  if (h < 0) return;
  if (sync_hooks[h].kind == sync_hook_kind::async) {
    t.busy = true;
    const bool pageable = async_call_touches_pageable(cbid, info->functionParams);
    t.busy = false;
    if (!pageable) return;
  }
  for (sync_guard_node* g = t.innermost; g != nullptr; g = g->outer)
    g->counts[static_cast<std::size_t>(h)].fetch_add(1, std::memory_order_relaxed);
}

inline std::string cupti_result_name(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) return "CUPTI error " + std::to_string(static_cast<int>(r));
  return s;
}

// The one CUPTI subscription of the process, shared by every live sync_guard: subscribed when
// the first guard is made, unsubscribed when the last one goes.
class cupti_subscription {
 public:
  static cupti_subscription& instance() {
    static auto* s = new cupti_subscription;  // leaked: guards may outlive static destruction
    return *s;
  }

  void acquire() {
    std::lock_guard lock(mutex_);
    if (refs_ == 0) subscribe();
    ++refs_;
  }

  void release() noexcept {
    std::lock_guard lock(mutex_);
    if (refs_ == 0 || --refs_ != 0) return;
    if (cuptiUnsubscribe(handle_) != CUPTI_SUCCESS) swallowed_error_count().fetch_add(1, std::memory_order_relaxed);
    handle_ = nullptr;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    if (handle_ != nullptr) (void)cuptiUnsubscribe(handle_);
    handle_ = nullptr;
    throw error("ferry::sync_guard cannot observe CUDA calls: " + why +
                ". It never reports a silent zero, so it refuses to start.");
  }

  void subscribe() {
    // A usable device first: without a driver CUPTI would deliver nothing.
    const cudaError_t before = cudaPeekAtLastError();
    int devices = 0;
    const cudaError_t r = cudaGetDeviceCount(&devices);
    if (r != cudaSuccess || devices == 0) {
      if (r != cudaSuccess && before == cudaSuccess) (void)cudaGetLastError();
      fail(r != cudaSuccess ? std::string("cudaGetDeviceCount failed with ") + cudaGetErrorName(r) + " (" +
                                  cudaGetErrorString(r) + ")"
                            : std::string("no CUDA device is visible"));
    }
    const CUptiResult s = cuptiSubscribe(&handle_, &sync_guard_callback, nullptr);
    if (s != CUPTI_SUCCESS) {
      handle_ = nullptr;
      fail("cuptiSubscribe failed with " + cupti_result_name(s) +
           " (CUPTI allows one subscriber per process: another tool holds it, such as "
           "compute-sanitizer, Nsight Systems or Nsight Compute, a profiler, or a second copy of "
           "ferry::sync_guard in another shared object; run the guarded code outside those tools)");
    }
    for (const sync_hook& h : sync_hooks) {
      const CUptiResult e = cuptiEnableCallback(1, handle_, CUPTI_CB_DOMAIN_RUNTIME_API, h.cbid);
      if (e != CUPTI_SUCCESS) fail(std::string("cuptiEnableCallback(") + h.name + ") failed with " + cupti_result_name(e));
    }
    // Self-test: a hooked no-op call (cudaFree(nullptr) frees nothing) must reach the callback.
    sync_thread_state& t = sync_thread();
    t.probing = true;
    t.probe_hits = 0;
    const cudaError_t before_probe = cudaPeekAtLastError();
    const cudaError_t p = cudaFree(nullptr);
    t.probing = false;
    if (p != cudaSuccess && before_probe == cudaSuccess) (void)cudaGetLastError();
    if (t.probe_hits == 0)
      fail(std::string("CUPTI accepted the subscription but delivered no callback for a test call "
                       "(cudaFree(nullptr) returned ") +
           cudaGetErrorName(p) + ")");
  }

  std::mutex mutex_;
  std::uint64_t refs_ = 0;
  CUpti_SubscriberHandle handle_ = nullptr;
};

}  // namespace ferry::detail

#endif  // FERRY_HAS_CUDA
