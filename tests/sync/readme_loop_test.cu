// README.md's loop, as written (device_buffer ids, a staged_write_tensor block table, uva_backed
// positions; async_h2d, stage_write/apply_write, publish), with a slow stand-in model (about 2 ms
// a step: a host task that sleeps on the host backend, a kernel that spins on CUDA) and a host
// that runs ahead of it. Under the default reuse::event_fenced nothing throws: once positions'
// ring holds max_slots slots, publish waits for the oldest (back-pressure), and the sync scope
// (sync_guard on CUDA, host_sync_guard on the host) counts those waits. Every step's data, as the
// model read it, is checked against a host reference.
//
// The CUDA case is tagged [no-sanitizer] (sync_guard subscribes CUPTI, which compute-sanitizer
// holds); it SKIPs where CUPTI cannot subscribe (FAILs under FERRY_REQUIRE_GPU=1).
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <ferry/ferry.hpp>
#include <ferry/sync/sync_guard.hpp>
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

// The CUDA case launches the stand-in model (a kernel): it exists only under nvcc.
#if FERRY_HAS_CUDA && !defined(__CUDACC__)
#define LOOP_BACKENDS ferry::backend::host
#else
#define LOOP_BACKENDS FERRY_TEST_BACKENDS
#endif

namespace {

constexpr int steps = 40;
constexpr std::size_t n = 256;  // ids and positions, as in README
constexpr std::size_t rows = 1024, cols = 512;
constexpr std::size_t record = n + 2;  // what the model saw of a step: the ids, then the 2 table entries
constexpr unsigned long long model_ns = 2'000'000;

// Generation-stamped values: different for every (step, i), never zero.
int token(int step, std::size_t i) { return (step + 1) * 1000003 + static_cast<int>(i) * 7 + 1; }
std::size_t row_of(int step) { return static_cast<std::size_t>(step) * 37 % rows; }
std::size_t start_of(int step) { return static_cast<std::size_t>(step) * 11 % (cols - 2); }
int block(int step, int k) { return -((step + 1) * 131 + k + 1); }

// The stand-in model on the host backend: a stream task that takes 2 ms, then records what it read.
void launch_model(ferry::stream_ref<ferry::backend::host> s, ferry::device_span<int> ids,
                  ferry::staged_view<int> table, ferry::device_span<const std::int64_t> pos, int step,
                  int* seen, std::int64_t* seen_pos) {
  ferry::enqueue_host(s, [=] {
    std::this_thread::sleep_for(std::chrono::nanoseconds(model_ns));
    int* out = seen + static_cast<std::size_t>(step) * record;
    for (std::size_t i = 0; i < n; ++i) out[i] = ids.data()[i];
    const int* t = table.data_handle() + row_of(step) * table.extent(1) + start_of(step);
    out[n] = t[0];
    out[n + 1] = t[1];
    for (std::size_t i = 0; i < n; ++i) seen_pos[static_cast<std::size_t>(step) * n + i] = pos.data()[i];
  });
}

#if defined(__CUDACC__) && FERRY_HAS_CUDA
__device__ unsigned long long readme_loop_globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The stand-in model on CUDA: thread 0 spins for 2 ms, then the block records what it read.
__global__ void readme_loop_model(const int* ids, ferry::staged_view<int> table, const std::int64_t* pos,
                                  std::size_t row, std::size_t start, int* out, std::int64_t* out_pos) {
  if (threadIdx.x == 0) {
    const unsigned long long t0 = readme_loop_globaltimer_ns();
    while (readme_loop_globaltimer_ns() - t0 < model_ns) {
    }
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    out[i] = ids[i];
    out_pos[i] = pos[i];
  }
  if (threadIdx.x == 0) {
    const int* t = table.data_handle() + row * table.extent(1) + start;
    out[n] = t[0];
    out[n + 1] = t[1];
  }
}

void launch_model(ferry::stream_ref<ferry::backend::cuda> s, ferry::device_span<int> ids,
                  ferry::staged_view<int> table, ferry::device_span<const std::int64_t> pos, int step,
                  int* seen, std::int64_t* seen_pos) {
  readme_loop_model<<<1, 256, 0, s.get()>>>(ids.data(), table, pos.data(), row_of(step), start_of(step),
                                            seen + static_cast<std::size_t>(step) * record,
                                            seen_pos + static_cast<std::size_t>(step) * n);
  REQUIRE(cudaPeekAtLastError() == cudaSuccess);
}
#endif

}  // namespace

