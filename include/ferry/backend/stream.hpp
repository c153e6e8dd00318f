// ferry/backend/stream.hpp: stream_ref (non-owning) and stream (owning), for both backends.
#pragma once

#include <ferry/backend/detail/cuda_runtime.hpp>
#include <ferry/backend/detail/host_queue.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/stream_errors.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>

// CCCL interop: stream_ref<backend::cuda> converts to and from cuda::stream_ref where CCCL is on
// the include path (always under nvcc; the toolkit's include/cccl for host compilers).
#if FERRY_HAS_CUDA && __has_include(<cuda/stream_ref>)
#include <cuda/stream_ref>
#define FERRY_HAS_CCCL_STREAM_REF 1
#else
#define FERRY_HAS_CCCL_STREAM_REF 0
#endif

/// The one diagnostic for a 0, NULL or nullptr where ferry expects a stream (compile time), and
/// the start of the error for a null cudaStream_t (run time).
#define FERRY_NO_DEFAULT_STREAM "ferry has no default stream: pass a ferry::stream"

namespace ferry {

template <class B>
class event;

namespace detail {
/// What a literal 0, NULL or nullptr is, where a function expects a stream: such an argument
/// selects a stream_ref constructor, or an overload of each public function template that deduces
/// its backend from the stream, whose only content is the FERRY_NO_DEFAULT_STREAM static_assert,
/// so that the mistake reads as one line instead of a list of candidates.
template <class Z>
concept null_stream_argument = std::integral<std::remove_cvref_t<Z>> ||
                               std::same_as<std::remove_cvref_t<Z>, std::nullptr_t>;
/// What such an overload returns (deduced, so that its static_assert is the first error reported,
/// before any use of the result).
struct no_default_stream {};
}  // namespace detail

/// A non-owning, trivially copyable reference to a stream of backend B. Never made from 0, NULL or
/// nullptr (a compile error: FERRY_NO_DEFAULT_STREAM) nor from a null cudaStream_t (ferry::error):
/// there is no implicit "default stream" in ferry, the stream is always explicit.
/// `stream_ref<>` names the default backend (FERRY_DEFAULT_BACKEND), as `stream<>` does.
template <class B = default_backend>
class stream_ref;
template <class B>
class stream;

template <>
class stream_ref<backend::host>;
#if FERRY_HAS_CUDA
template <>
class stream_ref<backend::cuda>;
#endif

namespace detail {
/// The queue or CUDA stream `s` names, or throws when it names none (a moved-from stream): every
/// use of a stream by ferry goes through here.
inline host_queue* checked(stream_ref<backend::host> s);
#if FERRY_HAS_CUDA
inline cudaStream_t checked(stream_ref<backend::cuda> s);
#endif
[[noreturn]] inline void throw_empty_stream() {
  throw error("ferry: the stream is empty (a moved-from stream)");
}
[[noreturn]] inline FERRY_COLD void throw_null_handle() {
  throw error("ferry: stream_ref was given a null cudaStream_t, and " FERRY_NO_DEFAULT_STREAM
              " (or name the legacy default stream cudaStreamLegacy, or cudaStreamPerThread)");
}
}  // namespace detail

/// The host backend's stream reference: names an in-order host work queue. Made from a
/// ferry::stream<backend::host> (or copied); its queue stays internal to ferry.
template <>
class stream_ref<backend::host> {
 public:
  /// The backend this reference belongs to.
  using backend_type = backend::host;
  /// Rejects 0, NULL and nullptr at compile time: ferry has no default stream.
  template <detail::null_stream_argument Z>
  stream_ref(Z) {
    static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  }

  /// Blocks until all work enqueued so far has run; rethrows (once) the first error raised by
  /// that work. Every call on an empty reference (of a moved-from stream) throws ferry::error.
  void synchronize() const;
  /// Makes later work on this stream wait until `e` has completed, without blocking the host.
  void wait(const event<backend::host>& e) const;

  friend bool operator==(stream_ref a, stream_ref b) noexcept { return a.queue_ == b.queue_; }

 private:
  // Only the owning stream makes one from its queue: the queue is ferry-internal.
  friend class stream<backend::host>;
  explicit stream_ref(detail::host_queue* q) noexcept : queue_(q) {}
  detail::host_queue* queue_;  // the queue referred to (null when moved-from)

