// Tests for include/ferry/step/detail/step_capture.hpp (step_batch under launch::capture). On the
// host backend they test the commit PROTOCOL (the host has no stream capture: replay_recorded runs
// what the recorded kernel does, through the same shared code): commits and replays in order,
// pipelined, slots inserted while replays are held, a replay without a commit and a commit without
// a replay detected and reported. On CUDA they test the CAPTURE: the step recorded with
// cudaStreamBeginCapture into a graph whose next node is a stand-in model reading the step's
// outputs, replayed 1,000 times with changing sizes and slots inserted mid-run, every step checked
// against a host reference, and the same misuse detected.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <step/support.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

// Functors outside an anonymous namespace: a batch's calls carry a visibility attribute, which a
// type of internal linkage would void (nvcc warns).
namespace step_capture_test {

inline constexpr std::size_t width = 64;       // the most elements of an upload or a gather
inline constexpr std::size_t src_n = 300;      // the gather's device source
inline constexpr std::size_t fill_n = 16;      // the fill's destination
inline constexpr std::size_t keep = 16;        // steps the model keeps (rows of its history)
inline constexpr std::size_t row = 4 + 2 * width;  // a history row: stamp, sizes, fill value, upload, gather

/// The epilogue: the step's number and sizes where the model reads them.
struct marks {
  ferry::step_ref<std::int64_t> up;
  ferry::step_ref<std::int64_t> gat;
  std::int64_t* meta = nullptr;
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    if (ctx.rank() != 0) return;
    meta[0] = static_cast<std::int64_t>(ctx.step() + 1);
    meta[1] = static_cast<std::int64_t>(ctx.size(up));
    meta[2] = static_cast<std::int64_t>(ctx.size(gat));
  }
};

/// The stand-in model, a node after the step in the engine's graph: copies what the step left in
/// its destinations (through the epilogue's meta: its number and sizes) into history row
/// (number % keep). The same code on the device (one block) and on the host (one thread).
struct model {
  const std::int64_t* meta;
  const std::int64_t* up;
  const std::int64_t* gat;
  const std::int64_t* fill;
  std::int64_t* history;
  FERRY_HOST_DEVICE void operator()(unsigned rank, unsigned threads) const {
    const std::int64_t stamp = meta[0];
    if (stamp == 0) return;
    std::int64_t* r = history + static_cast<std::size_t>((stamp - 1) % static_cast<std::int64_t>(keep)) * row;
    const auto nu = static_cast<std::size_t>(meta[1]);
    const auto ng = static_cast<std::size_t>(meta[2]);
    for (std::size_t i = rank; i < width; i += threads) {
      r[4 + i] = i < nu ? up[i] : 0;
      r[4 + width + i] = i < ng ? gat[i] : 0;
    }
    if (rank == 0) {
      r[0] = stamp;
      r[1] = meta[1];
      r[2] = meta[2];
      r[3] = fill[fill_n - 1];
    }
  }
};

}  // namespace step_capture_test

#if defined(__CUDACC__)
__global__ void step_capture_test_model(step_capture_test::model m) { m(threadIdx.x, blockDim.x); }
#endif

namespace {

using namespace step_capture_test;
using ferry_test::read;

template <class B, class Reuse = ferry::reuse::event_fenced>
using batch_of = ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::capture, Reuse,
                                   ferry::epilogue::functor<marks>>;

/// An engine around a capture batch: the step's destinations, the model's buffers, the step's
/// host data drawn at random, the reference of every step, and the replay (CUDA: a graph captured
/// with the recorded step and the model; host: replay_recorded and the model as host work).
template <class B, class Reuse = ferry::reuse::event_fenced>
struct engine {
  using batch_t = batch_of<B, Reuse>;
  ferry::stream<B> s;
  std::mt19937_64 rng;
  ferry::device_buffer<std::int64_t, B> up{width}, gat{width}, src{src_n}, fill{fill_n}, meta{4},
      history{keep * row};
  std::vector<std::int64_t> src_ref;
  batch_t batch;
  typename batch_t::template upload<std::int64_t> u;
  typename batch_t::template gather<std::int64_t> g;
  typename batch_t::template publish<std::int64_t> p;
  std::map<std::uint64_t, std::vector<std::int64_t>> want;  // step -> its history row
#if FERRY_HAS_CUDA
  cudaGraphExec_t exec = nullptr;
#endif

