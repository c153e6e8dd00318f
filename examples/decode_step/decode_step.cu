// decode_step: one engine step's input preparation built from ferry (SPEC §11; the step itself is
// decode_step.hpp: one ferry::step_batch, submitted as one kernel launch, or with --graph as one
// graph replay), run on the GPU when there is one and on ferry's host backend otherwise.
//
// 1. Checks: K steps, each followed by a read-back (ferry::async_d2h into pinned buffers, then one
//    synchronize) of the block table, the published positions and sequence lengths, the packed
//    sampling arrays, the logprob matrix and the logits indices, compared with a host model of
//    the same step; then the timed steps; then K more checked steps (after the host ran far ahead
//    of the device). Any mismatch: a message and exit code 1.
// 2. Times: host µs per step (SPEC §10: bursts of steps, the stream drained between bursts, the
//    median) and device µs per step (CUDA: events around a burst queued behind a kernel that holds
//    the stream; host backend: wall time of a burst queued behind a held queue, until drained).
//
// Usage: decode_step [--steps N] [--check K] [--host] [--graph]
//   --steps N  timed steps (default 5120: bursts of 256), --check K  checked steps before and
//   after timing (default 16), --host  use the host backend even when a GPU is present,
//   --graph  submit each step as the replay of its slot's CUDA graph (ferry::launch::graph).
// With FERRY_REQUIRE_GPU=1 a missing GPU is an error (the GPU machine's test run).
// Built by nvcc when available; without nvcc it is built as C++ for the host backend only.
#include "decode_step.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace decode_step;

/// Command-line options.
struct options {
  long steps = 5120;
  long check = 16;
  bool force_host = false;
  bool graph = false;
};

/// The host model of the step: the same scheduler, applied to plain host arrays.
struct reference {
  scheduler sched;
  std::vector<std::int32_t> table = std::vector<std::int32_t>(max_requests * max_blocks, 0);
  std::vector<std::int64_t> positions = std::vector<std::int64_t>(batch);
  std::vector<std::int32_t> seq_lens = std::vector<std::int32_t>(batch);
  std::vector<std::int32_t> tokens = std::vector<std::int32_t>(batch);
  std::vector<float> temperature = std::vector<float>(batch);
  std::vector<float> top_p = std::vector<float>(batch);
  std::vector<std::int32_t> top_k = std::vector<std::int32_t>(batch);
  std::vector<std::int64_t> seed = std::vector<std::int64_t>(batch);
  std::vector<std::int64_t> logprobs = std::vector<std::int64_t>(batch * logprob_cols);
  std::vector<std::int32_t> logits_indices = std::vector<std::int32_t>(batch);

  reference() { scheduler::initial_state(positions, seq_lens, logprobs.data(), logits_indices); }

  /// One step: writes applied in staging order (so a later write wins), arrays rewritten.
  void run() {
    const std::int64_t s = sched.begin_step();
    scheduler::advance(positions, seq_lens);
    sched.for_each_write(s, seq_lens, [&](std::size_t row, std::size_t start, std::span<const std::int32_t> ids) {
      std::copy(ids.begin(), ids.end(), table.begin() + static_cast<std::ptrdiff_t>(row * max_blocks + start));
    });
    scheduler::sampling(s, tokens.data(), temperature.data(), top_p.data(), top_k.data(), seed.data());
    scheduler::logprob_rows(s, logprobs.data());
    logits_indices[batch - 1] = seq_lens[batch - 1];
  }
};

/// Pinned host buffers the device results are read back into.
template <class B>
struct readback {
  ferry::pinned_buffer<std::int32_t, B> table{max_requests * max_blocks};
  ferry::pinned_buffer<std::int64_t, B> positions{batch};
  ferry::pinned_buffer<std::int32_t, B> seq_lens{batch};
  ferry::pinned_buffer<std::int32_t, B> tokens{batch};
  ferry::pinned_buffer<float, B> temperature{batch};
  ferry::pinned_buffer<float, B> top_p{batch};
  ferry::pinned_buffer<std::int32_t, B> top_k{batch};
  ferry::pinned_buffer<std::int64_t, B> seed{batch};
  ferry::pinned_buffer<std::int64_t, B> logprobs{batch * logprob_cols};
  ferry::pinned_buffer<std::int32_t, B> logits_indices{batch};
};

