// Tests for include/ferry/step/step_batch.hpp (and the step kernel / host task): random plans
// against a host reference on both backends, slots reused under readers held behind gates, the
// graph launch replaying changing steps, bad input, and steady state.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <step/support.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using ferry_test::model;
using ferry_test::random_bits;
using ferry_test::randomize;
using ferry_test::read;
using ferry_test::returns_after_open;
using ferry_test::same_bits;

/// A step plan of every kind, on batch type Batch: three write targets (int32 tensor with rows of
/// several chunks, a plain double matrix, a uint8 tensor), three uploads (int64, uint16 of more
/// than one chunk, float), two publishes (int32, double), a fill from a publish's element and one
/// from a device value. Each step is random (sizes, values, write counts, overlaps) and mirrored
/// in a host reference. `declared`: the maxima given to the plan (growth::fixed needs them; pow2
/// gets tiny hints and grows).
template <class B, class Batch>
struct harness {
  static constexpr bool fixed = std::is_same_v<typename Batch::growth_policy, ferry::growth::fixed>;
  // per-step limits (the declared maxima under growth::fixed)
  static constexpr std::size_t n64 = 300, n16 = 5000, nf = 64, np32 = 256, npd = 40;
  static constexpr std::size_t wa = 12, ea = 9000, wm = 8, em = 600, wc = 6, ec = 120;

  ferry::stream<B> s;
  std::mt19937_64 rng;
  ferry::staged_write_tensor<std::int32_t, B> ta{10, 4200, s};
  ferry::device_buffer<double, B> mb{12 * 300};
  ferry::staged_write_tensor<std::uint8_t, B> tc{9, 50, s};
  ferry::device_buffer<std::int64_t, B> d64{n64 + 100};
  ferry::device_buffer<std::uint16_t, B> d16{n16};
  ferry::device_buffer<float, B> df{nf};
  ferry::device_buffer<std::int32_t, B> f32{7};
  ferry::device_buffer<std::int64_t, B> f64{3};
  ferry::device_buffer<std::int64_t, B> value{1};
  model<std::int32_t> ma{10, 4200};
  model<double> mm{12, 300};
  model<std::uint8_t> mc{9, 50};
  std::vector<std::int64_t> r64;
  std::vector<std::uint16_t> r16;
  std::vector<float> rf;
  std::vector<std::int32_t> rp32, rf32;
  std::vector<double> rpd;
  std::vector<std::int64_t> rf64;
  Batch batch;
  typename Batch::template upload<std::int64_t> u64;
  typename Batch::template upload<std::uint16_t> u16;
  typename Batch::template upload<float> uf;
  typename Batch::template publish<std::int32_t> p32;
  typename Batch::template publish<double> pd;
  typename Batch::template writes<std::int32_t> w_a;
  typename Batch::template writes<double> w_m;
  typename Batch::template writes<std::uint8_t> w_c;

  harness(std::uint64_t seed, std::size_t slots) : rng(seed), batch(slots, fixed ? slots : 64) {
    mm.data = randomize(mb, s, rng);
    r64 = randomize(d64, s, rng);
    r16 = randomize(d16, s, rng);
    rf = randomize(df, s, rng);
    rf32 = randomize(f32, s, rng);
    rf64 = randomize(f64, s, rng);
    auto d = [](std::size_t n) { return fixed ? n : std::size_t{1}; };
    u64 = batch.add_upload(d64.span(), d(n64));
    u16 = batch.add_upload(d16.span(), d(n16));
    uf = batch.add_upload(df.span(), d(nf));
    p32 = batch.template add_publish<std::int32_t>(d(np32));
    pd = batch.template add_publish<double>(d(npd));
    w_a = fixed ? batch.add_writes(ta, wa, ea) : batch.add_writes(ta);
    w_m = fixed ? batch.add_writes(ferry::staged_view<double>(mb.span().data(), 12, 300), wm, em)
                : batch.add_writes(ferry::staged_view<double>(mb.span().data(), 12, 300));
    w_c = fixed ? batch.add_writes(tc, wc, ec) : batch.add_writes(tc);
    batch.add_fill(f32.span(), p32, 5);
    batch.add_fill(f64.span(), value.span().data());
  }

  std::size_t pick(std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); }

  template <class T, class U>
  void random_upload(U& h, std::vector<T>& ref, std::size_t max_n) {
    const std::size_t n = pick(0, max_n);
    const auto v = random_bits<T>(n, rng);
    auto out = h.span(n);
    REQUIRE(out.size() == n);
    std::copy(v.begin(), v.end(), out.begin());
    std::copy(v.begin(), v.end(), ref.begin());
  }
  template <class T, class W>
  void random_writes(W& h, model<T>& m, std::size_t max_w, std::size_t max_e) {
    const std::size_t count = pick(0, max_w);
    std::size_t left = max_e, row = 0, start = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (pick(0, 3) != 0) {  // else: the same row again, often overlapping
        row = pick(0, m.rows - 1);
        start = pick(0, m.cols);
      } else {
        start = pick(0, start);
      }
      const std::size_t len = pick(0, std::min(m.cols - start, left));
      const auto v = random_bits<T>(len, rng);
      if (len == 1 && start == 0 && pick(0, 1) == 0)
        h.stage_write_elem(row, v[0]);
      else
        h.stage_write(row, start, v);
      m.write(row, start, v);
      left -= len;
    }
  }

  /// Fills one random step (begin() already called).
  void fill_step() {
    random_upload(u64, r64, n64);
    random_upload(u16, r16, n16);
    random_upload(uf, rf, nf);
    rp32 = random_bits<std::int32_t>(pick(6, np32), rng);
    std::copy(rp32.begin(), rp32.end(), p32.span(rp32.size()).begin());
    rpd = random_bits<double>(pick(0, npd), rng);
    std::copy(rpd.begin(), rpd.end(), pd.span(rpd.size()).begin());
    random_writes(w_a, ma, wa, ea);
    random_writes(w_m, mm, wm, em);
    random_writes(w_c, mc, wc, ec);
    std::fill(rf32.begin(), rf32.end(), rp32[5]);
  }

  /// A new device value for the step's device-sourced fill, enqueued before its submit.
  void next_value() {
    const auto v = random_bits<std::int64_t>(1, rng);
    ferry::async_h2d(v, value.span(), s);
    std::fill(rf64.begin(), rf64.end(), v[0]);
  }

  void step() {
    next_value();
    batch.begin();
    fill_step();
    batch.submit(s);
  }

  /// Every destination and the last step's publishes against the reference.
  void check(long step) {
    INFO("step " << step);
    CHECK(same_bits(read<std::int32_t, B>(ta.span(), s), ma.data));
    CHECK(same_bits(read<double, B>(mb.span(), s), mm.data));
    CHECK(same_bits(read<std::uint8_t, B>(tc.span(), s), mc.data));
    CHECK(same_bits(read<std::int64_t, B>(d64.span(), s), r64));
    CHECK(same_bits(read<std::uint16_t, B>(d16.span(), s), r16));
    CHECK(same_bits(read<float, B>(df.span(), s), rf));
    CHECK(same_bits(read<std::int32_t, B>(p32.view(), s), rp32));
    CHECK(same_bits(read<double, B>(pd.view(), s), rpd));
    CHECK(same_bits(read<std::int32_t, B>(f32.span(), s), rf32));
    REQUIRE(same_bits(read<std::int64_t, B>(f64.span(), s), rf64));
  }
};

