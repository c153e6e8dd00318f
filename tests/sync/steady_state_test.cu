// Steady-state proofs (SPEC §8): every component's hot path, warmed up, runs 1,000 steps inside a
// raise-mode ferry::sync_scope<B> (sync_guard through CUPTI on CUDA, the host backend's counters
// on the host) with zero synchronizing calls and zero allocations, while the stream is kept busy
// and the GPU may run a few steps behind the host; afterwards the last step's results are checked
// against a host reference, so the loop really did the work. A negative control per backend shows
// that the same harness catches one stream.synchronize().
//
// CUDA cases are tagged [no-sanitizer]: compute-sanitizer holds the process's one CUPTI
// subscription. They SKIP where CUPTI cannot subscribe (FAIL under FERRY_REQUIRE_GPU=1).
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <ferry/sync/sync_guard.hpp>
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

// The CUDA cases launch kernels (the consumer, the staged apply): they exist only under nvcc.
#if FERRY_HAS_CUDA && !defined(__CUDACC__)
#define STEADY_BACKENDS ferry::backend::host
#else
#define STEADY_BACKENDS FERRY_TEST_BACKENDS
#endif

namespace {

// ---- the shape of a step ----------------------------------------------------------------------

constexpr std::size_t measured_steps = 1000;
constexpr std::size_t lag = 4;              // the GPU may run up to `lag` steps behind the host
constexpr std::size_t burst = 2 * lag + 2;  // warm-up steps enqueued at once behind a closed gate
constexpr std::size_t warm_steps = 256;     // paced warm-up steps (the stream drained every 64)
constexpr std::size_t ring = burst;         // caller-owned buffers rotated by caller_fenced cases
constexpr std::size_t max_slots = 16;       // uva_pool ceiling: room for the burst's inserted slots
constexpr std::size_t max_n = 1024;

// Step i's element count: ragged, but within one power-of-two size class (so that the warm-up's
// blocks are the steady state's blocks).
constexpr std::size_t n_at(std::size_t i) { return max_n - (i * 97) % (max_n * 3 / 10); }

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element k of step i's input (part `part` of it): different for every step.
template <class T>
T value_at(std::size_t i, std::size_t k, std::size_t part = 0) {
  const std::uint64_t h = mix((i * 8 + part) * 1'000'003ull + k);
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(static_cast<double>(h % (1u << 24)) - (1u << 23));
  else
    return static_cast<T>(h);
}

template <class T>
void fill_step(std::span<T> out, std::size_t i, std::size_t part = 0) {
  for (std::size_t k = 0; k < out.size(); ++k) out[k] = value_at<T>(i, k, part);
}

template <class T>
std::vector<T> step_values(std::size_t i, std::size_t n, std::size_t part = 0) {
  std::vector<T> v(n);
  fill_step<T>(v, i, part);
  return v;
}

// ---- the consumer: what reads each step's result on the stream --------------------------------

template <class T>
FERRY_HOST_DEVICE unsigned long long bits_of(T x) {
  unsigned long long b = 0;
  memcpy(&b, &x, sizeof(T));
  return b;
}

// Position-weighted sum of the elements' bits: order and every value matter.
template <class T>
unsigned long long checksum(const T* p, std::size_t n) {
  unsigned long long sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += bits_of(p[i]) * (i + 1);
  return sum;
}

#if defined(__CUDACC__)
template <class T>
__global__ void checksum_kernel(const T* data, std::size_t n, unsigned long long* sink) {
  __shared__ unsigned long long partial[256];
  unsigned long long sum = 0;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) sum += bits_of(data[i]) * (i + 1);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *sink = partial[0];
}
#endif

// Enqueues on `s` a small consumer of `data` writing its checksum to *sink (device memory): a
// one-block kernel on CUDA, a host task on the host backend.
template <class T, class B>
void consume(ferry::stream_ref<B> s, ferry::device_span<const T> data, unsigned long long* sink) {
  if constexpr (std::is_same_v<B, ferry::backend::host>) {
    ferry::enqueue_host(s, [p = data.data(), n = data.size(), sink] { *sink = checksum(p, n); });
  } else {
#if defined(__CUDACC__)
    checksum_kernel<T><<<1, 256, 0, s.get()>>>(data.data(), data.size(), sink);
    FERRY_CUDA_CHECK_LAUNCH("checksum_kernel");
#endif
  }
}

