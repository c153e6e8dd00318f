// The bad-input table (docs/bad_input.md) against the library: one test case per row, named by the
// row's id, runs the bad call on every backend and checks the exception's exact type and what is
// kept; two more cases check that the page and the registry below list the same rows, and that
// every row has its case. A .cu: the staged rows apply on CUDA, which needs nvcc.
#include <support/backends.hpp>

#include <ferry/ferry.hpp>
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#if __has_include(<dlpack/dlpack.h>)
#include <ferry/interop/dlpack.hpp>
#define FERRY_TEST_DLPACK 1
#else
#define FERRY_TEST_DLPACK 0
#endif

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_case_info.hpp>
#include <catch2/interfaces/catch_interfaces_capture.hpp>
#include <catch2/interfaces/catch_interfaces_registry_hub.hpp>
#include <catch2/interfaces/catch_interfaces_testcase.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <ranges>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

namespace {

using i32 = std::int32_t;
using i64 = std::int64_t;
using host = ferry::backend::host;

// ---- the registry: the rows of docs/bad_input.md ------------------------------------------------

struct row {
  std::string_view id, exception, kept;
};

constexpr std::string_view enqueue_kept = "nothing enqueued, out unchanged, arena unchanged";
constexpr std::string_view pool_kept = "pool rotation, stats and earlier views unchanged";
constexpr std::string_view pool_busy_kept =
    "pool rotation, stats and earlier views unchanged, but fence_hits counts the busy slot";
constexpr std::string_view staged_kept = "staged writes kept, target unchanged";
constexpr std::string_view fused_kept = "every tensor's staged writes kept, targets unchanged";
constexpr std::string_view step_refused_kept = "nothing enqueued, out unchanged, the step open with its data";
constexpr std::string_view step_plan_kept = "plan unchanged";

constexpr row registry[] = {
    {"stream.moved_from", "ferry::error", enqueue_kept},
    {"stream.other_device", "ferry::error",
     "nothing enqueued, out unchanged, arena unchanged, current device unchanged"},
    {"stream.capturing", "ferry::error", "nothing captured, arena unchanged"},
    {"wait.bound.not_positive", "std::invalid_argument", "the bound unchanged"},
    {"wait.reuse_policy.not_positive", "std::invalid_argument", pool_busy_kept},
    {"wait.event.past_bound", "ferry::timeout_error", "the event unchanged: it synchronizes once the stream passes it"},
    {"wait.pool.full_past_bound", "ferry::timeout_error", pool_busy_kept},
    {"wait.step.full_past_bound", "ferry::timeout_error", "no step open, slots unchanged, every step's data read intact"},
    {"wait.arena.trim_past_bound", "ferry::timeout_error", "arena unchanged"},
    {"memory.pinned_buffer.bytes_overflow", "std::invalid_argument", "nothing allocated"},
    {"memory.device_buffer.bytes_overflow", "std::invalid_argument", "nothing allocated"},
    {"arena.cap.staging", "ferry::capacity_error", enqueue_kept},
    {"arena.cap.reserve", "ferry::capacity_error", "arena unchanged"},
    {"h2d.too_small.contiguous", "std::out_of_range", enqueue_kept},
    {"h2d.too_small.pinned_span", "std::out_of_range", enqueue_kept},
    {"h2d.too_small.forward_range", "std::out_of_range", enqueue_kept},
    {"h2d.too_small.input_range", "std::out_of_range",
     "nothing enqueued, out unchanged, staging block given back"},
    {"h2d.bytes_overflow", "std::out_of_range", enqueue_kept},
    {"h2d.buffer.bytes_overflow", "std::invalid_argument", "nothing allocated, nothing enqueued"},
    {"h2d_packed.too_small.typed", "std::out_of_range", enqueue_kept},
    {"h2d_packed.too_small.bytes", "std::out_of_range", enqueue_kept},
    {"h2d_packed.bytes_overflow", "std::out_of_range", enqueue_kept},
    {"h2d_packed.misaligned", "std::invalid_argument", enqueue_kept},
    {"d2h.too_small", "std::out_of_range", "nothing enqueued, out unchanged"},
    {"to_host.too_large", "std::invalid_argument", "nothing enqueued, arena unchanged"},
    {"cpu_gpu_buffer.bytes_overflow", "std::invalid_argument", "nothing allocated"},
    {"cpu_gpu_buffer.copy_to_device.n_above_size", "std::out_of_range",
     "nothing enqueued, device() unchanged, arena unchanged"},
    {"cpu_gpu_buffer.copy_to_host.n_above_size", "std::out_of_range",
     "nothing enqueued, host() unchanged"},
    {"cpu_gpu_buffer.moved_from", "std::out_of_range", "nothing enqueued, arena unchanged"},
    {"pool.slots_zero", "std::invalid_argument", "arena unchanged"},
    {"pool.slots_above_max", "std::invalid_argument", "arena unchanged"},
    {"pool.max_slots", "ferry::capacity_error", pool_busy_kept},
    {"pool.growth.bytes_overflow", "ferry::capacity_error",
     "pool rotation, stats, earlier views and arena unchanged, but fence_hits counts a busy slot"},
    {"pool.fixed.exceeded", "ferry::capacity_error", pool_kept},
    {"pool.fixed.busy", "ferry::capacity_error", pool_busy_kept},
    {"pool.request_overflow", "ferry::capacity_error", pool_kept},
    {"pool.copy_to_device.too_small", "std::out_of_range",
     "pool rotation, stats and earlier views unchanged, nothing enqueued"},
    {"pool.moved_from", "ferry::error", "nothing enqueued, arena unchanged"},
    {"pool.rows.zero_width", "std::invalid_argument", "arena unchanged"},
    {"pool.rows.not_whole", "std::invalid_argument", pool_kept},
    {"uva_backed.publish.n_above_size", "std::out_of_range", pool_kept},
    {"uva_backed.publish_rows.n_above_rows", "std::out_of_range", pool_kept},
    {"uva_backed.max_slots", "ferry::capacity_error", pool_busy_kept},
    {"dlpack.byte_offset.wraps", "std::invalid_argument", "no view made, the tensor unchanged"},
    {"dlpack.device_type.unknown", "std::invalid_argument", "no view made, the tensor unchanged"},
    {"dlpack.to_dlpack.too_many_elements", "std::invalid_argument", "no tensor made"},
    {"dlpack.moved_from", "ferry::error", "the moved-to tensor unchanged"},
    {"staged.ctor.bytes_overflow", "std::invalid_argument", "nothing allocated"},
    {"staged.ctor.adopted_size", "std::invalid_argument", "nothing allocated, the memory unchanged"},
    {"staged.ctor.null_arena", "std::invalid_argument", "nothing leaked"},
    {"staged.bounds.row", "std::out_of_range", staged_kept},
    {"staged.bounds.start", "std::out_of_range", staged_kept},
    {"staged.bounds.len", "std::out_of_range", staged_kept},
    {"staged.bounds.empty_range", "std::out_of_range", staged_kept},
    {"staged.fixed.exceeded", "ferry::capacity_error", staged_kept},
    {"staged.reserve.writes_overflow", "ferry::capacity_error", "capacities and staged writes unchanged"},
    {"staged.reserve.elements_overflow", "ferry::capacity_error", "capacities and staged writes unchanged"},
    {"staged.reserve.past_arena", "ferry::capacity_error", "capacities and staged writes unchanged, arena unchanged"},
    {"staged.moved_from", "ferry::error", "the moved-to tensor's staged writes kept, nothing enqueued"},
    {"staged.capturing", "ferry::error", "staged writes kept, target unchanged, nothing captured"},
    {"fused.same_tensor_twice", "std::invalid_argument", fused_kept},
    {"fused.too_many_tensors", "std::invalid_argument", fused_kept},
    {"fused.fixed.exceeded", "ferry::capacity_error", fused_kept},
    {"fused.reserve.writes_overflow", "ferry::capacity_error",
     "capacity and every tensor's staged writes unchanged"},
    {"growth.pow2.unrepresentable", "ferry::capacity_error", "no state (a pure function)"},
    {"step.submit.growth_throws", "ferry::capacity_error", step_refused_kept},
    {"step.submit.growth_huge", "ferry::capacity_error", step_refused_kept},
    {"step.begin.full", "ferry::capacity_error", "no step open, slots unchanged, every step's data read intact"},
    {"step.reserve.past_arena", "ferry::capacity_error", "no step open, no slot allocated, the plan not fixed, arena unchanged"},
    {"step.handle.empty", "ferry::error", "nothing recorded"},
    {"step.handle.assigned_over", "ferry::error", "the assigned batch's plan and handles unchanged"},
    {"step.overlap.uploads", "std::invalid_argument", step_plan_kept},
    {"step.overlap.write_targets", "std::invalid_argument", step_plan_kept},
    {"step.overlap.fills", "std::invalid_argument", step_plan_kept},
    {"step.overlap.fill_upload", "std::invalid_argument", step_plan_kept},
    {"step.overlap.target_destination", "std::invalid_argument", step_plan_kept},
    {"step.overlap.fill_source", "std::invalid_argument", step_plan_kept},
    {"step.overlap.gather_source", "std::invalid_argument", step_plan_kept},
    {"step.gather.source_too_large", "std::invalid_argument", step_plan_kept},
    {"step.span.past_arena", "ferry::capacity_error",
     "the step open with what it held before the call: its submit carries the data written before and nothing else"},
    {"step.epilogue.throws", "ferry::error", "the step's data landed, later steps run"},
    {"step.capture.record_unreserved", "ferry::error", "nothing captured, the plan not fixed"},
    {"step.capture.record_not_capturing", "ferry::error", "nothing enqueued"},
    {"step.capture.replay_without_commit", "ferry::error", "no step open, nothing committed"},
};

const std::type_info* exception_type(std::string_view name) {
  if (name == "ferry::error") return &typeid(ferry::error);
  if (name == "ferry::capacity_error") return &typeid(ferry::capacity_error);
  if (name == "ferry::timeout_error") return &typeid(ferry::timeout_error);
  if (name == "std::out_of_range") return &typeid(std::out_of_range);
  if (name == "std::invalid_argument") return &typeid(std::invalid_argument);
  return nullptr;
}

const row* find_row(std::string_view id) {
  for (const row& r : registry)
    if (r.id == id) return &r;
  return nullptr;
}

// The row of the running test case: its name up to " - <backend>".
std::string current_row_id() {
  std::string name = Catch::getResultCapture().getCurrentTestName();
  if (const auto cut = name.find(" - "); cut != std::string::npos) name.resize(cut);
  return name;
}

// Runs the row's bad call `f`: it must throw exactly the row's exception type (a subclass or a
// base does not count), with a message starting "ferry: ".
template <class F>
void expect_throw(F&& f) {
  const std::string id = current_row_id();
  const row* r = find_row(id);
  REQUIRE(r != nullptr);
  const std::type_info* want = exception_type(r->exception);
  REQUIRE(want != nullptr);
  try {
    f();
  } catch (const std::exception& e) {
    INFO(id << " threw " << typeid(e).name() << " (expected " << r->exception << "): " << e.what());
    CHECK(typeid(e) == *want);
    CHECK(std::string_view(e.what()).starts_with("ferry: "));
    return;
  } catch (...) {
    FAIL(id << ": threw a non-standard exception; expected " << r->exception);
  }
  FAIL(id << ": nothing was thrown; expected " << r->exception);
}

// ---- observing what is kept -----------------------------------------------------------------

bool same(const ferry::arena_stats& a, const ferry::arena_stats& b) {
  return a.allocations == b.allocations && a.reuses == b.reuses &&
         a.bytes_reserved == b.bytes_reserved && a.bytes_in_use == b.bytes_in_use;
}
bool same(const ferry::pool_stats& a, const ferry::pool_stats& b) {
  return a.slots == b.slots && a.max_slots == b.max_slots && a.calls == b.calls &&
         a.grows == b.grows && a.fence_hits == b.fence_hits && a.inserted == b.inserted &&
         a.fences == b.fences && a.full_waits == b.full_waits;
}

// The row's bad call on a pool (or uva_backed) that has published `first` at `data`: its stats,
// a pool's rotation, and that view stay as they were.
template <class Pool, class T, class F>
void published_row(Pool& p, const T* data, const std::vector<T>& first, F&& bad) {
  constexpr bool rotates = requires(Pool& q) { q.current_slot(); };
  const auto stats = p.stats();
  std::size_t slot = 0;
  if constexpr (rotates) slot = p.current_slot();
  expect_throw(std::forward<F>(bad));
  CHECK(same(p.stats(), stats));
  if constexpr (rotates) CHECK(p.current_slot() == slot);
  CHECK(std::vector<T>(data, data + first.size()) == first);
}

// The count of ferry's enqueues before a bad call (both backends): unchanged after it, nothing
// was enqueued.
template <class B>
std::uint64_t tasks_of(ferry::stream_ref<B> s) {
  return ferry_test::enqueued(s);
}

// What the backend has allocated so far (pinned and device).
template <class B>
std::uint64_t allocations() {
  const auto st = ferry::backend_stats_of<B>();
  return st.pinned_allocations + st.device_allocations;
}

template <class T, class B>
void upload(ferry::device_span<T> d, const std::vector<T>& v, ferry::stream_ref<B> s) {
  ferry::pinned_buffer<T, B> p(v.size());
  std::copy(v.begin(), v.end(), p.host().begin());
  ferry::async_h2d(ferry::pinned_span<const T>(p.host()), d, s);
  s.synchronize();
}

template <class T, class B>
std::vector<T> download(ferry::device_span<const T> d, ferry::stream_ref<B> s) {
  ferry::pinned_buffer<T, B> p(d.size());
  ferry::async_d2h(d, p.host(), s);
  s.synchronize();
  return std::vector<T>(p.host().begin(), p.host().end());
}

// A sized range of n int64_t that owns no memory (so 2^61 elements cost nothing until read).
auto huge_range(std::uint64_t n) {
  return std::views::iota(std::uint64_t{0}, n) |
         std::views::transform([](std::uint64_t i) { return static_cast<i64>(i * 0x9E3779B97F4A7C15ull); });
}
constexpr std::uint64_t two_61 = std::uint64_t{1} << 61;

enum class arena_kind { open, full };

// A transfer's stream, arena (warmed by one good upload) and random destination, with the state a
// bad call must leave as it was. A full arena (its cap of one block reached by a block the test
// holds) makes any staging throw ferry::capacity_error: a bounds check made after staging shows.
template <class B, class T = i32>
struct transfer_scene {
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<T, B> out;
  std::vector<T> before;
  ferry::pinned_block held;
  std::uint64_t tasks = 0;
  ferry::arena_stats arena_before{};

