// ferry_vllm._C: ferry's components over torch tensors, on torch's current stream. The Python
// classes of ferry_vllm (vLLM's names and signatures, and ferry's own StepBatch) hold these
// objects. ferry's exceptions reach Python through pybind11's translation: std::invalid_argument →
// ValueError, std::out_of_range → IndexError, ferry::error and ferry::capacity_error
// (std::runtime_error) → RuntimeError.
#include "apply.hpp"
#include "values.hpp"

#include <ferry/interop/torch.hpp>

#include <torch/extension.h>
#if FERRY_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

namespace py = pybind11;

namespace ferry_vllm {
namespace {

constexpr bool cuda_build = FERRY_HAS_CUDA != 0;

// ---- streams ------------------------------------------------------------------------------------
// CUDA: torch's current stream of the current device. Host backend: one ferry host stream, drained
// after every call (torch's CPU tensors are read eagerly). A CUDA build also runs the staged
// writes of CPU tensors (vLLM's CPU worker, device="cpu") on ferry's host backend, on that stream.
using host_backend = ferry::backend::host;
ferry::stream<host_backend>& host_stream() {
  static ferry::stream<host_backend> s;
  return s;
}
#if FERRY_HAS_CUDA
stream_t current_stream() { return ferry::from_torch(c10::cuda::getCurrentCUDAStream()); }
void finish(stream_t) {}
#else
stream_t current_stream() { return host_stream(); }
void finish(stream_t s) { s.synchronize(); }
#endif

// The device of the memory ferry hands out (and of every tensor made over it).
at::Device memory_device() {
#if FERRY_HAS_CUDA
  return at::Device(at::kCUDA, c10::cuda::current_device());
#else
  return at::Device(at::kCPU);
#endif
}

// The elements of `t` as a device_span<T> of the memory it is on (from_torch's checks).
template <class T>
ferry::device_span<T> span_of(const at::Tensor& t) {
  return ferry::from_torch<T>(t, t.is_cpu() ? 0 : t.get_device());
}

// ---- dtypes ---------------------------------------------------------------------------------------
template <class T>
constexpr at::ScalarType scalar_of() {
  if constexpr (std::is_same_v<T, std::int32_t>) return at::kInt;
  else if constexpr (std::is_same_v<T, std::int64_t>) return at::kLong;
  else return at::kFloat;
}

// Calls f.template operator()<T>() for the element type of `dtype` (int32, int64, float32).
template <class F>
decltype(auto) dispatch(at::ScalarType dtype, const char* api, F&& f) {
  switch (dtype) {
    case at::kInt: return f.template operator()<std::int32_t>();
    case at::kLong: return f.template operator()<std::int64_t>();
    case at::kFloat: return f.template operator()<float>();
    default:
      throw std::invalid_argument(std::string("ferry: ") + api + ": unsupported dtype " +
                                  c10::toString(dtype) +
                                  ": should be one of [torch.int32, torch.int64, torch.float32]");
  }
}

std::size_t checked_index(std::int64_t v, const char* api, const char* what) {
  if (v < 0)
    throw std::out_of_range(std::string("ferry: ") + api + ": negative " + what + " " + std::to_string(v));
  return static_cast<std::size_t>(v);
}

std::size_t index_argument(py::handle v, const char* api, const char* what) {
  return checked_index(int_argument(v, api, what), api, what);
}

// A tensor over ferry's memory at `data`, keeping `owner` alive for as long as torch holds it.
at::Tensor view_of(void* data, std::vector<std::int64_t> sizes, at::ScalarType dtype, at::Device device,
                   std::shared_ptr<void> owner) {
  // target_device: the device is known, so torch need not ask the driver for the pointer's.
  return at::for_blob(data, sizes)
      .deleter([owner = std::move(owner)](void*) mutable { owner.reset(); })
      .options(at::TensorOptions().dtype(dtype).device(device))
      .target_device(device)
      .make_tensor();
}

std::vector<std::int64_t> shape(std::int64_t rows, const std::vector<std::int64_t>& tail) {
  std::vector<std::int64_t> s{rows};
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

// ---- async_h2d ------------------------------------------------------------------------------------
// A new tensor on the current device holding `values` (a CPU tensor, pinned or not, or a sequence),
// copied by ferry::async_h2d on torch's current stream. A pageable or Python source is staged
// through ferry's pinned arena (consumed when this returns); a pinned tensor is DMA'd in place.
at::Tensor h2d(py::handle values, at::ScalarType dtype) {
  return dispatch(dtype, "async_tensor_h2d", [&]<class T>() {
    const host_values<T> src(values, "async_tensor_h2d");
    at::Tensor out = at::empty({static_cast<std::int64_t>(src.size())},
                               at::TensorOptions().dtype(dtype).device(memory_device()));
    const auto s = current_stream();
    const auto dst = span_of<T>(out);
    if constexpr (cuda_build) {
      if (THPVariable_Check(values.ptr())) {
        const at::Tensor& t = THPVariable_Unpack(values.ptr());
        if (t.is_pinned() && t.scalar_type() == dtype && t.is_contiguous()) {
          ferry::async_h2d(ferry::from_torch_pinned<const T>(t), dst, s);
          return out;
        }
      }
    }
    ferry::async_h2d(src.span(), dst, s);
    finish(s);
    return out;
  });
}

// The UVA (device) view of a pinned CPU tensor's memory, same sizes and strides; the view keeps
// the tensor alive. On the host backend, the tensor itself.
at::Tensor uva_view(const at::Tensor& t) {
  if (!t.is_cpu()) throw std::invalid_argument("ferry: uva view: expected a CPU tensor, got " + t.device().str());
#if FERRY_HAS_CUDA
  if (!t.is_pinned()) throw std::invalid_argument("ferry: uva view: the CPU tensor is not pinned");
  void* mapped = nullptr;
  if (cudaHostGetDevicePointer(&mapped, t.data_ptr(), 0) != cudaSuccess) {
    (void)cudaGetLastError();
    throw ferry::error("ferry: uva view: the pinned tensor's memory is not mapped for UVA");
  }
  auto keep = std::make_shared<at::Tensor>(t);
  const at::Device device = memory_device();
  return at::for_blob(mapped, t.sizes())
      .strides(t.strides())
      .deleter([keep](void*) mutable { keep.reset(); })
      .options(t.options().device(device))
      .target_device(device)
      .make_tensor();
#else
  return t;
#endif
}

// ---- UvaBufferPool --------------------------------------------------------------------------------
struct UvaPool {
  virtual ~UvaPool() = default;
  virtual at::Tensor copy_to_uva(py::handle values, const std::vector<std::int64_t>& tail) = 0;
  virtual at::Tensor copy_to_device(py::handle values, const at::Tensor& out) = 0;
  virtual void record_use() = 0;
  virtual std::size_t slots() const = 0;
  virtual std::size_t current_slot() const = 0;
  virtual std::size_t capacity(std::size_t i) const = 0;
  virtual std::uintptr_t slot_address(std::size_t i) const = 0;
  virtual py::tuple slot(std::size_t i, const std::vector<std::int64_t>& tail) = 0;
};

template <class T>
struct UvaPoolT final : UvaPool, std::enable_shared_from_this<UvaPoolT<T>> {
  // vLLM's slots start as zeros (torch.zeros): each slot is zero-filled here, before any reader.
  UvaPoolT(std::size_t rows, std::size_t width, std::size_t slots)
      : pool(ferry::row_width{width}, rows, slots) {
    for (std::size_t i = 0; i < pool.slots(); ++i) {
      const auto m = pool.slot_memory(i);
      if (!m.empty()) std::memset(const_cast<T*>(m.data()), 0, m.size_bytes());
    }
  }

  at::Tensor copy_to_uva(py::handle values, const std::vector<std::int64_t>& tail) override {
    const host_values<T> src(values, "copy_to_uva");
    const auto s = current_stream();
    const auto v = pool.copy_to_uva(src.span(), s);
    finish(s);
    const auto rows = static_cast<std::int64_t>(v.size() / pool.width());
    return view_of(const_cast<T*>(v.data()), shape(rows, tail), scalar_of<T>(), memory_device(),
                   this->shared_from_this());
  }
  at::Tensor copy_to_device(py::handle values, const at::Tensor& out) override {
    const host_values<T> src(values, "copy_to_gpu");
    const auto s = current_stream();
    (void)pool.copy_to_device(src.span(), span_of<T>(out), s);
    finish(s);
    return out;
  }
  void record_use() override { pool.record_use(current_stream()); }
  std::size_t slots() const override { return pool.slots(); }
  std::size_t current_slot() const override { return pool.current_slot(); }
  std::size_t capacity(std::size_t i) const override { return pool.capacity(i); }
  std::uintptr_t slot_address(std::size_t i) const override {
    return reinterpret_cast<std::uintptr_t>(pool.slot_memory(i).data());
  }
  // All of slot i as (its pinned host tensor, its UVA tensor): capacity(i) rows of `tail`, over
  // the slot's memory (one address under UVA; the same tensor on the host backend).
  py::tuple slot(std::size_t i, const std::vector<std::int64_t>& tail) override {
    const auto m = pool.slot_memory(i);
    const auto sizes = shape(static_cast<std::int64_t>(pool.capacity(i)), tail);
    auto* data = const_cast<T*>(m.data());
    at::Tensor cpu = view_of(data, sizes, scalar_of<T>(), at::Device(at::kCPU), this->shared_from_this());
    at::Tensor uva =
        cuda_build ? view_of(data, sizes, scalar_of<T>(), memory_device(), this->shared_from_this()) : cpu;
    return py::make_tuple(cpu, uva);
  }

  ferry::uva_pool<T> pool;
};

std::shared_ptr<UvaPool> make_uva_pool(std::int64_t rows, std::int64_t width, at::ScalarType dtype,
                                       std::int64_t slots) {
  const auto r = checked_index(rows, "UvaBufferPool", "size");
  const auto w = checked_index(width, "UvaBufferPool", "row width");
  if (slots <= 0)
    throw std::invalid_argument("ferry: UvaBufferPool: max_concurrency must be at least 1, got " +
                                std::to_string(slots));
  return dispatch(dtype, "UvaBufferPool", [&]<class T>() -> std::shared_ptr<UvaPool> {
    return std::make_shared<UvaPoolT<T>>(r, w, static_cast<std::size_t>(slots));
  });
}

// ---- UvaBackedTensor ------------------------------------------------------------------------------
struct UvaBacked {
  virtual ~UvaBacked() = default;
  virtual at::Tensor host(const std::vector<std::int64_t>& sizes) = 0;
  virtual at::Tensor publish(std::int64_t rows, const std::vector<std::int64_t>& tail) = 0;
};

template <class T>
struct UvaBackedT final : UvaBacked, std::enable_shared_from_this<UvaBackedT<T>> {
  UvaBackedT(std::size_t rows, std::size_t width, std::size_t slots)
      : state(ferry::row_width{width}, rows, slots) {}
  at::Tensor host(const std::vector<std::int64_t>& sizes) override {
    return view_of(state.host().data(), sizes, scalar_of<T>(), at::Device(at::kCPU), this->shared_from_this());
  }
  at::Tensor publish(std::int64_t rows, const std::vector<std::int64_t>& tail) override {
    const auto n = checked_index(rows, "UvaBackedTensor.copy_to_uva", "n");
    if (n > state.rows())
      throw std::out_of_range("ferry: UvaBackedTensor.copy_to_uva: n = " + std::to_string(n) +
                              " exceeds the " + std::to_string(state.rows()) + " rows");
    const auto s = current_stream();
    const auto v = state.publish(n * state.width(), s);
    finish(s);
    return view_of(const_cast<T*>(v.data()), shape(rows, tail), scalar_of<T>(), memory_device(),
                   this->shared_from_this());
  }
  ferry::uva_backed<T> state;
};

std::shared_ptr<UvaBacked> make_uva_backed(std::int64_t rows, std::int64_t width, at::ScalarType dtype,
                                           std::int64_t slots) {
  const auto r = checked_index(rows, "UvaBackedTensor", "size");
  const auto w = checked_index(width, "UvaBackedTensor", "row width");
  if (slots <= 0)
    throw std::invalid_argument("ferry: UvaBackedTensor: max_concurrency must be at least 1, got " +
                                std::to_string(slots));
  return dispatch(dtype, "UvaBackedTensor", [&]<class T>() -> std::shared_ptr<UvaBacked> {
    return std::make_shared<UvaBackedT<T>>(r, w, static_cast<std::size_t>(slots));
  });
}

// ---- CpuGpuBuffer ---------------------------------------------------------------------------------
struct CpuGpu {
  virtual ~CpuGpu() = default;
  virtual at::Tensor cpu(const std::vector<std::int64_t>& sizes) = 0;
  virtual at::Tensor gpu(const std::vector<std::int64_t>& sizes) = 0;
  virtual void copy_to_gpu(std::int64_t elements) = 0;
  virtual void copy_to_cpu(std::int64_t elements) = 0;
};

template <class T>
struct CpuGpuT final : CpuGpu, std::enable_shared_from_this<CpuGpuT<T>> {
  explicit CpuGpuT(std::size_t n) : buffer(n) {}
  at::Tensor cpu(const std::vector<std::int64_t>& sizes) override {
    return view_of(buffer.host().data(), sizes, scalar_of<T>(), at::Device(at::kCPU), this->shared_from_this());
  }
  at::Tensor gpu(const std::vector<std::int64_t>& sizes) override {
    return view_of(buffer.device().data(), sizes, scalar_of<T>(), memory_device(), this->shared_from_this());
  }
  void copy_to_gpu(std::int64_t elements) override {
    const auto s = current_stream();
    (void)buffer.copy_to_device(checked_index(elements, "CpuGpuBuffer.copy_to_gpu", "n"), s);
    finish(s);
  }
  void copy_to_cpu(std::int64_t elements) override {
    const auto s = current_stream();
    (void)buffer.copy_to_host(checked_index(elements, "CpuGpuBuffer.copy_to_cpu", "n"), s);
    finish(s);
  }
  ferry::cpu_gpu_buffer<T> buffer;
};

std::shared_ptr<CpuGpu> make_cpu_gpu(std::int64_t elements, at::ScalarType dtype) {
  const auto n = checked_index(elements, "CpuGpuBuffer", "size");
  return dispatch(dtype, "CpuGpuBuffer", [&]<class T>() -> std::shared_ptr<CpuGpu> {
    return std::make_shared<CpuGpuT<T>>(n);
  });
}

// ---- StagedWriteTensor and FusedStagedWriter ------------------------------------------------------
struct Staged {
  virtual ~Staged() = default;
  virtual void stage_write(py::handle row, py::handle start, py::handle values) = 0;
  virtual void stage_write_elem(py::handle row, py::handle value) = 0;
  virtual void apply_write() = 0;
  virtual void clear() = 0;
  virtual std::size_t pending() const = 0;
  virtual std::size_t pending_elements() const = 0;
  virtual at::ScalarType dtype() const = 0;
  virtual bool uva() const = 0;
  virtual bool cpu() const = 0;  // a CPU target of a CUDA build, on ferry's host backend
};

#if FERRY_HAS_CUDA
/// A CUDA build's staged-write tensor over a CPU torch tensor (vLLM's CPU worker): ferry's host
/// backend, whose "device" memory is host memory.
template <class T>
using cpu_target = ferry::staged_write_tensor<T, ferry::target::device, host_backend>;
#endif

template <class X>
struct StagedT final : Staged {
  using T = typename X::value_type;
  StagedT(at::Tensor memory_, X target_) : memory(std::move(memory_)), target(std::move(target_)) {}
  void stage_write(py::handle row, py::handle start, py::handle values) override {
    const auto r = index_argument(row, "stage_write", "index");
    const auto c = index_argument(start, "stage_write", "start");
    const host_values<T> src(values, "stage_write");
    target.stage_write(r, c, src.span());
  }
  void stage_write_elem(py::handle row, py::handle value) override {
    const auto r = index_argument(row, "stage_write_elem", "index");
    target.stage_write_elem(r, host_scalar<T>(value, "stage_write_elem"));
  }
  void apply_write() override {
    if constexpr (on_cpu) {
      // A CPU tensor holds its writes when the call returns, as torch's CPU ops do.
      auto& s = host_stream();
      target.apply_write(s);
      s.synchronize();
    } else {
      const auto s = current_stream();
      apply<T>(target, s);
      finish(s);
    }
  }
  void clear() override { target.clear(); }
  std::size_t pending() const override { return target.pending(); }
  std::size_t pending_elements() const override { return target.pending_elements(); }
  at::ScalarType dtype() const override { return scalar_of<T>(); }
  bool uva() const override { return std::is_same_v<X, uva_target<T>>; }
  bool cpu() const override { return on_cpu; }
  static constexpr bool on_cpu = cuda_build && std::is_same_v<typename X::backend_type, host_backend>;

  at::Tensor memory;  // the target's memory (a torch tensor); destroyed after `target`
  X target;
};

// A staged-write tensor over `memory`: a CUDA tensor (device target), a pinned CPU tensor (UVA
// target) or, in a CUDA build, any other CPU tensor (a device target on ferry's host backend),
// viewed as rows x cols.
std::shared_ptr<Staged> make_staged(const at::Tensor& memory, std::int64_t rows, std::int64_t cols,
                                    bool uva, std::int64_t slots) {
  const auto r = checked_index(rows, "StagedWriteTensor", "rows");
  const auto c = checked_index(cols, "StagedWriteTensor", "columns");
  if (slots <= 0)
    throw std::invalid_argument("ferry: StagedWriteTensor: max_concurrency must be at least 1, got " +
                                std::to_string(slots));
  const auto n = static_cast<std::size_t>(slots);
  return dispatch(memory.scalar_type(), "StagedWriteTensor", [&]<class T>() -> std::shared_ptr<Staged> {
    if (uva) {
      if constexpr (cuda_build)
        if (!memory.is_pinned())
          throw std::invalid_argument("ferry: StagedWriteTensor: a UVA target must be pinned CPU memory");
      return std::make_shared<StagedT<uva_target<T>>>(
          memory, make_uva_target<T>(ferry::from_torch_pinned<T>(memory), r, c, n));
    }
#if FERRY_HAS_CUDA
    if (memory.is_cpu())
      return std::make_shared<StagedT<cpu_target<T>>>(
          memory, cpu_target<T>(ferry::from_torch<T, host_backend>(memory, 0), r, c, n));
#endif
    return std::make_shared<StagedT<device_target<T>>>(memory, make_device_target<T>(span_of<T>(memory), r, c, n));
  });
}

// One fused writer per element type; tensors are applied in groups of one kind (device or UVA
// target), at most fused_group per launch.
struct Fused {
  explicit Fused(std::size_t slots) : slots(slots) {}

  void apply(const std::vector<std::shared_ptr<Staged>>& tensors) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i]) throw std::invalid_argument("ferry: FusedStagedWriter.apply: tensor " + std::to_string(i) + " is None");
      for (std::size_t j = 0; j < i; ++j)
        if (tensors[i] == tensors[j])
          throw std::invalid_argument("ferry: FusedStagedWriter.apply got the same tensor twice (positions " +
                                      std::to_string(j) + " and " + std::to_string(i) + ")");
    }
    // CPU targets (a CUDA build's, on ferry's host backend) apply one by one, each done when its
    // apply returns, as vLLM's CPU worker applies them.
    bool on_device = false;
    for (const auto& t : tensors) {
      if (t->pending() == 0) continue;
      if (t->cpu()) t->apply_write();
      else on_device = true;
    }
    if (!on_device) return;  // nothing for the device's stream
    const auto s = current_stream();
    run<std::int32_t>(tensors, s);
    run<std::int64_t>(tensors, s);
    run<float>(tensors, s);
    finish(s);
  }

  template <class T>
  void run(const std::vector<std::shared_ptr<Staged>>& tensors, stream_t s) {
    std::vector<device_target<T>*> dev;
    std::vector<uva_target<T>*> uva;
    for (const auto& t : tensors) {
      if (t->dtype() != scalar_of<T>() || t->pending() == 0 || t->cpu()) continue;
      if (t->uva()) uva.push_back(&static_cast<StagedT<uva_target<T>>&>(*t).target);
      else dev.push_back(&static_cast<StagedT<device_target<T>>&>(*t).target);
    }
    if (dev.empty() && uva.empty()) return;
    auto& w = writer<T>();
    for (std::size_t i = 0; i < dev.size(); i += fused_group)
      apply_fused<T>(w, std::span<device_target<T>* const>(dev).subspan(i, std::min(fused_group, dev.size() - i)), s);
    for (std::size_t i = 0; i < uva.size(); i += fused_group)
      apply_fused<T>(w, std::span<uva_target<T>* const>(uva).subspan(i, std::min(fused_group, uva.size() - i)), s);
  }

  template <class T>
  fused_writer<T>& writer() {
    auto& w = std::get<std::unique_ptr<fused_writer<T>>>(writers);
    if (!w) w = make_fused_writer<T>(fused_group, slots);  // constructed where nvcc built the kernels
    return *w;
  }

  std::size_t slots;
  std::tuple<std::unique_ptr<fused_writer<std::int32_t>>, std::unique_ptr<fused_writer<std::int64_t>>,
             std::unique_ptr<fused_writer<float>>>
      writers;
};

