// liblaunch_tap.so: the host time of every cudaLaunchKernel and cudaGraphLaunch call of a process,
// by row, regime and kernel. Loaded with LD_PRELOAD into a benchmark (tools/gpu-check's launch
// phase: bench.decode_step and its before build), it stands in front of the CUDA runtime's two entry
// points, reads the time-stamp counter around the call it forwards, and adds the call's time to a
// histogram of the row the benchmark named last (support/launch_tap.hpp's tap_row; "(untagged)"
// before the first or after a null row). No source change in ferry or a row is needed, and every
// row is timed the same way, ferry's and the floors' alike.
//
// FERRY_LAUNCH_TAP_FENCE=1: a full fence (mfence) just before each call, timed apart: the stores
// the caller made before the launch have landed when the call starts, so the call's time no longer
// includes waiting for them, and the fence's time is what they cost to drain.
// FERRY_LAUNCH_TAP_OUT=FILE: where the JSON goes at exit (standard error without it):
//   {"tsc_ghz", "fence", "entries": [{"row", "regime", "call", "kernel", "launches", "grid_min",
//    "grid_max", "grid_mean", "call_us": {"p10", "p50", "p90", "mean"}, "fence_us": same or null}],
//    "threads": [{"tid", "launches", "sched": the scheduler's migrations and switches of the thread
//    (/proc), "cpus": {CPU: the thread's tap_row calls on it}}]}
// (processes of one build differ by more than a tenth: these say whether where a process ran does).
// The histograms hold 16-tick bins up to 2^17 ticks (about 40 µs); a longer call counts in the
// last bin (medians are unaffected) and in the mean at its own length. Recording happens after the
// call returns, in the calling thread's own tables: no lock or atomic before a launch. Host-only;
// Linux, x86-64.
#include <cuda_runtime_api.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr int bin_shift = 4;  // 16 ticks a bin
constexpr std::size_t bins = std::size_t{1} << 13;

struct histogram {
  std::array<std::uint32_t, bins> counts{};
  double sum_ticks = 0;
  void add(std::uint64_t ticks) noexcept {
    counts[std::min<std::uint64_t>(ticks >> bin_shift, bins - 1)] += 1;
    sum_ticks += static_cast<double>(ticks);
  }
};

/// One kernel (or graph launches) of one row and regime.
struct entry {
  const char* row;
  const char* regime;
  const void* func;  // null: cudaGraphLaunch
  std::string kernel;
  std::uint64_t launches = 0, grid_sum = 0;
  std::uint32_t grid_min = UINT32_MAX, grid_max = 0;
  histogram call, fence;
};

/// A thread's entries; `row`/`regime`: what tap_row named last on this thread; `cpus`: the CPU
/// it ran on at each tap_row call.
struct thread_table {
  const char* row = nullptr;
  const char* regime = nullptr;
  std::vector<std::unique_ptr<entry>> entries;
  entry* last = nullptr;
  pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  std::map<int, std::uint64_t> cpus;
  entry& find(const void* func) {
    if (last && last->func == func && last->row == row && last->regime == regime) return *last;
    for (auto& e : entries)
      if (e->func == func && e->row == row && e->regime == regime) return *(last = e.get());
    entries.push_back(std::make_unique<entry>(entry{row, regime, func, {}}));
    return *(last = entries.back().get());
  }
};

using launch_fn = cudaError_t (*)(const void*, dim3, dim3, void**, std::size_t, cudaStream_t);
using graph_fn = cudaError_t (*)(cudaGraphExec_t, cudaStream_t);
using name_fn = cudaError_t (*)(const char**, const void*);

struct tap_state {
  launch_fn launch = reinterpret_cast<launch_fn>(dlsym(RTLD_NEXT, "cudaLaunchKernel"));
  graph_fn graph = reinterpret_cast<graph_fn>(dlsym(RTLD_NEXT, "cudaGraphLaunch"));
  name_fn name = reinterpret_cast<name_fn>(dlsym(RTLD_NEXT, "cudaFuncGetName"));
  bool fence = [] {
    const char* f = std::getenv("FERRY_LAUNCH_TAP_FENCE");
    return f && std::strcmp(f, "0") != 0 && *f != '\0';
  }();
  std::uint64_t tsc0 = __rdtsc();
  timespec t0 = now();
  std::mutex m;  // guards tables (a thread's first launch, and the exit)
  std::vector<std::unique_ptr<thread_table>> tables;