  transfer_scene(std::size_t n, std::uint64_t seed, arena_kind kind = arena_kind::full)
      : arena(kind == arena_kind::full ? ferry::pinned_arena<B>::min_block
                                       : ferry::pinned_arena<B>::unlimited),
        out(n),
        before(ferry_test::random_values<T>(n, seed)) {
    const auto warm = ferry_test::random_values<T>(n, seed + 1);
    ferry::async_h2d(warm, out.span(), s, arena);
    s.synchronize();
    if (kind == arena_kind::full) held = arena.acquire(1);
    upload(out.span(), before, ferry::stream_ref<B>(s));
    mark();
  }
  ~transfer_scene() { arena.release(held); }
  void mark() {
    tasks = tasks_of<B>(s);
    arena_before = arena.stats();
  }
  void nothing_enqueued() { CHECK(tasks_of<B>(s) == tasks); }
  void arena_unchanged() { CHECK(same(arena.stats(), arena_before)); }
  void out_unchanged() { CHECK(download(ferry::device_span<const T>(out.span()), ferry::stream_ref<B>(s)) == before); }
  void all_kept() {
    nothing_enqueued();
    arena_unchanged();
    out_unchanged();
  }
};

// ---- staged writes: a tensor with one batch applied and one staged, against a host model --------

constexpr std::size_t rows = 8, cols = 64;

template <class Tensor, class B>
struct staged_scene {
  ferry::stream<B> s;
  Tensor t;
  std::vector<i32> applied = std::vector<i32>(rows * cols, 0);  // the target now
  std::vector<i32> model = applied;                            // the target once pending applies
  std::mt19937_64 rng;

  // reserve(4, 32) first (the capacity under growth::fixed), then two writes of `len` applied and
  // two staged.
  explicit staged_scene(std::uint64_t seed, std::size_t len = 8,
                        ferry::pinned_arena<B>& arena = ferry::default_arena<B>())
      : t(rows, cols, s, 2, {.arena = &arena}), rng(seed) {
    t.reserve(4, 32);
    stage(2, len);
    apply();
    stage(2, len);
  }
  void stage(std::size_t writes, std::size_t len) {
    for (std::size_t w = 0; w < writes; ++w) {
      const std::size_t row = rng() % rows, start = rng() % (cols - len + 1);
      const auto v = ferry_test::random_values<i32>(len, rng());
      t.stage_write(row, start, v);
      std::copy(v.begin(), v.end(), model.begin() + static_cast<std::ptrdiff_t>(row * cols + start));
    }
  }
  void apply() {
    t.apply_write(s);
    applied = model;
  }
  std::vector<i32> target() { return download(ferry::device_span<const i32>(t.span()), ferry::stream_ref<B>(s)); }
  // The staged writes are kept (the same counts) and the target is as the last apply left it.
  void unchanged(std::size_t writes, std::size_t elements) {
    CHECK(t.pending() == writes);
    CHECK(t.pending_elements() == elements);
    CHECK(target() == applied);
  }
  // A later apply writes exactly what was staged.
  void later_apply_matches() {
    apply();
    CHECK(t.pending() == 0);
    CHECK(target() == model);
  }
};

template <class B>
using tensor = ferry::staged_write_tensor<i32, B>;
template <class B>
using fixed_tensor = ferry::staged_write_tensor<i32, ferry::growth::fixed, B>;

// The row's bad call on a staged scene, then what is kept.
template <class Tensor, class B, class F>
void staged_row(std::uint64_t seed, F&& bad) {
  staged_scene<Tensor, B> sc(seed);
  const std::size_t writes = sc.t.pending(), elements = sc.t.pending_elements();
  expect_throw([&] { bad(sc.t); });
  sc.unchanged(writes, elements);
  sc.later_apply_matches();
}

#if FERRY_HAS_CUDA
// Runs `f` while `s` captures a graph; returns the number of nodes captured.
template <class F>
std::size_t captured_nodes(cudaStream_t s, F&& f) {
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  f();
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  std::size_t n = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess);
  cudaGraphDestroy(g);
  return n;
}
#endif

// stream_ref from 0 or nullptr does not compile (tests/compile_fail/stream_ref_from_*.cpp: its
// constructor for them holds the FERRY_NO_DEFAULT_STREAM static_assert, so is_constructible says
// true and only a compile-fail test can tell).

}  // namespace

#define BAD_INPUT_ROW(id) TEMPLATE_TEST_CASE(id, "[bad_input]", FERRY_TEST_BACKENDS)
#define CUDA_ONLY(B)                                                       \
  if constexpr (std::is_same_v<B, host>) SKIP("a CUDA-only row");          \
  else
#define HOST_ONLY(B)                                                       \
  if constexpr (!std::is_same_v<B, host>) SKIP("a host-backend-only row"); \
  else

// ---- the page and the registry ----------------------------------------------------------------

TEST_CASE("bad_input: docs/bad_input.md lists exactly the registry's rows", "[bad_input][docs]") {
  std::ifstream in(FERRY_BAD_INPUT_DOC);
  REQUIRE(in.good());
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '`')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '`')) v.remove_suffix(1);
    return std::string(v);
  };
  std::map<std::string, std::pair<std::string, std::string>> doc;  // id -> (exception, kept)
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("| `")) continue;  // a table row whose first cell is an id
    std::vector<std::string> cells;
    std::string_view rest(line);
    rest.remove_prefix(1);
    for (auto bar = rest.find('|'); bar != std::string_view::npos; bar = rest.find('|')) {
      cells.push_back(trim(rest.substr(0, bar)));
      rest.remove_prefix(bar + 1);
    }
    INFO("docs/bad_input.md: " << line);
    REQUIRE(cells.size() == 4);
    CHECK(doc.emplace(cells[0], std::pair{cells[2], cells[3]}).second);  // ids are unique
  }
  std::set<std::string> ids;
  for (const row& r : registry) {
    CHECK(ids.emplace(r.id).second);
    const auto it = doc.find(std::string(r.id));
    if (it == doc.end()) {
      FAIL_CHECK("row " << r.id << " is in the test's registry but not in docs/bad_input.md");
      continue;
    }
    if (it->second.first != r.exception)
      FAIL_CHECK("row " << r.id << ": docs/bad_input.md says exception '" << it->second.first
                        << "', the registry '" << r.exception << "'");
    if (it->second.second != r.kept)
      FAIL_CHECK("row " << r.id << ": docs/bad_input.md says kept '" << it->second.second
                        << "', the registry '" << r.kept << "'");
  }
  for (const auto& [id, cells] : doc)
    if (!ids.contains(id)) FAIL_CHECK("row " << id << " is in docs/bad_input.md but not in the test's registry");
}