template <class B, class... Ps>
void plan_run(std::uint64_t seed, std::size_t slots) {
  using batch_t = ferry::step_batch<B, Ps...>;
  harness<B, batch_t> h(seed, slots);
  for (long k = 0; k < 40; ++k) {
    h.step();
    // caller_fenced: the caller makes sure a slot's step has run before the slot comes back;
    // growth::fixed: the caller stays within its slots (pow2 inserts slots instead)
    if constexpr (std::is_same_v<typename batch_t::reuse_policy, ferry::reuse::caller_fenced> ||
                  std::is_same_v<typename batch_t::growth_policy, ferry::growth::fixed>)
      h.s.synchronize();
    if (k % 3 == 0 || k == 39) h.check(k);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("step_batch: random plans match a host reference", "[step]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  SECTION("pow2, event_fenced (grows from tiny hints)") { plan_run<TestType>(11, 2); }
  SECTION("growth::fixed") { plan_run<TestType, ferry::growth::fixed>(12, 3); }
  SECTION("caller_fenced") { plan_run<TestType, ferry::reuse::caller_fenced>(13, 1); }
}

TEMPLATE_TEST_CASE("step_batch: launch::graph replays 1000 changing steps, each equal to the reference",
                   "[step][graph]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using batch_t = ferry::step_batch<TestType, ferry::presets::graph_safe, ferry::launch::graph>;
  harness<TestType, batch_t> h(21, 4);
  h.batch.reserve();  // the slots and their graphs, once
  REQUIRE(h.batch.slots() == 4);
  for (long k = 0; k < 1000; ++k) {
    h.next_value();
    h.batch.begin();
    h.fill_step();
    if (k % 97 == 5) {  // beyond the fixed slot: capacity_error, and nothing of the step is lost
      CHECK_THROWS_AS(h.u64.span(h.n64 + 1), ferry::capacity_error);
      while (h.w_a.pending() < h.wa && h.w_a.pending_elements() < h.ea) {
        const auto v = random_bits<std::int32_t>(1, h.rng);
        h.w_a.stage_write(3, 7, v);
        h.ma.write(3, 7, v);
      }
      CHECK_THROWS_AS(h.w_a.stage_write(1, 0, {std::int32_t{2}}), ferry::capacity_error);
    }
    h.batch.submit(h.s);
    h.check(k);
  }
  REQUIRE(h.batch.slots() == 4);
}

#if defined(__CUDACC__)
/// An engine's node after the step: copies what the step uploaded.
__global__ void step_batch_test_after(const std::int64_t* uploaded, std::int64_t* seen, std::size_t n) {
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) seen[i] = uploaded[i];
}

TEST_CASE("step_batch: submit_with replays the step graph as a child of an engine's graph, 1000 changing steps",
          "[step][graph]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  using batch_t = ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::graph>;
  harness<B, batch_t> h(31, 3);
  h.batch.reserve();
  ferry::device_buffer<std::int64_t, B> seen(h.n64);
  // The engine's graphs: one per step graph it is given (one in all), [step graph] -> [its own
  // kernel].
  std::vector<std::pair<cudaGraph_t, cudaGraphExec_t>> engine;
  auto exec_for = [&](cudaGraph_t step) {
    for (const auto& [g, e] : engine)
      if (g == step) return e;
    cudaGraph_t g = nullptr;
    REQUIRE(cudaGraphCreate(&g, 0) == cudaSuccess);
    cudaGraphNode_t child = nullptr, after = nullptr;
    REQUIRE(cudaGraphAddChildGraphNode(&child, g, nullptr, 0, step) == cudaSuccess);
    const std::int64_t* up = h.d64.span().data();
    std::int64_t* out = seen.span().data();
    std::size_t n = h.n64;
    void* args[] = {&up, &out, &n};
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(&step_batch_test_after);
    p.gridDim = dim3(1);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    REQUIRE(cudaGraphAddKernelNode(&after, g, &child, 1, &p) == cudaSuccess);
    cudaGraphExec_t e = nullptr;
    REQUIRE(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
    engine.emplace_back(step, e);
    return e;
  };
  for (long k = 0; k < 1000; ++k) {
    h.next_value();
    h.batch.begin();
    h.fill_step();
    auto v = h.u64.span(h.n64);  // the whole upload, so that the engine's node reads all of it
    const auto more = random_bits<std::int64_t>(h.n64, h.rng);
    std::copy(more.begin(), more.end(), v.begin());
    std::copy(more.begin(), more.end(), h.r64.begin());
    // [submit_with]
    h.batch.submit_with(h.s, [&](cudaGraph_t step) {  // the same step graph at every step
      // exec_for: the engine's executable, built once on first sight of `step` (a child node,
      // cudaGraphAddChildGraphNode, then the engine's nodes that depend on it)
      REQUIRE(cudaGraphLaunch(exec_for(step), h.s.get()) == cudaSuccess);
    });
    // [/submit_with]
    h.check(k);
    INFO("step " << k);
    // the engine's node ran after the step, and read what it uploaded
    REQUIRE(same_bits(read<std::int64_t, B>(seen.span(), h.s),
                      std::vector<std::int64_t>(h.r64.begin(), h.r64.begin() + h.n64)));
  }
  // one executable for every slot: the same step graph handed out at every step
  CHECK(engine.size() == 1);
  for (const auto& [g, e] : engine) CHECK(cudaGraphExecDestroy(e) == cudaSuccess);
}

__global__ void step_batch_test_read(const std::uint32_t* view, std::uint32_t* out, std::size_t n) {
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = view[i];
}
#endif

namespace {

/// Enqueues on `r` a reader of `view` that copies it into `out`. CUDA: a kernel, as an engine
/// reads a publish (a cudaMemcpyAsync between two host buffers is synchronous for the host, so it
/// would block behind a held stream); host backend: a stream-ordered copy.
template <class B>
void read_view(ferry::device_span<const std::uint32_t> view, ferry::pinned_buffer<std::uint32_t, B>& out,
               ferry::stream_ref<B> r) {
  if constexpr (std::is_same_v<B, ferry::backend::host>) {
    ferry::async_d2h(view, out.host(), r);
  } else {
#if defined(__CUDACC__)
    step_batch_test_read<<<1, 256, 0, r.get()>>>(view.data(), out.host().data(), view.size());
    REQUIRE(cudaPeekAtLastError() == cudaSuccess);
#endif
  }
}

/// Publishes `data` as one step of `batch` on `s`, and enqueues a reader of its view on `r`
/// (read_view into `out`).
template <class B, class Batch, class P>
void publish_step(Batch& batch, P& p, const std::vector<std::uint32_t>& data, ferry::stream_ref<B> s,
                  ferry::stream_ref<B> r, ferry::pinned_buffer<std::uint32_t, B>& out) {
  batch.begin();
  auto span = p.span(data.size());
  std::copy(data.begin(), data.end(), span.begin());
  batch.submit(s);
  read_view<B>(p.view(), out, r);
}

}  // namespace

TEMPLATE_TEST_CASE("step_batch: a slot is never rewritten under its step or a held reader", "[step][reuse]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  std::mt19937_64 rng(31);
  constexpr std::size_t n = 300, steps = 6;
  std::vector<std::vector<std::uint32_t>> data;
  std::vector<std::unique_ptr<ferry::pinned_buffer<std::uint32_t, B>>> out;
  for (std::size_t k = 0; k < steps; ++k) {
    data.push_back(random_bits<std::uint32_t>(n, rng));
    out.push_back(std::make_unique<ferry::pinned_buffer<std::uint32_t, B>>(n));
  }
  auto check = [&](std::size_t upto) {
    for (std::size_t k = 0; k < upto; ++k) {
      INFO("step " << k);
      REQUIRE(same_bits(std::vector<std::uint32_t>(out[k]->host().begin(), out[k]->host().end()), data[k]));
    }
  };

  SECTION("pow2: slots are inserted while the stream is held") {
    ferry::stream<B> s;
    ferry::step_batch<B> batch(2, 8);
    auto p = batch.template add_publish<std::uint32_t>(n);
    ferry_test::gate<B> g(s);  // holds every step's kernel and every reader
    for (std::size_t k = 0; k < steps; ++k) publish_step<B>(batch, p, data[k], s, s, *out[k]);
    CHECK(batch.slots() == steps);
    g.open();
    s.synchronize();
    check(steps);
    // the stream caught up: the ring is reused, not grown
    for (std::size_t k = 0; k < 2 * steps; ++k) {
      publish_step<B>(batch, p, data[k % steps], s, s, *out[k % steps]);
      s.synchronize();
    }
    CHECK(batch.slots() == steps);
    check(steps);
  }
  SECTION("a reader held after its step has run: the next submit covers it") {
    ferry::stream<B> s;
    ferry::step_batch<B> batch(2, 8);
    auto p = batch.template add_publish<std::uint32_t>(n);
    batch.begin();
    auto span = p.span(n);
    std::copy(data[0].begin(), data[0].end(), span.begin());
    batch.submit(s);
    ferry_test::gate<B> g(s);
    g.wait_entered();  // step 0 has run; its reader is held
    read_view<B>(p.view(), *out[0], s);
    for (std::size_t k = 1; k < steps; ++k) publish_step<B>(batch, p, data[k], s, s, *out[k]);
    g.open();
    s.synchronize();
    check(steps);
  }
  SECTION("growth::fixed: slots of the plan's capacity are inserted while the stream is held") {
    ferry::stream<B> s;
    ferry::step_batch<B, ferry::growth::fixed, ferry::reuse::throw_when_full> batch(2, steps);
    auto p = batch.template add_publish<std::uint32_t>(n);
    ferry_test::gate<B> g(s);
    for (std::size_t k = 0; k < steps; ++k) publish_step<B>(batch, p, data[k], s, s, *out[k]);
    CHECK(batch.slots() == steps);
    REQUIRE_THROWS_AS(batch.begin(), ferry::capacity_error);  // max_slots reached: throw_when_full
    CHECK_FALSE(batch.in_step());
    g.open();
    s.synchronize();
    check(steps);
  }
  SECTION("growth::fixed, max_slots == slots, throw_when_full: a busy next slot throws capacity_error and loses nothing") {
    using Catch::Matchers::ContainsSubstring;
    ferry::stream<B> s;
    ferry::step_batch<B, ferry::growth::fixed, ferry::reuse::throw_when_full> batch(2, 2);
    auto p = batch.template add_publish<std::uint32_t>(n);
    ferry_test::gate<B> g(s);
    publish_step<B>(batch, p, data[0], s, s, *out[0]);
    publish_step<B>(batch, p, data[1], s, s, *out[1]);
    const auto line = std::to_string(ferry::detail::shared_timeline<B>().mark(s).line);
    REQUIRE_THROWS_WITH(batch.begin(), ContainsSubstring("ferry: step_batch: the next slot (slot 0) is still in use") &&
                                           ContainsSubstring("until stream point (line " + line + ", seq ") &&
                                           ContainsSubstring("max_slots (2)"));
    CHECK_FALSE(batch.in_step());
    CHECK(batch.slots() == 2);
    g.open();
    s.synchronize();
    publish_step<B>(batch, p, data[2], s, s, *out[2]);
    s.synchronize();
    check(3);
  }
  SECTION("max_slots == slots, event_fenced (the default): a full ring waits for the next slot") {
    ferry::stream<B> s;
    ferry::step_batch<B> batch(2, 2);
    auto p = batch.template add_publish<std::uint32_t>(n);
    ferry_test::gate<B> g(s);  // holds both steps' kernels and readers
    publish_step<B>(batch, p, data[0], s, s, *out[0]);
    publish_step<B>(batch, p, data[1], s, s, *out[1]);
    const auto syncs = ferry::backend_stats_of<B>().synchronizations;
    const auto waits = ferry::detail::ring_waits;
    CHECK(returns_after_open(g, [&] { batch.begin(); }));  // waited for step 0's slot
    CHECK(batch.in_step());
    CHECK(batch.slots() == 2);
    CHECK(ferry::detail::ring_waits == waits + 1);
    CHECK(ferry::backend_stats_of<B>().synchronizations > syncs);
    check(1);  // step 0's reader ran before its slot was written again
    auto span = p.span(n);
    std::copy(data[2].begin(), data[2].end(), span.begin());
    batch.submit(s);
    read_view<B>(p.view(), *out[2], s);
    s.synchronize();
    check(3);
  }
  SECTION("growth::fixed, event_fenced: a full ring waits, then the step runs") {
    ferry::stream<B> s;
    ferry::step_batch<B, ferry::growth::fixed> batch(2, 3);
    auto p = batch.template add_publish<std::uint32_t>(n);
    ferry_test::gate<B> g(s);
    for (std::size_t k = 0; k < 3; ++k) publish_step<B>(batch, p, data[k], s, s, *out[k]);
    CHECK(batch.slots() == 3);
    const auto waits = ferry::detail::ring_waits;
    CHECK(returns_after_open(g, [&] { publish_step<B>(batch, p, data[3], s, s, *out[3]); }));
    CHECK(ferry::detail::ring_waits == waits + 1);
    CHECK(batch.slots() == 3);
    s.synchronize();
    check(4);
  }
  SECTION("a reader on another stream, declared with record_use") {
    ferry::stream<B> s, r;
    ferry::step_batch<B> batch(2, 8);
    auto p = batch.template add_publish<std::uint32_t>(n);
    ferry_test::gate<B> g(r);  // holds the reader only: the steps themselves run
    publish_step<B>(batch, p, data[0], s, r, *out[0]);
    batch.record_use(r);
    for (std::size_t k = 1; k < steps; ++k) {
      publish_step<B>(batch, p, data[k], s, s, *out[k]);
      s.synchronize();
    }
    CHECK(batch.slots() == 3);  // one slot inserted; then the held slot is stepped over
    g.open();
    r.synchronize();
    check(steps);
  }
}

TEMPLATE_TEST_CASE("step_batch: bad input throws clearly and loses nothing", "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  std::mt19937_64 rng(41);
  ferry::stream<B> s;
  ferry::device_buffer<std::int64_t, B> dst(64), fill(4);
  ferry::staged_write_tensor<float, B> t(4, 10, s);
  ferry::step_batch<B, ferry::growth::fixed> batch(2);
  CHECK_THROWS_AS(batch.add_upload(dst.span(), 65), std::invalid_argument);
  auto up = batch.add_upload(dst.span(), 32);
  auto pub = batch.template add_publish<std::int64_t>(8);
  auto w = batch.add_writes(t, 2, 12);
  batch.add_fill(fill.span(), pub, 3);
  CHECK_THROWS_WITH(up.span(1), Catch::Matchers::StartsWith("ferry: ") &&
                                    Catch::Matchers::ContainsSubstring("call begin() first"));
  batch.begin();
  CHECK_THROWS_WITH(batch.template add_publish<int>(1), Catch::Matchers::ContainsSubstring("the plan is fixed"));
  CHECK_THROWS_AS(batch.begin(), ferry::error);

  const auto a = random_bits<std::int64_t>(32, rng);
  auto sa = up.span(32);
  std::copy(a.begin(), a.end(), sa.begin());
  CHECK_THROWS_AS(up.span(65), std::out_of_range);
  CHECK_THROWS_AS(up.span(33), ferry::capacity_error);
  CHECK_THROWS_AS(pub.span(9), ferry::capacity_error);
  const auto row = random_bits<float>(10, rng);
  CHECK_THROWS_AS(w.stage_write(4, 0, row), std::out_of_range);
  CHECK_THROWS_AS(w.stage_write(0, 1, row), std::out_of_range);
  w.stage_write(1, 0, row);
  CHECK_THROWS_AS(w.stage_write(2, 0, row), ferry::capacity_error);  // 20 > 12 elements
  w.stage_write(2, 8, std::span(row).first(2));
  CHECK_THROWS_AS(w.stage_write(3, 0, {1.f}), ferry::capacity_error);  // a third write
  CHECK(w.pending() == 2);
  CHECK(w.pending_elements() == 12);
  const auto pv = random_bits<std::int64_t>(3, rng);
  auto sp = pub.span(3);
  std::copy(pv.begin(), pv.end(), sp.begin());
  CHECK_THROWS_AS(batch.submit(s), std::out_of_range);  // the fill reads element 3 of 3
  CHECK(batch.in_step());
  const auto pv2 = random_bits<std::int64_t>(4, rng);
  sp = pub.span(4);
  std::copy(pv2.begin(), pv2.end(), sp.begin());
  batch.submit(s);
  CHECK_FALSE(batch.in_step());

  CHECK(same_bits(read<std::int64_t, B>(dst.span().first(32), s), a));
  CHECK(same_bits(read<std::int64_t, B>(fill.span(), s), std::vector<std::int64_t>(4, pv2[3])));
  model<float> m(4, 10);
  m.write(1, 0, row);
  m.write(2, 8, {row[0], row[1]});
  CHECK(same_bits(ferry_test::read_back<float, B>(t, s), m.data));
}

TEMPLATE_TEST_CASE("step_batch: steady state allocates nothing, never synchronizes, one task per step",
                   "[step][steady]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  std::mt19937_64 rng(51);
  ferry::stream<B> s;
  ferry::device_buffer<std::int32_t, B> dst(256);
  ferry::staged_write_tensor<std::int32_t, B> t(64, 128, s);
  ferry::step_batch<B> batch(2, 32);
  auto up = batch.add_upload(dst.span(), 256);
  auto pub = batch.template add_publish<std::int64_t>(256);
  auto w = batch.add_writes(t, 8, 512);
  const auto v = random_bits<std::int32_t>(256, rng);
  const auto p = random_bits<std::int64_t>(256, rng);
  auto step = [&](std::size_t k) {
    batch.begin();
    auto a = up.span(256);
    std::copy(v.begin(), v.end(), a.begin());
    auto b = pub.span(256);
    std::copy(p.begin(), p.end(), b.begin());
    for (std::size_t i = 0; i < 8; ++i) w.stage_write((k + i) % 64, 0, std::span(v).first(64));
    batch.submit(s);
  };
  {  // warm-up: the deepest ring, behind a held stream (a burst's steps and the step before it)
    ferry_test::gate<B> g(s);
    for (std::size_t k = 0; k < 17; ++k) step(k);
  }
  s.synchronize();
  const std::size_t slots = batch.slots();
  ferry::backend_stats total{};
  for (int burst = 0; burst < 8; ++burst) {
    const auto before = ferry::backend_stats_of<B>();
    for (std::size_t k = 0; k < 16; ++k) step(k);
    const auto after = ferry::backend_stats_of<B>();
    total.pinned_allocations += after.pinned_allocations - before.pinned_allocations;
    total.device_allocations += after.device_allocations - before.device_allocations;
    total.synchronizations += after.synchronizations - before.synchronizations;
    s.synchronize();
  }
  CHECK(total.pinned_allocations == 0);
  CHECK(total.device_allocations == 0);
  CHECK(total.synchronizations == 0);
  CHECK(batch.slots() == slots);
  if constexpr (std::is_same_v<B, ferry::backend::host>) {
    const auto before = ferry_test::enqueued<B>(s);
    step(0);
    CHECK(ferry_test::enqueued<B>(s) - before == 1);
  }
}

// ---- reliability: submit, empty and stale handles, the rules checked at setup ------------------

// User GrowthPolicies, outside the anonymous namespace: a batch's submit carries a visibility
// attribute, which a type of internal linkage would void (nvcc warns).
namespace step_test_policies {

constexpr std::size_t policy_threshold = std::size_t{64} << 10;

/// A legal GrowthPolicy that throws ferry::capacity_error for more than 64 KiB (elements or bytes).
struct throws_above_64k {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    if (needed > policy_threshold)
      throw ferry::capacity_error("ferry: test policy: no capacity above 64 KiB (asked " + std::to_string(needed) + ")");
    return ferry::growth::pow2::capacity_for(needed, current);
  }
};

/// A legal GrowthPolicy whose answer above 64 KiB is 2^63, which no pinned block can hold.
struct huge_above_64k {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    if (needed > policy_threshold) return std::max(needed, std::size_t{1} << 63);
    return ferry::growth::pow2::capacity_for(needed, current);
  }
};

}  // namespace step_test_policies