/// Compares `got` with `want` bit for bit; prints the first difference. Returns the mismatches.
template <class T>
std::size_t compare(const char* what, long step, ferry::pinned_span<T> got, const std::vector<T>& want) {
  std::size_t bad = 0, first = 0;
  if (got.size() != want.size()) {
    std::printf("MISMATCH at step %ld: %s has %zu elements, the reference %zu\n", step, what, got.size(), want.size());
    return 1;
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad != 0)
    std::printf("MISMATCH at step %ld: %s differs in %zu of %zu elements, first at [%zu]: got %s, want %s\n", step,
                what, bad, want.size(), first, std::to_string(got[first]).c_str(), std::to_string(want[first]).c_str());
  return bad;
}

/// Reads back every device-side result of the last step, waits for it, compares with `ref`.
template <class B, class Step>
std::size_t check_step(Step& step, const reference& ref, readback<B>& rb, ferry::stream_ref<B> s) {
  const auto& [tokens, temperature, top_p, top_k, seed] = step.sampling();
  auto table = ferry::async_d2h(step.block_table(), rb.table.host(), s);
  auto positions = ferry::async_d2h(step.positions(), rb.positions.host(), s);
  auto seq_lens = ferry::async_d2h(step.seq_lens(), rb.seq_lens.host(), s);
  auto tok = ferry::async_d2h(tokens, rb.tokens.host(), s);
  auto temp = ferry::async_d2h(temperature, rb.temperature.host(), s);
  auto tp = ferry::async_d2h(top_p, rb.top_p.host(), s);
  auto tk = ferry::async_d2h(top_k, rb.top_k.host(), s);
  auto sd = ferry::async_d2h(seed, rb.seed.host(), s);
  auto lp = ferry::async_d2h(step.logprobs(), rb.logprobs.host(), s);
  auto li = ferry::async_d2h(step.logits_indices(), rb.logits_indices.host(), s);
  s.synchronize();
  const long n = static_cast<long>(step.steps()) - 1;
  return compare("block table", n, table, ref.table) + compare("positions", n, positions, ref.positions) +
         compare("seq_lens", n, seq_lens, ref.seq_lens) + compare("token ids", n, tok, ref.tokens) +
         compare("temperature", n, temp, ref.temperature) + compare("top-p", n, tp, ref.top_p) +
         compare("top-k", n, tk, ref.top_k) + compare("seed", n, sd, ref.seed) +
         compare("logprob matrix", n, lp, ref.logprobs) + compare("logits indices", n, li, ref.logits_indices);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

using clock_type = std::chrono::steady_clock;
double us_since(clock_type::time_point t0, long n) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / static_cast<double>(n);
}