TEST_CASE("bad_input: every registry row has its test case, and its exception is known", "[bad_input]") {
  std::set<std::string> cases;
  for (const Catch::TestCaseInfo* info : Catch::getRegistryHub().getTestCaseRegistry().getAllInfos()) {
    std::string name = info->name;
    if (const auto cut = name.find(" - "); cut != std::string::npos) name.resize(cut);
    cases.insert(name);
  }
  for (const row& r : registry) {
    if (!cases.contains(std::string(r.id))) FAIL_CHECK("row " << r.id << " has no test case");
    if (exception_type(r.exception) == nullptr) FAIL_CHECK("row " << r.id << ": unknown exception " << r.exception);
  }
}

// ---- streams ------------------------------------------------------------------------------------

BAD_INPUT_ROW("stream.moved_from") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(16, 101);
  ferry::stream<B> taken(std::move(sc.s));
  sc.s = std::move(taken);  // sc.s owns the stream again; `taken` is moved-from
  sc.mark();
  const auto src = ferry_test::random_values<i32>(16, 102);
  expect_throw([&] { ferry::async_h2d(src, sc.out.span(), taken, sc.arena); });
  sc.all_kept();
}

BAD_INPUT_ROW("stream.other_device") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  CUDA_ONLY(B) {
#if FERRY_HAS_CUDA
    int devices = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    if (devices < 2) SKIP("needs two GPUs");
    transfer_scene<B> sc(16, 111);
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    ferry::stream<B> other;
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    other.synchronize();
    sc.mark();
    const auto src = ferry_test::random_values<i32>(16, 112);
    expect_throw([&] { ferry::async_h2d(src, sc.out.span(), other, sc.arena); });
    int current = -1;
    REQUIRE(cudaGetDevice(&current) == cudaSuccess);
    CHECK(current == 0);
    other.synchronize();
    sc.all_kept();
#endif
  }
}

BAD_INPUT_ROW("stream.capturing") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  CUDA_ONLY(B) {
#if FERRY_HAS_CUDA
    transfer_scene<B> sc(16, 121);
    const auto src = ferry_test::random_values<i32>(16, 122);
    CHECK(captured_nodes(sc.s.get(), [&] {
            expect_throw([&] { ferry::async_h2d(src, sc.out.span(), sc.s, sc.arena); });
          }) == 0);
    sc.arena_unchanged();
    sc.out_unchanged();
#endif
  }
}

// ---- memory -------------------------------------------------------------------------------------

BAD_INPUT_ROW("memory.pinned_buffer.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const auto before = allocations<B>();
  expect_throw([] { ferry::pinned_buffer<i64, B> b(two_61); });
  CHECK(allocations<B>() == before);
}

BAD_INPUT_ROW("memory.device_buffer.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  const auto before = allocations<B>();
  expect_throw([] { ferry::device_buffer<i64, B> b(two_61); });
  expect_throw([&] { ferry::device_buffer<i64, B> b(two_61, s); });
  s.synchronize();
  CHECK(allocations<B>() == before);
}

BAD_INPUT_ROW("arena.cap.staging") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena(1024);  // one block of 1 KiB at most
  ferry::device_buffer<i32, B> out(512);
  const auto before = ferry_test::random_values<i32>(512, 131);
  upload(out.span(), before, ferry::stream_ref<B>(s));
  ferry::async_h2d(ferry_test::random_values<i32>(16, 132), out.span(), s, arena);  // warm: 256 B
  s.synchronize();
  upload(out.span(), before, ferry::stream_ref<B>(s));
  const auto tasks = tasks_of<B>(s);
  const auto stats = arena.stats();
  const auto src = ferry_test::random_values<i32>(512, 133);  // 2 KiB: above the cap
  expect_throw([&] { ferry::async_h2d(src, out.span(), s, arena); });
  CHECK(tasks_of<B>(s) == tasks);
  CHECK(same(arena.stats(), stats));
  CHECK(download(ferry::device_span<const i32>(out.span()), ferry::stream_ref<B>(s)) == before);
}

BAD_INPUT_ROW("arena.cap.reserve") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::pinned_arena<B> arena(1024);
  arena.reserve(256);
  const auto stats = arena.stats();
  expect_throw([&] { arena.reserve(2048); });
  CHECK(same(arena.stats(), stats));
}

// ---- transfers ----------------------------------------------------------------------------------

BAD_INPUT_ROW("h2d.too_small.contiguous") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(16, 141);
  const auto src = ferry_test::random_values<i32>(17, 142);
  expect_throw([&] { ferry::async_h2d(src, sc.out.span(), sc.s, sc.arena); });
  sc.all_kept();
}

BAD_INPUT_ROW("h2d.too_small.pinned_span") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(16, 151);
  ferry::pinned_buffer<i32, B> src(17);
  const auto v = ferry_test::random_values<i32>(17, 152);
  std::copy(v.begin(), v.end(), src.host().begin());
  sc.mark();
  expect_throw([&] { ferry::async_h2d(src.host(), sc.out.span(), sc.s, sc.arena); });
  sc.all_kept();
}

BAD_INPUT_ROW("h2d.too_small.forward_range") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(16, 161);
  const auto v = ferry_test::random_values<i32>(17, 162);
  auto src = v | std::views::filter([](i32) { return true; });  // forward, not sized
  expect_throw([&] { ferry::async_h2d(src, sc.out.span(), sc.s, sc.arena); });
  sc.all_kept();
}

BAD_INPUT_ROW("h2d.too_small.input_range") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(16, 171, arena_kind::open);  // a single-pass source needs staging to be read
  std::ostringstream text;
  for (i32 x : ferry_test::random_values<i32>(17, 172)) text << x << ' ';
  std::istringstream in(text.str());
  auto src = std::views::istream<i32>(in);  // single-pass
  expect_throw([&] { ferry::async_h2d(src, sc.out.span(), sc.s, sc.arena); });
  sc.nothing_enqueued();
  CHECK(sc.arena.stats().bytes_in_use == sc.arena_before.bytes_in_use);
  sc.out_unchanged();
}

BAD_INPUT_ROW("h2d.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B, i64> sc(4, 181);
  expect_throw([&] { ferry::async_h2d(huge_range(two_61 + 1), sc.out.span(), sc.s, sc.arena); });
  sc.all_kept();
}

BAD_INPUT_ROW("h2d.buffer.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  const auto before = allocations<B>();
  const auto tasks = tasks_of<B>(s);
  expect_throw([&] { auto buf = ferry::async_h2d(huge_range(two_61 + 1), s, arena); });
  CHECK(tasks_of<B>(s) == tasks);
  s.synchronize();
  CHECK(allocations<B>() == before);
}

BAD_INPUT_ROW("h2d_packed.too_small.typed") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(7, 191);
  const auto a = ferry_test::random_values<i32>(4, 192), b = ferry_test::random_values<i32>(4, 193);
  expect_throw([&] { (void)ferry::async_h2d_packed(sc.out.span(), sc.s, sc.arena, a, b); });
  sc.all_kept();
}

BAD_INPUT_ROW("h2d_packed.too_small.bytes") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(8, 201);
  // 1 + 16 bytes of parts fit 24 bytes, but the second part starts at 16: 32 bytes needed.
  const ferry::device_span<std::byte> out(reinterpret_cast<std::byte*>(sc.out.span().data()), 24);
  const std::vector<std::int8_t> a{0x5d};
  const auto b = ferry_test::random_values<i32>(4, 202);
  expect_throw([&] { (void)ferry::async_h2d_packed(out, sc.s, sc.arena, a, b); });
  sc.all_kept();
}

BAD_INPUT_ROW("h2d_packed.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B, i64> sc(4, 211);
  // 2^61 elements of 8 bytes: the part's bytes wrap to 0.
  expect_throw([&] { (void)ferry::async_h2d_packed(sc.out.span(), sc.s, sc.arena, huge_range(two_61)); });
  sc.all_kept();
}

BAD_INPUT_ROW("h2d_packed.misaligned") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(16, 221);
  const ferry::device_span<std::byte> out(reinterpret_cast<std::byte*>(sc.out.span().data()) + 4, 60);
  const auto a = ferry_test::random_values<i32>(4, 222);
  expect_throw([&] { (void)ferry::async_h2d_packed(out, sc.s, sc.arena, a); });
  sc.all_kept();
}

BAD_INPUT_ROW("d2h.too_small") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::device_buffer<i32, B> src(8);
  upload(src.span(), ferry_test::random_values<i32>(8, 231), ferry::stream_ref<B>(s));
  ferry::pinned_buffer<i32, B> out(7);
  const auto before = ferry_test::random_values<i32>(7, 232);
  std::copy(before.begin(), before.end(), out.host().begin());
  const auto tasks = tasks_of<B>(s);
  expect_throw([&] { ferry::async_d2h(src.span(), out.host(), s); });
  CHECK(tasks_of<B>(s) == tasks);
  s.synchronize();
  CHECK(std::vector<i32>(out.host().begin(), out.host().end()) == before);
}

BAD_INPUT_ROW("to_host.too_large") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  transfer_scene<B> sc(16, 151, arena_kind::open);
  const ferry::device_span<const i32> huge(sc.out.span().data(), std::size_t{1} << 62);  // never read
  expect_throw([&] { (void)ferry::to_host(huge, ferry::stream_ref<B>(sc.s), sc.arena); });
  sc.nothing_enqueued();
  sc.arena_unchanged();
}

BAD_INPUT_ROW("cpu_gpu_buffer.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const auto before = allocations<B>();
  expect_throw([] { ferry::cpu_gpu_buffer<i64, B> b(two_61); });
  CHECK(allocations<B>() == before);
}

// A cpu_gpu_buffer whose device() holds `dev` and whose host() holds `hst` (different random data).
template <class B>
struct pair_scene {
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::cpu_gpu_buffer<i32, B> buf{8, arena};
  std::vector<i32> dev, hst;
  std::uint64_t tasks = 0;
  ferry::arena_stats arena_before{};
  explicit pair_scene(std::uint64_t seed)
      : dev(ferry_test::random_values<i32>(8, seed)), hst(ferry_test::random_values<i32>(8, seed + 1)) {
    std::copy(dev.begin(), dev.end(), buf.host().begin());
    buf.copy_to_device(8, s);
    s.synchronize();
    std::copy(hst.begin(), hst.end(), buf.host().begin());
    tasks = tasks_of<B>(s);
    arena_before = arena.stats();
  }
};