namespace {

using step_test_policies::huge_above_64k;
using step_test_policies::policy_threshold;
using step_test_policies::throws_above_64k;

/// One upload of a 128 KiB step under growth policy G: submit throws capacity_error having enqueued
/// nothing, again on a retry; the step stays open; smaller data then submit (or cancel(), then a
/// smaller step) works, and the batch keeps working after.
template <class B, class G>
void growth_policy_refuses(bool fix_by_cancel) {
  std::mt19937_64 rng(61);
  ferry::stream<B> s;
  constexpr std::size_t big = (std::size_t{128} << 10) / sizeof(std::int32_t);
  ferry::device_buffer<std::int32_t, B> dst(big);
  auto ref = randomize(dst, s, rng);
  s.synchronize();
  ferry::step_batch<B, G> batch(2, 8);
  auto up = batch.add_upload(dst.span(), 1);  // a tiny hint: the slot grows
  auto pub = batch.template add_publish<std::int32_t>(1);
  for (int round = 0; round < 3; ++round) {  // a good step before, and after each refusal
    batch.begin();
    const auto v = random_bits<std::int32_t>(1000, rng);
    auto out = up.span(v.size());
    std::copy(v.begin(), v.end(), out.begin());
    std::copy(v.begin(), v.end(), ref.begin());
    const auto p = random_bits<std::int32_t>(7, rng);
    std::copy(p.begin(), p.end(), pub.span(p.size()).begin());
    batch.submit(s);
    REQUIRE(same_bits(read<std::int32_t, B>(dst.span(), s), ref));
    REQUIRE(same_bits(read<std::int32_t, B>(pub.view(), s), p));

    batch.begin();
    const auto huge = random_bits<std::int32_t>(big, rng);
    auto all = up.span(big);
    std::copy(huge.begin(), huge.end(), all.begin());
    const auto steps = batch.steps();
    const auto tasks = ferry_test::enqueued<B>(s);
    for (int retry = 0; retry < 2; ++retry) {
      CHECK_THROWS_AS(batch.submit(s), ferry::capacity_error);
      CHECK(batch.in_step());
      CHECK(batch.steps() == steps);
      CHECK(ferry_test::enqueued<B>(s) == tasks);
    }
    CHECK(same_bits(read<std::int32_t, B>(dst.span(), s), ref));  // the step was never launched
    if (fix_by_cancel) {
      const auto before_cancel = ferry_test::enqueued<B>(s);
      batch.cancel();
      CHECK_FALSE(batch.in_step());
      CHECK(batch.steps() == steps);
      CHECK(ferry_test::enqueued<B>(s) == before_cancel);
      CHECK_THROWS_AS(up.span(1), ferry::error);  // outside a step again
      batch.begin();
    }
    const auto fixed = random_bits<std::int32_t>(4000, rng);  // 16 KiB: within the policy
    auto smaller = up.span(fixed.size());
    std::copy(fixed.begin(), fixed.end(), smaller.begin());
    std::copy(fixed.begin(), fixed.end(), ref.begin());
    batch.submit(s);
    CHECK_FALSE(batch.in_step());
    CHECK(batch.steps() == steps + 1);
    REQUIRE(same_bits(read<std::int32_t, B>(dst.span(), s), ref));
  }
}

}  // namespace