// Device (or UVA) memory read back after the steady state (allocates and synchronizes: outside
// the scope).
template <class T, class B>
std::vector<T> read_back(ferry::device_span<const T> d, ferry::stream_ref<B> s) {
  ferry::pinned_buffer<T, B> host(d.size());
  ferry::async_d2h(d, host.host(), s);
  s.synchronize();
  return std::vector<T>(host.host().begin(), host.host().end());
}

// The consumers' results: one checksum per consumed part.
template <class B>
struct sinks {
  ferry::device_buffer<unsigned long long, B> buf{4};
  unsigned long long* at(std::size_t k) const { return buf.data() + k; }
  unsigned long long read(std::size_t k, ferry::stream_ref<B> s) const {
    return read_back<unsigned long long, B>(ferry::device_span<const unsigned long long>(at(k), 1), s)[0];
  }
};

// The last step's result `last` reads back as `expected`, and its consumer (sink 0) saw the same.
template <class T, class B, class Span>
void check_last(const Span& last, const std::vector<T>& expected, const sinks<B>& sink,
                std::type_identity_t<ferry::stream_ref<B>> s) {
  CHECK(read_back<T, B>(last, s) == expected);
  CHECK(sink.read(0, s) == checksum(expected.data(), expected.size()));
}

// ---- the harness ------------------------------------------------------------------------------

struct steady_result {
  std::size_t last_step = 0;     // the index of the last measured step
  std::uint64_t syncs = 0;       // what the scope saw over the measured steps
  std::uint64_t allocations = 0;
  std::string report;
  std::string check_error;       // what check() threw (ferry::sync_error), if it threw
};

// Runs `step(i)` (which enqueues step i's operation and its consumer on `s`, and nothing that
// waits) as an engine would: first a warm-up that brings every arena block, slot and scratch to
// its largest size and number (a burst of steps behind a closed gate, so that as many are in
// flight as the pacing below ever allows, then paced steps with the stream drained now and
// then), then `measured_steps` steps inside a raise-mode sync scope. The host runs ahead: no
// step waits for its predecessor; it only polls (event query, never a synchronizing call) that
// step i - lag has finished, as an engine bounds its run-ahead. `inject_sync`: one
// stream.synchronize() in the middle of the measured loop (the negative control).
template <class B, class Step>
steady_result run_steady_state(ferry::stream_ref<B> s, Step&& step, bool inject_sync = false) {
  std::array<ferry::event<B>, lag> done;  // done[i % lag]: the end of step i
  std::size_t i = 0;
  auto paced_step = [&] {
    while (!done[i % lag].ready()) std::this_thread::yield();  // step i - lag has finished
    step(i);
    done[i % lag].record(s);
    ++i;
  };

  // One step on an open stream first: CUDA loads kernel modules lazily at their first launch,
  // which may wait for the whole context, so no first launch may sit behind the closed gate.
  step(i++);
  s.synchronize();
  {
    ferry_test::gate<B> closed(s);
    for (std::size_t k = 0; k < burst; ++k) step(i++);
  }
  s.synchronize();
  for (std::size_t k = 0; k < warm_steps; ++k) {
    paced_step();
    if (k % 64 == 63) s.synchronize();
  }

  steady_result r;
  std::optional<ferry::sync_scope<B>> guard;
  try {
    guard.emplace(ferry::sync_mode::raise);
  } catch (const ferry::error& e) {
    if (ferry_test::gpu_required()) FAIL("FERRY_REQUIRE_GPU=1 but sync_guard cannot start: " << e.what());
    SKIP("sync_guard cannot start (no CUPTI subscription): " << e.what());
  }
  for (std::size_t k = 0; k < measured_steps; ++k) {
    paced_step();
    if (inject_sync && k == measured_steps / 2) s.synchronize();
  }
  try {
    guard->check();
  } catch (const ferry::sync_error& e) {
    r.check_error = e.what();
  }
  r.syncs = guard->syncs();
  r.allocations = guard->allocations();
  r.report = guard->report();
  guard.reset();
  r.last_step = i - 1;
  s.synchronize();
  return r;
}

// The verdict every steady-state case asserts.
#define REQUIRE_STEADY(r)                  \
  do {                                     \
    INFO("sync scope: " << (r).report);    \
    CHECK((r).check_error.empty());        \
    CHECK((r).syncs == 0);                 \
    CHECK((r).allocations == 0);           \
  } while (0)

}  // namespace

