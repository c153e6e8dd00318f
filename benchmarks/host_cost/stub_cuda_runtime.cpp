// A stand-in for the CUDA runtime, for probe.host_cost: every entry point its cases call (a new
// case that calls another fails to link until it is added here), each doing the least that keeps
// ferry's bookkeeping honest, so that an instruction count of a ferry call (tools/host-cost, under
// valgrind) is ferry's own host work with nothing of a driver's.
// No GPU and no driver is needed: it runs on any machine with the CUDA toolkit's headers.
//  - Memory: device, pinned and mapped allocations are host memory from the heap, each range kept
//    so that cudaPointerGetAttributes tells them apart (pageable memory is "unregistered").
//  - Work: copies, fills, kernel and graph launches enqueue nothing; a kernel's mapped counter is
//    never written, so a point made by a kernel passes only once an event recorded after it has.
//  - Calls: each entry point counts its calls, written at exit to the file FERRY_STUB_CALLS names.
//  - Completion: FERRY_STUB_BEHIND=K (0 by default) keeps the newest K event records of the process
//    not ready, a GPU K operations behind; a synchronizing call completes every record so far.
//  - Tracing: FERRY_STUB_TRACE=FILE writes the address of the entry points that mark a step
//    (the launches, and cudaGetDevice, where a ferry call begins) and every pinned
//    allocation's range into FILE, for benchmarks/host_cost/footprint.py (tools/host-cost
//    --footprint). Only allocations write, so a steady state writes nothing.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace {

struct stub_event {
  std::uint64_t recorded = 0;  // the process's record count at its last record (0: never)
};
struct stub_stream {
  unsigned long long id;
};

struct runtime {
  std::mutex mutex;
  std::FILE* trace = nullptr;  // FERRY_STUB_TRACE
  std::map<std::uintptr_t, std::pair<std::size_t, cudaMemoryType>> ranges;  // start: bytes, kind
  std::uint64_t records = 0;    // events recorded so far
  std::uint64_t completed = 0;  // records a synchronizing call completed
  std::uint64_t behind = 0;     // FERRY_STUB_BEHIND
  unsigned long long next_stream_id = 100;
  runtime();
  void* allocate(std::size_t bytes, cudaMemoryType kind) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    if (!p) return nullptr;
    std::lock_guard lock(mutex);
    ranges[reinterpret_cast<std::uintptr_t>(p)] = {bytes ? bytes : 1, kind};
    if (trace && kind == cudaMemoryTypeHost) {
      std::fprintf(trace, "pinned %p %zu\n", p, bytes);
      std::fflush(trace);
    }
    return p;
  }
  void release(void* p) {
    if (!p) return;
    {
      std::lock_guard lock(mutex);
      ranges.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    std::free(p);
  }
  cudaMemoryType kind_of(const void* p) {
    std::lock_guard lock(mutex);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = ranges.upper_bound(a);
    if (it == ranges.begin()) return cudaMemoryTypeUnregistered;
    --it;
    return a < it->first + it->second.first ? it->second.second : cudaMemoryTypeUnregistered;
  }
  bool ready(const stub_event& e) {
    std::lock_guard lock(mutex);
    return e.recorded <= completed || e.recorded + behind <= records;
  }
  void complete_all() {
    std::lock_guard lock(mutex);
    completed = records;
  }
};

// Never destroyed, as the runtime it stands in for: ferry's static destructors still free after main.
runtime& rt() {
  static runtime* r = new runtime;
  return *r;
}

// Calls of each entry point, written at exit to the file FERRY_STUB_CALLS names ("name count" a
// line). Never destroyed either.
struct tally {
  std::mutex mutex;
  std::vector<std::pair<const char*, std::atomic<std::uint64_t>*>> counts;
  std::atomic<std::uint64_t>& of(const char* name) {
    std::lock_guard lock(mutex);
    if (counts.empty()) std::atexit(write);
    counts.emplace_back(name, new std::atomic<std::uint64_t>(0));
    return *counts.back().second;
  }
  static void write();
};
tally& calls() {
  static tally* t = new tally;
  return *t;
}
void tally::write() {
  const char* path = std::getenv("FERRY_STUB_CALLS");
  std::FILE* f = path ? std::fopen(path, "w") : nullptr;
  if (!f) return;
  std::lock_guard lock(calls().mutex);
  for (const auto& [name, n] : calls().counts)
    std::fprintf(f, "%s %llu\n", name, static_cast<unsigned long long>(n->load()));
  std::fclose(f);
}
// Counts a call of the entry point it opens.
#define FERRY_STUB_COUNT()                                              \
  static std::atomic<std::uint64_t>& stub_calls_ = calls().of(__func__); \
  stub_calls_.fetch_add(1, std::memory_order_relaxed)

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t allocate(void** p, std::size_t bytes, cudaMemoryType kind) {
  *p = rt().allocate(bytes, kind);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t complete_all() {
  rt().complete_all();
  return cudaSuccess;
}

}  // namespace