BAD_INPUT_ROW("cpu_gpu_buffer.copy_to_device.n_above_size") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pair_scene<B> sc(241);
  expect_throw([&] { sc.buf.copy_to_device(9, sc.s); });
  CHECK(tasks_of<B>(sc.s) == sc.tasks);
  CHECK(same(sc.arena.stats(), sc.arena_before));
  CHECK(download(ferry::device_span<const i32>(sc.buf.device()), ferry::stream_ref<B>(sc.s)) == sc.dev);
}

BAD_INPUT_ROW("cpu_gpu_buffer.copy_to_host.n_above_size") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pair_scene<B> sc(251);
  expect_throw([&] { (void)sc.buf.copy_to_host(9, sc.s); });
  CHECK(tasks_of<B>(sc.s) == sc.tasks);
  sc.s.synchronize();
  CHECK(std::vector<i32>(sc.buf.host().begin(), sc.buf.host().end()) == sc.hst);
}

BAD_INPUT_ROW("cpu_gpu_buffer.moved_from") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pair_scene<B> sc(261);
  ferry::cpu_gpu_buffer<i32, B> taken(std::move(sc.buf));
  expect_throw([&] { sc.buf.copy_to_device(1, sc.s); });
  CHECK(tasks_of<B>(sc.s) == sc.tasks);
  CHECK(same(sc.arena.stats(), sc.arena_before));
  CHECK(download(ferry::device_span<const i32>(taken.device()), ferry::stream_ref<B>(sc.s)) == sc.dev);
}

// ---- pools --------------------------------------------------------------------------------------

BAD_INPUT_ROW("pool.slots_zero") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::pinned_arena<B> arena;
  arena.reserve(256);
  const auto stats = arena.stats();
  expect_throw([&] { ferry::uva_pool<i32, B> p(4, 0, 8, arena); });
  expect_throw([&] { ferry::uva_backed<i32, B> u(4, 0, 8, arena); });
  CHECK(same(arena.stats(), stats));
}

BAD_INPUT_ROW("pool.slots_above_max") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::pinned_arena<B> arena;
  arena.reserve(256);
  const auto stats = arena.stats();
  expect_throw([&] { ferry::uva_pool<i32, B> p(4, 3, 2, arena); });
  CHECK(same(arena.stats(), stats));
}

// A pool with views handed out, and the pool's state a bad call must leave as it was.
template <class Pool, class B>
struct pool_scene {
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  Pool pool;
  std::vector<std::vector<i32>> values;  // what each view holds
  std::vector<ferry::device_span<const i32>> views;
  ferry::pool_stats stats_before{};
  std::size_t slot_before = 0;
  std::mt19937_64 rng;

  pool_scene(std::size_t capacity, std::size_t slots, std::size_t max_slots, std::uint64_t seed)
      : pool(capacity, slots, max_slots, arena), rng(seed) {}
  void put(std::size_t n) {
    values.push_back(ferry_test::random_values<i32>(n, rng()));
    views.push_back(pool.copy_to_uva(values.back(), s));
  }
  void mark() {
    stats_before = pool.stats();
    slot_before = pool.current_slot();
  }
  // The views are pinned, mapped memory: read on the host while their readers may still be held.
  void unchanged() {
    CHECK(same(pool.stats(), stats_before));
    CHECK(pool.current_slot() == slot_before);
    for (std::size_t i = 0; i < views.size(); ++i)
      CHECK(std::vector<i32>(views[i].data(), views[i].data() + views[i].size()) == values[i]);
  }
  // The next call rotates from where the pool was, as if the bad call had not happened.
  void next_call_rotates() {
    s.synchronize();
    put(4);
    CHECK(pool.current_slot() == (slot_before + 1) % pool.slots());
    CHECK(std::vector<i32>(views.back().data(), views.back().data() + 4) == values.back());
  }
};

// The message of the exception `f` throws (empty when it returns).
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