TEMPLATE_TEST_CASE("step_batch: a submit refused by its growth policy enqueues nothing and leaves the step open",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  SECTION("a policy that throws; smaller data, then submit") { growth_policy_refuses<TestType, throws_above_64k>(false); }
  SECTION("a policy that throws; cancel(), then a smaller step") { growth_policy_refuses<TestType, throws_above_64k>(true); }
  SECTION("a policy answering 2^63 bytes; smaller data, then submit") {
    growth_policy_refuses<TestType, huge_above_64k>(false);
  }
  SECTION("a policy answering 2^63 bytes; cancel(), then a smaller step") {
    growth_policy_refuses<TestType, huge_above_64k>(true);
  }
}

TEMPLATE_TEST_CASE("step_batch: cancel() drops the open step; the next step takes its slot", "[step]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  std::mt19937_64 rng(62);
  ferry::stream<B> s;
  ferry::device_buffer<std::int64_t, B> dst(64), fill(3);
  ferry::staged_write_tensor<std::int32_t, B> t(4, 32, s);
  ferry::step_batch<B, ferry::reuse::caller_fenced> batch(2);
  auto up = batch.add_upload(dst.span(), 64);
  auto pub = batch.template add_publish<std::int64_t>(8);
  auto w = batch.add_writes(t, 4, 64);
  batch.add_fill(fill.span(), pub, 2);
  auto ref = randomize(dst, s, rng);
  auto fref = randomize(fill, s, rng);
  model<std::int32_t> m(4, 32);
  batch.cancel();  // outside a step: nothing to drop
  CHECK_FALSE(batch.in_step());
  for (int k = 0; k < 6; ++k) {
    batch.begin();
    const auto junk = random_bits<std::int64_t>(64, rng);
    std::copy(junk.begin(), junk.end(), up.span(64).begin());
    std::copy(junk.begin(), junk.begin() + 8, pub.span(8).begin());
    w.stage_write(1, 3, random_bits<std::int32_t>(20, rng));
    CHECK(w.pending() == 1);
    const auto tasks = ferry_test::enqueued<B>(s);
    batch.cancel();
    CHECK(ferry_test::enqueued<B>(s) == tasks);
    CHECK(w.pending() == 0);
    CHECK(w.pending_elements() == 0);
    CHECK(pub.view().empty());
    CHECK(batch.steps() == static_cast<std::uint64_t>(k));
    // caller_fenced: the slot after the last submitted step again, so the caller's count of steps
    // (not of begin() calls) still says which slots are done
    batch.begin();
    const auto v = random_bits<std::int64_t>(1 + rng() % 64, rng);
    std::copy(v.begin(), v.end(), up.span(v.size()).begin());
    std::copy(v.begin(), v.end(), ref.begin());
    const auto p = random_bits<std::int64_t>(3 + rng() % 6, rng);
    std::copy(p.begin(), p.end(), pub.span(p.size()).begin());
    std::fill(fref.begin(), fref.end(), p[2]);
    const auto row = random_bits<std::int32_t>(5, rng);
    w.stage_write(k % 4, 2, row);
    m.write(k % 4, 2, row);
    batch.submit(s);
    s.synchronize();
    CHECK(same_bits(read<std::int64_t, B>(dst.span(), s), ref));
    CHECK(same_bits(read<std::int64_t, B>(fill.span(), s), fref));
    CHECK(same_bits(read<std::int64_t, B>(pub.view(), s), p));
    CHECK(same_bits(ferry_test::read_back<std::int32_t, B>(t, s), m.data));
  }
  CHECK(batch.slots() == 2);
}