extern "C" {

// ---- errors and devices ---------------------------------------------------------------------------
const char* cudaGetErrorString(cudaError_t e) {
  FERRY_STUB_COUNT();
  return e == cudaSuccess ? "no error" : "stub runtime error";
}
const char* cudaGetErrorName(cudaError_t e) {
  FERRY_STUB_COUNT();
  return e == cudaSuccess ? "cudaSuccess" : "cudaErrorStub";
}
cudaError_t cudaGetLastError() {
  FERRY_STUB_COUNT();
  return std::exchange(last_error, cudaSuccess);
}
cudaError_t cudaPeekAtLastError() {
  FERRY_STUB_COUNT();
  return last_error;
}
cudaError_t cudaGetDevice(int* d) {
  FERRY_STUB_COUNT();
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  FERRY_STUB_COUNT();
  return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaDeviceSynchronize() {
  FERRY_STUB_COUNT();
  return complete_all();
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  FERRY_STUB_COUNT();
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->numRegs = 32;
  return cudaSuccess;
}

// ---- memory ---------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  FERRY_STUB_COUNT();
  return allocate(p, bytes, cudaMemoryTypeDevice);
}
cudaError_t cudaFree(void* p) {
  FERRY_STUB_COUNT();
  rt().release(p);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  FERRY_STUB_COUNT();
  rt().release(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned) {
  FERRY_STUB_COUNT();
  return allocate(p, bytes, cudaMemoryTypeHost);
}
cudaError_t cudaFreeHost(void* p) {
  FERRY_STUB_COUNT();
  rt().release(p);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  FERRY_STUB_COUNT();
  std::memset(a, 0, sizeof *a);
  a->type = rt().kind_of(p);
  a->device = a->type == cudaMemoryTypeUnregistered ? -2 : 0;
  if (a->type != cudaMemoryTypeUnregistered) {
    a->devicePointer = const_cast<void*>(p);
    if (a->type == cudaMemoryTypeHost) a->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void*, const void*, std::size_t, cudaMemcpyKind, cudaStream_t) {
  FERRY_STUB_COUNT();
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void*, int, std::size_t, cudaStream_t) {
  FERRY_STUB_COUNT();
  return cudaSuccess;
}
cudaError_t cudaMemset(void*, int, std::size_t) {
  FERRY_STUB_COUNT();
  return cudaSuccess;
}
cudaError_t cudaGetSymbolAddress(void** p, const void* symbol) {
  FERRY_STUB_COUNT();
  *p = const_cast<void*>(symbol);
  return cudaSuccess;
}

// ---- streams --------------------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  FERRY_STUB_COUNT();
  std::lock_guard lock(rt().mutex);
  *s = reinterpret_cast<cudaStream_t>(new stub_stream{rt().next_stream_id++});
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  FERRY_STUB_COUNT();
  delete reinterpret_cast<stub_stream*>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  FERRY_STUB_COUNT();
  if (s == cudaStreamLegacy || s == nullptr) *id = 1;
  else if (s == cudaStreamPerThread) *id = 2;
  else *id = reinterpret_cast<stub_stream*>(s)->id;
  return cudaSuccess;
}
cudaError_t cudaStreamGetDevice(cudaStream_t, int* d) {
  FERRY_STUB_COUNT();
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  FERRY_STUB_COUNT();
  return complete_all();
}
cudaError_t cudaStreamQuery(cudaStream_t) {
  FERRY_STUB_COUNT();
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* st) {
  FERRY_STUB_COUNT();
  *st = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

// ---- events ---------------------------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  FERRY_STUB_COUNT();
  *e = reinterpret_cast<cudaEvent_t>(new stub_event{});
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  FERRY_STUB_COUNT();
  std::lock_guard lock(rt().mutex);
  reinterpret_cast<stub_event*>(e)->recorded = ++rt().records;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  FERRY_STUB_COUNT();
  return rt().ready(*reinterpret_cast<stub_event*>(e)) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  FERRY_STUB_COUNT();
  return complete_all();
}

// ---- kernels and graphs ---------------------------------------------------------------------------
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, std::size_t, cudaStream_t) {
  FERRY_STUB_COUNT();
  return cudaSuccess;
}
cudaError_t cudaGraphCreate(cudaGraph_t* g, unsigned) {
  FERRY_STUB_COUNT();
  *g = reinterpret_cast<cudaGraph_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  FERRY_STUB_COUNT();
  delete reinterpret_cast<char*>(g);
  return cudaSuccess;
}
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* n, cudaGraph_t, const cudaGraphNode_t*, std::size_t,
                                   const cudaKernelNodeParams*) {
  FERRY_STUB_COUNT();
  *n = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t, unsigned long long) {
  FERRY_STUB_COUNT();
  *e = reinterpret_cast<cudaGraphExec_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  FERRY_STUB_COUNT();
  delete reinterpret_cast<char*>(e);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) {
  FERRY_STUB_COUNT();
  return cudaSuccess;
}

// ---- what nvcc's host code calls to register a file's kernels and to launch them ------------------
void** __cudaRegisterFatBinary(void*) {
  static void* handle = nullptr;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, std::size_t, int, int) {}
cudaError_t __cudaGetKernel(cudaKernel_t* k, const void* f) {
  *k = reinterpret_cast<cudaKernel_t>(const_cast<void*>(f));
  return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, std::size_t, cudaStream_t) {
  FERRY_STUB_COUNT();
  return cudaSuccess;
}
cudaError_t __cudaPopCallConfiguration(dim3*, dim3*, std::size_t*, void*) { return cudaSuccess; }

}  // extern "C"

namespace {
runtime::runtime() {
  if (const char* k = std::getenv("FERRY_STUB_BEHIND")) behind = std::strtoull(k, nullptr, 10);
  const char* path = std::getenv("FERRY_STUB_TRACE");
  if (!path || !*path || !(trace = std::fopen(path, "w"))) return;
  const std::pair<const char*, const void*> entries[] = {
      {"cudaLaunchKernel", reinterpret_cast<const void*>(&cudaLaunchKernel)},
      {"__cudaLaunchKernel", reinterpret_cast<const void*>(&__cudaLaunchKernel)},
      {"cudaGraphLaunch", reinterpret_cast<const void*>(&cudaGraphLaunch)},
      {"cudaGetDevice", reinterpret_cast<const void*>(&cudaGetDevice)}};
  for (const auto& [name, at] : entries) std::fprintf(trace, "entry %s %p\n", name, at);
  std::fflush(trace);
}
}  // namespace