BAD_INPUT_ROW("pool.max_slots") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  {
    // One held reader alone never throws, even with the ring at max_slots: the ring turns round
    // its slot.
    pool_scene<ferry::uva_pool<i32, B>, B> sc(4, 3, 3, 270);
    ferry::stream<B> other;
    ferry_test::gate<B> held(other);
    sc.put(4);
    sc.pool.record_use(other);
    for (int k = 0; k < 6; ++k) {
      sc.s.synchronize();
      sc.put(4);
    }
    CHECK(sc.pool.stats().inserted == 0);
    CHECK(sc.pool.slots() == 3);
    CHECK(std::vector<i32>(sc.views[0].data(), sc.views[0].data() + 4) == sc.values[0]);  // held
  }
  // Under reuse::throw_when_full a full ring throws (the default, event_fenced, waits: see
  // tests/pool/uva_pool_test.cpp).
  pool_scene<ferry::uva_pool<i32, ferry::reuse::throw_when_full, B>, B> sc(4, 1, 2, 271);
  {
    ferry_test::gate<B> held(sc.s);  // every view's reader is still queued behind it
    sc.put(4);
    sc.put(4);  // slot 0 busy: a second slot is inserted
    REQUIRE(sc.pool.slots() == 2);
    sc.mark();
    const auto src = ferry_test::random_values<i32>(4, 272);
    expect_throw([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
    ++sc.stats_before.fence_hits;  // the busy slot it found
    sc.unchanged();
    // The message names each held slot and the stream point it waits for.
    const std::string what = message_of([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
    INFO(what);
    CHECK(what.starts_with("ferry: uva_pool: "));
    CHECK(what.find("max_slots (2)") != std::string::npos);
    CHECK(what.find("slot 0 is held until stream point (line ") != std::string::npos);
    CHECK(what.find("slot 1 is held until stream point (line ") != std::string::npos);
    ++sc.stats_before.fence_hits;
  }
  sc.next_call_rotates();
}

// A legal GrowthPolicy (at least `needed`) whose answer, 2^62 elements, is 2^64 bytes of int32.
struct huge_growth {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t /*current*/) {
    return std::max<std::size_t>(needed, std::size_t{1} << 62);
  }
};

BAD_INPUT_ROW("pool.growth.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  using pool = ferry::uva_pool<i32, huge_growth, B>;
  const auto src = ferry_test::random_values<i32>(100, 362);
  {
    // Growing the slot coming into use.
    pool_scene<pool, B> sc(64, 2, 8, 361);
    sc.put(64);
    sc.s.synchronize();
    sc.mark();
    const auto arena_before = sc.arena.stats();
    expect_throw([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
    sc.unchanged();
    CHECK(same(sc.arena.stats(), arena_before));
    CHECK(sc.pool.capacity(0) == 64);
    CHECK(sc.pool.capacity(1) == 64);
    sc.next_call_rotates();
  }
  {
    // Inserting a slot in front of a held one.
    pool_scene<pool, B> sc(64, 1, 8, 363);
    {
      ferry_test::gate<B> held(sc.s);
      sc.put(64);
      sc.mark();
      const auto arena_before = sc.arena.stats();
      expect_throw([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
      ++sc.stats_before.fence_hits;  // the busy slot it found
      sc.unchanged();
      CHECK(same(sc.arena.stats(), arena_before));
    }
    sc.next_call_rotates();
  }
}

BAD_INPUT_ROW("pool.fixed.exceeded") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pool_scene<ferry::uva_pool<i32, ferry::growth::fixed, B>, B> sc(4, 2, 8, 281);
  sc.put(4);
  sc.mark();
  const auto src = ferry_test::random_values<i32>(5, 282);
  expect_throw([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
  sc.unchanged();
  sc.next_call_rotates();
}

BAD_INPUT_ROW("pool.fixed.busy") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pool_scene<ferry::uva_pool<i32, ferry::growth::fixed, ferry::reuse::throw_when_full, B>, B> sc(4, 1, 8, 291);
  {
    ferry_test::gate<B> held(sc.s);
    sc.put(4);
    sc.mark();
    const auto src = ferry_test::random_values<i32>(4, 292);
    expect_throw([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
    ++sc.stats_before.fence_hits;  // the busy slot it found
    sc.unchanged();
  }
  sc.next_call_rotates();
}

BAD_INPUT_ROW("pool.request_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pool_scene<ferry::uva_pool<i64, B>, B> sc(4, 2, 8, 301);
  const auto first = ferry_test::random_values<i64>(4, 302);
  const auto view = sc.pool.copy_to_uva(first, sc.s);
  published_row(sc.pool, view.data(), first,
                [&] { (void)sc.pool.copy_to_uva(huge_range(two_61 + 1), sc.s); });
}

BAD_INPUT_ROW("pool.copy_to_device.too_small") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pool_scene<ferry::uva_pool<i32, B>, B> sc(4, 2, 8, 311);
  sc.put(4);
  ferry::device_buffer<i32, B> out(3);
  const auto before = ferry_test::random_values<i32>(3, 312);
  upload(out.span(), before, ferry::stream_ref<B>(sc.s));
  sc.mark();
  const auto tasks = tasks_of<B>(sc.s);
  const auto src = ferry_test::random_values<i32>(4, 313);
  expect_throw([&] { (void)sc.pool.copy_to_device(src, out.span(), sc.s); });
  CHECK(tasks_of<B>(sc.s) == tasks);
  sc.unchanged();
  CHECK(download(ferry::device_span<const i32>(out.span()), ferry::stream_ref<B>(sc.s)) == before);
  sc.next_call_rotates();
}

BAD_INPUT_ROW("pool.moved_from") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  pool_scene<ferry::uva_pool<i32, B>, B> sc(4, 2, 8, 321);
  sc.put(4);
  ferry::uva_pool<i32, B> taken(std::move(sc.pool));
  const auto tasks = tasks_of<B>(sc.s);
  const auto stats = sc.arena.stats();
  const auto src = ferry_test::random_values<i32>(4, 322);
  expect_throw([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
  CHECK(tasks_of<B>(sc.s) == tasks);
  CHECK(same(sc.arena.stats(), stats));
  CHECK(std::vector<i32>(sc.views[0].data(), sc.views[0].data() + 4) == sc.values[0]);
}

BAD_INPUT_ROW("pool.rows.zero_width") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::pinned_arena<B> arena;
  arena.reserve(256);
  const auto stats = arena.stats();
  expect_throw([&] { ferry::uva_pool<i32, B> p(ferry::row_width{0}, 4, 2, 8, arena); });
  expect_throw([&] { ferry::uva_backed<i32, B> u(ferry::row_width{0}, 4, 2, 8, arena); });
  CHECK(same(arena.stats(), stats));
}

BAD_INPUT_ROW("pool.rows.not_whole") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::uva_pool<i32, B> pool(ferry::row_width{3}, 4, 2, 8, arena);
  const auto first = ferry_test::random_values<i32>(6, 341);
  const auto view = pool.copy_to_uva(first, s);
  const auto src = ferry_test::random_values<i32>(7, 342);
  published_row(pool, view.data(), first, [&] { (void)pool.copy_to_uva(src, s); });
}

BAD_INPUT_ROW("uva_backed.publish_rows.n_above_rows") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::uva_backed<i32, B> u(ferry::row_width{4}, 3, 2, 8, arena);
  const auto first = ferry_test::random_values<i32>(12, 351);
  std::copy(first.begin(), first.end(), u.host().begin());
  const auto view = u.publish_rows(3, s);
  published_row(u, view.data_handle(), first, [&] { (void)u.publish_rows(4, s); });
}

BAD_INPUT_ROW("uva_backed.publish.n_above_size") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::uva_backed<i32, B> u(8, 2, 8, arena);
  const auto first = ferry_test::random_values<i32>(8, 331);
  std::copy(first.begin(), first.end(), u.host().begin());
  const auto view = u.publish(8, s);
  published_row(u, view.data(), first, [&] { (void)u.publish(9, s); });
  // The next publish takes the other slot (rotation unchanged) and holds the new host state.
  s.synchronize();
  const auto second = ferry_test::random_values<i32>(8, 332);
  std::copy(second.begin(), second.end(), u.host().begin());
  const auto next = u.publish(8, s);
  CHECK(next.data() != view.data());
  CHECK(std::vector<i32>(next.data(), next.data() + 8) == second);
}

BAD_INPUT_ROW("uva_backed.max_slots") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  ferry::uva_backed<i32, ferry::reuse::throw_when_full, B> u(8, 2, 2, arena);
  std::vector<std::vector<i32>> published;
  std::vector<ferry::device_span<const i32>> views;
  {
    ferry_test::gate<B> held(s);  // both snapshots' readers are queued behind it
    for (std::uint64_t k = 0; k < 2; ++k) {
      published.push_back(ferry_test::random_values<i32>(8, 371 + k));
      std::copy(published.back().begin(), published.back().end(), u.host().begin());
      views.push_back(u.publish(8, s));
      ferry::enqueue_host(s, [] {});  // a reader of the snapshot, held by the gate
    }
    auto stats = u.stats();
    expect_throw([&] { (void)u.publish(8, s); });
    ++stats.fence_hits;  // the busy slot it found
    CHECK(same(u.stats(), stats));
    for (std::size_t k = 0; k < 2; ++k)
      CHECK(std::vector<i32>(views[k].data(), views[k].data() + 8) == published[k]);
    const std::string what = message_of([&] { (void)u.publish(8, s); });
    INFO(what);
    CHECK(what.starts_with("ferry: uva_backed: "));
    CHECK(what.find("uva_pool") == std::string::npos);
    CHECK(what.find("is held until stream point (line ") != std::string::npos);
  }
  s.synchronize();
  CHECK(u.publish(8, s).data() == views[0].data());  // the rotation goes on where it was
  s.synchronize();
}

// ---- interop ------------------------------------------------------------------------------------

#if FERRY_TEST_DLPACK
// A DLTensor of 12 int32 at `data` in the memory from_dlpack<i32, B> accepts on the device
// current now. Never dereferenced.
template <class B>
DLTensor dl_tensor(void* data, std::int64_t* shape) {
  const bool is_host = std::is_same_v<B, host>;
  const int device = is_host ? 0 : ferry::detail::backend_ops<B>::current_device();
  return DLTensor{data, DLDevice{is_host ? kDLCPU : kDLCUDA, device}, 2, DLDataType{kDLInt, 32, 1},
                  shape, nullptr, 0};
}
#endif

BAD_INPUT_ROW("dlpack.byte_offset.wraps") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
#if FERRY_TEST_DLPACK
  alignas(16) i32 storage[12] = {};
  std::int64_t shape[2] = {3, 4};
  DLTensor t = dl_tensor<B>(storage, shape);
  REQUIRE(ferry::from_dlpack<i32, B>(t).data() == storage);
  const auto base = reinterpret_cast<std::uintptr_t>(storage);
  for (const std::uint64_t offset : {~std::uint64_t{0} - 15, (~std::uint64_t{0} - 7 - base) & ~std::uint64_t{3}}) {
    t.byte_offset = offset;
    const DLTensor before = t;
    expect_throw([&] { (void)ferry::from_dlpack<i32, B>(t); });
    DLTensor host_tensor = t;
    host_tensor.device = DLDevice{kDLCPU, 0};
    expect_throw([&] { (void)ferry::from_dlpack_host<i32>(host_tensor); });
    if constexpr (std::is_same_v<B, host>) expect_throw([&] { (void)ferry::from_dlpack_pinned<i32, B>(t); });
    CHECK(std::memcmp(&before, &t, sizeof t) == 0);
    CHECK(shape[0] == 3);
    CHECK(shape[1] == 4);
  }
#else
  SKIP("<dlpack/dlpack.h> not found");
#endif
}

BAD_INPUT_ROW("dlpack.device_type.unknown") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
#if FERRY_TEST_DLPACK
  alignas(16) i32 storage[12] = {};
  std::int64_t shape[2] = {3, 4};
  DLTensor t = dl_tensor<B>(storage, shape);
  const int unknown = 1000;  // stored as the producer's integer: no enumerator of DLDeviceType
  static_assert(sizeof(unknown) == sizeof(t.device.device_type));
  std::memcpy(&t.device.device_type, &unknown, sizeof(unknown));
  const DLTensor before = t;
  expect_throw([&] { (void)ferry::from_dlpack<i32, B>(t); });
  expect_throw([&] { (void)ferry::from_dlpack_pinned<i32, B>(t); });
  expect_throw([&] { (void)ferry::from_dlpack_host<i32>(t); });
  CHECK(std::memcmp(&before, &t, sizeof t) == 0);
#else
  SKIP("<dlpack/dlpack.h> not found");
#endif
}

BAD_INPUT_ROW("dlpack.to_dlpack.too_many_elements") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
#if FERRY_TEST_DLPACK
  std::uint8_t byte = 0;
  constexpr std::size_t two_63 = std::size_t{1} << 63;
  const int device = std::is_same_v<B, host> ? 0 : ferry::detail::backend_ops<B>::current_device();
  const ferry::device_span<std::uint8_t> huge(&byte, two_63);  // never dereferenced
  const std::int64_t split[2] = {std::int64_t{1} << 62, 2};
  expect_throw([&] { (void)ferry::to_dlpack<B>(huge, device); });
  expect_throw([&] { (void)ferry::to_dlpack<B>(huge, device, split); });
  expect_throw([&] { (void)ferry::to_dlpack<B>(ferry::detail::make_pinned_span(&byte, two_63)); });
#else
  SKIP("<dlpack/dlpack.h> not found");
#endif
}

BAD_INPUT_ROW("dlpack.moved_from") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
#if FERRY_TEST_DLPACK
  ferry::device_buffer<i32, B> buf(12);
  auto from = ferry::to_dlpack<B>(buf.span());
  const DLTensor* at = &from.get();
  const auto to = std::move(from);
  expect_throw([&] { (void)from.get(); });  // NOLINT(bugprone-use-after-move): the case itself
  CHECK(from.empty());                      // NOLINT(bugprone-use-after-move)
  CHECK(&to.get() == at);
  CHECK(to.get().data == buf.span().data());
  CHECK(to.get().shape[0] == 12);
#else
  SKIP("<dlpack/dlpack.h> not found");
#endif
}

// ---- staged writes ------------------------------------------------------------------------------

BAD_INPUT_ROW("staged.ctor.bytes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const auto before = allocations<B>();
  expect_throw([] { ferry::staged_write_tensor<i64, B> t(two_61, 1); });
  CHECK(allocations<B>() == before);
}

BAD_INPUT_ROW("staged.ctor.adopted_size") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  const auto init = ferry_test::random_values<i32>(12, 343);
  ferry::device_buffer<i32, B> device(12);
  ferry::pinned_buffer<i32, B> pinned(12);
  upload(device.span(), init, ferry::stream_ref<B>(s));
  std::copy(init.begin(), init.end(), pinned.host().begin());
  const auto before = allocations<B>();
  expect_throw([&] { tensor<B> t(device.span(), 4, 4); });
  expect_throw([&] { tensor<B> t(ferry::device_span<i32>(nullptr, 16), 4, 4); });
  expect_throw([&] { ferry::staged_write_tensor<i32, ferry::target::uva, B> t(pinned.host(), 3, 5); });
  CHECK(allocations<B>() == before);
  CHECK(download(ferry::device_span<const i32>(device.span()), ferry::stream_ref<B>(s)) == init);
  CHECK(std::vector<i32>(pinned.host().begin(), pinned.host().end()) == init);
}

BAD_INPUT_ROW("staged.ctor.null_arena") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  auto live = [] {
    const auto st = ferry::backend_stats_of<B>();
    return st.pinned_allocations - st.pinned_frees + st.device_allocations - st.device_frees;
  };
  const auto before = live();
  expect_throw([&] { tensor<B> t(4, 4, s, 2, {.arena = nullptr}); });  // the target is freed
  expect_throw([&] { ferry::fused_staged_writer<i32, B> w(2, 2, {.arena = nullptr}); });
  CHECK(live() == before);
}

BAD_INPUT_ROW("staged.bounds.row") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const auto v = ferry_test::random_values<i32>(4, 341);
  staged_row<tensor<B>, B>(342, [&](auto& t) { t.stage_write(rows, 0, v); });
}

BAD_INPUT_ROW("staged.bounds.start") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const auto v = ferry_test::random_values<i32>(1, 351);
  staged_row<tensor<B>, B>(352, [&](auto& t) { t.stage_write(0, cols + 1, v); });
}

BAD_INPUT_ROW("staged.bounds.len") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const auto v = ferry_test::random_values<i32>(cols - 10 + 1, 361);
  staged_row<tensor<B>, B>(362, [&](auto& t) { t.stage_write(1, 10, v); });
}

BAD_INPUT_ROW("staged.bounds.empty_range") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const std::vector<i32> none;
  SECTION("row == rows") { staged_row<tensor<B>, B>(371, [&](auto& t) { t.stage_write(rows, 0, none); }); }
  SECTION("start == cols + 1") {
    staged_row<tensor<B>, B>(372, [&](auto& t) { t.stage_write(0, cols + 1, none); });
  }
}