TEMPLATE_TEST_CASE("step_batch: every member of an empty handle throws ferry::error, its counts are 0", "[step][bad_input]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using batch_t = ferry::step_batch<TestType>;
  typename batch_t::template upload<std::int32_t> u;
  typename batch_t::template publish<double> p;
  typename batch_t::template writes<std::uint16_t> w;
  CHECK_THROWS_AS(u.destination(), ferry::error);
  CHECK_THROWS_AS(u.span(1), ferry::error);
  CHECK_THROWS_AS(p.view(), ferry::error);
  CHECK_THROWS_AS(p.span(1), ferry::error);
  CHECK_THROWS_AS(w.stage_write(0, 0, {std::uint16_t{1}}), ferry::error);
  CHECK_THROWS_WITH(p.view(), Catch::Matchers::StartsWith("ferry: ") && Catch::Matchers::ContainsSubstring("empty"));
  CHECK(w.pending() == 0);
  CHECK(w.pending_elements() == 0);
  CHECK(w.rows() == 0);
  CHECK(w.cols() == 0);
}

TEMPLATE_TEST_CASE("step_batch: handles of a batch assigned over or destroyed throw; moves keep handles valid",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using batch_t = ferry::step_batch<B>;
  std::mt19937_64 rng(63);
  ferry::stream<B> s;
  ferry::device_buffer<std::int32_t, B> a_dst(32), b_dst(32);
  ferry::staged_write_tensor<std::int32_t, B> t(2, 8, s);
  auto a_ref = randomize(a_dst, s, rng);
  auto b_ref = randomize(b_dst, s, rng);
  batch_t a;
  auto a_up = a.add_upload(a_dst.span(), 32);
  auto a_pub = a.template add_publish<std::int32_t>(4);
  auto a_w = a.add_writes(t, 2, 16);
  a.begin();  // slots taken, a step open: assignment drops it
  std::copy(a_ref.begin(), a_ref.end(), a_up.span(32).begin());
  batch_t b;
  auto b_up = b.add_upload(b_dst.span(), 32);
  auto b_pub = b.template add_publish<std::int32_t>(4);
  auto step = [&](batch_t& batch) {
    batch.begin();
    const auto v = random_bits<std::int32_t>(32, rng);
    std::copy(v.begin(), v.end(), b_up.span(32).begin());
    b_ref = v;
    const auto p = random_bits<std::int32_t>(4, rng);
    std::copy(p.begin(), p.end(), b_pub.span(4).begin());
    batch.submit(s);
    CHECK(same_bits(read<std::int32_t, B>(b_dst.span(), s), b_ref));
    CHECK(same_bits(read<std::int32_t, B>(b_pub.view(), s), p));
  };
  step(b);
  batch_t c(std::move(b));  // move construction keeps the plan: b's handles stay valid
  step(c);
  batch_t d;  // a move into an empty batch keeps them valid too
  d = std::move(c);
  step(d);
  a = std::move(d);  // a's plan is gone: its handles say so, b's handles now work through a
  using Catch::Matchers::ContainsSubstring;
  CHECK_THROWS_AS(a_up.span(1), ferry::error);
  CHECK_THROWS_WITH(a_up.destination(), ContainsSubstring("assigned over or destroyed"));
  CHECK_THROWS_AS(a_pub.view(), ferry::error);
  CHECK_THROWS_AS(a_pub.span(1), ferry::error);
  CHECK_THROWS_AS(a_w.stage_write(0, 0, {std::int32_t{5}}), ferry::error);
  CHECK_THROWS_AS(a_w.pending(), ferry::error);
  CHECK_THROWS_AS(a_w.rows(), ferry::error);
  CHECK_THROWS_AS(a.add_fill(a_dst.span().first(1), a_pub, 0), std::invalid_argument);  // not a's publish now
  step(a);
  step(a);
  CHECK(a.steps() == 5);
  {
    batch_t e(std::move(a));
    step(e);
  }  // destroyed: its handles say so
  CHECK_THROWS_AS(b_up.span(1), ferry::error);
  CHECK_THROWS_AS(b_pub.view(), ferry::error);
  CHECK_THROWS_AS(b_up.destination(), ferry::error);
  CHECK(same_bits(read<std::int32_t, B>(b_dst.span(), s), b_ref));
}