  static timespec now() noexcept {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
  }
  thread_table& mine() {
    static __thread thread_table* t __attribute__((tls_model("initial-exec"))) = nullptr;
    if (!t) {
      std::lock_guard<std::mutex> lock(m);
      tables.push_back(std::make_unique<thread_table>());
      t = tables.back().get();
    }
    return *t;
  }
};

tap_state& state() {
  static tap_state* s = new tap_state;  // never destroyed: launches may come during exit
  return *s;
}

/// Names of kernels, resolved outside any timed call: by the runtime in tap_row, by their host
/// symbol alone at exit (the runtime may be torn down by then).
void name_entries(thread_table& t, bool ask_runtime) {
  tap_state& s = state();
  for (auto& e : t.entries) {
    if (!e->kernel.empty()) continue;
    if (!e->func) {
      e->kernel = "(graph)";
      continue;
    }
    const char* raw = nullptr;
    if (!ask_runtime || !s.name || s.name(&raw, e->func) != cudaSuccess) raw = nullptr;
    if (Dl_info info{}; !raw && dladdr(e->func, &info)) raw = info.dli_sname;
    if (!raw) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "%p", e->func);
      e->kernel = hex;
      continue;
    }
    int status = 0;
    char* d = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
    e->kernel = status == 0 && d ? d : raw;
    std::free(d);
  }
}

void record(thread_table& t, const void* func, std::uint32_t grid, std::uint64_t t0, std::uint64_t t1,
            std::uint64_t t2) {
  entry& e = t.find(func);
  e.launches += 1;
  e.grid_sum += grid;
  e.grid_min = std::min(e.grid_min, grid);
  e.grid_max = std::max(e.grid_max, grid);
  e.call.add(t2 - t1);
  if (state().fence) e.fence.add(t1 - t0);
}

/// The timed call: t0, [fence, t1], the call, t2.
template <class Call>
cudaError_t timed(const void* func, std::uint32_t grid, Call&& call) {
  tap_state& s = state();
  thread_table& t = s.mine();
  const std::uint64_t t0 = __rdtsc();
  std::uint64_t t1 = t0;
  if (s.fence) {
    _mm_mfence();
    _mm_lfence();  // the counter is read once the fence has completed
    t1 = __rdtsc();
  }
  const cudaError_t r = call();
  _mm_lfence();
  const std::uint64_t t2 = __rdtsc();
  record(t, func, grid, t0, t1, t2);
  return r;
}

void write_stats(std::FILE* f, const histogram& h, std::uint64_t n, double ticks_per_us) {
  if (n == 0) {
    std::fputs("null", f);
    return;
  }
  auto quantile = [&](double q) {
    const auto want = static_cast<std::uint64_t>(q * static_cast<double>(n - 1));
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < bins; ++b) {
      seen += h.counts[b];
      if (seen > want) return (static_cast<double>(b << bin_shift) + 8.0) / ticks_per_us;  // the bin's middle
    }
    return static_cast<double>(bins << bin_shift) / ticks_per_us;
  };
  std::fprintf(f, "{\"p10\": %.4f, \"p50\": %.4f, \"p90\": %.4f, \"mean\": %.4f}", quantile(0.1), quantile(0.5),
               quantile(0.9), h.sum_ticks / static_cast<double>(n) / ticks_per_us);
}

/// The scheduler's counts for thread `tid` of this process (/proc: migrations between CPUs,
/// switches it asked for and switches forced on it), as JSON.
std::string sched_counts(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/sched");
  std::string line, out;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(' ') + 1);
    if (key != "se.nr_migrations" && key != "nr_voluntary_switches" && key != "nr_involuntary_switches") continue;
    out += (out.empty() ? "\"" : ", \"") + key + "\": " + std::to_string(std::strtoull(line.c_str() + colon + 1, nullptr, 10));
  }
  return "{" + out + "}";
}

void write_string(std::FILE* f, const char* s) {
  std::fputc('"', f);
  for (; s && *s; ++s) {
    if (*s == '"' || *s == '\\') std::fputc('\\', f);
    if (static_cast<unsigned char>(*s) >= 0x20) std::fputc(*s, f);
  }
  std::fputc('"', f);
}