  friend detail::host_queue* detail::checked(stream_ref s);
};

inline detail::host_queue* detail::checked(stream_ref<backend::host> s) {
  if (!s.queue_) [[unlikely]] throw_empty_stream();
  return s.queue_;
}

#if FERRY_HAS_CUDA
/// The CUDA backend's stream reference: wraps a cudaStream_t, and may carry the stream's identity
/// (its process-unique id and its device), which never change while the stream lives. A reference
/// that carries them saves ferry's calls through it a cudaStreamGetId and a cudaStreamGetDevice
/// each: those of a ferry::stream carry them, as does identified(handle); one made from a bare
/// handle looks them up on every use.
template <>
class stream_ref<backend::cuda> {
 public:
  /// The backend this reference belongs to.
  using backend_type = backend::cuda;
  /// Rejects 0, NULL and nullptr at compile time: ferry has no default stream.
  template <detail::null_stream_argument Z>
  stream_ref(Z) {
    static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  }
  /// Refers to an existing CUDA stream (which must outlive every use through this reference).
  /// A null handle (a cudaStream_t variable holding 0, the legacy default stream by accident) →
  /// ferry::error: name that stream cudaStreamLegacy (or cudaStreamPerThread) if it is meant.
  explicit stream_ref(cudaStream_t s) : stream_(s) {
    if (!s) [[unlikely]] detail::throw_null_handle();
  }

  /// A reference to `s` that carries its id and device, looked up now (cudaStreamGetId,
  /// cudaStreamGetDevice): for an engine's own stream, made once and reused every step. The
  /// legacy and per-thread default streams carry nothing: which stream they name depends on the
  /// calling thread and its current device.
  [[nodiscard]] static stream_ref identified(cudaStream_t s) {
    if (!s) detail::throw_null_handle();
    if (s == cudaStreamLegacy || s == cudaStreamPerThread) return stream_ref(s);
    int device = 0;
    FERRY_CUDA_CHECK(cudaStreamGetDevice(s, &device));
    return stream_ref(s, detail::stream_id(s), device);
  }

  /// The CUDA stream this reference names.
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  /// cudaStreamSynchronize, then rethrows (once) the first error raised by host work enqueued on
  /// this stream with ferry::enqueue_host. Every call on an empty reference (of a moved-from
  /// stream) throws ferry::error: a null handle would silently mean the legacy default stream.
  void synchronize() const;
  /// cudaStreamWaitEvent: later work waits for `e` on the device; the host does not block.
  void wait(const event<backend::cuda>& e) const;
  /// The device the stream belongs to (carried, or cudaStreamGetDevice).
  [[nodiscard]] int device() const {
    if (device_ >= 0) return device_;
    int d = 0;
    FERRY_CUDA_CHECK(cudaStreamGetDevice(detail::checked(*this), &d));
    return d;
  }
  /// The device the reference carries (a ferry::stream's, or one made by identified()), -1 when
  /// it carries none. No runtime call: the one device query that is safe on a capturing stream,
  /// where cudaStreamGetDevice fails and invalidates the capture.
  [[nodiscard]] int known_device() const noexcept { return device_; }
  /// The stream's process-unique id (carried, or cudaStreamGetId): unlike a handle, never reused
  /// by a later stream.
  [[nodiscard]] unsigned long long id() const {
    return id_ != 0 ? id_ : detail::stream_id(detail::checked(*this));
  }

  friend bool operator==(stream_ref a, stream_ref b) noexcept { return a.stream_ == b.stream_; }

#if FERRY_HAS_CCCL_STREAM_REF
  // ---- CCCL interop ----
  /// Refers to the stream `s` names (explicit, as from cudaStream_t: ferry never picks a stream).
  /// A cuda::stream_ref of the null handle (the legacy default stream) becomes cudaStreamLegacy,
  /// that stream's explicit name: a null handle is what a moved-from ferry::stream holds.
  explicit stream_ref(::cuda::stream_ref s) noexcept
      : stream_(s.get() != nullptr ? s.get() : cudaStreamLegacy) {}
  /// The same stream as a cuda::stream_ref, for CCCL (and RMM) APIs.
  operator ::cuda::stream_ref() const noexcept { return ::cuda::stream_ref(stream_); }
#endif

 protected:
  /// Refers to `s`, whose id and device are known.
  stream_ref(cudaStream_t s, unsigned long long id, int device) noexcept
      : stream_(s), id_(id), device_(device) {}
  cudaStream_t stream_;         ///< The stream referred to (null when moved-from).
  unsigned long long id_ = 0;   ///< Its id (0: not carried).
  int device_ = -1;             ///< Its device (-1: not carried).
};

inline cudaStream_t detail::checked(stream_ref<backend::cuda> s) {
  if (!s.get()) [[unlikely]] throw_empty_stream();
  return s.get();
}
#endif

/// An owning stream of backend B; publicly a `stream_ref<B>`, so every function taking a stream
/// accepts both. Host: a new work queue with its own worker thread (destroying it drains it).
/// CUDA: a non-blocking stream on the device current at construction. Destroying a stream drops
/// the errors of its work that no synchronizing call took; the one a synchronize would have
/// thrown counts in swallowed_errors().
template <class B = default_backend>
class stream;

/// An owning host stream: a work queue with its own worker thread.
template <>
class stream<backend::host> : public stream_ref<backend::host> {
 public:
  /// A new queue and its worker thread.
  stream() : stream(detail::host_queue::create()) {}
  /// Takes over `o`'s queue; `o` is left empty.
  stream(stream&& o) noexcept : stream_ref(std::exchange(o.queue_, nullptr)), owner_(std::move(o.owner_)) {}
  /// Closes this stream's queue, then takes over `o`'s.
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      close();
      owner_ = std::move(o.owner_);
      queue_ = std::exchange(o.queue_, nullptr);
    }
    return *this;
  }
  /// Drains the queue and ends its worker thread: every task enqueued on this stream has run
  /// when the destructor returns. Events recorded on it stay valid (and ready).
  ~stream() { close(); }

 private:
  explicit stream(std::shared_ptr<detail::host_queue> q) : stream_ref(q.get()), owner_(std::move(q)) {}
  void close() noexcept {
    if (queue_) queue_->close();
  }
  std::shared_ptr<detail::host_queue> owner_;
};