TEMPLATE_TEST_CASE("README's loop runs as written with a slow model: a full ring waits, counted as a sync",
                   "[sync][backpressure][no-sanitizer]", LOOP_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  // What the model saw of every step (pinned, mapped memory: the model writes it, the host reads it
  // once the stream is drained).
  ferry::pinned_buffer<int, B> seen(static_cast<std::size_t>(steps) * record);
  ferry::pinned_buffer<std::int64_t, B> seen_pos(static_cast<std::size_t>(steps) * n);

  // README's snippet, with its types spelled for backend B.
  ferry::stream<B> stream;
  ferry::device_buffer<int, B> ids(256);
  ferry::staged_write_tensor<int, ferry::presets::block_table, B> table(1024, 512);
  ferry::uva_backed<std::int64_t, B> positions(256);
  const auto start = ferry_test::random_values<std::int64_t>(n, 9001);
  std::copy(start.begin(), start.end(), positions.host().begin());

  std::optional<ferry::sync_scope<B>> guard;
  try {
    guard.emplace(ferry::sync_mode::record);
  } catch (const ferry::error& e) {
    if (ferry_test::gpu_required()) FAIL("FERRY_REQUIRE_GPU=1 but sync_guard cannot start: " << e.what());
    SKIP("sync_guard cannot start (no CUPTI subscription): " << e.what());
  }
  const auto waits_before = ferry::detail::ring_waits;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    std::vector<int> tokens(n);  // pageable host data
    for (std::size_t i = 0; i < n; ++i) tokens[i] = token(step, i);
    ferry::async_h2d(tokens, ids.span(), stream);
    table.stage_write(row_of(step), start_of(step), {block(step, 0), block(step, 1)});
    table.apply_write(stream);
    for (auto& p : positions.host()) ++p;
    ferry::device_span<const std::int64_t> pos = positions.publish(256, stream);
    launch_model(ferry::stream_ref<B>(stream), ids.span(), table.view(), pos, step, seen.host().data(),
                 seen_pos.host().data());
  }
  const auto host_done = std::chrono::steady_clock::now();
  const std::uint64_t syncs = guard->syncs();
  const std::uint64_t waits = ferry::detail::ring_waits - waits_before;
  guard.reset();
  stream.synchronize();
  const double host_ms = std::chrono::duration<double, std::milli>(host_done - t0).count();
  INFO("host loop " << host_ms << " ms; waits "
                    << waits << ", syncs " << syncs << ", positions full_waits " << positions.stats().full_waits);

  // Back-pressure: the host ran ahead until positions' ring was full, then waited for its oldest
  // slot, each wait a synchronization the scope saw; it never threw.
  CHECK(positions.stats().slots == positions.stats().max_slots);
  CHECK(positions.stats().full_waits > 0);
  CHECK(waits >= positions.stats().full_waits);
  CHECK(syncs >= positions.stats().full_waits);

  // Every step's data, as the model read it, is the host's.
  std::size_t wrong = 0;
  for (int step = 0; step < steps; ++step) {
    const int* out = seen.host().data() + static_cast<std::size_t>(step) * record;
    const std::int64_t* p = seen_pos.host().data() + static_cast<std::size_t>(step) * n;
    bool ok = out[n] == block(step, 0) && out[n + 1] == block(step, 1);
    for (std::size_t i = 0; i < n; ++i)
      ok = ok && out[i] == token(step, i) && p[i] == start[i] + step + 1;
    if (!ok) {
      UNSCOPED_INFO("step " << step << " read data of another step");
      ++wrong;
    }
  }
  CHECK(wrong == 0);
}
