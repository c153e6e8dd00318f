// Benchmark support: the CUDA runtime API calls an operation makes in steady state (SPEC §10),
// counted with CUPTI's callback API (runtime API domain: every API entry, by name) in a pass of its
// own, apart from any timing: a subscribed callback costs every call host time. ferry makes no
// driver API calls of its own, so these are all the CUDA calls an operation makes.
//
// Counted: the calls made on the thread that runs count(op), inside op; a benchmark's own drains,
// holds and launches around it are not. CUPTI allows one subscriber per process, so no
// ferry::sync_guard may be alive meanwhile. Built without CUPTI (FERRY_BENCH_CUPTI unset), or
// when another tool holds CUPTI, nothing is counted and every figure is NaN (null in the JSON)
// with the reason beside it: never a silent zero.
#pragma once

#include "bench.hpp"

#if FERRY_BENCH_CUPTI
#include <cupti.h>
#endif

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <thread>

namespace ferry_bench {

/// Runtime API calls per operation: in total and by API name (per-thread-stream variants and
/// version suffixes folded into the name users write); `note` says why when not measured.
struct calls_per_op {
  double total = std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, double> by_name;
  std::string note;

  [[nodiscard]] bool measured() const { return note.empty(); }
  /// Calls per operation whose name starts with `prefix` ("cudaEvent": records and queries).
  [[nodiscard]] double starting_with(std::string_view prefix) const {
    if (!measured()) return total;
    double n = 0;
    for (const auto& [name, k] : by_name)
      if (std::string_view(name).starts_with(prefix)) n += k;
    return n;
  }
  /// "cudaLaunchKernel 1.00, cudaMemcpyAsync 1.00", "none", or why it was not measured.
  [[nodiscard]] std::string names() const {
    if (!measured()) return "not measured (" + note + ")";
    std::string s;
    for (const auto& [name, k] : by_name) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %.2f", k);
      s += (s.empty() ? "" : ", ") + name + buf;
    }
    return s.empty() ? "none" : s;
  }
};

/// A CUPTI subscription to the runtime API domain for as long as it lives.
class runtime_calls {
 public:
#if FERRY_BENCH_CUPTI
  runtime_calls() {
    if (const auto r = cuptiSubscribe(&sub_, &on_call, this); r != CUPTI_SUCCESS) {
      why_ = "cuptiSubscribe: " + error_name(r);
      if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) why_ += " (another tool or a sync_guard holds CUPTI)";
      return;
    }
    if (const auto r = cuptiEnableDomain(1, sub_, CUPTI_CB_DOMAIN_RUNTIME_API); r != CUPTI_SUCCESS) {
      why_ = "cuptiEnableDomain: " + error_name(r);
      cuptiUnsubscribe(sub_);
      return;
    }
    subscribed_ = true;
  }
  ~runtime_calls() {
    if (subscribed_) cuptiUnsubscribe(sub_);
  }
#else
  runtime_calls() = default;
#endif
  runtime_calls(const runtime_calls&) = delete;
  runtime_calls& operator=(const runtime_calls&) = delete;

  /// Runs op() and counts the runtime calls it makes on this thread.
  template <class Op>
  void count(Op&& op) {
    counting_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    op();
    counting_.store(std::thread::id{}, std::memory_order_relaxed);
  }
  void reset() {
    for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
  }
  /// What was counted since the last reset(), per operation over `ops` operations.
  [[nodiscard]] calls_per_op per_op(std::size_t ops) const {
    calls_per_op r;
    if (!subscribed_) {
      r.note = why_;
      return r;
    }
    std::uint64_t total = 0;
    for (std::size_t id = 0; id < counts_.size(); ++id) {
      const std::uint64_t n = counts_[id].load(std::memory_order_relaxed);
      if (n == 0) continue;
      total += n;
      r.by_name[name_of(id)] += static_cast<double>(n) / static_cast<double>(ops);
    }
    r.total = static_cast<double>(total) / static_cast<double>(ops);
    return r;
  }

 private:
#if FERRY_BENCH_CUPTI
  static constexpr std::size_t ids = CUPTI_RUNTIME_TRACE_CBID_SIZE;
  static void CUPTIAPI on_call(void* user, CUpti_CallbackDomain, CUpti_CallbackId id, const void* data) {
    auto* const self = static_cast<runtime_calls*>(user);
    const auto* const info = static_cast<const CUpti_CallbackData*>(data);
    if (info->callbackSite != CUPTI_API_ENTER || id >= ids ||
        self->counting_.load(std::memory_order_relaxed) != std::this_thread::get_id())
      return;
    self->counts_[id].fetch_add(1, std::memory_order_relaxed);
  }
  static std::string name_of(std::size_t id) {
    const char* n = nullptr;
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, static_cast<std::uint32_t>(id), &n) != CUPTI_SUCCESS || !n)
      return "cbid " + std::to_string(id);
    std::string s = n;
    for (const char* suffix : {"_ptsz_", "_ptds_", "_v"})
      if (const auto p = s.rfind(suffix); p != std::string::npos) s.erase(p);
    return s;
  }
  static std::string error_name(CUptiResult r) {
    const char* s = nullptr;
    cuptiGetResultString(r, &s);
    return s ? s : "CUPTI error " + std::to_string(static_cast<int>(r));
  }
  CUpti_SubscriberHandle sub_{};
  std::string why_;
#else
  static constexpr std::size_t ids = 1;
  static std::string name_of(std::size_t) { return {}; }
  std::string why_ = "built without CUPTI";
#endif
  bool subscribed_ = false;
  std::atomic<std::thread::id> counting_{};  // the thread whose calls count now (none: no one's)
  std::array<std::atomic<std::uint64_t>, ids> counts_{};
};

/// Runtime calls per operation in steady state: op(i) for i in [0, warm + ops), `before(i)` ahead
/// of each (a drain, a hold: never counted); the first `warm` calls are not counted, the next
/// `ops` are. The subscription lives for this pass only, so that no timed run pays for it.
template <class Op, class Before>
calls_per_op steady_calls(Op&& op, Before&& before, std::size_t ops = 1000, std::size_t warm = 1000) {
  std::size_t i = 0;
  for (; i < warm; ++i) {
    before(i);
    op(i);
  }
  runtime_calls rc;
  for (; i < warm + ops; ++i) {
    before(i);
    rc.count([&] { op(i); });
  }
  return rc.per_op(ops);
}

}  // namespace ferry_bench