  engine(std::uint64_t seed, std::size_t slots, std::size_t max_slots) : rng(seed), batch(slots, max_slots) {
    src_ref = ferry_test::randomize(src, ferry::stream_ref<B>(s), rng);
    const std::vector<std::int64_t> zero(4, 0);
    ferry::async_h2d(zero, meta.span(), ferry::stream_ref<B>(s));
    s.synchronize();
    u = batch.add_upload(up.span(), width);
    g = batch.add_gather(gat.span(), ferry::device_span<const std::int64_t>(src.span()), width);
    p = batch.template add_publish<std::int64_t>(4);
    batch.add_fill(fill.span(), p, 0);
    batch.set_epilogue(marks{u.ref(), g.ref(), meta.span().data()});
    batch.reserve();  // before the capture: it allocates
#if FERRY_HAS_CUDA
    if constexpr (std::is_same_v<B, ferry::backend::cuda>) {
      // [record]
      REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
      batch.record(s);  // the one ferry call on a capturing stream (after reserve(): it allocates)
      step_capture_test_model<<<1, 128, 0, s.get()>>>(the_model());  // the model reads what the step wrote
      cudaGraph_t graph = nullptr;
      REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
      REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
      // [/record]
      REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    }
#endif
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() {
#if FERRY_HAS_CUDA
    if (exec) static_cast<void>(cudaGraphExecDestroy(exec));
#endif
  }

  model the_model() {
    return {meta.span().data(), up.span().data(), gat.span().data(), fill.span().data(), history.span().data()};
  }

  /// One replay of the engine's graph: the recorded step, then the model.
  void replay() {
#if FERRY_HAS_CUDA
    if constexpr (std::is_same_v<B, ferry::backend::cuda>) {
      REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);
      return;
    }
#endif
    if constexpr (std::is_same_v<B, ferry::backend::host>) {
      batch.replay_recorded(s);
      ferry::enqueue_host(s, [m = the_model()] { m(0, 1); });
    }
  }

  /// Fills the open step at random (sizes 0..width, every 5th gather row from the host) and keeps
  /// its reference row under `step`.
  void fill_step(std::uint64_t step) {
    const std::size_t nu = rng() % (width + 1), ng = rng() % (width + 1);
    std::vector<std::int64_t> r(row, 0);
    r[0] = static_cast<std::int64_t>(step + 1);
    r[1] = static_cast<std::int64_t>(nu);
    r[2] = static_cast<std::int64_t>(ng);
    auto us = u.span(nu);
    for (std::size_t i = 0; i < nu; ++i) r[4 + i] = us[i] = static_cast<std::int64_t>(rng());
    auto idx = g.indices(ng);
    auto hv = g.host_values();
    for (std::size_t i = 0; i < ng; ++i) {
      if (i % 5 == 0) {
        idx[i] = ferry::from_host;
        r[4 + width + i] = hv[i] = static_cast<std::int64_t>(rng());
      } else {
        idx[i] = static_cast<std::int32_t>(rng() % src_n);
        r[4 + width + i] = src_ref[static_cast<std::size_t>(idx[i])];
      }
    }
    auto ps = p.span(1 + rng() % 4);
    for (auto& x : ps) x = static_cast<std::int64_t>(rng());
    r[3] = ps[0];
    want[step] = std::move(r);
  }

  /// One step: begin, fill, commit, replay.
  void step(std::uint64_t k) {
    commit_only(k);
    replay();
  }
  /// Step k begun, filled and committed, with no replay. The commit calls nothing of the
  /// backend's: no enqueue (on CUDA: no launch, no event, no copy), no query, no wait, no
  /// allocation (the host backend's commit enqueues its mark's wait on the batch's line).
  void commit_only(std::uint64_t k) {
    batch.begin();
    fill_step(k);
    const auto before = ferry::backend_stats_of<B>();
    batch.commit();
    const auto after = ferry::backend_stats_of<B>();
    CHECK(after.enqueues == before.enqueues + (std::is_same_v<B, ferry::backend::host> ? 1 : 0));
    CHECK(after.completion_queries == before.completion_queries);
    CHECK(after.synchronizations == before.synchronizations);
    CHECK(after.pinned_allocations == before.pinned_allocations);
    CHECK(after.device_allocations == before.device_allocations);
  }