#if defined(__CUDACC__)
/// Keeps a stream busy for about `ns` nanoseconds (clock64 counts SM cycles, ~2 GHz).
__global__ void hold_kernel(unsigned long long ns) {
  const long long t0 = clock64();
  while (static_cast<unsigned long long>(clock64() - t0) < ns * 2) {
  }
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// CUDA: device µs per step of a burst queued behind a held stream, timed by events.
template <class Step>
double device_us_per_step(Step& step, ferry::stream_ref<ferry::backend::cuda> s, long burst) {
  cudaEvent_t e0, e1;
  cuda_check(cudaEventCreate(&e0), "cudaEventCreate");
  cuda_check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<double> v;
  for (int rep = 0; rep < 4; ++rep) {
    hold_kernel<<<1, 1, 0, s.get()>>>(static_cast<unsigned long long>(20e6 + burst * 100e3));
    cuda_check(cudaPeekAtLastError(), "hold_kernel launch");
    cuda_check(cudaEventRecord(e0, s.get()), "cudaEventRecord");
    for (long k = 0; k < burst; ++k) step.run(s);
    cuda_check(cudaEventRecord(e1, s.get()), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (rep > 0) v.push_back(ms * 1e3 / static_cast<double>(burst));  // the first is a warm-up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(v);
}
#endif

/// Host backend: wall µs per step of a burst queued behind a held queue, from its release until
/// the queue has drained.
template <class Step>
double device_us_per_step(Step& step, ferry::stream_ref<ferry::backend::host> s, long burst) {
  std::vector<double> v;
  for (int rep = 0; rep < 4; ++rep) {
    std::atomic<bool> open{false};
    ferry::enqueue_host(s, [&open] {
      while (!open.load(std::memory_order_acquire)) std::this_thread::yield();
    });
    for (long k = 0; k < burst; ++k) step.run(s);
    const auto t0 = clock_type::now();
    open.store(true, std::memory_order_release);
    s.synchronize();
    if (rep > 0) v.push_back(us_since(t0, burst));
  }
  return median(v);
}

template <class B, class Launch>
int run(const options& o, const char* where) {
  const long burst = std::max(1L, std::min(256L, o.steps));
  const long bursts = std::max(1L, o.steps / burst);
  ferry::stream<B> s;
  ferry_step<B, Launch> step(s, static_cast<std::size_t>(burst) + 8);
  reference ref;
  readback<B> rb;
  std::printf("decode_step on %s: batch %zu of %zu requests, block table %zu x %zu int32, one step_batch %s\n",
              where, batch, max_requests, max_requests, max_blocks,
              Launch::replays_graph ? "graph replay per step" : "kernel launch per step");

  // 1. checked steps
  std::size_t bad = 0;
  for (long k = 0; k < o.check; ++k) {
    step.run(s);
    ref.run();
    bad += check_step(step, ref, rb, s);
  }

  // 2. timed steps: host time (bursts, drained between, median), then device time
  for (long k = 0; k < burst; ++k) step.run(s);  // warm-up
  s.synchronize();
  std::vector<double> host;
  for (long b = 0; b < bursts; ++b) {
    const auto t0 = clock_type::now();
    for (long k = 0; k < burst; ++k) step.run(s);
    host.push_back(us_since(t0, burst));
    s.synchronize();
  }
  const double device = device_us_per_step(step, s, burst);
  while (ref.sched.steps() < step.steps()) ref.run();

  // 3. checked steps after the host ran ahead of the device
  for (long k = 0; k < o.check; ++k) {
    step.run(s);
    ref.run();
    bad += check_step(step, ref, rb, s);
  }

  if (bad != 0) {
    std::printf("check: FAILED, %zu mismatched elements\n", bad);
    return 1;
  }
  std::printf("check: %ld of %ld steps read back and equal to the host reference (block table, positions, "
              "seq_lens, 5 packed arrays, logprob matrix, logits indices)\n",
              2 * o.check, static_cast<long>(step.steps()));
  const bool on_host = std::is_same_v<B, ferry::backend::host>;
  std::printf("time:  host %.2f us/step (median of %ld bursts of %ld), device %.2f us/step%s\n", median(host),
              bursts, burst, device, on_host ? " (the stream's worker thread)" : "");
  return 0;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&] {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
      const long v = std::stol(argv[++i]);
      if (v < 0) throw std::invalid_argument(a + " must not be negative");
      return v;
    };
    if (a == "--steps") o.steps = std::max(1L, number());
    else if (a == "--check") o.check = number();
    else if (a == "--host") o.force_host = true;
    else if (a == "--graph") o.graph = true;
    else throw std::invalid_argument("unknown argument " + a + " (use --steps N, --check K, --host, --graph)");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    const char* require = std::getenv("FERRY_REQUIRE_GPU");
    // The backend is chosen once, at start-up (docs/consuming.md, "Choosing the backend at run
    // time"): run<B> is instantiated for both, and the CUDA one runs where a device is usable.
#if defined(__CUDACC__)
    const bool gpu = !o.force_host && ferry::cuda_device_available();
#else
    const bool gpu = false;  // built as C++: the CUDA backend's kernels need nvcc
#endif
    if (!gpu && !o.force_host && require != nullptr && std::string(require) == "1") {
      std::fprintf(stderr, "decode_step: FERRY_REQUIRE_GPU=1 but no CUDA device was found\n");
      return 2;
    }
#if defined(__CUDACC__)
    if (gpu) {
      cudaDeviceProp p{};
      cuda_check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
      const std::string where = std::string("the GPU (") + p.name + ")";
      return o.graph ? run<ferry::backend::cuda, ferry::launch::graph>(o, where.c_str())
                     : run<ferry::backend::cuda, ferry::launch::kernel>(o, where.c_str());
    }
#endif
    const char* where = ferry::cuda_device_available() ? (o.force_host ? "the host backend (--host)" : "the host backend (built without nvcc)")
                                                       : "the host backend (no CUDA device found)";
    return o.graph ? run<ferry::backend::host, ferry::launch::graph>(o, where)
                   : run<ferry::backend::host, ferry::launch::kernel>(o, where);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_step: %s\n", e.what());
    return 1;
  }
}