BAD_INPUT_ROW("staged.fixed.exceeded") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  // reserve(4, 32) with 16 elements pending: 17 more exceed it.
  const auto v = ferry_test::random_values<i32>(17, 381);
  staged_row<fixed_tensor<B>, B>(382, [&](auto& t) { t.stage_write(2, 0, v); });
}

// A reserve that cannot be represented leaves the capacity as it was: under growth::fixed the
// writes that reserve(4, 32) allows still fit and one more does not; nothing is allocated.
template <class Tensor, class B>
void reserve_row(std::uint64_t seed, std::size_t writes, std::size_t elements) {
  staged_scene<Tensor, B> sc(seed);
  const std::size_t pending = sc.t.pending(), pending_elements = sc.t.pending_elements();
  const auto arena = ferry::default_arena<B>().stats();
  expect_throw([&] { sc.t.reserve(writes, elements); });
  CHECK(ferry::default_arena<B>().stats().bytes_reserved == arena.bytes_reserved);
  sc.unchanged(pending, pending_elements);
  sc.stage(2, 8);  // up to the reserved 4 writes of 32 elements
  if constexpr (std::is_same_v<Tensor, fixed_tensor<B>>) {
    const auto one = ferry_test::random_values<i32>(1, seed + 1);
    CHECK_THROWS_AS(sc.t.stage_write(0, 0, one), ferry::capacity_error);
  }
  sc.later_apply_matches();
}

BAD_INPUT_ROW("staged.reserve.writes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  constexpr std::size_t writes = std::size_t{1} << 62;
  SECTION("growth::pow2") { reserve_row<tensor<B>, B>(391, writes, 0); }
  SECTION("growth::fixed") { reserve_row<fixed_tensor<B>, B>(392, writes, 0); }
}

BAD_INPUT_ROW("staged.reserve.elements_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  constexpr std::size_t elements = std::numeric_limits<std::size_t>::max();
  SECTION("growth::pow2") { reserve_row<tensor<B>, B>(401, 0, elements); }
  SECTION("growth::fixed") { reserve_row<fixed_tensor<B>, B>(402, 0, elements); }
}

// A reserve whose sizes fit size_t but that no slot of a 64 MiB arena holds: the arena refuses it
// before any host memory is sized from the request; the capacity stays as reserve(4, 32) set it.
template <class Tensor, class B>
void past_arena_row(std::uint64_t seed) {
  ferry::pinned_arena<B> arena(std::size_t{64} << 20);
  staged_scene<Tensor, B> sc(seed, 8, arena);
  const std::size_t pending = sc.t.pending(), pending_elements = sc.t.pending_elements();
  const auto before = arena.stats();
  expect_throw([&] { sc.t.reserve(0, std::size_t{1} << 56); });  // 2^58 bytes of contents
  expect_throw([&] { sc.t.reserve(std::size_t{1} << 40, 0); });  // 2^41 descriptors
  CHECK(arena.stats().bytes_reserved == before.bytes_reserved);
  CHECK(arena.stats().allocations == before.allocations);
  sc.unchanged(pending, pending_elements);
  sc.stage(2, 8);  // up to the reserved 4 writes of 32 elements
  if constexpr (std::is_same_v<Tensor, fixed_tensor<B>>) {
    const auto one = ferry_test::random_values<i32>(1, seed + 1);
    CHECK_THROWS_AS(sc.t.stage_write(0, 0, one), ferry::capacity_error);
  }
  sc.later_apply_matches();
}

BAD_INPUT_ROW("staged.reserve.past_arena") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  SECTION("growth::pow2") { past_arena_row<tensor<B>, B>(405); }
  SECTION("growth::fixed") { past_arena_row<fixed_tensor<B>, B>(406); }
}

BAD_INPUT_ROW("staged.moved_from") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  staged_scene<tensor<B>, B> sc(411);
  const std::size_t writes = sc.t.pending(), elements = sc.t.pending_elements();
  tensor<B> taken(std::move(sc.t));
  const auto tasks = tasks_of<B>(sc.s);
  const auto v = ferry_test::random_values<i32>(4, 412);
  expect_throw([&] { sc.t.stage_write(0, 0, v); });
  expect_throw([&] { sc.t.apply_write(sc.s); });
  CHECK(tasks_of<B>(sc.s) == tasks);
  CHECK(taken.pending() == writes);
  CHECK(taken.pending_elements() == elements);
  taken.apply_write(sc.s);
  CHECK(download(ferry::device_span<const i32>(taken.span()), ferry::stream_ref<B>(sc.s)) == sc.model);
}

BAD_INPUT_ROW("staged.capturing") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  CUDA_ONLY(B) {
#if FERRY_HAS_CUDA
    staged_scene<tensor<B>, B> sc(421);
    const std::size_t writes = sc.t.pending(), elements = sc.t.pending_elements();
    CHECK(captured_nodes(sc.s.get(), [&] { expect_throw([&] { sc.t.apply_write(sc.s); }); }) == 0);
    sc.unchanged(writes, elements);
    sc.later_apply_matches();
#endif
  }
}

// Two tensors with writes applied and staged, the writer's bad apply, then what is kept.
template <class Writer, class B, class F>
void fused_row(std::uint64_t seed, Writer& w, F&& bad, std::size_t len = 8) {
  staged_scene<tensor<B>, B> a(seed, len), b(seed + 1, len);
  const std::size_t aw = a.t.pending(), ae = a.t.pending_elements();
  const std::size_t bw = b.t.pending(), be = b.t.pending_elements();
  expect_throw([&] { bad(a, b); });
  a.s.synchronize();
  a.unchanged(aw, ae);
  b.unchanged(bw, be);
  // A good fused apply afterwards writes exactly what each tensor had staged.
  w.apply(a.s, a.t, b.t);
  a.s.synchronize();
  CHECK(a.t.pending() == 0);
  CHECK(b.t.pending() == 0);
  CHECK(a.target() == a.model);
  CHECK(b.target() == b.model);
}

BAD_INPUT_ROW("fused.same_tensor_twice") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::fused_staged_writer<i32, B> w(3);
  fused_row<decltype(w), B>(431, w, [&](auto& a, auto& b) { w.apply(a.s, a.t, b.t, a.t); });
}

BAD_INPUT_ROW("fused.too_many_tensors") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::fused_staged_writer<i32, B> w(2);
  staged_scene<tensor<B>, B> c(443);
  const std::size_t cw = c.t.pending();
  fused_row<decltype(w), B>(441, w, [&](auto& a, auto& b) { w.apply(a.s, a.t, b.t, c.t); });
  CHECK(c.t.pending() == cw);
  c.s.synchronize();
  CHECK(c.target() == c.applied);
}

BAD_INPUT_ROW("fused.fixed.exceeded") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::fused_staged_writer<i32, B> w(2);
  ferry::fused_staged_writer<i32, ferry::growth::fixed, B> small(2);
  small.reserve(1, 8);  // scratch for 8 elements: two tensors' 128 staged elements exceed it
  fused_row<decltype(w), B>(451, w, [&](auto& a, auto& b) { small.apply(a.s, a.t, b.t); }, 64);
}

BAD_INPUT_ROW("fused.reserve.writes_overflow") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::fused_staged_writer<i32, ferry::growth::fixed, B> w(2);
  w.reserve(4, 32);  // the good apply afterwards (4 writes of 32 elements) needs exactly this
  fused_row<decltype(w), B>(461, w, [&](auto&, auto&) {
    const auto reserved = ferry::default_arena<B>().stats().bytes_reserved;
    try {
      w.reserve(std::size_t{1} << 62, 0);
    } catch (...) {
      CHECK(ferry::default_arena<B>().stats().bytes_reserved == reserved);  // nothing allocated
      throw;
    }
  });
}

// ---- policies -----------------------------------------------------------------------------------

BAD_INPUT_ROW("growth.pow2.unrepresentable") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  expect_throw([] { (void)ferry::growth::pow2::capacity_for((std::size_t{1} << 63) + 1); });
  expect_throw([] { (void)ferry::growth::pow2::capacity_for(std::numeric_limits<std::size_t>::max()); });
  CHECK(ferry::growth::pow2::capacity_for(std::size_t{1} << 63) == (std::size_t{1} << 63));
}

// ---- step_batch ---------------------------------------------------------------------------------

// User GrowthPolicies, outside the anonymous namespace: a batch's submit carries a visibility
// attribute, which a type of internal linkage would void (nvcc warns).
namespace bad_input_policies {

constexpr std::size_t step_threshold = std::size_t{64} << 10;

// Legal GrowthPolicies that refuse more than 64 KiB: by throwing, or by an answer of 2^63 bytes.
struct step_throws_above_64k {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    if (needed > step_threshold) throw ferry::capacity_error("ferry: the test's policy refuses " + std::to_string(needed));
    return ferry::growth::pow2::capacity_for(needed, current);
  }
};
struct step_huge_above_64k {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    return needed > step_threshold ? std::max(needed, std::size_t{1} << 63)
                                   : ferry::growth::pow2::capacity_for(needed, current);
  }
};

// An epilogue that throws at step 1 (host code only: on CUDA it is device code, which does not
// throw, and the row is skipped).
struct step_throwing_epilogue {
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
#if !defined(__CUDA_ARCH__)
    if (ctx.step() == 1) throw std::runtime_error("the test's epilogue fails at step 1");
#else
    (void)ctx;
#endif
  }
};

}  // namespace bad_input_policies