  /// Synchronizes, then checks the model's row of every step in [from, to) (at most `keep`).
  void check(std::uint64_t from, std::uint64_t to) {
    const auto h = read<std::int64_t, B>(history.span(), ferry::stream_ref<B>(s));
    for (std::uint64_t k = from; k < to; ++k) {
      INFO("step " << k);
      const std::vector<std::int64_t> got(h.begin() + static_cast<std::ptrdiff_t>((k % keep) * row),
                                          h.begin() + static_cast<std::ptrdiff_t>((k % keep + 1) * row));
      REQUIRE(got == want.at(k));
      want.erase(k);
    }
  }
};

/// Requires `call` to throw E whose message names a commit without a replay, and `what`.
template <class E, class Call>
void require_unreplayed(Call&& call, const char* what) {
  using Catch::Matchers::ContainsSubstring;
  REQUIRE_THROWS_MATCHES(call(), E,
                         Catch::Matchers::MessageMatches(ContainsSubstring(what) &&
                                                         ContainsSubstring("a commit without a replay")));
}

/// Steps in chunks of up to `keep` without a synchronization (the host commits step k+1 while
/// replay k may not have run), each chunk checked; a burst with the replays held in the middle,
/// so that slots are inserted while the engine's replays run behind (growth mid-run).
template <class B>
void run_steps(std::uint64_t seed, std::uint64_t steps) {
  engine<B> e(seed, 2, 16);
  std::uint64_t k = 0;
  while (k < steps) {
    const std::uint64_t from = k;
    if (k == steps / 2) {
      const std::size_t before = e.batch.slots();
      {
        ferry_test::gate<B> held(e.s);
        for (int i = 0; i < 12; ++i, ++k) e.step(k);  // more than the chunks before ever held
        CHECK(e.batch.replayed() <= from);  // nothing ran behind the gate
      }
      CHECK(e.batch.slots() > before);  // slots were inserted, and reached without recording again
    } else {
      const std::uint64_t n = 1 + e.rng() % 8;
      for (std::uint64_t i = 0; i < n && k < steps; ++i, ++k) e.step(k);
    }
    e.check(from, k);
    CHECK(e.batch.replayed() == k);
    e.batch.check_replayed();
  }
  CHECK(e.batch.steps() == steps);
}

}  // namespace

TEMPLATE_TEST_CASE("step_capture: committed steps run by replays in order, pipelined, with slots inserted while "
                   "replays are held; every step checked",
                   "[step][capture]", FERRY_TEST_BACKENDS) {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  run_steps<B>(7001, std::is_same_v<B, ferry::backend::host> ? 300 : 1000);
}

TEMPLATE_TEST_CASE("step_capture: a replay without a commit does no step work and is reported by the next begin, "
                   "commit and check_replayed",
                   "[step][capture]", FERRY_TEST_BACKENDS) {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  engine<B> e(7002, 2, 4);
  for (std::uint64_t k = 0; k < 3; ++k) e.step(k);
  e.check(0, 3);
  // The destinations poisoned, then a replay with no commit before it.
  const auto poison = ferry_test::randomize(e.up, ferry::stream_ref<B>(e.s), e.rng);
  e.replay();
  e.s.synchronize();
  CHECK(read<std::int64_t, B>(e.up.span(), ferry::stream_ref<B>(e.s)) == poison);  // no upload ran
  CHECK(e.batch.replayed() == 3);
  using Catch::Matchers::ContainsSubstring;
  REQUIRE_THROWS_MATCHES(e.batch.begin(), ferry::error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("step_batch::begin") &&
                                                         ContainsSubstring("a replay without a commit") &&
                                                         ContainsSubstring("to run step 3")));
  CHECK_FALSE(e.batch.in_step());
  REQUIRE_THROWS_MATCHES(e.batch.commit(), ferry::error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("step_batch::commit") &&
                                                         ContainsSubstring("a replay without a commit")));
  REQUIRE_THROWS_MATCHES(e.batch.check_replayed(), ferry::error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("a replay without a commit")));
  CHECK(e.batch.steps() == 3);
}

TEMPLATE_TEST_CASE("step_capture: a commit without a replay is reported once the replays have run (check_replayed) "
                   "and when the ring fills with unreplayed commits (begin); the late replay then runs it",
                   "[step][capture]", FERRY_TEST_BACKENDS) {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  engine<B, ferry::reuse::throw_when_full> e(7003, 2, 3);
  e.step(0);
  e.check(0, 1);
  // Two commits, one replay: steps 1 and 2 committed, one replay runs step 1.
  e.commit_only(1);
  e.commit_only(2);
  e.replay();
  e.s.synchronize();
  CHECK(e.batch.replayed() == 2);
  require_unreplayed<ferry::error>([&] { e.batch.check_replayed(); }, "step 2 was committed but no replay has run it");
  // The host goes on committing (as it may while replays are queued) until the ring (3 slots) is
  // held by commits no replay ran: begin names them.
  e.commit_only(3);
  require_unreplayed<ferry::capacity_error>([&] { e.batch.begin(); },
                                            "2 committed steps (from step 2) have not been run by a replay");
  CHECK_FALSE(e.batch.in_step());
  // The replays that were missing run steps 2 and 3, and the pairing is whole again.
  e.replay();
  e.replay();
  e.check(1, 4);
  e.batch.check_replayed();
  e.step(4);
  e.check(4, 5);
}

