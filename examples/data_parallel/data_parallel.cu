// data_parallel: data parallelism across the GPUs of one process, driven by one host thread
// (docs/multi_gpu.md). One rank per GPU, each with its own stream and its own device-bound ferry
// objects; NCCL carries the cross-GPU traffic, enqueued on the same streams after ferry's uploads.
//
// Every step, for each rank: the host routes this rank's tokens to experts (a seeded random
// routing) and uploads the per-expert token counts with ferry::async_h2d; it stages a few
// block-table appends into the rank's ferry::staged_write_tensor and applies them. Then one NCCL
// all-reduce (sum) per rank, in one group, gives every rank the global expert load (what
// data-parallel MoE ranks agree on before dispatch). No host synchronization on the way.
//
// Checks: every K steps and after the last one, each rank's all-reduced counts must equal the sum
// over ranks of that step's contributions, and each rank's block table its host reference (read
// back with ferry::async_d2h into pinned memory). Prints the median host time per step.
//
// Usage: data_parallel [--gpus G] [--steps N] [--check K]   (defaults: 2, 256, 8)
// Exit codes: 0 pass, 1 mismatch or error, 77 fewer than G CUDA devices (skipped) — unless the
// environment variable FERRY_REQUIRE_GPUS is a number >= G, then a missing GPU is an error (1).
#include <ferry/ferry.cuh>

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using B = ferry::backend::cuda;
constexpr std::size_t experts = 64;            // MoE experts: entries of the all-reduced vector
constexpr std::size_t top_k = 2;               // experts per token
constexpr std::size_t rows = 256, cols = 128;  // block table per rank: requests x blocks
constexpr std::size_t appends_per_step = 8;    // block-table appends staged per rank and step

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                             ")");
}
void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(r));
}

/// One rank's host side: its random routing and block allocation, and the reference block table.
struct rank_host {
  std::mt19937_64 rng;
  std::vector<std::int32_t> counts = std::vector<std::int32_t>(experts);  // this step's contribution
  std::vector<std::int32_t> table = std::vector<std::int32_t>(rows * cols, 0);
  std::vector<std::size_t> used = std::vector<std::size_t>(rows, 0);      // blocks per request row

  explicit rank_host(int rank) : rng(0x5eed0000u + static_cast<unsigned>(rank)) {}

  /// Routes 256..767 tokens to `top_k` experts each (skewed: a few hot experts).
  void route() {
    std::fill(counts.begin(), counts.end(), 0);
    std::geometric_distribution<std::size_t> hot(0.08);
    const std::size_t tokens = 256 + rng() % 512;
    for (std::size_t t = 0; t < tokens * top_k; ++t) ++counts[std::min(hot(rng), experts - 1)];
  }

  /// Stages appends of 1-4 new block ids to random requests, into `tensor` and the reference.
  template <class Tensor>
  void append_blocks(Tensor& tensor) {
    for (std::size_t k = 0; k < appends_per_step; ++k) {
      const std::size_t row = rng() % rows, n = 1 + rng() % 4;
      if (used[row] + n > cols) used[row] = 0;  // the request finished: its row starts over
      std::int32_t ids[4];
      for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>(1 + rng() % 1'000'000);
      tensor.stage_write(row, used[row], std::span<const std::int32_t>(ids, n));
      std::copy(ids, ids + n, table.begin() + static_cast<std::ptrdiff_t>(row * cols + used[row]));
      used[row] += n;
    }
  }
};

/// One rank's device side. Made with its device current: every member remembers that device.
struct rank_device {
  int device;
  ferry::stream<B> stream;  // non-blocking, on `device`
  ferry::device_buffer<std::int32_t, B> local{experts}, global{experts};
  ferry::staged_write_tensor<std::int32_t, ferry::presets::block_table, B> table{rows, cols, stream};
  ferry::pinned_buffer<std::int32_t, B> global_back{experts}, table_back{rows * cols};
  explicit rank_device(int d) : device(d) {}
};

/// The NCCL communicators, one per rank, destroyed before the ranks' streams.
struct communicators {
  std::vector<ncclComm_t> comm;
  explicit communicators(int n) : comm(static_cast<std::size_t>(n), nullptr) {
    // NVLink multicast (NVLS) must never be used on the shared GPU machine: force it off for
    // every communicator of this process, whatever the caller's environment says.
    if (setenv("NCCL_NVLS_ENABLE", "0", 1) != 0) throw std::runtime_error("setenv(NCCL_NVLS_ENABLE) failed");
    std::vector<int> devices(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) devices[static_cast<std::size_t>(r)] = r;
    nccl_check(ncclCommInitAll(comm.data(), n, devices.data()), "ncclCommInitAll");
  }
  ~communicators() {
    for (ncclComm_t c : comm)
      if (c != nullptr)
        if (const ncclResult_t r = ncclCommDestroy(c); r != ncclSuccess)
          std::fprintf(stderr, "data_parallel: ncclCommDestroy failed: %s\n", ncclGetErrorString(r));
  }
};

/// Enqueues one step on every rank; returns without waiting for the GPUs.
void enqueue_step(std::vector<std::unique_ptr<rank_device>>& ranks, std::vector<rank_host>& hosts,
                  communicators& nccl) {
  // [step]
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    rank_device& d = *ranks[r];
    // Free functions (async_h2d, async_d2h) check the stream against the CURRENT device.
    cuda_check(cudaSetDevice(d.device), "cudaSetDevice");
    hosts[r].route();
    ferry::async_h2d(hosts[r].counts, d.local.span(), d.stream);  // via the default pinned arena
    hosts[r].append_blocks(d.table);
    d.table.apply_write(d.stream);  // one kernel on this rank's stream
  }
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t r = 0; r < ranks.size(); ++r)
    nccl_check(ncclAllReduce(ranks[r]->local.data(), ranks[r]->global.data(), experts, ncclInt32, ncclSum,
                             nccl.comm[r], ranks[r]->stream.get()),
               "ncclAllReduce");
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  // [/step]
}