// ---- transfers --------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("steady state: async_h2d from a pageable vector (pin::stage)",
                   "[steady_state][async_h2d][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<std::int32_t, B> out(max_n);
  sinks<B> sink;
  std::vector<std::int32_t> input(max_n);
  ferry::device_span<std::int32_t> last;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    const std::span<std::int32_t> src(input.data(), n_at(i));
    fill_step(src, i);
    last = ferry::async_h2d<ferry::pin::stage>(src, out.span(), s, arena);
    consume<std::int32_t>(s, last, sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(last, step_values<std::int32_t>(r.last_step, n_at(r.last_step)), sink, s);
}

TEMPLATE_TEST_CASE("steady state: async_h2d from pinned_span sources",
                   "[steady_state][async_h2d][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  std::vector<ferry::pinned_buffer<std::int32_t, B>> inputs;  // one per step in flight
  for (std::size_t k = 0; k < ring; ++k) inputs.emplace_back(max_n);
  ferry::device_buffer<std::int32_t, B> out(max_n);
  sinks<B> sink;
  ferry::device_span<std::int32_t> last;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    // DMA'd in place: the buffer of step i was last read by step i - ring, which has finished.
    const auto src = inputs[i % ring].host().first(n_at(i));
    fill_step(src.span(), i);
    last = ferry::async_h2d(ferry::pinned_span<const std::int32_t>(src), out.span(), s);
    consume<std::int32_t>(s, last, sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(last, step_values<std::int32_t>(r.last_step, n_at(r.last_step)), sink, s);
}

TEMPLATE_TEST_CASE("steady state: async_h2d_packed into a typed span",
                   "[steady_state][async_h2d_packed][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<std::int32_t, B> out(3 * max_n);
  sinks<B> sink;
  std::vector<std::int32_t> tokens(max_n);
  ferry::device_span<std::int32_t> last;

  // Step i: tokens (contiguous), positions (a computed forward range: gathered), and lengths.
  auto positions = [](std::size_t i) {
    return std::views::iota(std::size_t{0}, n_at(i) / 2) |
           std::views::transform([i](std::size_t k) { return static_cast<std::int32_t>(i + k); });
  };
  auto expected_at = [&](std::size_t i) {
    auto v = step_values<std::int32_t>(i, n_at(i));
    for (auto p : positions(i)) v.push_back(p);
    const auto lens = step_values<std::int32_t>(i, 16, 1);
    v.insert(v.end(), lens.begin(), lens.end());
    return v;
  };
  std::vector<std::int32_t> lens(16);

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    const std::span<std::int32_t> t(tokens.data(), n_at(i));
    fill_step(t, i);
    fill_step<std::int32_t>(lens, i, 1);
    const auto [a, b, c] = ferry::async_h2d_packed(out.span(), s, arena, t, positions(i), lens);
    last = out.span().first(a.size() + b.size() + c.size());
    consume<std::int32_t>(s, last, sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(last, expected_at(r.last_step), sink, s);
}

TEMPLATE_TEST_CASE("steady state: async_h2d_packed into a byte span of mixed parts",
                   "[steady_state][async_h2d_packed][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<std::uint8_t, B> storage(16 * max_n);
  const ferry::device_span<std::byte> out(reinterpret_cast<std::byte*>(storage.data()), storage.size());
  sinks<B> sink;
  std::vector<std::int32_t> ids(max_n);
  std::vector<std::int64_t> offsets(max_n);
  std::vector<float> scales(max_n / 4);
  std::tuple<ferry::device_span<std::int32_t>, ferry::device_span<std::int64_t>, ferry::device_span<float>> last;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    const std::span<std::int32_t> a(ids.data(), n_at(i));
    // Parts of (2868, 4096], (1432, 2048] and (716, 1024] bytes: one staging size class.
    const std::span<std::int64_t> b(offsets.data(), n_at(i + 1) / 4);
    const std::span<float> c(scales.data(), n_at(i + 2) / 4);
    fill_step(a, i, 0);
    fill_step(b, i, 1);
    fill_step(c, i, 2);
    last = ferry::async_h2d_packed(out, s, arena, a, b, c);
    consume<std::int32_t>(s, std::get<0>(last), sink.at(0));
    consume<std::int64_t>(s, std::get<1>(last), sink.at(1));
    consume<float>(s, std::get<2>(last), sink.at(2));
  });
  REQUIRE_STEADY(r);
  const std::size_t i = r.last_step;
  const auto ea = step_values<std::int32_t>(i, n_at(i), 0);
  const auto eb = step_values<std::int64_t>(i, n_at(i + 1) / 4, 1);
  const auto ec = step_values<float>(i, n_at(i + 2) / 4, 2);
  CHECK(read_back<std::int32_t, B>(std::get<0>(last), s) == ea);
  CHECK(read_back<std::int64_t, B>(std::get<1>(last), s) == eb);
  CHECK(read_back<float, B>(std::get<2>(last), s) == ec);
  CHECK(sink.read(0, s) == checksum(ea.data(), ea.size()));
  CHECK(sink.read(1, s) == checksum(eb.data(), eb.size()));
  CHECK(sink.read(2, s) == checksum(ec.data(), ec.size()));
}