__attribute__((destructor)) void write_report() {
  tap_state& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  // A process that launched nothing and named no row writes nothing: the children a benchmark
  // starts (addr2line) inherit LD_PRELOAD, and must not overwrite its file.
  if (s.tables.empty()) return;
  const timespec t1 = tap_state::now();
  const double ns = static_cast<double>(t1.tv_sec - s.t0.tv_sec) * 1e9 + static_cast<double>(t1.tv_nsec - s.t0.tv_nsec);
  const double ticks_per_us = static_cast<double>(__rdtsc() - s.tsc0) / ns * 1e3;
  const char* path = std::getenv("FERRY_LAUNCH_TAP_OUT");
  std::FILE* f = path && *path ? std::fopen(path, "w") : stderr;
  if (!f) {
    std::fprintf(stderr, "launch tap: cannot write %s\n", path);
    return;
  }
  std::fprintf(f, "{\"tsc_ghz\": %.4f, \"fence\": %s, \"entries\": [", ticks_per_us / 1e3, s.fence ? "true" : "false");
  bool first = true;
  for (auto& t : s.tables) {
    name_entries(*t, false);
    for (auto& e : t->entries) {
      std::fputs(first ? "\n  {\"row\": " : ",\n  {\"row\": ", f);
      first = false;
      write_string(f, e->row ? e->row : "(untagged)");
      std::fputs(", \"regime\": ", f);
      write_string(f, e->regime ? e->regime : "");
      std::fprintf(f, ", \"call\": \"%s\", \"kernel\": ", e->func ? "cudaLaunchKernel" : "cudaGraphLaunch");
      write_string(f, e->kernel.c_str());
      std::fprintf(f, ", \"launches\": %llu, \"grid_min\": %u, \"grid_max\": %u, \"grid_mean\": %.2f, \"call_us\": ",
                   static_cast<unsigned long long>(e->launches), e->grid_min, e->grid_max,
                   static_cast<double>(e->grid_sum) / static_cast<double>(e->launches));
      write_stats(f, e->call, e->launches, ticks_per_us);
      std::fputs(", \"fence_us\": ", f);
      write_stats(f, e->fence, s.fence ? e->launches : 0, ticks_per_us);
      std::fputc('}', f);
    }
  }
  std::fputs("\n], \"threads\": [", f);
  first = true;
  for (auto& t : s.tables) {
    std::uint64_t launches = 0;
    for (auto& e : t->entries) launches += e->launches;
    std::fprintf(f, "%s\n  {\"tid\": %d, \"launches\": %llu, \"sched\": %s, \"cpus\": {", first ? "" : ",",
                 static_cast<int>(t->tid), static_cast<unsigned long long>(launches), sched_counts(t->tid).c_str());
    first = false;
    bool first_cpu = true;
    for (const auto& [cpu, n] : t->cpus) {
      std::fprintf(f, "%s\"%d\": %llu", first_cpu ? "" : ", ", cpu, static_cast<unsigned long long>(n));
      first_cpu = false;
    }
    std::fputs("}}", f);
  }
  std::fputs("\n]}\n", f);
  if (f != stderr) std::fclose(f);
}

}  // namespace

extern "C" {

/// The row (and regime) whose launches follow on the calling thread; null: none. The strings must
/// live until exit (a benchmark's labels). Also names the kernels seen so far (outside any timing).
__attribute__((visibility("default"))) void ferry_launch_tap_row(const char* row, const char* regime) {
  thread_table& t = state().mine();
  t.row = row;
  t.regime = regime;
  t.cpus[sched_getcpu()] += 1;
  name_entries(t, true);
}

__attribute__((visibility("default"))) cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block,
                                                                    void** args, std::size_t shared,
                                                                    cudaStream_t stream) {
  tap_state& s = state();
  if (!s.launch) return cudaErrorNotSupported;
  return timed(func, grid.x * grid.y * grid.z, [&] { return s.launch(func, grid, block, args, shared, stream); });
}

__attribute__((visibility("default"))) cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  tap_state& s = state();
  if (!s.graph) return cudaErrorNotSupported;
  return timed(nullptr, 0, [&] { return s.graph(exec, stream); });
}

}  // extern "C"
