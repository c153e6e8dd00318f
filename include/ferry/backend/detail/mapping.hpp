// ferry/backend/detail/mapping.hpp: whether a device's mapping of pinned memory is live (a kernel
// reads the host's writes through the mapped address, and the host reads the kernel's), proven
// once per process and device by a probe (docs/backends.md, "A live mapping, proven once").
#pragma once

#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

namespace ferry::detail {

/// What a mapping probe found: the mapping is live, else the first word the host wrote and what
/// came back from the kernel that read it through the mapped address and wrote it back.
struct mapping_finding {
  bool live = true;
  std::uint64_t wrote = 0;
  std::uint64_t read = 0;
};

/// A probe of one backend: writes a pattern into pinned, mapped memory of `device`, has a kernel
/// read it through the mapped address and write it back through the mapping, and compares.
using mapping_probe = mapping_finding (*)(int device);

/// What ferry knows of a device's mapping.
enum class mapping_state : unsigned char {
  unknown,  ///< not proven: no probe has run (none could, or none was asked for yet)
  live,     ///< the probe read the host's pattern back
  dead,     ///< the probe read something else: kernels must not read pinned memory in place
};

/// The test hook: while true, every probe reports the mapping dead (the probe still runs in full;
/// the value it read back is reported altered), so that the paths taken on a machine whose
/// mapping is not live (Confidential Computing, WSL2) are tested anywhere. Set it, then
/// mapping_verdicts<B>::instance().forget().
inline std::atomic<bool>& mapping_probe_fails() noexcept {
  static std::atomic<bool> fails{false};
  return fails;
}

/// The pattern word i of a probe: no zero byte, different in every word and every byte lane.
constexpr std::uint64_t mapping_pattern(std::size_t i) noexcept {
  return 0xF3EE5A5AC3A5963CULL ^ (0x0101010101010101ULL * static_cast<std::uint64_t>(i + 1));
}

/// Compares what came back (`back`, `words` of them) with the pattern, the test hook applied.
inline mapping_finding mapping_compare(const std::uint64_t* back, std::size_t words) noexcept {
  const bool fail = mapping_probe_fails().load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t got = fail && i == 0 ? ~back[i] : back[i];
    if (got != mapping_pattern(i)) return {false, mapping_pattern(i), got};
  }
  return {};
}

/// The verdict of backend B's probe per device, each found once (the first component that needs
/// it), then a load. The probe of the host backend is built in; CUDA's lives with ferry's kernels
/// (mapping_probe.cuh) and is offered to the whole process by every translation unit built by
/// nvcc that includes <ferry/ferry.cuh>: a program without one keeps the allocation flags' check
/// only (state() stays unknown). Thread-safe.
template <class B>
class mapping_verdicts {
 public:
  static mapping_verdicts& instance() {
    static auto* v = new mapping_verdicts;  // leaked: components may outlive static destruction
    return *v;
  }

  /// Registers `probe` as the backend's probe, unless one already is.
  void offer(mapping_probe probe) noexcept {
    mapping_probe none = nullptr;
    probe_.compare_exchange_strong(none, probe, std::memory_order_acq_rel);
  }

  /// The verdict for `device`: found by the probe at the first call (another thread asking
  /// meanwhile waits for it), then remembered. unknown without a probe, or for a device past
  /// timeline_max_devices. A probe that fails to run (a CUDA error, its wait past the bound)
  /// throws, and the next call probes again.
  mapping_state state(int device) {
    if (device < 0 || device >= timeline_max_devices) return mapping_state::unknown;
    auto& slot = states_[static_cast<std::size_t>(device)];
    if (const auto s = slot.load(std::memory_order_acquire); s != mapping_state::unknown) return s;
    const mapping_probe probe = probe_.load(std::memory_order_acquire);
    if (probe == nullptr) return mapping_state::unknown;
    std::lock_guard lock(mutex_);
    if (const auto s = slot.load(std::memory_order_acquire); s != mapping_state::unknown) return s;
    const mapping_finding f = probe(device);
    findings_[static_cast<std::size_t>(device)] = f;
    const auto s = f.live ? mapping_state::live : mapping_state::dead;
    slot.store(s, std::memory_order_release);
    return s;
  }
  /// The verdict already found (no probe runs): what the reuse core asks before a kernel writes
  /// its counter through the mapping.
  [[nodiscard]] mapping_state known(int device) const noexcept {
    if (device < 0 || device >= timeline_max_devices) return mapping_state::unknown;
    return states_[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
  }
  /// What the probe found on `device` (after state() said dead).
  [[nodiscard]] mapping_finding finding(int device) {
    std::lock_guard lock(mutex_);
    return findings_[static_cast<std::size_t>(device)];
  }
  /// Forgets every verdict: the next state() probes again (the test hook's companion).
  void forget() noexcept {
    std::lock_guard lock(mutex_);
    for (auto& s : states_) s.store(mapping_state::unknown, std::memory_order_release);
  }

 private:
  mapping_verdicts();

  std::atomic<mapping_probe> probe_{nullptr};
  std::mutex mutex_;
  std::array<std::atomic<mapping_state>, timeline_max_devices> states_{};
  std::array<mapping_finding, timeline_max_devices> findings_{};
};

/// The host backend's probe: the "mapping" is the memory itself (mapped() is the host address),
/// read and written back by another thread (the host backend's kernels run on stream workers). It
/// fails only under the test hook.
inline mapping_finding probe_host_mapping(int /*device*/) {
  constexpr std::size_t words = mapping_probe_words;
  std::array<std::uint64_t, 2 * words> memory{};
  for (std::size_t i = 0; i < words; ++i) memory[i] = mapping_pattern(i);
  std::thread([src = memory.data(), dst = memory.data() + words] {
    for (std::size_t i = 0; i < words; ++i) dst[i] = static_cast<const volatile std::uint64_t*>(src)[i];
  }).join();
  return mapping_compare(memory.data() + words, words);
}

template <class B>
mapping_verdicts<B>::mapping_verdicts() {
  if constexpr (std::is_same_v<B, backend::host>) offer(&probe_host_mapping);
}

/// The message of a component that needs a live mapping on a device whose probe found it dead.
inline std::string dead_mapping_text(const char* component, int device, const mapping_finding& f) {
  char words[96];
  std::snprintf(words, sizeof words, "the host wrote 0x%016llx and got back 0x%016llx",
                static_cast<unsigned long long>(f.wrote), static_cast<unsigned long long>(f.read));
  return std::string("ferry: ") + component + ": kernels on device " + std::to_string(device) +
         " do not see pinned memory through its mapped address (ferry's mapping probe: " + words +
         " from a kernel that read and wrote it through the mapping): the allocation flags say mapped, but the "
         "mapping is not live (Confidential Computing, WSL2?). Nothing here may be read in place by a kernel. "
         "The way out: staged_write_tensor with ferry::target::uva_or_device (its target in device memory, "
         "every apply copied H2D) and ferry's copies (async_h2d, to_host) work on such a device; or run where "
         "UVA works (docs/troubleshooting.md, \"The mapping is not live\")";
}

/// Throws ferry::error (dead_mapping_text) when backend B's probe finds `device`'s mapping dead;
/// runs the probe the first time. `component`: what needs it, for the message.
template <class B>
void require_live_mapping(int device, const char* component) {
  auto& v = mapping_verdicts<B>::instance();
  if (v.state(device) == mapping_state::dead) throw error(dead_mapping_text(component, device, v.finding(device)));
}

}  // namespace ferry::detail