namespace {

using bad_input_policies::step_huge_above_64k;
using bad_input_policies::step_throwing_epilogue;
using bad_input_policies::step_throws_above_64k;

// A 128 KiB upload in one step under growth policy G: submit throws having enqueued nothing; the
// step stays open with its data (a smaller span of the same upload still holds what was written)
// and submits once it is within the policy.
template <class B, class G>
void step_refused_row(std::uint64_t seed) {
  ferry::stream<B> s;
  constexpr std::size_t big = (std::size_t{128} << 10) / sizeof(i32);
  ferry::device_buffer<i32, B> out(big);
  const auto before = ferry_test::random_values<i32>(big, seed);
  upload(out.span(), before, ferry::stream_ref<B>(s));
  ferry::step_batch<B, G> batch;
  auto up = batch.add_upload(out.span(), 1);
  batch.begin();
  const auto data = ferry_test::random_values<i32>(big, seed + 1);
  auto span = up.span(big);
  std::copy(data.begin(), data.end(), span.begin());
  const auto tasks = tasks_of<B>(s);
  expect_throw([&] { batch.submit(s); });
  CHECK(tasks_of<B>(s) == tasks);
  CHECK(batch.in_step());
  CHECK(download(ferry::device_span<const i32>(out.span()), ferry::stream_ref<B>(s)) == before);
  auto kept = up.span(1000);  // the same slot memory: what was written is still there
  CHECK(std::vector<i32>(kept.begin(), kept.end()) == std::vector<i32>(data.begin(), data.begin() + 1000));
  batch.submit(s);
  auto want = before;
  std::copy(data.begin(), data.begin() + 1000, want.begin());
  CHECK(download(ferry::device_span<const i32>(out.span()), ferry::stream_ref<B>(s)) == want);
}

// A plan over 256 elements of device memory: an upload into [0, 32), a 4 x 16 write target over
// [32, 96), a fill of [96, 100) from element 1 of a publish, and a device value outside it. A bad
// add_* call, then a step through the plan: the memory matches a reference, so nothing was added.
template <class B>
struct step_scene {
  ferry::stream<B> s;
  ferry::device_buffer<i32, B> mem{256}, value{1};
  std::vector<i32> ref;
  ferry::step_batch<B> batch;
  typename ferry::step_batch<B>::template upload<i32> up;
  typename ferry::step_batch<B>::template writes<i32> w;
  typename ferry::step_batch<B>::template publish<i32> pub;
  std::uint64_t seed;

  explicit step_scene(std::uint64_t seed_) : ref(ferry_test::random_values<i32>(256, seed_)), seed(seed_) {
    upload(mem.span(), ref, ferry::stream_ref<B>(s));
    upload(value.span(), ferry_test::random_values<i32>(1, seed + 1), ferry::stream_ref<B>(s));
    up = batch.add_upload(at(0, 32), 32);
    w = batch.add_writes(ferry::staged_view<i32>(mem.span().data() + 32, 4, 16), 4, 64);
    pub = batch.template add_publish<i32>(4);
    batch.add_fill(at(96, 4), pub, 1);
  }
  ferry::device_span<i32> at(std::size_t i, std::size_t n) { return mem.span().subspan(i, n); }
  const i32* device_value() { return value.span().data(); }
  void bad(auto&& call) {
    expect_throw(call);
    step_matches();
  }
  void step_matches() {
    batch.begin();
    const auto a = ferry_test::random_values<i32>(32, seed + 2);
    std::copy(a.begin(), a.end(), up.span(32).begin());
    std::copy(a.begin(), a.end(), ref.begin());
    const auto row = ferry_test::random_values<i32>(16, seed + 3);
    w.stage_write(3, 0, row);
    std::copy(row.begin(), row.end(), ref.begin() + 32 + 3 * 16);
    const auto p = ferry_test::random_values<i32>(2, seed + 4);
    std::copy(p.begin(), p.end(), pub.span(2).begin());
    std::fill(ref.begin() + 96, ref.begin() + 100, p[1]);
    batch.submit(s);
    CHECK(download(ferry::device_span<const i32>(mem.span()), ferry::stream_ref<B>(s)) == ref);
  }
};

}  // namespace

BAD_INPUT_ROW("step.submit.growth_throws") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_refused_row<B, step_throws_above_64k>(501);
}

BAD_INPUT_ROW("step.submit.growth_huge") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_refused_row<B, step_huge_above_64k>(511);
}

// A step batch of two slots (max_slots 2) whose two steps and their readers are queued behind a
// gate: the row's bad begin() runs while the gate holds them (`bad(batch)`); after it no step is
// open, the slots are as they were, every step's data was read intact, and once the stream has
// caught up the next begin() takes the freed slot.
template <class Batch, class B, class Bad>
void full_step_ring_row(std::uint64_t seed, Bad&& bad) {
  ferry::stream<B> s;
  Batch batch(2, 2);
  auto pub = batch.template add_publish<i32>(16);
  std::vector<std::vector<i32>> data;
  std::vector<std::vector<i32>> seen(2);
  {
    ferry_test::gate<B> held(s);  // both steps and their readers are queued behind it
    for (std::uint64_t k = 0; k < 2; ++k) {
      data.push_back(ferry_test::random_values<i32>(16, seed + k));
      batch.begin();
      std::copy(data[k].begin(), data[k].end(), pub.span(16).begin());
      batch.submit(s);
      // A reader of the published slot (pinned, mapped memory: the host may read it in place).
      ferry::enqueue_host(s, [v = pub.view(), out = &seen[k]] { *out = std::vector<i32>(v.data(), v.data() + v.size()); });
    }
    bad(batch);
    CHECK_FALSE(batch.in_step());
    CHECK(batch.slots() == 2);
  }
  s.synchronize();
  CHECK(seen[0] == data[0]);
  CHECK(seen[1] == data[1]);
  batch.begin();  // the stream caught up: the next slot is free
  CHECK(batch.in_step());
  batch.cancel();
}

BAD_INPUT_ROW("step.begin.full") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  full_step_ring_row<ferry::step_batch<B, ferry::reuse::throw_when_full>, B>(531, [](auto& batch) {
    const std::string what = message_of([&] { batch.begin(); });
    INFO(what);
    CHECK(what.starts_with("ferry: step_batch: the next slot (slot 0) is still in use"));
    CHECK(what.find("until stream point (line ") != std::string::npos);
    CHECK(what.find("max_slots (2)") != std::string::npos);
    expect_throw([&] { batch.begin(); });
  });
}

BAD_INPUT_ROW("step.handle.empty") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  using batch_t = ferry::step_batch<B>;
  typename batch_t::template upload<i32> u;
  typename batch_t::template publish<i32> p;
  typename batch_t::template writes<i32> w;
  expect_throw([&] { (void)u.destination(); });
  expect_throw([&] { (void)p.view(); });
  expect_throw([&] { (void)u.span(1); });
  expect_throw([&] { (void)p.span(1); });
  expect_throw([&] { w.stage_write(0, 0, {i32{1}}); });
  CHECK(w.pending() == 0);
}

BAD_INPUT_ROW("step.handle.assigned_over") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(521);
  ferry::device_buffer<i32, B> other(8);
  ferry::step_batch<B> old;
  auto stale_up = old.add_upload(other.span(), 8);
  auto stale_pub = old.template add_publish<i32>(8);
  old = std::move(sc.batch);  // old's plan ends; the scene's moves in, its handles with it
  expect_throw([&] { (void)stale_up.span(1); });
  expect_throw([&] { (void)stale_up.destination(); });
  expect_throw([&] { (void)stale_pub.view(); });
  sc.batch = std::move(old);  // a move into a moved-from batch: the scene's handles stay valid
  sc.step_matches();
}

BAD_INPUT_ROW("step.overlap.uploads") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(531);
  sc.bad([&] { (void)sc.batch.add_upload(sc.at(31, 2), 2); });
}

BAD_INPUT_ROW("step.overlap.write_targets") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(541);
  SECTION("the same memory") {
    sc.bad([&] { (void)sc.batch.add_writes(ferry::staged_view<i32>(sc.mem.span().data() + 32, 4, 16)); });
  }
  SECTION("one row shared") {
    sc.bad([&] { (void)sc.batch.add_writes(ferry::staged_view<i32>(sc.mem.span().data() + 80, 2, 8)); });
  }
}

BAD_INPUT_ROW("step.overlap.fills") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(551);
  sc.bad([&] { sc.batch.add_fill(sc.at(99, 1), sc.device_value()); });
}

BAD_INPUT_ROW("step.overlap.fill_upload") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(561);
  SECTION("a fill over the upload") { sc.bad([&] { sc.batch.add_fill(sc.at(0, 1), sc.device_value()); }); }
  SECTION("an upload over the fill") { sc.bad([&] { (void)sc.batch.add_upload(sc.at(90, 8), 8); }); }
}

BAD_INPUT_ROW("step.overlap.target_destination") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(571);
  SECTION("a target over the upload") {
    sc.bad([&] { (void)sc.batch.add_writes(ferry::staged_view<i32>(sc.mem.span().data() + 24, 1, 9)); });
  }
  SECTION("a fill over the target") { sc.bad([&] { sc.batch.add_fill(sc.at(40, 2), sc.device_value()); }); }
}

// A writes target whose declared maxima fit size_t but that no slot of a 64 MiB arena holds:
// reserve() and the first begin() are refused by the arena before any host memory is sized from
// the plan; nothing is allocated and the plan stays open (an add_* call still works).
template <class B, class... Ps>
void past_arena_step_row(std::size_t max_writes, std::size_t max_elements) {
  ferry::pinned_arena<B> arena(std::size_t{64} << 20);
  ferry::device_buffer<i32, B> mem(64);
  ferry::step_batch<B, Ps...> batch(2, 4, arena);
  (void)batch.add_upload(mem.span().subspan(0, 16), 16);
  (void)batch.add_writes(ferry::staged_view<i32>(mem.span().data() + 16, 2, 16), max_writes, max_elements);
  const auto before = arena.stats();
  expect_throw([&] { batch.reserve(); });
  expect_throw([&] { batch.begin(); });
  CHECK_FALSE(batch.in_step());
  CHECK(batch.slots() == 0);
  CHECK(arena.stats().bytes_reserved == before.bytes_reserved);
  CHECK(arena.stats().allocations == before.allocations);
  CHECK_NOTHROW(batch.template add_publish<i32>(4));
}

BAD_INPUT_ROW("step.reserve.past_arena") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  SECTION("growth::fixed, max_elements 2^56") { past_arena_step_row<B, ferry::growth::fixed>(0, std::size_t{1} << 56); }
  SECTION("growth::fixed, max_writes 2^40") { past_arena_step_row<B, ferry::growth::fixed>(std::size_t{1} << 40, 0); }
  SECTION("growth::pow2, max_elements 2^56") { past_arena_step_row<B>(0, std::size_t{1} << 56); }
}

BAD_INPUT_ROW("step.overlap.fill_source") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(581);
  SECTION("a source the upload writes") {
    sc.bad([&] { sc.batch.add_fill(sc.value.span(), static_cast<const i32*>(sc.at(5, 1).data())); });
  }
  SECTION("an upload over a fill's source") {
    ferry::device_buffer<i32, B> dst(4);
    sc.batch.add_fill(dst.span(), sc.device_value());
    sc.bad([&] { (void)sc.batch.add_upload(sc.value.span(), 1); });
  }
  SECTION("a write target over a fill's source") {
    ferry::device_buffer<i32, B> dst(4);
    sc.batch.add_fill(dst.span(), sc.device_value());
    sc.bad([&] { (void)sc.batch.add_writes(ferry::staged_view<i32>(sc.value.span().data(), 1, 1)); });
  }
  SECTION("a gather's destination over a fill's source") {
    ferry::device_buffer<i32, B> dst(4), src(4);
    sc.batch.add_fill(dst.span(), sc.device_value());
    sc.bad([&] { (void)sc.batch.add_gather(sc.value.span(), ferry::device_span<const i32>(src.span()), 1); });
  }
}