TEMPLATE_TEST_CASE("step_batch: destinations that overlap are rejected at setup, naming both ranges",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using Catch::Matchers::ContainsSubstring;
  std::mt19937_64 rng(64);
  ferry::stream<B> s;
  ferry::device_buffer<std::int32_t, B> mem(256), value(1);
  const auto span = mem.span();
  auto hex = [](const void* p) {
    std::ostringstream o;
    o << "0x" << std::hex << reinterpret_cast<std::uintptr_t>(p);
    return o.str();
  };
  ferry::step_batch<B> batch;
  // the plan: an upload into [0, 32), a target over [32, 96) (4 x 16), a fill of [96, 100),
  // a publish (slot memory: never a destination)
  auto up = batch.add_upload(span.subspan(0, 32), 32);
  auto w = batch.add_writes(ferry::staged_view<std::int32_t>(span.data() + 32, 4, 16), 4, 64);
  auto pub = batch.template add_publish<std::int32_t>(8);
  batch.add_fill(span.subspan(96, 4), pub, 1);
  // upload vs upload (one element shared), naming both ranges
  CHECK_THROWS_WITH(batch.add_upload(span.subspan(31, 2), 2),
                    ContainsSubstring(hex(span.data() + 31)) && ContainsSubstring("8 bytes") &&
                        ContainsSubstring(hex(span.data())) && ContainsSubstring("128 bytes"));
  CHECK_THROWS_AS(batch.add_upload(span.subspan(31, 2), 2), std::invalid_argument);
  // write target vs write target: a second view over the same memory, and one that shares a row
  CHECK_THROWS_AS(batch.add_writes(ferry::staged_view<std::int32_t>(span.data() + 32, 4, 16)), std::invalid_argument);
  CHECK_THROWS_AS(batch.add_writes(ferry::staged_view<std::int32_t>(span.data() + 80, 1, 16)), std::invalid_argument);
  // a target of another element type over the same bytes
  CHECK_THROWS_AS(batch.add_writes(ferry::staged_view<std::int64_t>(reinterpret_cast<std::int64_t*>(span.data() + 40), 2, 2)),
                  std::invalid_argument);
  // write target vs upload and fill; upload vs fill; fill vs fill
  CHECK_THROWS_AS(batch.add_writes(ferry::staged_view<std::int32_t>(span.data() + 28, 1, 8)), std::invalid_argument);
  CHECK_THROWS_AS(batch.add_writes(ferry::staged_view<std::int32_t>(span.data() + 95, 1, 2)), std::invalid_argument);
  CHECK_THROWS_AS(batch.add_upload(span.subspan(90, 10), 10), std::invalid_argument);
  CHECK_THROWS_AS(batch.add_fill(span.subspan(0, 1), value.span().data()), std::invalid_argument);
  CHECK_THROWS_WITH(batch.add_fill(span.subspan(99, 1), pub, 0),
                    ContainsSubstring(hex(span.data() + 99)) && ContainsSubstring(hex(span.data() + 96)));
  CHECK_THROWS_AS(batch.add_fill(span.subspan(40, 2), value.span().data()), std::invalid_argument);
  // ranges that only touch, and empty ranges, are disjoint
  auto up2 = batch.add_upload(span.subspan(100, 20), 20);
  batch.add_fill(span.subspan(120, 0), value.span().data());
  auto w2 = batch.add_writes(ferry::staged_view<std::int32_t>(span.data() + 120, 2, 8), 2, 16);
  // nothing rejected was added: a step moves exactly the plan above
  auto ref = randomize(mem, s, rng);
  const auto val = random_bits<std::int32_t>(1, rng);
  ferry::async_h2d(val, value.span(), s);
  batch.begin();
  const auto a = random_bits<std::int32_t>(32, rng);
  std::copy(a.begin(), a.end(), up.span(32).begin());
  std::copy(a.begin(), a.end(), ref.begin());
  const auto row = random_bits<std::int32_t>(16, rng);
  w.stage_write(2, 0, row);
  std::copy(row.begin(), row.end(), ref.begin() + 32 + 2 * 16);
  const auto p = random_bits<std::int32_t>(2, rng);
  std::copy(p.begin(), p.end(), pub.span(2).begin());
  std::fill(ref.begin() + 96, ref.begin() + 100, p[1]);
  const auto b = random_bits<std::int32_t>(20, rng);
  std::copy(b.begin(), b.end(), up2.span(20).begin());
  std::copy(b.begin(), b.end(), ref.begin() + 100);
  const auto r2 = random_bits<std::int32_t>(8, rng);
  w2.stage_write(1, 0, r2);
  std::copy(r2.begin(), r2.end(), ref.begin() + 128);
  batch.submit(s);
  CHECK(same_bits(read<std::int32_t, B>(mem.span(), s), ref));
}

