// ferry_vllm._C: ferry's components over torch tensors. The Python classes of ferry_vllm (vLLM's
// names and signatures, and ferry's own StepBatch) hold these objects. Each object is made for one
// backend, chosen from its device when it is made: device="cpu" on ferry's host backend (every
// build), device="cuda" on its CUDA backend (a CUDA build), on torch's current stream. Values
// from Python are read by values.hpp (exact.hpp's rule). ferry's exceptions reach Python through
// pybind11's translation: std::invalid_argument → ValueError, std::out_of_range → IndexError,
// ferry::error and ferry::capacity_error (std::runtime_error) → RuntimeError; py::type_error →
// TypeError. Every message starts with "ferry: ".
#include "torch_glue.hpp"

#if FERRY_HAS_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

namespace ferry_vllm {
namespace {

// ---- async_h2d ------------------------------------------------------------------------------------
// A new tensor on the backend's device holding `values` (a CPU tensor, pinned or not, a NumPy
// array or a sequence), or `out` holding them (a contiguous tensor of that device, of `dtype`,
// with as many elements), copied by ferry::async_h2d on the backend's stream. A pageable or Python
// source is staged through ferry's pinned arena (consumed when this returns); a pinned tensor of
// the dtype is DMA'd in place.
at::Tensor h2d(py::handle values, at::ScalarType dtype, bool cuda, std::optional<at::Tensor> into) {
  return dispatch_backend(cuda, "async_tensor_h2d", [&]<class B>() {
    return dispatch(dtype, "async_tensor_h2d", [&]<class T>() {
      const host_values<T> src(values, "async_tensor_h2d");
      const auto n = static_cast<std::int64_t>(src.size());
      if (into && (into->scalar_type() != dtype || into->numel() != n))
        throw std::invalid_argument(std::string("ferry: async_tensor_h2d: out holds ") +
                                    std::to_string(into->numel()) + " elements of " +
                                    c10::toString(into->scalar_type()) + ", the data " + std::to_string(n) +
                                    " of " + c10::toString(dtype));
      at::Tensor out = into ? *into : at::empty({n}, at::TensorOptions().dtype(dtype).device(on<B>::device()));
      const auto s = on<B>::stream();
      const auto dst = span_of<T, B>(out);
      if constexpr (!is_host<B>) {
        if (THPVariable_Check(values.ptr())) {
          const at::Tensor& t = THPVariable_Unpack(values.ptr());
          if (t.is_pinned() && t.scalar_type() == dtype && t.is_contiguous()) {
            ferry::async_h2d(ferry::from_torch_pinned<const T, B>(t), dst, s);
            return out;
          }
        }
      }
      ferry::async_h2d(src.span(), dst, s);
      on<B>::finish(s);
      return out;
    });
  });
}

// The UVA (device) view of a pinned CPU tensor's memory, same sizes and strides; the view keeps
// the tensor alive. On the host backend, a CPU tensor over the same memory (its own TensorImpl, as
// the CUDA view is: an op that returns it does not return its input).
at::Tensor uva_view(const at::Tensor& t, bool cuda) {
  if (!t.is_cpu()) throw std::invalid_argument("ferry: uva view: expected a CPU tensor, got " + t.device().str());
  return dispatch_backend(cuda, "uva view", [&]<class B>() -> at::Tensor {
    if (t.numel() == 0) return at::empty_strided(t.sizes(), t.strides(), t.options().device(on<B>::device()));
    void* mapped = t.data_ptr();
    if constexpr (!is_host<B>) {
#if FERRY_HAS_CUDA
      if (!t.is_pinned()) throw std::invalid_argument("ferry: uva view: the CPU tensor is not pinned");
      if (cudaHostGetDevicePointer(&mapped, t.data_ptr(), 0) != cudaSuccess) {
        (void)cudaGetLastError();
        throw ferry::error("ferry: uva view: the pinned tensor's memory is not mapped for UVA");
      }
#endif
    }
    auto keep = std::make_shared<at::Tensor>(t);
    const at::Device device = on<B>::device();
    return at::for_blob(mapped, t.sizes())
        .strides(t.strides())
        .deleter([keep](void*) mutable { keep.reset(); })
        .options(t.options().device(device))
        .target_device(device)
        .make_tensor();
  });
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

template <class T, class B>
struct UvaPoolT final : UvaPool, std::enable_shared_from_this<UvaPoolT<T, B>> {
  // vLLM's slots start as zeros (torch.zeros): each slot is zero-filled here, before any reader.
  UvaPoolT(std::size_t rows, std::size_t width, std::size_t slots) : pool(ferry::row_width{width}, rows, slots) {
    for (std::size_t i = 0; i < pool.slots(); ++i) {
      const auto m = pool.slot_memory(i);
      if (!m.empty()) std::memset(const_cast<T*>(m.data()), 0, m.size_bytes());
    }
  }

  at::Tensor copy_to_uva(py::handle values, const std::vector<std::int64_t>& tail) override {
    const host_values<T> src(values, "copy_to_uva");
    const auto s = on<B>::stream();
    const auto v = pool.copy_to_uva(src.span(), s);
    on<B>::finish(s);
    const auto rows = static_cast<std::int64_t>(v.size() / pool.width());
    return view_of(const_cast<T*>(v.data()), shape(rows, tail), scalar_of<T>(), on<B>::device(),
                   this->shared_from_this());
  }
  at::Tensor copy_to_device(py::handle values, const at::Tensor& out) override {
    const host_values<T> src(values, "copy_to_gpu");
    const auto s = on<B>::stream();
    (void)pool.copy_to_device(src.span(), span_of<T, B>(out), s);
    on<B>::finish(s);
    return out;
  }
  void record_use() override { pool.record_use(on<B>::stream()); }
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
    at::Tensor uva = is_host<B> ? cpu : view_of(data, sizes, scalar_of<T>(), on<B>::device(), this->shared_from_this());
    return py::make_tuple(cpu, uva);
  }

  ferry::uva_pool<T, B> pool;
};

std::shared_ptr<UvaPool> make_uva_pool(std::int64_t rows, std::int64_t width, at::ScalarType dtype, std::int64_t slots,
                                       bool cuda) {
  const auto r = checked_index(rows, "UvaBufferPool", "size");
  const auto w = checked_index(width, "UvaBufferPool", "row width");
  if (slots <= 0)
    throw std::invalid_argument("ferry: UvaBufferPool: max_concurrency must be at least 1, got " +
                                std::to_string(slots));
  return dispatch_backend(cuda, "UvaBufferPool", [&]<class B>() {
    return dispatch(dtype, "UvaBufferPool", [&]<class T>() -> std::shared_ptr<UvaPool> {
      return std::make_shared<UvaPoolT<T, B>>(r, w, static_cast<std::size_t>(slots));
    });
  });
}

// ---- UvaBackedTensor ------------------------------------------------------------------------------
struct UvaBacked {
  virtual ~UvaBacked() = default;
  virtual at::Tensor host(const std::vector<std::int64_t>& sizes) = 0;
  virtual at::Tensor publish(std::int64_t rows, const std::vector<std::int64_t>& tail) = 0;
};

template <class T, class B>
struct UvaBackedT final : UvaBacked, std::enable_shared_from_this<UvaBackedT<T, B>> {
  UvaBackedT(std::size_t rows, std::size_t width, std::size_t slots) : state(ferry::row_width{width}, rows, slots) {}
  at::Tensor host(const std::vector<std::int64_t>& sizes) override {
    return view_of(state.host().data(), sizes, scalar_of<T>(), at::Device(at::kCPU), this->shared_from_this());
  }
  at::Tensor publish(std::int64_t rows, const std::vector<std::int64_t>& tail) override {
    const auto n = checked_index(rows, "UvaBackedTensor.copy_to_uva", "n");
    if (n > state.rows())
      throw std::out_of_range("ferry: UvaBackedTensor.copy_to_uva: n = " + std::to_string(n) + " exceeds the " +
                              std::to_string(state.rows()) + " rows");
    const auto s = on<B>::stream();
    const auto v = state.publish(n * state.width(), s);
    on<B>::finish(s);
    return view_of(const_cast<T*>(v.data()), shape(rows, tail), scalar_of<T>(), on<B>::device(),
                   this->shared_from_this());
  }
  ferry::uva_backed<T, B> state;
};

std::shared_ptr<UvaBacked> make_uva_backed(std::int64_t rows, std::int64_t width, at::ScalarType dtype,
                                           std::int64_t slots, bool cuda) {
  const auto r = checked_index(rows, "UvaBackedTensor", "size");
  const auto w = checked_index(width, "UvaBackedTensor", "row width");
  if (slots <= 0)
    throw std::invalid_argument("ferry: UvaBackedTensor: max_concurrency must be at least 1, got " +
                                std::to_string(slots));
  return dispatch_backend(cuda, "UvaBackedTensor", [&]<class B>() {
    return dispatch(dtype, "UvaBackedTensor", [&]<class T>() -> std::shared_ptr<UvaBacked> {
      return std::make_shared<UvaBackedT<T, B>>(r, w, static_cast<std::size_t>(slots));
    });
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

template <class T, class B>
struct CpuGpuT final : CpuGpu, std::enable_shared_from_this<CpuGpuT<T, B>> {
  explicit CpuGpuT(std::size_t n) : buffer(n) {}
  at::Tensor cpu(const std::vector<std::int64_t>& sizes) override {
    return view_of(buffer.host().data(), sizes, scalar_of<T>(), at::Device(at::kCPU), this->shared_from_this());
  }
  at::Tensor gpu(const std::vector<std::int64_t>& sizes) override {
    return view_of(buffer.device().data(), sizes, scalar_of<T>(), on<B>::device(), this->shared_from_this());
  }
  void copy_to_gpu(std::int64_t elements) override {
    const auto s = on<B>::stream();
    (void)buffer.copy_to_device(checked_index(elements, "CpuGpuBuffer.copy_to_gpu", "n"), s);
    on<B>::finish(s);
  }
  void copy_to_cpu(std::int64_t elements) override {
    const auto s = on<B>::stream();
    (void)buffer.copy_to_host(checked_index(elements, "CpuGpuBuffer.copy_to_cpu", "n"), s);
    on<B>::finish(s);
  }
  ferry::cpu_gpu_buffer<T, B> buffer;
};

std::shared_ptr<CpuGpu> make_cpu_gpu(std::int64_t elements, at::ScalarType dtype, bool cuda) {
  const auto n = checked_index(elements, "CpuGpuBuffer", "size");
  return dispatch_backend(cuda, "CpuGpuBuffer", [&]<class B>() {
    return dispatch(dtype, "CpuGpuBuffer", [&]<class T>() -> std::shared_ptr<CpuGpu> {
      return std::make_shared<CpuGpuT<T, B>>(n);
    });
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
  virtual bool cuda() const = 0;
};

template <class X>
struct StagedT final : Staged {
  using T = typename X::value_type;
  using B = typename X::backend_type;
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
    const auto s = on<B>::stream();
    apply<T, B>(target, s);
    on<B>::finish(s);  // a CPU tensor holds its writes when the call returns, as torch's CPU ops do
  }
  void clear() override { target.clear(); }
  std::size_t pending() const override { return target.pending(); }
  std::size_t pending_elements() const override { return target.pending_elements(); }
  at::ScalarType dtype() const override { return scalar_of<T>(); }
  bool uva() const override { return std::is_same_v<X, uva_target<T, B>>; }
  bool cuda() const override { return !is_host<B>; }

  at::Tensor memory;  // the target's memory (a torch tensor); destroyed after `target`
  X target;
};

// A staged-write tensor over `memory`, viewed as rows x cols, on the backend of `cuda`: a device
// tensor of that backend (device target), or pinned CPU memory (UVA target; any CPU tensor on the
// host backend).
std::shared_ptr<Staged> make_staged(const at::Tensor& memory, std::int64_t rows, std::int64_t cols, bool uva,
                                    std::int64_t slots, bool cuda) {
  const auto r = checked_index(rows, "StagedWriteTensor", "rows");
  const auto c = checked_index(cols, "StagedWriteTensor", "columns");
  if (slots <= 0)
    throw std::invalid_argument("ferry: StagedWriteTensor: max_concurrency must be at least 1, got " +
                                std::to_string(slots));
  const auto n = static_cast<std::size_t>(slots);
  return dispatch_backend(cuda, "StagedWriteTensor", [&]<class B>() {
    return dispatch(memory.scalar_type(), "StagedWriteTensor", [&]<class T>() -> std::shared_ptr<Staged> {
      if (uva) {
        if constexpr (!is_host<B>)
          if (!memory.is_pinned())
            throw std::invalid_argument("ferry: StagedWriteTensor: a UVA target must be pinned CPU memory");
        return std::make_shared<StagedT<uva_target<T, B>>>(
            memory, make_uva_target<T, B>(ferry::from_torch_pinned<T, B>(memory), r, c, n));
      }
      return std::make_shared<StagedT<device_target<T, B>>>(
          memory, make_device_target<T, B>(span_of<T, B>(memory), r, c, n));
    });
  });
}

// Fused writers per element type and backend; tensors are applied in groups of one kind (device
// or UVA target), at most fused_group per launch: those of the host backend first (done when the
// call returns), then those of the CUDA backend on its current stream.
struct Fused {
  explicit Fused(std::size_t slots) : slots(slots) {}

  void apply(py::handle list) {
    std::vector<std::shared_ptr<Staged>> tensors;
    const py::object seq = py::reinterpret_steal<py::object>(
        PySequence_Fast(list.ptr(), "ferry: FusedStagedWriter.apply: tensors must be a sequence of StagedWriteTensor"));
    if (!seq) throw py::error_already_set();
    for (Py_ssize_t i = 0, n = PySequence_Fast_GET_SIZE(seq.ptr()); i < n; ++i) {
      py::handle item = PySequence_Fast_GET_ITEM(seq.ptr(), i);
      if (!py::isinstance<Staged>(item))
        throw py::type_error("ferry: FusedStagedWriter.apply: tensor " + std::to_string(i) + " is a " +
                             std::string(py::str(py::type::of(item).attr("__name__"))) + ", not a StagedWriteTensor");
      auto t = item.cast<std::shared_ptr<Staged>>();
      if (!t)
        throw std::runtime_error("ferry: FusedStagedWriter.apply: tensor " + std::to_string(i) +
                                 " has no C++ object (made with StagedWriteTensor.__new__ alone)");
      tensors.push_back(std::move(t));
    }
    for (std::size_t i = 0; i < tensors.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (tensors[i] == tensors[j])
          throw std::invalid_argument("ferry: FusedStagedWriter.apply got the same tensor twice (positions " +
                                      std::to_string(j) + " and " + std::to_string(i) + ")");
    run_backend<host_backend>(tensors);
#if FERRY_HAS_CUDA
    run_backend<cuda_backend>(tensors);
#endif
  }

 private:
  template <class B>
  void run_backend(const std::vector<std::shared_ptr<Staged>>& tensors) {
    const bool any = std::any_of(tensors.begin(), tensors.end(),
                                 [](const auto& t) { return t->cuda() == !is_host<B> && t->pending() != 0; });
    if (!any) return;
    const auto s = on<B>::stream();
    run<std::int32_t, B>(tensors, s);
    run<std::int64_t, B>(tensors, s);
    run<float, B>(tensors, s);
    on<B>::finish(s);
  }

  template <class T, class B>
  void run(const std::vector<std::shared_ptr<Staged>>& tensors, stream_t<B> s) {
    std::vector<device_target<T, B>*> dev;
    std::vector<uva_target<T, B>*> uva;
    for (const auto& t : tensors) {
      if (t->dtype() != scalar_of<T>() || t->pending() == 0 || t->cuda() != !is_host<B>) continue;
      if (t->uva()) uva.push_back(&static_cast<StagedT<uva_target<T, B>>&>(*t).target);
      else dev.push_back(&static_cast<StagedT<device_target<T, B>>&>(*t).target);
    }
    if (dev.empty() && uva.empty()) return;
    auto& w = writer<T, B>();
    for (std::size_t i = 0; i < dev.size(); i += fused_group)
      apply_fused<T, B>(w, std::span<device_target<T, B>* const>(dev).subspan(i, std::min(fused_group, dev.size() - i)), s);
    for (std::size_t i = 0; i < uva.size(); i += fused_group)
      apply_fused<T, B>(w, std::span<uva_target<T, B>* const>(uva).subspan(i, std::min(fused_group, uva.size() - i)), s);
  }

  template <class T, class B>
  fused_writer<T, B>& writer() {
    auto& w = std::get<std::unique_ptr<fused_writer<T, B>>>(writers);
    if (!w) w = make_fused_writer<T, B>(fused_group, slots);  // constructed where the kernels were built
    return *w;
  }

  std::size_t slots;
  std::tuple<std::unique_ptr<fused_writer<std::int32_t, host_backend>>,
             std::unique_ptr<fused_writer<std::int64_t, host_backend>>,
             std::unique_ptr<fused_writer<float, host_backend>>
#if FERRY_HAS_CUDA
             ,
             std::unique_ptr<fused_writer<std::int32_t, cuda_backend>>,
             std::unique_ptr<fused_writer<std::int64_t, cuda_backend>>,
             std::unique_ptr<fused_writer<float, cuda_backend>>
#endif
             >
      writers;
};

// ---- StepBatch (ferry's addition) -----------------------------------------------------------------
// A whole step in one call and one launch (ferry::step_batch): uploads, staged writes, gathers
// (with host rows), publishes, fills and the shipped epilogue. The plan names torch tensors on the
// batch's device (held here, destroyed after the batch); each step() begins a step, writes every
// source, index and value into the step's slot, and submits on the backend's stream. Whatever
// throws cancels the step: nothing of it is enqueued, and the next step() starts afresh.

// `obj` as a list or tuple (PySequence_Fast: a list or tuple itself, anything else copied).
py::object fast_sequence(py::handle obj, const char* message) {
  PyObject* seq = PySequence_Fast(obj.ptr(), message);
  if (seq == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(seq);
}

// The items of an optional per-handle sequence: none (None), or exactly `count` of them.
std::span<PyObject*> per_handle(py::handle obj, py::object& owner, std::size_t count, const char* what) {
  if (obj.is_none()) return {};
  owner = fast_sequence(obj, (std::string("ferry: StepBatch.step: ") + what + " must be a sequence").c_str());
  const auto n = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(owner.ptr()));
  if (n != count)
    throw std::invalid_argument("ferry: StepBatch.step: " + std::to_string(n) + " " + what + " for " +
                                std::to_string(count) + " (one each, None for none)");
  return {PySequence_Fast_ITEMS(owner.ptr()), n};
}

struct Step {
  virtual ~Step() = default;
  virtual std::size_t add_upload(py::handle dst) = 0;
  virtual std::size_t add_writes(py::handle target, py::handle max_writes, py::handle max_elements) = 0;
  virtual std::size_t add_gather(py::handle dst, py::handle src, py::handle max_n) = 0;
  virtual std::size_t add_publish(py::handle dtype, py::handle max_n) = 0;
  virtual void add_fill(py::handle dst, py::handle value, py::handle publish, py::handle index) = 0;
  virtual void set_decode_epilogue(py::handle rows, py::handle base, py::handle drafts, py::handle block_table,
                                   py::handle block_size, py::handle num_computed, py::handle positions,
                                   py::handle seq_lens, py::handle slot_mapping) = 0;
  virtual void step(py::handle uploads, py::handle writes, py::handle gathers, py::handle host_values,
                    py::handle publishes) = 0;
  virtual at::Tensor publish_view(py::handle i) = 0;
  virtual void record_use() = 0;
  virtual std::uint64_t steps() const = 0;
};

template <class B>
struct StepT final : Step, std::enable_shared_from_this<StepT<B>> {
  using batch_type = step_batch<B>;
  template <class T>
  using upload = typename batch_type::template upload<T>;
  template <class T>
  using writes_of = typename batch_type::template writes<T>;
  template <class T>
  using gather = typename batch_type::template gather<T>;
  template <class T>
  using publish = typename batch_type::template publish<T>;
  template <template <class> class H>
  using any_of = std::variant<H<std::int32_t>, H<std::int64_t>, H<float>>;

  explicit StepT(std::size_t slots) : device(on<B>::device()), batch(make_step_batch<B>(slots)) {}

  std::size_t add_upload(py::handle dst_arg) override {
    const at::Tensor dst = device_tensor(dst_arg, 1, "StepBatch.add_upload", "dst");
    uploads.push_back(dispatch(dst.scalar_type(), "StepBatch.add_upload", [&]<class T>() -> any_of<upload> {
      return batch->template add_upload<T>(span_of<T, B>(dst), static_cast<std::size_t>(dst.numel()));
    }));
    upload_dsts.push_back(dst);
    return uploads.size() - 1;
  }

  std::size_t add_writes(py::handle target_arg, py::handle max_writes, py::handle max_elements) override {
    const at::Tensor target = device_tensor(target_arg, 2, "StepBatch.add_writes", "target");
    const auto w = index_argument(max_writes, "StepBatch.add_writes", "max_writes");
    const auto e = index_argument(max_elements, "StepBatch.add_writes", "max_elements");
    writes.push_back(dispatch(target.scalar_type(), "StepBatch.add_writes", [&]<class T>() -> any_of<writes_of> {
      const ferry::staged_view<T> view(span_of<T, B>(target).data(), static_cast<std::size_t>(target.size(0)),
                                       static_cast<std::size_t>(target.size(1)));
      return batch->template add_writes<T>(view, w, e);
    }));
    memory.push_back(target);
    return writes.size() - 1;
  }

  std::size_t add_gather(py::handle dst_arg, py::handle src_arg, py::handle max_n) override {
    const char* api = "StepBatch.add_gather";
    const at::Tensor dst = device_tensor(dst_arg, 1, api, "dst");
    const at::Tensor src = device_tensor(src_arg, 1, api, "src");
    if (src.scalar_type() != dst.scalar_type())
      throw std::invalid_argument(std::string("ferry: ") + api + ": src is " + c10::toString(src.scalar_type()) +
                                  ", dst " + c10::toString(dst.scalar_type()) + ": a gather copies elements as they are");
    const std::size_t n = max_n.is_none() ? static_cast<std::size_t>(dst.numel()) : index_argument(max_n, api, "max_n");
    gathers.push_back(dispatch(dst.scalar_type(), api, [&]<class T>() -> any_of<gather> {
      return batch->template add_gather<T>(span_of<T, B>(dst), ferry::device_span<const T>(span_of<T, B>(src)), n);
    }));
    gather_dsts.push_back(dst);
    memory.push_back(src);
    return gathers.size() - 1;
  }

  std::size_t add_publish(py::handle dtype_arg, py::handle max_n) override {
    const char* api = "StepBatch.add_publish";
    if (!THPDtype_Check(dtype_arg.ptr()))
      throw py::type_error(std::string("ferry: ") + api + ": dtype must be a torch.dtype, got " +
                           Py_TYPE(dtype_arg.ptr())->tp_name);
    const at::ScalarType dtype = reinterpret_cast<THPDtype*>(dtype_arg.ptr())->scalar_type;
    const auto n = index_argument(max_n, api, "max_n");
    publishes.push_back(dispatch(dtype, api, [&]<class T>() -> any_of<publish> {
      return batch->template add_publish<T>(n);
    }));
    publish_dtypes.push_back(dtype);
    return publishes.size() - 1;
  }

  void add_fill(py::handle dst_arg, py::handle value_arg, py::handle publish_arg, py::handle index_arg) override {
    const char* api = "StepBatch.add_fill";
    const at::Tensor dst = device_tensor(dst_arg, -1, api, "dst");
    if (!dst.is_contiguous())
      throw std::invalid_argument(std::string("ferry: ") + api + ": dst must be contiguous");
    if (value_arg.is_none() == publish_arg.is_none())
      throw std::invalid_argument(std::string("ferry: ") + api +
                                  ": give either value (a one-element tensor on the batch's device) or publish and index");
    dispatch(dst.scalar_type(), api, [&]<class T>() {
      const ferry::device_span<T> d = span_of<T, B>(dst);
      if (!value_arg.is_none()) {
        const at::Tensor value = device_tensor(value_arg, -1, api, "value");
        if (value.numel() != 1 || value.scalar_type() != dst.scalar_type())
          throw std::invalid_argument(std::string("ferry: ") + api + ": value must be one element of dst's dtype " +
                                      c10::toString(dst.scalar_type()) + ", got " + std::to_string(value.numel()) +
                                      " of " + c10::toString(value.scalar_type()));
        batch->template add_fill<T>(d, span_of<T, B>(value).data());
        memory.push_back(value);
      } else {
        const auto p = index_argument(publish_arg, api, "publish");
        if (p >= publishes.size())
          throw std::out_of_range(std::string("ferry: ") + api + ": publish " + std::to_string(p) + " of " +
                                  std::to_string(publishes.size()));
        auto* h = std::get_if<publish<T>>(&publishes[p]);
        if (h == nullptr)
          throw std::invalid_argument(std::string("ferry: ") + api + ": publish " + std::to_string(p) + " is " +
                                      c10::toString(publish_dtypes[p]) + ", dst " + c10::toString(dst.scalar_type()));
        batch->template add_fill<T>(d, *h, index_argument(index_arg, api, "index"));
      }
    });
    memory.push_back(dst);
  }

  void set_decode_epilogue(py::handle rows, py::handle base, py::handle drafts, py::handle block_table,
                           py::handle block_size, py::handle num_computed, py::handle positions,
                           py::handle seq_lens, py::handle slot_mapping) override {
    const char* api = "StepBatch.set_decode_epilogue";
    step_epilogue e;
    e.which = step_epilogue::kind::decode;
    decode_epilogue& d = e.decode;
    std::int64_t n = 0;  // the most rows a step may have: the rows view's destination
    d.rows = view_ref(rows, api, "rows", &n);
    d.base = view_ref(base, api, "base", nullptr);
    if (!drafts.is_none()) {
      d.drafts = view_ref(drafts, api, "drafts", nullptr);
      d.has_drafts = true;
    }
    if (!block_table.is_none()) {
      const at::Tensor t = output(block_table, at::kInt, 2, 0, api, "block_table");
      d.block_table = t.template data_ptr<std::int32_t>();
      d.table_rows = t.size(0);
      d.table_cols = t.size(1);
    }
    d.block_size = static_cast<std::int64_t>(index_argument(block_size, api, "block_size"));
    if (d.block_size == 0) throw std::invalid_argument(std::string("ferry: ") + api + ": block_size must be at least 1");
    if (!num_computed.is_none()) {
      const at::Tensor t = output(num_computed, at::kInt, 1, 0, api, "num_computed");
      d.num_computed = t.template data_ptr<std::int32_t>();
      d.num_requests = t.numel();
    }
    if (!positions.is_none())
      d.positions = output(positions, at::kLong, 1, n, api, "positions").template data_ptr<std::int64_t>();
    if (!seq_lens.is_none())
      d.seq_lens = output(seq_lens, at::kInt, 1, n, api, "seq_lens").template data_ptr<std::int32_t>();
    if (!slot_mapping.is_none()) {
      if (block_table.is_none())
        throw std::invalid_argument(std::string("ferry: ") + api + ": slot_mapping needs block_table");
      d.slot_mapping = output(slot_mapping, at::kLong, 1, n, api, "slot_mapping").template data_ptr<std::int64_t>();
    }
    batch->set_epilogue(e);
  }

  // uploads: one source per upload (None: nothing this step); staged: (writes index, row, start,
  // values); gathers: None, or one index sequence per gather (None: nothing); host_values: None,
  // or one per gather (the values of its ferry_vllm.FROM_HOST rows, n of them); publishes: None,
  // or one source per publish.
  void step(py::handle sources, py::handle staged, py::handle gather_rows, py::handle values,
            py::handle published) override {
    const char* api = "StepBatch.step";
    const py::object src = fast_sequence(sources, "ferry: StepBatch.step: uploads must be a sequence");
    const py::object ws = fast_sequence(staged, "ferry: StepBatch.step: writes must be a sequence");
    const auto n = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(src.ptr()));
    if (n != uploads.size())
      throw std::invalid_argument("ferry: StepBatch.step: " + std::to_string(n) + " sources for " +
                                  std::to_string(uploads.size()) + " uploads (one per upload, None for none)");
    py::object g_owner, v_owner, p_owner;
    const auto g = per_handle(gather_rows, g_owner, gathers.size(), "gathers");
    const auto v = per_handle(values, v_owner, gathers.size(), "host_values");
    const auto p = per_handle(published, p_owner, publishes.size(), "publishes");
    if (g.empty() && !v.empty())
      throw std::invalid_argument("ferry: StepBatch.step: host_values without gathers");
    // The first begin() allocates the slots: the stream is checked first (not capturing, on the
    // batch's device), since an allocation inside a CUDA graph capture invalidates the capture.
    if (batch->slots() == 0)
      ferry::detail::backend_ops<B>::check_stream(on<B>::stream(), is_host<B> ? 0 : device.index());
    batch->begin();
    try {
      PyObject** items = PySequence_Fast_ITEMS(src.ptr());
      for (std::size_t i = 0; i < n; ++i)
        if (items[i] != Py_None) std::visit([&](auto& u) { fill_upload(u, i, items[i]); }, uploads[i]);
      PyObject** w = PySequence_Fast_ITEMS(ws.ptr());
      for (Py_ssize_t j = 0, m = PySequence_Fast_GET_SIZE(ws.ptr()); j < m; ++j) stage(j, w[j]);
      for (std::size_t i = 0; i < g.size(); ++i)
        if (g[i] != Py_None)
          std::visit([&](auto& h) { fill_gather(h, i, g[i], v.empty() ? Py_None : v[i]); }, gathers[i]);
        else if (!v.empty() && v[i] != Py_None)
          throw std::invalid_argument("ferry: StepBatch.step: host_values for gather " + std::to_string(i) +
                                      ", which has no indices this step");
      for (std::size_t i = 0; i < p.size(); ++i)
        if (p[i] != Py_None)
          std::visit(
              [&]<class T>(publish<T>& h) {
                const host_values<T> values_of(p[i], api);
                std::ranges::copy(values_of.span(), h.span(values_of.size()).begin());
              },
              publishes[i]);
      const auto s = on<B>::stream();
      submit_step<B>(*batch, s);
      on<B>::finish(s);
    } catch (...) {
      batch->cancel();
      throw;
    }
  }

  // The last step's publish i as a tensor on the batch's device (a UVA view of the slot on CUDA):
  // valid for work enqueued on the stream before the next step.
  at::Tensor publish_view(py::handle i_arg) override {
    const auto i = index_argument(i_arg, "StepBatch.publish_view", "publish");
    if (i >= publishes.size())
      throw std::out_of_range("ferry: StepBatch.publish_view: publish " + std::to_string(i) + " of " +
                              std::to_string(publishes.size()));
    return std::visit(
        [&]<class T>(publish<T>& h) {
          const ferry::device_span<const T> v = h.view();
          return view_of(const_cast<T*>(v.data()), {static_cast<std::int64_t>(v.size())}, scalar_of<T>(),
                         on<B>::device(), this->shared_from_this());
        },
        publishes[i]);
  }

  void record_use() override { batch->record_use(on<B>::stream()); }
  std::uint64_t steps() const override { return batch->steps(); }

 private:
  // A contiguous tensor on the batch's device of `dims` dimensions (-1: any).
  at::Tensor device_tensor(py::handle h, std::int64_t dims, const char* api, const char* what) const {
    const at::Tensor t = tensor_argument(h, api, what);
    if (dims >= 0 && t.dim() != dims)
      throw std::invalid_argument(std::string("ferry: ") + api + ": expected a " + std::to_string(dims) +
                                  "-D tensor, got " + std::to_string(t.dim()) + "-D");
    if (t.device() != device)
      throw std::invalid_argument(std::string("ferry: ") + api + ": the tensor is on " + t.device().str() +
                                  ", the batch's memory on " + device.str());
    return t;
  }

  // An epilogue's output (or table): a contiguous tensor on the batch's device, of `dtype` and
  // `dims` dimensions, with at least `least` elements; held by the batch.
  at::Tensor output(py::handle h, at::ScalarType dtype, std::int64_t dims, std::int64_t least, const char* api,
                    const char* what) {
    const at::Tensor t = device_tensor(h, dims, api, what);
    if (t.scalar_type() != dtype || !t.is_contiguous() || t.numel() < least)
      throw std::invalid_argument(std::string("ferry: ") + api + ": " + what + " must be a contiguous " +
                                  c10::toString(dtype) + " tensor of at least " + std::to_string(least) +
                                  " elements, got " + std::to_string(t.numel()) + " of " +
                                  c10::toString(t.scalar_type()) + (t.is_contiguous() ? "" : ", not contiguous"));
    memory.push_back(t);
    return t;
  }

  // The epilogue's reference to the int32 upload or gather whose destination is the tensor `h`
  // (the same tensor given to add_upload or add_gather); `rows`: its destination's size.
  ferry::step_ref<std::int32_t> view_ref(py::handle h, const char* api, const char* what, std::int64_t* rows) {
    const at::Tensor t = tensor_argument(h, api, what);
    for (std::size_t i = 0; i < uploads.size(); ++i)
      if (upload_dsts[i].is_same(t))
        if (auto* u = std::get_if<upload<std::int32_t>>(&uploads[i])) {
          if (rows != nullptr) *rows = t.numel();
          return u->ref();
        }
    for (std::size_t i = 0; i < gathers.size(); ++i)
      if (gather_dsts[i].is_same(t))
        if (auto* g = std::get_if<gather<std::int32_t>>(&gathers[i])) {
          if (rows != nullptr) *rows = t.numel();
          return g->ref();
        }
    throw std::invalid_argument(std::string("ferry: ") + api + ": " + what +
                                " must be the destination of an int32 upload or gather of this batch (the tensor "
                                "given to add_upload or add_gather)");
  }

  template <class T>
  void fill_upload(upload<T>& u, std::size_t i, py::handle obj) {
    const host_values<T> v(obj, "StepBatch.step");
    const std::size_t n = v.size();
    const std::size_t max_n = u.destination().size();
    if (n > max_n)
      throw std::out_of_range("ferry: StepBatch.step: the source of upload " + std::to_string(i) + " has " +
                              std::to_string(n) + " elements, more than its destination's " + std::to_string(max_n));
    std::ranges::copy(v.span(), u.span(n).begin());
  }

  template <class T>
  void fill_gather(gather<T>& h, std::size_t i, py::handle rows, py::handle values) {
    const host_values<std::int32_t> idx(rows, "StepBatch.step");
    const std::size_t n = idx.size();
    const std::size_t max_n = h.destination().size();
    if (n > max_n)
      throw std::out_of_range("ferry: StepBatch.step: gather " + std::to_string(i) + " has " + std::to_string(n) +
                              " indices, more than its destination's " + std::to_string(max_n));
    std::ranges::copy(idx.span(), h.indices(n).begin());
    if (values.is_none()) return;
    const host_values<T> v(values, "StepBatch.step");
    if (v.size() != n)
      throw std::invalid_argument("ferry: StepBatch.step: host_values of gather " + std::to_string(i) + " has " +
                                  std::to_string(v.size()) + " values for its " + std::to_string(n) +
                                  " indices (one per row; rows not FROM_HOST are not read)");
    std::ranges::copy(v.span(), h.host_values().begin());
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
        [&]<class T>(writes_of<T>& h) {
          const host_values<T> v(it[3], "StepBatch.step");
          h.stage_write(row, start, v.span());
        },
        writes[k]);
  }

  at::Device device;                                         // the device of every tensor of the plan
  std::vector<at::Tensor> memory, upload_dsts, gather_dsts;  // the plan's tensors, destroyed after `batch`
  std::unique_ptr<batch_type> batch;
  std::vector<any_of<upload>> uploads;
  std::vector<any_of<writes_of>> writes;
  std::vector<any_of<gather>> gathers;
  std::vector<any_of<publish>> publishes;
  std::vector<at::ScalarType> publish_dtypes;
};

std::shared_ptr<Step> make_step(std::int64_t slots, bool cuda) {
  if (slots < 2)
    throw std::invalid_argument("ferry: StepBatch: max_concurrency must be at least 2, got " + std::to_string(slots));
  return dispatch_backend(cuda, "StepBatch", [&]<class B>() -> std::shared_ptr<Step> {
    return std::make_shared<StepT<B>>(static_cast<std::size_t>(slots));
  });
}

}  // namespace
}  // namespace ferry_vllm

#define FERRY_VLLM_STR2(x) #x
#define FERRY_VLLM_STR(x) FERRY_VLLM_STR2(x)

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace ferry_vllm;
  m.doc() = "ferry's components over torch tensors (the core of ferry_vllm)";
  m.attr("cuda") = py::bool_(cuda_build);
  // setup.py's version (its local label names the backends) and the torch it was built against.
  m.attr("version") = FERRY_VLLM_STR(FERRY_VLLM_VERSION);
  m.attr("torch_version") = FERRY_VLLM_STR(FERRY_VLLM_TORCH);
  m.def("h2d", &h2d, py::arg("values"), py::arg("dtype"), py::arg("cuda"), py::arg("out") = py::none());
  m.def("uva_view", &uva_view, py::arg("cpu"), py::arg("cuda"));

  py::class_<UvaPool, std::shared_ptr<UvaPool>>(m, "UvaPool")
      .def(py::init(&make_uva_pool), py::arg("rows"), py::arg("width"), py::arg("dtype"), py::arg("slots"),
           py::arg("cuda"))
      .def("copy_to_uva", &UvaPool::copy_to_uva)
      .def("copy_to_device", &UvaPool::copy_to_device)
      .def("record_use", &UvaPool::record_use)
      .def_property_readonly("slots", &UvaPool::slots)
      .def_property_readonly("current_slot", &UvaPool::current_slot)
      .def("capacity", &UvaPool::capacity)
      .def("slot_address", &UvaPool::slot_address)
      .def("slot", &UvaPool::slot);

  py::class_<UvaBacked, std::shared_ptr<UvaBacked>>(m, "UvaBacked")
      .def(py::init(&make_uva_backed), py::arg("rows"), py::arg("width"), py::arg("dtype"), py::arg("slots"),
           py::arg("cuda"))
      .def("host", &UvaBacked::host)
      .def("publish", &UvaBacked::publish);

  py::class_<CpuGpu, std::shared_ptr<CpuGpu>>(m, "CpuGpu")
      .def(py::init(&make_cpu_gpu), py::arg("elements"), py::arg("dtype"), py::arg("cuda"))
      .def("cpu", &CpuGpu::cpu)
      .def("gpu", &CpuGpu::gpu)
      .def("copy_to_gpu", &CpuGpu::copy_to_gpu)
      .def("copy_to_cpu", &CpuGpu::copy_to_cpu);

  // The members take `self` as its holder: an instance made by StagedWriteTensor.__new__ alone
  // (vLLM's tests make one) has no C++ object, and pybind11 then raises RuntimeError ("non-held
  // instance") instead of handing the member a pointer to nothing. Arguments are read as Python
  // objects (values.hpp), so that a wrong type is a `ferry:` TypeError naming it.
  using held = const std::shared_ptr<Staged>&;
  py::class_<Staged, std::shared_ptr<Staged>>(m, "Staged")
      .def(py::init(&make_staged), py::arg("memory"), py::arg("rows"), py::arg("cols"), py::arg("uva"),
           py::arg("slots"), py::arg("cuda"))
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
      .def("apply", &Fused::apply, py::arg("tensors"));

  py::class_<Step, std::shared_ptr<Step>>(m, "Step")
      .def(py::init(&make_step), py::arg("max_concurrency"), py::arg("cuda"))
      .def("add_upload", &Step::add_upload, py::arg("dst"))
      .def("add_writes", &Step::add_writes, py::arg("target"), py::arg("max_writes"), py::arg("max_elements"))
      .def("add_gather", &Step::add_gather, py::arg("dst"), py::arg("src"), py::arg("max_n") = py::none())
      .def("add_publish", &Step::add_publish, py::arg("dtype"), py::arg("max_n"))
      .def("add_fill", &Step::add_fill, py::arg("dst"), py::arg("value") = py::none(), py::kw_only(),
           py::arg("publish") = py::none(), py::arg("index") = 0)
      .def("set_decode_epilogue", &Step::set_decode_epilogue, py::arg("rows"), py::arg("base"),
           py::arg("drafts") = py::none(), py::kw_only(), py::arg("block_table") = py::none(),
           py::arg("block_size") = 16, py::arg("num_computed") = py::none(), py::arg("positions") = py::none(),
           py::arg("seq_lens") = py::none(), py::arg("slot_mapping") = py::none())
      .def("step", &Step::step, py::arg("uploads"), py::arg("writes"), py::arg("gathers") = py::none(),
           py::arg("host_values") = py::none(), py::arg("publishes") = py::none())
      .def("publish_view", &Step::publish_view, py::arg("publish"))
      .def("record_use", &Step::record_use)
      .def_property_readonly("steps", &Step::steps);

  register_prep(m);
}