BAD_INPUT_ROW("step.overlap.gather_source") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(591);
  ferry::device_buffer<i32, B> dst(4), src(8);
  const ferry::device_span<const i32> from(src.span());
  SECTION("a source the target covers") {
    sc.bad([&] { (void)sc.batch.add_gather(dst.span(), ferry::device_span<const i32>(sc.at(40, 8)), 4); });
  }
  SECTION("a source its own destination covers") {
    sc.bad([&] { (void)sc.batch.add_gather(src.span().subspan(4, 4), from, 4); });
  }
  SECTION("an upload, a write target, a fill and a gather's destination over a gather's source") {
    (void)sc.batch.add_gather(dst.span(), from, 4);
    ferry::device_buffer<i32, B> other(4);
    expect_throw([&] { (void)sc.batch.add_upload(src.span().subspan(6, 2), 2); });
    expect_throw([&] { (void)sc.batch.add_writes(ferry::staged_view<i32>(src.span().data() + 2, 1, 2)); });
    expect_throw([&] { sc.batch.add_fill(src.span().subspan(7, 1), sc.device_value()); });
    sc.bad([&] { (void)sc.batch.add_gather(src.span().first(1), ferry::device_span<const i32>(other.span()), 1); });
  }
}

BAD_INPUT_ROW("step.gather.source_too_large") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  step_scene<B> sc(601);
  ferry::device_buffer<i32, B> dst(4);
  // A source never read, at an address below every allocation, so that no destination of the
  // plan overlaps its 8 GiB: only its size is refused.
  const ferry::device_span<const i32> huge(reinterpret_cast<const i32*>(std::uintptr_t{64}), (std::size_t{1} << 31) + 1);
  sc.bad([&] { (void)sc.batch.add_gather(dst.span(), huge, 4); });
}

// A step that outgrows its slot under growth::pow2 takes more arena memory; a 1 MiB arena refuses
// the room for 2^20 int32. The step stays as it was: the submit carries the upload's 16 elements
// (its span of 2^20 refused after them), the publish's 4, and nothing of a second upload whose only
// span was refused (it once carried 4 MiB from address 0).
BAD_INPUT_ROW("step.span.past_arena") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  constexpr std::size_t big = std::size_t{1} << 20;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena(big);
  ferry::device_buffer<i32, B> out(big), other(big), gd(big), src(4);
  const auto before = ferry_test::random_values<i32>(big, 611);
  upload(out.span(), before, ferry::stream_ref<B>(s));
  upload(other.span(), before, ferry::stream_ref<B>(s));
  ferry::step_batch<B> batch(2, 2, arena);
  auto up = batch.add_upload(out.span(), 16);
  auto up2 = batch.add_upload(other.span(), 16);
  auto pub = batch.template add_publish<i32>(4);
  auto g = batch.add_gather(gd.span(), ferry::device_span<const i32>(src.span()), 4);
  batch.begin();
  const auto data = ferry_test::random_values<i32>(16, 612);
  std::copy(data.begin(), data.end(), up.span(16).begin());
  std::fill_n(pub.span(4).begin(), 4, 7);
  expect_throw([&] { (void)up.span(big); });
  expect_throw([&] { (void)up2.span(big); });
  expect_throw([&] { (void)pub.span(big); });
  expect_throw([&] { (void)g.indices(big); });
  CHECK(batch.in_step());
  batch.submit(s);
  auto want = before;
  std::copy(data.begin(), data.end(), want.begin());
  CHECK(download(ferry::device_span<const i32>(out.span()), ferry::stream_ref<B>(s)) == want);
  CHECK(download(ferry::device_span<const i32>(other.span()), ferry::stream_ref<B>(s)) == before);
  CHECK(download(pub.view(), ferry::stream_ref<B>(s)) == std::vector<i32>(4, 7));
}

BAD_INPUT_ROW("step.epilogue.throws") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  HOST_ONLY(B) {
    ferry::stream<B> s;
    ferry::device_buffer<i32, B> out(4);
    ferry::step_batch<B, ferry::epilogue::functor<step_throwing_epilogue>> batch;
    auto up = batch.add_upload(out.span(), 4);
    for (i32 k = 0; k < 3; ++k) {
      batch.begin();
      std::fill_n(up.span(4).begin(), 4, k);
      batch.submit(s);
      if (k == 1) {
        expect_throw([&] { s.synchronize(); });
        CHECK(download(ferry::device_span<const i32>(out.span()), ferry::stream_ref<B>(s)) == std::vector<i32>(4, 1));
      }
    }
    s.synchronize();  // once: step 2 runs clean
    CHECK(download(ferry::device_span<const i32>(out.span()), ferry::stream_ref<B>(s)) == std::vector<i32>(4, 2));
  }
}

template <class B>
using capture_batch = ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::capture>;

BAD_INPUT_ROW("step.capture.record_unreserved") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  CUDA_ONLY(B) {
#if FERRY_HAS_CUDA
    ferry::stream<B> s;
    ferry::device_buffer<i32, B> out(8);
    capture_batch<B> batch;
    (void)batch.add_upload(out.span(), 8);
    CHECK(captured_nodes(s.get(), [&] { expect_throw([&] { batch.record(s); }); }) == 0);
    CHECK(batch.slots() == 0);  // not reserved by the refused call
    ferry::device_buffer<i32, B> more(4);
    (void)batch.add_upload(more.span(), 4);  // the plan still open
#endif
  }
}

BAD_INPUT_ROW("step.capture.record_not_capturing") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  CUDA_ONLY(B) {
#if FERRY_HAS_CUDA
    ferry::stream<B> s;
    ferry::device_buffer<i32, B> out(8);
    capture_batch<B> batch;
    (void)batch.add_upload(out.span(), 8);
    batch.reserve();
    const auto before = ferry::backend_stats_of<B>().enqueues;
    expect_throw([&] { batch.record(s); });
    CHECK(ferry::backend_stats_of<B>().enqueues == before);
#endif
  }
}

BAD_INPUT_ROW("step.capture.replay_without_commit") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry::stream<B> s;
  ferry::device_buffer<i32, B> out(8);
  capture_batch<B> batch;
  auto up = batch.add_upload(out.span(), 8);
  batch.reserve();
  if constexpr (std::is_same_v<B, host>) {
    batch.replay_recorded(s);  // the host backend's stand-in for the engine's replay
  } else {
#if FERRY_HAS_CUDA
    REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    batch.record(s);
    cudaGraph_t g = nullptr;
    REQUIRE(cudaStreamEndCapture(s.get(), &g) == cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);  // a replay, no step committed
    s.synchronize();
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
#endif
  }
  s.synchronize();
  const std::string what = message_of([&] { batch.begin(); });
  INFO(what);
  CHECK(what.find("a replay without a commit") != std::string::npos);
  CHECK(what.find("to run step 0") != std::string::npos);
  expect_throw([&] { batch.begin(); });
  CHECK_FALSE(batch.in_step());
  expect_throw([&] { batch.commit(); });
  CHECK(batch.steps() == 0);
  CHECK(batch.replayed() == 0);
  (void)up;
}

// ---- waits past their bound (the bound set to 50 ms; a gate holds the stream) ---------------------

constexpr auto short_bound = std::chrono::milliseconds(50);

BAD_INPUT_ROW("wait.bound.not_positive") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  const auto before = ferry::wait_timeout();
  expect_throw([] { ferry::set_wait_timeout(std::chrono::nanoseconds(0)); });
  expect_throw([] { ferry::set_wait_timeout(std::chrono::seconds(-1)); });
  CHECK(ferry::wait_timeout() == before);
}

// A ReusePolicy that bounds its waits by 0 (not a bound).
struct zero_bound_reuse {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = true;
  static std::chrono::milliseconds wait_timeout() { return std::chrono::milliseconds(0); }
};

// A full ring (event_fenced-like) whose next slot is still read: the row's bad wait, then the same
// call once the readers are done.
template <class Pool, class B>
void full_ring_row(std::uint64_t seed) {
  pool_scene<Pool, B> sc(4, 2, 2, seed);
  {
    ferry_test::gate<B> held(sc.s);  // every view's reader is still queued behind it
    sc.put(4);
    sc.put(4);
    sc.mark();
    const auto src = ferry_test::random_values<i32>(4, seed + 1);
    expect_throw([&] { (void)sc.pool.copy_to_uva(src, sc.s); });
    ++sc.stats_before.fence_hits;  // the busy slot it found
    sc.unchanged();
  }
  sc.next_call_rotates();
}

BAD_INPUT_ROW("wait.reuse_policy.not_positive") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  full_ring_row<ferry::uva_pool<i32, zero_bound_reuse, B>, B>(601);
}

BAD_INPUT_ROW("wait.pool.full_past_bound") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry_test::wait_bound bound(short_bound);
  full_ring_row<ferry::uva_pool<i32, B>, B>(611);
}

BAD_INPUT_ROW("wait.event.past_bound") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry_test::wait_bound bound(short_bound);
  ferry::stream<B> s;
  ferry::event<B> e;
  {
    ferry_test::gate<B> held(s);
    e.record(s);
    expect_throw([&] { e.synchronize(); });
    CHECK_FALSE(e.ready());
  }
  e.synchronize();
  CHECK(e.ready());
}

BAD_INPUT_ROW("wait.step.full_past_bound") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry_test::wait_bound bound(short_bound);
  full_step_ring_row<ferry::step_batch<B>, B>(621, [](auto& batch) { expect_throw([&] { batch.begin(); }); });
}

BAD_INPUT_ROW("wait.arena.trim_past_bound") {
  using B = TestType;
  FERRY_REQUIRE_BACKEND(B);
  ferry_test::wait_bound bound(short_bound);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  {
    ferry_test::gate<B> held(s);
    arena.release(arena.acquire(512), s);
    arena.reserve(4096);
    const auto stats = arena.stats();
    expect_throw([&] { arena.trim(); });
    CHECK(same(arena.stats(), stats));
  }
  s.synchronize();
  arena.trim();
  CHECK(arena.stats().bytes_reserved == 0);
}