// A writes plan whose declared maxima fit size_t but that no slot of the arena holds: reserve()
// (or the first begin()) throws ferry::capacity_error from the arena before any host memory is
// sized from the plan, allocates nothing and leaves the plan unfixed. Each target's chunk list and
// overlap resolver were once reserved first, from the plan's descriptor count: std::bad_alloc, or
// an AddressSanitizer abort (fuzz: tests/fuzz/corpus/step/regression-writes-table-host-vectors).
TEMPLATE_TEST_CASE("step_batch: a writes plan past what the arena holds throws capacity_error before sizing host memory",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  std::mt19937_64 rng(0xf023);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena(std::size_t{64} << 20);  // as the fuzz targets: 64 MiB at most
  ferry::device_buffer<std::uint8_t, B> dst(64);
  const ferry::staged_view<std::uint8_t> target(dst.span().data(), 2, 30);
  auto run = [&](auto& batch, std::size_t max_writes, std::size_t max_elements) {
    INFO("add_writes(target, " << max_writes << ", " << max_elements << ")");
    auto w = batch.add_writes(target, max_writes, max_elements);
    const auto before = arena.stats();
    CHECK_THROWS_AS(batch.reserve(), ferry::capacity_error);
    CHECK_THROWS_WITH(batch.begin(), Catch::Matchers::StartsWith("ferry: "));
    CHECK_THROWS_AS(batch.begin(), ferry::capacity_error);
    CHECK_FALSE(batch.in_step());
    CHECK(batch.slots() == 0);  // nothing allocated, the plan not fixed
    CHECK(arena.stats().bytes_reserved == before.bytes_reserved);
    CHECK(arena.stats().allocations == before.allocations);
    (void)w;
  };
  for (const std::size_t n : {std::size_t{1} << 40, std::size_t{1} << 56, std::numeric_limits<std::size_t>::max()}) {
    {
      ferry::step_batch<B, ferry::growth::fixed> batch(2, 4, arena);
      run(batch, 0, n);
    }
    {
      ferry::step_batch<B, ferry::growth::fixed> batch(2, 4, arena);
      run(batch, n / 32, 0);  // descriptors for n / 32 writes
    }
    {
      ferry::step_batch<B> batch(2, 4, arena);  // pow2: the maxima are hints, grown by the policy
      run(batch, 0, n);
    }
  }
  // The same arena and target with maxima a slot holds: the plan runs and applies its writes.
  ferry::step_batch<B, ferry::growth::fixed> ok(2, 4, arena);
  auto w = ok.add_writes(target, 2, 60);
  ok.begin();
  const auto a = random_bits<std::uint8_t>(30, rng), b = random_bits<std::uint8_t>(30, rng);
  w.stage_write(0, 0, a);
  w.stage_write(1, 0, b);
  ok.submit(s);
  const auto got = read<std::uint8_t, B>(ferry::device_span<const std::uint8_t>(dst.span().data(), 60),
                                         ferry::stream_ref<B>(s));
  std::vector<std::uint8_t> want(a);
  want.insert(want.end(), b.begin(), b.end());
  CHECK(got == want);
}