#if FERRY_HAS_CUDA
/// An owning CUDA stream (cudaStreamNonBlocking, on the device current at construction).
template <>
class stream<backend::cuda> : public stream_ref<backend::cuda> {
 public:
  /// Creates the stream; its references carry its id and device.
  stream() : stream_ref(create()) {}
  /// Takes over `o`'s stream; `o` is left empty.
  stream(stream&& o) noexcept : stream_ref(o.take()) {}
  /// Destroys this stream, then takes over `o`'s.
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      destroy();
      stream_ref::operator=(o.take());
    }
    return *this;
  }
  /// cudaStreamDestroy (work already enqueued still completes).
  ~stream() { destroy(); }

 private:
  static stream_ref create() {
    cudaStream_t s = nullptr;
    FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    try {
      return identified(s);
    } catch (...) {
      static_cast<void>(cudaStreamDestroy(s));
      throw;
    }
  }
  // This stream's reference, leaving this one empty.
  stream_ref take() noexcept {
    const stream_ref r = *this;
    stream_ = nullptr;
    id_ = 0;
    device_ = -1;
    return r;
  }
  void destroy() noexcept {
    if (stream_) {
      detail::destructor_guard([&] {
        FERRY_CUDA_CHECK(cudaStreamDestroy(stream_));
        detail::stream_error_registry::instance().destroyed(id_);
      });
    }
    static_cast<void>(take());
  }
};
#endif

// ---- running host code in stream order ------------------------------------------------------

/// Runs `f()` on the host once all work enqueued before it on `s` has completed, and before any
/// work enqueued after it. Returns at once. An exception thrown by `f` is kept and rethrown by the
/// next synchronizing call on `s` (or an event recorded on it after `f`); later work still runs.
/// CUDA: `f` runs on a CUDA runtime thread (cudaLaunchHostFunc) and must not call CUDA.
template <class F>
void enqueue_host(stream_ref<backend::host> s, F&& f) {
  detail::checked(s)->enqueue(std::function<void()>(static_cast<F&&>(f)));
}

/// 0, NULL or nullptr in the stream's place: ferry has no default stream (a compile error).
template <detail::null_stream_argument Z, class F>
auto enqueue_host(Z, F&&) {
  static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  return detail::no_default_stream{};
}

#if FERRY_HAS_CUDA
template <class F>
void enqueue_host(stream_ref<backend::cuda> s, F&& f) {
  using task = detail::host_fn_task<std::decay_t<F>>;
  const cudaStream_t handle = detail::checked(s);
  const unsigned long long id = s.id();
  auto t = std::make_unique<task>(task{static_cast<F&&>(f), id, 0});
  auto& registry = detail::stream_error_registry::instance();
  t->ticket = registry.enqueue(id);
  if (const cudaError_t r = cudaLaunchHostFunc(handle, &task::trampoline, t.get()); r != cudaSuccess) {
    registry.finish(id, t->ticket, nullptr);
    detail::throw_cuda(r, "cudaLaunchHostFunc", __FILE__, __LINE__);
  }
  t.release();
  detail::count(detail::counters<backend::cuda>().enqueues);
}
#endif

inline void stream_ref<backend::host>::synchronize() const {
  detail::host_queue* q = detail::checked(*this);
  detail::count(detail::counters<backend::host>().synchronizations);
  q->drain();
  detail::rethrow_if(q->take_error());
}

#if FERRY_HAS_CUDA
inline void stream_ref<backend::cuda>::synchronize() const {
  const cudaStream_t handle = detail::checked(*this);
  detail::count(detail::counters<backend::cuda>().synchronizations);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(handle));
  auto& registry = detail::stream_error_registry::instance();
  if (registry.any()) detail::rethrow_if(registry.take(id(), detail::stream_errors::all));
}
#endif

}  // namespace ferry
