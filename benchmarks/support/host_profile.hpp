// ferry_bench::host_profile: where a row's host time per step goes, on a machine without a
// profiler. A timer (timer_create on CLOCK_MONOTONIC: a CPU-time clock ticks only as often as the
// scheduler) signals the calling thread only, every `period_us` microseconds; while sampling is on
// (the thread runs steps without blocking), the handler stores the stack's return addresses
// (backtrace() into a preallocated buffer, nothing else). split() names them afterwards: dladdr
// for shared libraries (the CUDA runtime's exported entry points, libc), `addr2line -C -f -i` for
// this executable (built with -g: inlined functions are named too, template arguments dropped),
// and charges each sample to a place (charge(): the ferry call and the runtime entry or
// ferry::detail function under it, or the row's own code). Host-only; Linux with glibc. The
// shares are of the time sampling was on.
#pragma once

#include <support/bench.hpp>

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ferry_bench {

class host_profile {
 public:
  static constexpr int max_depth = 48;
  /// The handler's frame and the signal trampoline's, above the interrupted code.
  static constexpr int skipped_frames = 2;
  using stack = std::array<void*, max_depth>;

  /// Room for `max_samples` samples, one every `period_us` while on(), of the calling thread.
  explicit host_profile(std::size_t max_samples = 1 << 16, long period_us = 20) : samples_(max_samples) {
    void* warm[4];
    (void)backtrace(warm, 4);  // loads the unwinder now, not inside the handler
    the() = this;
    struct sigaction sa {};
    sa.sa_sigaction = &handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, &old_) != 0) throw std::runtime_error("host_profile: sigaction failed");
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer_) != 0)
      throw std::runtime_error("host_profile: timer_create failed");
    itimerspec it{};
    it.it_interval.tv_nsec = period_us * 1000;
    it.it_value = it.it_interval;
    timer_settime(timer_, 0, &it, nullptr);
  }
  ~host_profile() {
    timer_delete(timer_);
    sigaction(SIGPROF, &old_, nullptr);
    the() = nullptr;
  }
  host_profile(const host_profile&) = delete;
  host_profile& operator=(const host_profile&) = delete;

  /// Samples are taken only between on() and off() (a burst's steps, not its drain).
  void on() { sampling_.store(true, std::memory_order_relaxed); }
  void off() { sampling_.store(false, std::memory_order_relaxed); }
  /// Samples taken so far (at most max_samples).
  [[nodiscard]] std::size_t samples() const { return std::min(taken_.load(), samples_.size()); }

  /// The samples so far by where they are charged (charge()), most first.
  [[nodiscard]] std::vector<std::pair<std::string, std::size_t>> split() const {
    name_frames();
    std::map<std::string, std::size_t> by;
    const std::size_t n = samples();
    for (std::size_t i = 0; i < n; ++i) ++by[charge(samples_[i].frames, samples_[i].depth)];
    std::vector<std::pair<std::string, std::size_t>> out(by.begin(), by.end());
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
  }

 private:
  struct sample {
    stack frames{};
    int depth = 0;
  };

  static host_profile*& the() {
    static host_profile* p = nullptr;
    return p;
  }
  static void handler(int, siginfo_t*, void*) {
    host_profile* p = the();
    if (p == nullptr || !p->sampling_.load(std::memory_order_relaxed)) return;
    const std::size_t i = p->taken_.fetch_add(1, std::memory_order_relaxed);
    if (i >= p->samples_.size()) return;
    auto& s = p->samples_[i];
    s.depth = backtrace(s.frames.data(), max_depth);
  }

  /// Names every frame of the samples so far (names_): one addr2line run for this executable's.
  void name_frames() const {
    std::vector<std::pair<void*, std::uintptr_t>> own;  // (pc, offset in this executable)
    const std::size_t n = samples();
    for (std::size_t i = 0; i < n; ++i)
      for (int f = 0; f < samples_[i].depth; ++f) {
        void* pc = samples_[i].frames[static_cast<std::size_t>(f)];
        if (names_.count(pc)) continue;
        auto& out = names_[pc];
        Dl_info info{};
        // A return address points after its call: pc - 1 is inside the call instruction.
        void* at = static_cast<char*>(pc) - 1;
        if (dladdr(at, &info) == 0 || info.dli_fname == nullptr) {
          out.push_back("?");
        } else if (std::string file = info.dli_fname; file.empty() || real_path(file) == self_path()) {
          own.emplace_back(pc, reinterpret_cast<std::uintptr_t>(at) - reinterpret_cast<std::uintptr_t>(info.dli_fbase));
        } else {
          out.push_back(file.substr(file.rfind('/') + 1) + ": " + (info.dli_sname ? info.dli_sname : "?"));
        }
      }
    if (own.empty()) return;
    // addr2line -a: each address's line, then its inlined chain (function, file:line), innermost first.
    char path[] = "/tmp/ferry_host_profile_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return;
    {
      std::ostringstream addrs;
      for (const auto& [pc, off] : own) addrs << "0x" << std::hex << off << "\n";
      const std::string text = addrs.str();
      (void)!write(fd, text.data(), text.size());
      close(fd);
    }
    const std::string cmd = "addr2line -a -C -f -i -e '" + self_path() + "' < " + path + " 2>/dev/null";
    std::unique_ptr<FILE, int (*)(FILE*)> f(popen(cmd.c_str(), "r"), pclose);
    std::size_t k = 0;
    std::vector<std::string>* out = nullptr;
    char line[8192];
    int field = 0;  // after an address line: function, file:line, function, file:line, ...
    while (f && fgets(line, sizeof line, f.get())) {
      std::string l(line);
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      if (l.rfind("0x", 0) == 0 && field % 2 == 0 && k < own.size()) {
        out = &names_[own[k++].first];
        field = 0;
        continue;
      }
      if (out && field++ % 2 == 0) out->push_back(function_name(l));
    }
    unlink(path);
    for (const auto& [pc, off] : own)
      if (names_[pc].empty()) names_[pc].push_back("?");
  }

  static std::string real_path(const std::string& file) {
    std::unique_ptr<char, void (*)(void*)> p(realpath(file.c_str(), nullptr), free);
    return p ? std::string(p.get()) : file;
  }
  /// This executable's path (dladdr names it as it was started, perhaps relative).
  static std::string self_path() {
    static const std::string p = [] {
      char buf[4096];
      const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
      return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    }();
    return p;
  }

  /// "void ferry::detail::step_core<...>::encode(std::byte*, ...) const" →
  /// "ferry::detail::step_core::encode": no return type, template arguments or parameters.
  static std::string function_name(std::string s) {
    for (std::size_t at; (at = s.find("(anonymous namespace)")) != std::string::npos;) s.replace(at, 21, "{anon}");
    std::string out;
    int depth = 0;
    for (const char c : s) {
      if (c == '<') ++depth;
      else if (c == '>') depth = std::max(0, depth - 1);
      else if (depth > 0) continue;
      else if (c == '(') break;
      else if (c == ' ' && !out.ends_with("operator")) out.clear();  // a return type before the name
      else out += c;
    }
    return out.empty() ? s : out;
  }

  static bool is_runtime(const std::string& n) {
    return n.rfind("libcudart", 0) == 0 || n.rfind("libcuda.", 0) == 0;
  }

  /// Where a sample is charged: under the outermost ferry:: frame (the public call: submit, begin,
  /// a handle's span, ...) where there is one, the CUDA runtime entry point it is in ("cuda runtime:
  /// cudaGraphLaunch": the call and the driver's work under it), else the innermost ferry::detail
  /// frame (the work: encode, check_gathers, ...); outside ferry, the innermost named function
  /// (the row's own code), with "> libc" when the sample is in libc under it.
  std::string charge(const stack& frames, int n) const {
    std::vector<std::string> chain;  // innermost first, inlined frames expanded
    for (int f = skipped_frames; f < n; ++f)
      for (auto& name : names_.at(frames[static_cast<std::size_t>(f)])) chain.push_back(name);
    auto ferry = [](const std::string& x) { return x.rfind("ferry::", 0) == 0; };
    const auto outer = std::find_if(chain.rbegin(), chain.rend(), ferry);
    const std::string call = outer == chain.rend() ? "" : *outer + " > ";
    const auto runtime = std::find_if(chain.rbegin(), chain.rend(), is_runtime);
    if (runtime != chain.rend()) return call + "cuda runtime: " + runtime->substr(runtime->find(": ") + 2);
    if (outer != chain.rend()) {
      const auto work = std::find_if(chain.begin(), chain.end(),
                                     [](const std::string& x) { return x.rfind("ferry::detail::", 0) == 0; });
      return work == chain.end() || *work == *outer ? *outer : call + *work;
    }
    const auto named = std::find_if(chain.begin(), chain.end(), [](const std::string& x) {
      return x != "?" && x.rfind("libc.", 0) != 0 && x.rfind("libstdc++", 0) != 0;
    });
    if (named == chain.end()) return "?";
    return *named + (chain.front().rfind("libc.", 0) == 0 ? " > libc" : "");
  }

  std::vector<sample> samples_;
  std::atomic<std::size_t> taken_{0};
  std::atomic<bool> sampling_{false};
  timer_t timer_{};
  struct sigaction old_ {};
  mutable std::map<void*, std::vector<std::string>> names_;
};

