// Tests of include/ferry/shared/shared_step_ring.hpp on the CUDA backend: one writer, one reader
// process per GPU (every GPU cudaGetDeviceCount reports), each reading every step of the ring in a
// kernel on its own GPU through the mapped shared memory and passing it from that kernel. The
// readers are separately started processes of this binary (a hidden test case, run by exec): a
// process that has initialized CUDA cannot fork a child that uses it. Skipped without a GPU; fails
// instead under FERRY_REQUIRE_GPU=1, and when FERRY_REQUIRE_GPUS names more GPUs than are found.
#include <ferry/shared/shared_step_ring.hpp>

#include <ferry/ferry.hpp>
#include <support/backends.hpp>

#include <catch2/catch_test_macros.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;

constexpr std::size_t elements = 1000;
constexpr std::uint32_t slots = 3;
constexpr std::uint64_t steps = 64;

[[maybe_unused]] FERRY_HOST_DEVICE std::uint64_t value_of(std::uint64_t step, std::size_t i) {
  std::uint64_t x = step * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
  x ^= x >> 31;
  return x * 0x94d049bb133111ebull;
}

[[maybe_unused]] std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

#if FERRY_HAS_CUDA && defined(__CUDACC__)

namespace {

using B = ferry::backend::cuda;

// Reads every value of the step from the mapped slot, counts the ones that differ from the
// writer's, holds the slot a while on this rank's turn (so that the writer finds it held), and
// passes the step: the kernel's last act, by one thread.
__global__ void read_step(ferry::shared_step<std::uint64_t> st, std::uint32_t rank, std::uint32_t ranks,
                          unsigned long long* counts) {
  unsigned long long bad = 0;
  for (std::size_t i = threadIdx.x; i < st.size; i += blockDim.x) bad += st[i] != value_of(st.step, i);
  if (bad != 0) atomicAdd(&counts[0], bad);
  if (threadIdx.x == 0 && st.step % ranks == rank) {
    const long long until = clock64() + 2'000'000;  // about a millisecond
    while (clock64() < until) {
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&counts[1], 1ull);  // steps read
    st.pass();
  }
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n;
}

pid_t spawn_reader(const std::string& name, std::uint32_t rank, std::uint32_t ranks) {
  setenv("FERRY_TEST_SHARED_RING", name.c_str(), 1);
  setenv("FERRY_TEST_SHARED_RANK", std::to_string(rank).c_str(), 1);
  setenv("FERRY_TEST_SHARED_RANKS", std::to_string(ranks).c_str(), 1);
  std::string exe = "/proc/self/exe", test = "shared step ring (CUDA): reader process";
  char* argv[] = {exe.data(), test.data(), nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, environ) == 0);
  return pid;
}

}  // namespace

TEST_CASE("shared step ring (CUDA): one reader process per GPU reads every step through the mapping",
          "[shared_step_ring][devices]") {
  FERRY_REQUIRE_BACKEND(B);
  const int n = device_count();
  if (const std::string want = env_or_empty("FERRY_REQUIRE_GPUS"); !want.empty() && std::atoi(want.c_str()) > n)
    FAIL("FERRY_REQUIRE_GPUS=" << want << " but " << n << " CUDA devices found");
  const auto ranks = static_cast<std::uint32_t>(n);
  const ferry::shared_step_layout layout{elements, slots, ranks};
  ferry::shared_step_writer<std::uint64_t, B> w("/ferry-test-" + std::to_string(::getpid()) + "-gpus", layout, 30s);
  std::vector<pid_t> readers;
  for (std::uint32_t r = 0; r < ranks; ++r) readers.push_back(spawn_reader(w.name(), r, ranks));
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (std::uint32_t r = 0; r < ranks; ++r)
    while (w.rank_state(r) != ferry::shared_rank_state::active) {
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(1ms);
    }
  std::vector<std::uint64_t> data(elements);
  for (std::uint64_t s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < elements; ++i) data[i] = value_of(s, i);
    CHECK(w.publish(data) == s);
  }
  for (const pid_t pid : readers) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  for (std::uint32_t r = 0; r < ranks; ++r) CHECK(w.rank_passed(r) == steps);
  CHECK(w.waits() > 0);  // the held kernels made the writer wait for their slots
}

// Run by the case above in a process of its own (hidden: not run by itself).
TEST_CASE("shared step ring (CUDA): reader process", "[.][shared_step_ring_child]") {
  const std::string name = env_or_empty("FERRY_TEST_SHARED_RING");
  REQUIRE_FALSE(name.empty());
  const auto rank = static_cast<std::uint32_t>(std::stoul(env_or_empty("FERRY_TEST_SHARED_RANK")));
  const auto ranks = static_cast<std::uint32_t>(std::stoul(env_or_empty("FERRY_TEST_SHARED_RANKS")));
  REQUIRE(cudaSetDevice(static_cast<int>(rank)) == cudaSuccess);
  ferry::shared_step_reader<std::uint64_t, B> rd(name, ferry::shared_step_layout{elements, slots, ranks}, rank, 30s);
  ferry::stream<B> s;
  unsigned long long* counts = nullptr;
  REQUIRE(cudaMalloc(&counts, 2 * sizeof(unsigned long long)) == cudaSuccess);
  REQUIRE(cudaMemset(counts, 0, 2 * sizeof(unsigned long long)) == cudaSuccess);
  for (std::uint64_t i = 0; i < steps; ++i) {
    const auto st = rd.acquire();
    REQUIRE(st.step == i);
    read_step<<<1, 256, 0, s.get()>>>(st, rank, ranks, counts);
    REQUIRE(cudaGetLastError() == cudaSuccess);
  }
  s.synchronize();
  unsigned long long host[2] = {};
  REQUIRE(cudaMemcpy(host, counts, sizeof(host), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[0] == 0);      // values that differed from the writer's
  CHECK(host[1] == steps);  // steps read
  REQUIRE(cudaFree(counts) == cudaSuccess);
  rd.leave();
}

#else

TEST_CASE("shared step ring (CUDA): one reader process per GPU reads every step through the mapping",
          "[shared_step_ring][devices]") {
  if (ferry_test::gpu_required()) FAIL("FERRY_REQUIRE_GPU=1 but this test was built without nvcc");
  SKIP("built without nvcc: the CUDA backend's reader kernels are not compiled");
}

#endif