// Under growth::fixed, a span() larger than its handle's earlier one in the step once took the
// slot's room again and threw capacity_error within max_n: as the step's last placement (fuzz:
// tests/fuzz/corpus/step/regression-span-grows-in-step) and after another handle's placement
// (regression-spans-grow-in-turns).
TEMPLATE_TEST_CASE("step_batch: spans that grow within a step stay within the declared capacity",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  struct call {
    bool publish;
    std::size_t n;
  };
  static const std::vector<call> orders[] = {
      // each larger than the last, as the step's last placement
      {{true, 15}, {true, 16}, {true, 17}, {true, 18}, {true, 19}, {false, 10}, {false, 13}, {false, 16}, {false, 19}, {false, 19}},
      // in turns, each after the other handle's placement
      {{false, 14}, {true, 12}, {false, 21}, {true, 19}}};
  const std::size_t which = GENERATE(0u, 1u);
  std::mt19937_64 rng(0xf025 + which);
  ferry::stream<B> s;
  ferry::device_buffer<std::int64_t, B> dst(21);
  ferry::step_batch<B, ferry::growth::fixed> batch(3, 3);
  auto pub = batch.template add_publish<std::int64_t>(19);
  auto up = batch.add_upload(dst.span(), 21);
  for (int step = 0; step < 4; ++step) {
    batch.begin();
    std::span<std::int64_t> u, last;
    for (const call& c : orders[which]) {
      if (c.publish)
        last = pub.span(c.n);
      else
        u = up.span(c.n);
    }
    const auto a = random_bits<std::int64_t>(u.size(), rng);
    const auto p = random_bits<std::int64_t>(last.size(), rng);
    std::copy(a.begin(), a.end(), u.begin());
    std::copy(p.begin(), p.end(), last.begin());
    batch.submit(s);
    const auto got = read<std::int64_t, B>(ferry::device_span<const std::int64_t>(dst.span()), ferry::stream_ref<B>(s));
    CHECK(std::vector<std::int64_t>(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(a.size())) == a);
    const auto v = pub.view();
    REQUIRE(v.size() == p.size());
    CHECK(std::vector<std::int64_t>(v.data(), v.data() + v.size()) == p);
  }
}

// One-element writes that overlap no write before them join the step's scatter record (one
// descriptor for many); a later write that overlaps one must still win, and one that a later
// write overlaps must lose. Steps of random one-element and short writes into a small target (so
// that overlaps in both orders are frequent, and some steps have none), against the host model,
// under growth::fixed at its exact limits and under the default growth policy.
template <class B, class T, class Growth>
void check_singles_against_model(std::uint64_t seed) {
  constexpr std::size_t rows = 6, cols = 8, writes = 40;
  std::mt19937_64 rng(seed);
  auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
  ferry::stream<B> s;
  ferry::device_buffer<T, B> dst(rows * cols);
  auto want = randomize(dst, ferry::stream_ref<B>(s), rng);
  ferry::step_batch<B, Growth> batch(2, 4);
  auto h = batch.add_writes(ferry::staged_view<T>(dst.data(), rows, cols), writes, writes * cols);
  for (int step = 0; step < 60; ++step) {
    batch.begin();
    const bool only_singles = step % 4 == 0;  // all one-element: the record alone, at its limit
    const bool disjoint = step % 4 == 1;      // one-element writes in distinct places: never unscattered
    std::size_t n = pick(writes / 2, writes);
    for (std::size_t w = 0; w < n; ++w) {
      const std::size_t len = only_singles || disjoint || pick(0, 3) != 0 ? 1 : pick(2, 5);
      std::size_t row = pick(0, rows - 1), start = pick(0, cols - len);
      if (disjoint) {
        row = w / cols;
        start = w % cols;
        if (row >= rows) break;
      }
      const auto v = random_bits<T>(len, rng);
      if (len == 1 && pick(0, 1) == 0)
        h.stage_write(row, start, {v[0]});
      else
        h.stage_write(row, start, v);
      std::copy(v.begin(), v.end(), want.begin() + static_cast<std::ptrdiff_t>(row * cols + start));
    }
    batch.submit(s);
    // Distinct one-element writes took the scatter record: one descriptor, not one per write.
    if (disjoint) CHECK(ferry::detail::step_batch_access::last_descriptors(batch) == 1);
    const auto got = read<T, B>(ferry::device_span<const T>(dst.span()), ferry::stream_ref<B>(s));
    REQUIRE(same_bits(got, want));
  }
}

TEMPLATE_TEST_CASE("step_batch: one-element writes scatter, and a later overlapping write wins either way", "[step]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  const std::uint64_t seed = GENERATE(1u, 2u, 3u);
  check_singles_against_model<B, std::int32_t, ferry::growth::fixed>(seed);
  check_singles_against_model<B, std::uint8_t, ferry::growth::fixed>(seed);
  check_singles_against_model<B, double, ferry::growth::pow2>(seed);
  check_singles_against_model<B, std::int16_t, ferry::growth::pow2>(seed);
}