/// Counts the elements of `got` that differ from `want`; prints the first one.
std::size_t compare(const char* what, int rank, long step, ferry::pinned_span<std::int32_t> got,
                    const std::vector<std::int32_t>& want) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  if (bad != 0)
    std::printf("MISMATCH at step %ld, rank %d: %s differs in %zu of %zu elements, first at [%zu]: got %d, want %d\n",
                step, rank, what, bad, want.size(), first, got[first], want[first]);
  return bad;
}

/// Reads back every rank's results of the last step enqueued and compares them with the host.
std::size_t check(std::vector<std::unique_ptr<rank_device>>& ranks, const std::vector<rank_host>& hosts, long step) {
  std::vector<std::int32_t> sum(experts, 0);
  for (const rank_host& h : hosts)
    for (std::size_t e = 0; e < experts; ++e) sum[e] += h.counts[e];
  std::vector<ferry::pinned_span<std::int32_t>> global, table;
  for (auto& d : ranks) {
    cuda_check(cudaSetDevice(d->device), "cudaSetDevice");
    global.push_back(ferry::async_d2h(d->global.span(), d->global_back.host(), d->stream));
    table.push_back(ferry::async_d2h(d->table.span(), d->table_back.host(), d->stream));
  }
  std::size_t bad = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ranks[r]->stream.synchronize();
    const int rank = static_cast<int>(r);
    bad += compare("all-reduced expert counts", rank, step, global[r], sum) +
           compare("block table", rank, step, table[r], hosts[r].table);
  }
  return bad;
}

long number(int& i, int argc, char** argv, long min) {
  const std::string a = argv[i];
  if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
  const std::string text = argv[++i];
  std::size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
  }
  if (used == 0 || used != text.size()) throw std::invalid_argument(a + " needs a number, got '" + text + "'");
  if (v < min) throw std::invalid_argument(a + " must be at least " + std::to_string(min));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    long gpus = 2, steps = 256, check_every = 8;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--gpus") gpus = number(i, argc, argv, 1);
      else if (a == "--steps") steps = number(i, argc, argv, 1);
      else if (a == "--check") check_every = number(i, argc, argv, 0);
      else throw std::invalid_argument("unknown argument " + a + " (use --gpus G, --steps N, --check K)");
    }

    int present = 0;
    const cudaError_t count_error = cudaGetDeviceCount(&present);
    if (count_error != cudaSuccess) present = 0;
    (void)cudaGetLastError();  // no driver or no device is not an error yet
    if (present < gpus) {
      const char* req = std::getenv("FERRY_REQUIRE_GPUS");
      char* end = nullptr;
      const long required = req != nullptr ? std::strtol(req, &end, 10) : 0;
      const bool must = req != nullptr && end != req && *end == '\0' && required >= gpus;
      const std::string why = count_error == cudaSuccess ? "" : std::string(" (") + cudaGetErrorName(count_error) + ")";
      std::fprintf(stderr, "data_parallel: needs %ld CUDA devices (one rank per GPU), found %d%s: %s\n", gpus, present,
                   why.c_str(), must ? "FAILED, FERRY_REQUIRE_GPUS requires them" : "skipped (exit code 77)");
      return must ? 1 : 77;
    }
    const int n = static_cast<int>(gpus);

    std::vector<std::unique_ptr<rank_device>> ranks;
    std::vector<rank_host> hosts;
    for (int r = 0; r < n; ++r) {
      cuda_check(cudaSetDevice(r), "cudaSetDevice");  // the ferry objects below remember device r
      ranks.push_back(std::make_unique<rank_device>(r));
      hosts.emplace_back(r);
      cudaDeviceProp p{};
      cuda_check(cudaGetDeviceProperties(&p, r), "cudaGetDeviceProperties");
      std::printf("rank %d: GPU %d (%s)\n", r, r, p.name);
    }
    {
      communicators nccl(n);  // after the ranks, so destroyed before their streams
      std::printf("data_parallel: %d ranks, %ld steps, %zu experts, block table %zu x %zu int32 per rank\n",
                  n, steps, experts, rows, cols);

      std::vector<double> host_us;
      std::size_t bad = 0;
      long checked = 0;
      for (long s = 0; s < steps; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        enqueue_step(ranks, hosts, nccl);
        host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        if ((check_every > 0 && (s + 1) % check_every == 0) || s + 1 == steps) {
          bad += check(ranks, hosts, s);
          ++checked;
        }
      }
      for (auto& d : ranks) d->stream.synchronize();

      std::sort(host_us.begin(), host_us.end());
      std::printf("host: %.2f us per step, median of %zu (%d uploads, %d applies, %d all-reduces each)\n",
                  host_us[host_us.size() / 2], host_us.size(), n, n, n);
      if (bad != 0) {
        std::printf("FAIL: %zu mismatched elements\n", bad);
        return 1;
      }
      std::printf("PASS: %ld of %ld steps read back on every rank and equal to the host reference\n", checked,
                  steps);
    }
    for (int r = n; r-- > 0;) {  // each rank's objects freed with its own device current
      cuda_check(cudaSetDevice(r), "cudaSetDevice");
      ranks[static_cast<std::size_t>(r)].reset();
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_parallel: %s\n", e.what());
    return 1;
  }
}