TEMPLATE_TEST_CASE("step_capture: under event_fenced, a ring held by commits no replay ran waits up to the bound, "
                   "then names them",
                   "[step][capture]", FERRY_TEST_BACKENDS) {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  engine<B> e(7005, 2, 2);
  e.step(0);
  e.check(0, 1);
  e.commit_only(1);
  {
    ferry_test::wait_bound bound(std::chrono::milliseconds(50));
    require_unreplayed<ferry::timeout_error>([&] { e.batch.begin(); },
                                             "1 committed step (from step 1) has not been run by a replay");
  }
  CHECK_FALSE(e.batch.in_step());
  e.replay();
  e.check(1, 2);
  e.step(2);
  e.check(2, 3);
  e.batch.check_replayed();
}

TEMPLATE_TEST_CASE("step_capture: a commit that throws commits nothing and leaves the step open", "[step][capture]",
                   FERRY_TEST_BACKENDS) {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  engine<B> e(7004, 2, 4);
  e.step(0);
  e.batch.begin();
  e.fill_step(1);
  auto idx = e.g.indices(2);  // an index past the source
  idx[0] = 0;
  idx[1] = static_cast<std::int32_t>(src_n);
  REQUIRE_THROWS_AS(e.batch.commit(), std::out_of_range);
  CHECK(e.batch.in_step());
  e.replay();  // a replay now finds no commit
  e.s.synchronize();
  CHECK(e.batch.replayed() == 1);
  REQUIRE_THROWS_WITH(e.batch.commit(), Catch::Matchers::ContainsSubstring("a replay without a commit"));
}

#if FERRY_HAS_CUDA
TEST_CASE("step_capture: record on a bare handle (a torch stream's) asks the runtime nothing of the capturing stream",
          "[step][capture]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::device_buffer<std::int64_t, B> up(8), meta(3);
  batch_of<B> b(2, 4);
  auto u = b.add_upload(up.span(), 8);
  b.set_epilogue(marks{u.ref(), u.ref(), meta.span().data()});  // the epilogue writes meta: it must point somewhere
  b.reserve();
  const ferry::stream_ref<B> bare(s.get());  // carries no device, as ferry::from_torch's does
  REQUIRE(bare.known_device() == -1);
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal) == cudaSuccess);
  b.record(bare);  // a device query here (cudaStreamGetDevice) fails and invalidates the capture
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  b.begin();
  const auto w = u.span(8);
  for (std::size_t i = 0; i < 8; ++i) w[i] = static_cast<std::int64_t>(10 + i);
  b.commit();
  REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);
  const auto got = ferry::to_host(ferry::device_span<const std::int64_t>(up.span()), ferry::stream_ref<B>(s));
  CHECK(got == std::vector<std::int64_t>{10, 11, 12, 13, 14, 15, 16, 17});
  // The epilogue ran after step 0's upload landed: its number + 1 and the upload's size, twice.
  CHECK(ferry::to_host(ferry::device_span<const std::int64_t>(meta.span()), ferry::stream_ref<B>(s)) ==
        std::vector<std::int64_t>{1, 8, 8});
  b.check_replayed();
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE("step_capture: record needs a reserved batch and a capturing stream of its device", "[step][capture]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  using Catch::Matchers::ContainsSubstring;
  ferry::stream<B> s;
  ferry::device_buffer<std::int64_t, B> up(8);
  batch_of<B> b(2, 4);
  auto u = b.add_upload(up.span(), 8);
  REQUIRE_THROWS_WITH(b.record(s), ContainsSubstring("call reserve() before the capture"));
  b.reserve();
  REQUIRE_THROWS_WITH(b.record(s), ContainsSubstring("the stream is not capturing"));
  b.begin();
  (void)u.span(1);
  b.commit();  // committed, never replayed: the destructor waits for it up to the bound, then leaks
  ferry_test::wait_bound bound(std::chrono::milliseconds(50));
  { auto gone = std::move(b); }
}
#endif