TEMPLATE_TEST_CASE("steady state: cpu_gpu_buffer copy_to_device (reuse::event_fenced)",
                   "[steady_state][cpu_gpu_buffer][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::cpu_gpu_buffer<std::int32_t, ferry::reuse::event_fenced, B> buf(max_n, arena);
  sinks<B> sink;
  ferry::device_span<std::int32_t> last;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    // Snapshotted by the call: host() is rewritten every step while earlier copies are queued.
    fill_step(buf.host().first(n_at(i)).span(), i);
    last = buf.copy_to_device(n_at(i), s);
    consume<std::int32_t>(s, last, sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(last, step_values<std::int32_t>(r.last_step, n_at(r.last_step)), sink, s);
}

TEMPLATE_TEST_CASE("steady state: cpu_gpu_buffer copy_to_device (reuse::caller_fenced)",
                   "[steady_state][cpu_gpu_buffer][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  std::vector<ferry::cpu_gpu_buffer<std::int32_t, ferry::reuse::caller_fenced, B>> bufs;
  for (std::size_t k = 0; k < ring; ++k) bufs.emplace_back(max_n);
  sinks<B> sink;
  ferry::device_span<std::int32_t> last;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    // DMA'd in place: buffer i % ring was last used by step i - ring, which has finished.
    auto& buf = bufs[i % ring];
    fill_step(buf.host().first(n_at(i)).span(), i);
    last = buf.copy_to_device(n_at(i), s);
    consume<std::int32_t>(s, last, sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(last, step_values<std::int32_t>(r.last_step, n_at(r.last_step)), sink, s);
}

// ---- UVA pools --------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("steady state: uva_pool copy_to_uva (reuse::event_fenced)",
                   "[steady_state][uva_pool][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  // Small slots at first: the warm-up grows them and inserts the slots the run-ahead needs.
  ferry::uva_pool<std::int32_t, ferry::reuse::event_fenced, B> pool(256, 2, max_slots, arena);
  sinks<B> sink;
  std::vector<std::int32_t> input(max_n);
  ferry::device_span<const std::int32_t> last;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    const std::span<std::int32_t> src(input.data(), n_at(i));
    fill_step(src, i);
    last = pool.copy_to_uva(src, s);
    consume<std::int32_t>(s, last, sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(last, step_values<std::int32_t>(r.last_step, n_at(r.last_step)), sink, s);
}

TEMPLATE_TEST_CASE("steady state: uva_backed publish", "[steady_state][uva_backed][no-sanitizer]",
                   STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::uva_backed<std::int32_t, B> state(max_n, 2, max_slots, arena);
  sinks<B> sink;
  ferry::device_span<const std::int32_t> last;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    fill_step(state.host().first(n_at(i)), i);
    last = state.publish(n_at(i), s);
    consume<std::int32_t>(s, last, sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(last, step_values<std::int32_t>(r.last_step, n_at(r.last_step)), sink, s);
}

// ---- staged writes ----------------------------------------------------------------------------

namespace {

constexpr std::size_t rows = 64, cols = 256, writes_per_step = 8;

// Stages step i's writes (ragged row segments on distinct rows) into `t` and the host model. A
// step's contents stay within (2048, 4096] bytes, one power-of-two class of staging and scratch.
template <class Tensor>
void stage_step(Tensor& t, std::vector<std::int32_t>& model, std::vector<std::int32_t>& scratch,
                std::size_t i, std::size_t part) {
  for (std::size_t w = 0; w < writes_per_step; ++w) {
    const std::size_t row = (i * writes_per_step + w + part * 7) % rows;
    const std::size_t len = 72 + mix(i * 64 + w + part) % 48;
    const std::size_t start = mix(i * 64 + w + part + 1) % (cols - len + 1);
    const std::span<std::int32_t> v(scratch.data(), len);
    fill_step(v, i, part * writes_per_step + w);
    t.stage_write(row, start, v);
    std::memcpy(model.data() + row * cols + start, v.data(), len * sizeof(std::int32_t));
  }
}

// One staged_write_tensor, applied every step, its whole target consumed.
template <class B, class Tensor>
void staged_case() {
  ferry::stream<B> s;
  Tensor t(rows, cols, s);
  std::vector<std::int32_t> model(rows * cols, 0);
  std::vector<std::int32_t> scratch(cols);
  sinks<B> sink;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    stage_step(t, model, scratch, i, 0);
    t.apply_write(s);
    consume<std::int32_t>(s, t.span(), sink.at(0));
  });
  REQUIRE_STEADY(r);
  check_last(t.span(), model, sink, s);
}

}  // namespace

TEMPLATE_TEST_CASE("steady state: staged_write_tensor apply_write (device target uva_direct)",
                   "[steady_state][staged_write_tensor][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  staged_case<TestType, ferry::staged_write_tensor<std::int32_t, ferry::target::device,
                                                   ferry::staging::uva_direct, TestType>>();
}

TEMPLATE_TEST_CASE("steady state: staged_write_tensor apply_write (device target h2d_copy)",
                   "[steady_state][staged_write_tensor][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  staged_case<TestType, ferry::staged_write_tensor<std::int32_t, ferry::target::device,
                                                   ferry::staging::h2d_copy, TestType>>();
}

TEMPLATE_TEST_CASE("steady state: staged_write_tensor apply_write (uva target)",
                   "[steady_state][staged_write_tensor][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  staged_case<TestType, ferry::staged_write_tensor<std::int32_t, ferry::target::uva, TestType>>();
}

TEMPLATE_TEST_CASE("steady state: fused_staged_writer apply over a device and a uva tensor",
                   "[steady_state][fused_staged_writer][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::staged_write_tensor<std::int32_t, ferry::target::device, B> dev(rows, cols, s);
  ferry::staged_write_tensor<std::int32_t, ferry::target::uva, B> uva(rows, cols, s);
  ferry::fused_staged_writer<std::int32_t, B> writer(2);
  std::vector<std::int32_t> dev_model(rows * cols, 0), uva_model(rows * cols, 0);
  std::vector<std::int32_t> scratch(cols);
  sinks<B> sink;

  const auto r = run_steady_state<B>(s, [&](std::size_t i) {
    stage_step(dev, dev_model, scratch, i, 0);
    stage_step(uva, uva_model, scratch, i, 1);
    writer.apply(s, dev, uva);
    consume<std::int32_t>(s, dev.span(), sink.at(0));
    consume<std::int32_t>(s, uva.span(), sink.at(1));
  });
  REQUIRE_STEADY(r);
  CHECK(read_back<std::int32_t, B>(dev.span(), s) == dev_model);
  CHECK(read_back<std::int32_t, B>(uva.span(), s) == uva_model);
  CHECK(sink.read(0, s) == checksum(dev_model.data(), dev_model.size()));
  CHECK(sink.read(1, s) == checksum(uva_model.data(), uva_model.size()));
}

// ---- the negative control ---------------------------------------------------------------------

TEMPLATE_TEST_CASE("steady state harness catches one stream synchronize in the loop",
                   "[steady_state][negative][no-sanitizer]", STEADY_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<std::int32_t, B> out(max_n);
  sinks<B> sink;
  std::vector<std::int32_t> input(max_n);
  ferry::device_span<std::int32_t> last;

  const auto r = run_steady_state<B>(
      s,
      [&](std::size_t i) {
        const std::span<std::int32_t> src(input.data(), n_at(i));
        fill_step(src, i);
        last = ferry::async_h2d(src, out.span(), s, arena);
        consume<std::int32_t>(s, last, sink.at(0));
      },
      /*inject_sync=*/true);
  INFO("sync scope: " << r.report);
  CHECK_FALSE(r.check_error.empty());  // check() threw ferry::sync_error
  CHECK(r.syncs == 1);
  CHECK(r.allocations == 0);
  const auto expected = step_values<std::int32_t>(r.last_step, n_at(r.last_step));
  CHECK(read_back<std::int32_t, B>(last, s) == expected);
}