/// The split of `steps` calls of `step` in each of `bursts` bursts, `drain` between bursts (not
/// sampled), by where the samples are charged (host_profile::split): each place's share of the
/// samples, most first; places under `min_share` each are merged into one "other" line.
template <class Step, class Drain>
std::vector<std::pair<std::string, double>> sample_steps(int bursts, int steps, Step&& step, Drain&& drain,
                                                         double min_share = 0.01) {
  host_profile p;
  for (int b = 0; b < bursts; ++b) {
    p.on();
    for (int k = 0; k < steps; ++k) step();
    p.off();
    drain();
  }
  std::vector<std::pair<std::string, double>> out;
  double other = 0;
  const auto n = static_cast<double>(p.samples());
  for (const auto& [path, count] : p.split()) {
    const double share = static_cast<double>(count) / n;
    if (share >= min_share) out.emplace_back(path, share);
    else other += share;
  }
  if (other > 0) out.emplace_back("other (places under " + std::to_string(static_cast<int>(min_share * 100)) + "% each)", other);
  return out;
}

/// One row's sample_steps() into `rep.host_profile`, a line each: the row's identifying columns
/// `of`, then "where", "share" and "us per step" (the share times `figure`, the row's timed host
/// µs per step in the same regime); each line is printed too.
template <class Step, class Drain>
void profile_row(report& rep, const row& of, double figure, int bursts, int steps, Step&& step, Drain&& drain) {
  std::string name;
  for (const auto& [k, v] : of) name += (name.empty() ? "" : ", ") + std::get<std::string>(v);
  for (const auto& [where, share] : sample_steps(bursts, steps, step, drain)) {
    row r = of;
    r.insert(r.end(), {{"where", where}, {"share", share}, {"us per step", share * figure}});
    rep.host_profile.push_back(std::move(r));
    std::ostringstream line;
    line << "  host profile: " << name << ": " << std::fixed << std::setprecision(3) << share * figure << " us ("
         << std::setprecision(1) << share * 100 << "%) " << where;
    std::cout << line.str() << std::endl;
  }
}

}  // namespace ferry_bench