// ---- StepBatch (ferry's addition) -----------------------------------------------------------------
// A whole step's uploads and writes in one call and one launch (ferry::step_batch). The plan names
// torch tensors on the memory device (held here, destroyed after the batch); each step() begins a
// step, copies every upload's source into its span of the slot, stages every write there, and
// submits on the current stream. Whatever throws cancels the step: nothing of it is enqueued, and
// the next step() starts afresh.
using upload_handle = std::variant<step_batch::upload<std::int32_t>, step_batch::upload<std::int64_t>,
                                   step_batch::upload<float>>;
using writes_handle = std::variant<step_batch::writes<std::int32_t>, step_batch::writes<std::int64_t>,
                                   step_batch::writes<float>>;

// `obj` as a list or tuple (PySequence_Fast: a list or tuple itself, anything else copied).
py::object fast_sequence(py::handle obj, const char* message) {
  PyObject* seq = PySequence_Fast(obj.ptr(), message);
  if (seq == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(seq);
}

struct Step {
  explicit Step(std::int64_t slots) : device(memory_device()) {
    if (slots < 2)
      throw std::invalid_argument("ferry: StepBatch: max_concurrency must be at least 2, got " + std::to_string(slots));
    batch = make_step_batch(static_cast<std::size_t>(slots));
  }

  std::size_t add_upload(const at::Tensor& dst) {
    check_memory(dst, 1, "StepBatch.add_upload");
    uploads.push_back(dispatch(dst.scalar_type(), "StepBatch.add_upload", [&]<class T>() -> upload_handle {
      return batch->add_upload<T>(span_of<T>(dst), static_cast<std::size_t>(dst.numel()));
    }));
    memory.push_back(dst);
    return uploads.size() - 1;
  }

  std::size_t add_writes(const at::Tensor& target, std::int64_t max_writes, std::int64_t max_elements) {
    check_memory(target, 2, "StepBatch.add_writes");
    const auto w = checked_index(max_writes, "StepBatch.add_writes", "max_writes");
    const auto e = checked_index(max_elements, "StepBatch.add_writes", "max_elements");
    writes.push_back(dispatch(target.scalar_type(), "StepBatch.add_writes", [&]<class T>() -> writes_handle {
      const ferry::staged_view<T> view(span_of<T>(target).data(), static_cast<std::size_t>(target.size(0)),
                                       static_cast<std::size_t>(target.size(1)));
      return batch->add_writes<T>(view, w, e);
    }));
    memory.push_back(target);
    return writes.size() - 1;
  }

  // sources: one per upload (None: nothing this step); staged: (writes index, row, start, values)
  void step(py::handle sources, py::handle staged) {
    const py::object src = fast_sequence(sources, "ferry: StepBatch.step: uploads must be a sequence");
    const py::object ws = fast_sequence(staged, "ferry: StepBatch.step: writes must be a sequence");
    const auto n = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(src.ptr()));
    if (n != uploads.size())
      throw std::invalid_argument("ferry: StepBatch.step: " + std::to_string(n) + " sources for " +
                                  std::to_string(uploads.size()) + " uploads (one per upload, None for none)");
    batch->begin();
    try {
      PyObject** items = PySequence_Fast_ITEMS(src.ptr());
      for (std::size_t i = 0; i < n; ++i)
        if (items[i] != Py_None) std::visit([&](auto& u) { fill(u, i, items[i]); }, uploads[i]);
      PyObject** w = PySequence_Fast_ITEMS(ws.ptr());
      for (Py_ssize_t j = 0, m = PySequence_Fast_GET_SIZE(ws.ptr()); j < m; ++j) stage(j, w[j]);
      const auto s = current_stream();
      submit_step(*batch, s);
      finish(s);
    } catch (...) {
      batch->cancel();
      throw;
    }
  }

  std::uint64_t steps() const { return batch->steps(); }

 private:
  void check_memory(const at::Tensor& t, std::int64_t dims, const char* api) const {
    if (t.dim() != dims)
      throw std::invalid_argument(std::string("ferry: ") + api + ": expected a " + std::to_string(dims) +
                                  "-D tensor, got " + std::to_string(t.dim()) + "-D");
    if (t.device() != device)
      throw std::invalid_argument(std::string("ferry: ") + api + ": the tensor is on " + t.device().str() +
                                  ", the batch's memory on " + device.str());
  }

  template <class T>
  void fill(step_batch::upload<T>& u, std::size_t i, py::handle obj) {
    const host_values<T> v(obj, "StepBatch.step");
    const std::size_t n = v.size();
    const std::size_t max_n = u.destination().size();
    if (n > max_n)
      throw std::out_of_range("ferry: StepBatch.step: the source of upload " + std::to_string(i) + " has " +
                              std::to_string(n) + " elements, more than its destination's " + std::to_string(max_n));
    std::ranges::copy(v.span(), u.span(n).begin());
  }

  void stage(Py_ssize_t j, PyObject* write) {
    const py::object f = fast_sequence(write, "ferry: StepBatch.step: a write must be a tuple");
    if (PySequence_Fast_GET_SIZE(f.ptr()) != 4)
      throw std::invalid_argument("ferry: StepBatch.step: write " + std::to_string(j) +
                                  " must be (writes_index, row, start, values), got " +
                                  std::to_string(PySequence_Fast_GET_SIZE(f.ptr())) + " items");
    PyObject** it = PySequence_Fast_ITEMS(f.ptr());
    const auto k = index_argument(it[0], "StepBatch.step", "writes index");
    if (k >= writes.size())
      throw std::out_of_range("ferry: StepBatch.step: write " + std::to_string(j) + " names writes index " +
                              std::to_string(k) + " of " + std::to_string(writes.size()));
    const auto row = index_argument(it[1], "StepBatch.step", "row");
    const auto start = index_argument(it[2], "StepBatch.step", "start");
    std::visit(
        [&]<class T>(step_batch::writes<T>& h) {
          const host_values<T> v(it[3], "StepBatch.step");
          h.stage_write(row, start, v.span());
        },
        writes[k]);
  }

  at::Device device;                // the memory device of every tensor of the plan
  std::vector<at::Tensor> memory;   // the plan's tensors, kept alive; destroyed after `batch`
  std::unique_ptr<step_batch> batch;
  std::vector<upload_handle> uploads;
  std::vector<writes_handle> writes;
};

}  // namespace
}  // namespace ferry_vllm

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace ferry_vllm;
  m.doc() = "ferry's components over torch tensors (the core of ferry_vllm)";
  m.attr("cuda") = py::bool_(cuda_build);
  m.def("h2d", &h2d, py::arg("values"), py::arg("dtype"));
  m.def("uva_view", &uva_view, py::arg("cpu"));

  py::class_<UvaPool, std::shared_ptr<UvaPool>>(m, "UvaPool")
      .def(py::init(&make_uva_pool), py::arg("rows"), py::arg("width"), py::arg("dtype"), py::arg("slots"))
      .def("copy_to_uva", &UvaPool::copy_to_uva)
      .def("copy_to_device", &UvaPool::copy_to_device)
      .def("record_use", &UvaPool::record_use)
      .def_property_readonly("slots", &UvaPool::slots)
      .def_property_readonly("current_slot", &UvaPool::current_slot)
      .def("capacity", &UvaPool::capacity)
      .def("slot_address", &UvaPool::slot_address)
      .def("slot", &UvaPool::slot);

  py::class_<UvaBacked, std::shared_ptr<UvaBacked>>(m, "UvaBacked")
      .def(py::init(&make_uva_backed), py::arg("rows"), py::arg("width"), py::arg("dtype"), py::arg("slots"))
      .def("host", &UvaBacked::host)
      .def("publish", &UvaBacked::publish);

  py::class_<CpuGpu, std::shared_ptr<CpuGpu>>(m, "CpuGpu")
      .def(py::init(&make_cpu_gpu), py::arg("elements"), py::arg("dtype"))
      .def("cpu", &CpuGpu::cpu)
      .def("gpu", &CpuGpu::gpu)
      .def("copy_to_gpu", &CpuGpu::copy_to_gpu)
      .def("copy_to_cpu", &CpuGpu::copy_to_cpu);

  // The members take `self` as its holder: an instance made by StagedWriteTensor.__new__ alone
  // (vLLM's tests make one) has no C++ object, and pybind11 then raises RuntimeError ("non-held
  // instance") instead of handing the member a pointer to nothing.
  using held = const std::shared_ptr<Staged>&;
  py::class_<Staged, std::shared_ptr<Staged>>(m, "Staged")
      .def(py::init(&make_staged), py::arg("memory"), py::arg("rows"), py::arg("cols"), py::arg("uva"),
           py::arg("slots"))
      .def(
          "stage_write",
          [](held t, py::handle index, py::handle start, py::handle x) { t->stage_write(index, start, x); },
          py::arg("index"), py::arg("start"), py::arg("x"))
      .def(
          "stage_write_elem", [](held t, py::handle index, py::handle x) { t->stage_write_elem(index, x); },
          py::arg("index"), py::arg("x"))
      .def("apply_write", [](held t) { t->apply_write(); })
      .def("clear", [](held t) { t->clear(); })
      .def_property_readonly("pending", [](held t) { return t->pending(); })
      .def_property_readonly("pending_elements", [](held t) { return t->pending_elements(); });

  py::class_<Fused>(m, "Fused")
      .def(py::init<std::size_t>(), py::arg("slots"))
      .def("apply", &Fused::apply);

  py::class_<Step>(m, "Step")
      .def(py::init<std::int64_t>(), py::arg("max_concurrency"))
      .def("add_upload", &Step::add_upload, py::arg("dst"))
      .def("add_writes", &Step::add_writes, py::arg("target"), py::arg("max_writes"), py::arg("max_elements"))
      .def("step", &Step::step, py::arg("uploads"), py::arg("writes"))
      .def_property_readonly("steps", &Step::steps);
}
