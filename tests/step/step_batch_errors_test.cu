// Tests for what step_batch keeps when a call is refused or fails (docs/step_batch.md, "Rules"):
// a handle's span refused by the arena, overlaps of what a step reads and writes declared in
// either order, an epilogue that throws (host backend), ceilings on slots that size nothing,
// gather sources at the reach of int32 indices, and how far ahead of its steps the host may fill
// the next one.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <step/support.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using ferry_test::random_bits;
using ferry_test::randomize;
using ferry_test::read;
using i32 = std::int32_t;

// Under growth::pow2 a step that outgrows its slot takes more arena memory; with the arena's cap
// reached (here by a block the engine holds meanwhile), the span, indices or publish that needed
// it throws ferry::capacity_error. The step must be as before the call: its submit, once the block
// is given back, carries the data written before the refusal and nothing else. (An upload whose
// first span of the step was refused once carried the refused size from address 0: a SEGV in the
// host backend's step task, an illegal address on CUDA.)
TEMPLATE_TEST_CASE("step_batch: a span the arena refuses leaves the step as it was, and its submit carries "
                   "what was written before",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  constexpr std::size_t big = std::size_t{1} << 20;  // 4 MiB of int32: room in a block of 8 MiB
  std::mt19937_64 rng(5301);
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena(std::size_t{12} << 20);
  ferry::device_buffer<i32, B> a(big), b(big), gd(big), src(64);
  auto want_a = randomize(a, ferry::stream_ref<B>(s), rng);
  auto want_b = randomize(b, ferry::stream_ref<B>(s), rng);
  auto want_gd = randomize(gd, ferry::stream_ref<B>(s), rng);
  const auto src_v = randomize(src, ferry::stream_ref<B>(s), rng);
  ferry::step_batch<B> batch(2, 4, arena);
  auto ua = batch.add_upload(a.span(), 16);
  auto ub = batch.add_upload(b.span(), 16);
  auto pub = batch.template add_publish<i32>(8);
  auto g = batch.add_gather(gd.span(), ferry::device_span<const i32>(src.span()), 16);
  for (int step = 0; step < 3; ++step) {
    batch.begin();
    const auto va = random_bits<i32>(16, rng);
    std::copy(va.begin(), va.end(), ua.span(16).begin());
    const auto vp = random_bits<i32>(8, rng);
    std::copy(vp.begin(), vp.end(), pub.span(8).begin());
    std::vector<i32> idx(4);
    for (auto& j : idx) j = static_cast<i32>(rng() % src.size());
    std::copy(idx.begin(), idx.end(), g.indices(idx.size()).begin());
    // Each refused: with 8 MiB held, the arena cannot hold the 8 MiB block they would take.
    const ferry::pinned_block held = arena.acquire(std::size_t{6} << 20);
    CHECK_THROWS_AS(ua.span(big), ferry::capacity_error);  // after a span of this upload
    CHECK_THROWS_AS(ub.span(big), ferry::capacity_error);  // the upload's first span of the step
    CHECK_THROWS_AS(pub.span(big), ferry::capacity_error);
    CHECK_THROWS_AS(g.indices(big), ferry::capacity_error);
    arena.release(held);
    batch.submit(s);
    std::copy(va.begin(), va.end(), want_a.begin());
    for (std::size_t i = 0; i < idx.size(); ++i) want_gd[i] = src_v[static_cast<std::size_t>(idx[i])];
    CHECK(read<i32, B>(ferry::device_span<const i32>(a.span()), s) == want_a);
    CHECK(read<i32, B>(ferry::device_span<const i32>(b.span()), s) == want_b);
    CHECK(read<i32, B>(ferry::device_span<const i32>(gd.span()), s) == want_gd);
    const auto v = pub.view();
    REQUIRE(v.size() == vp.size());
    CHECK(read<i32, B>(v, s) == vp);
  }
}

// What a gather or a fill reads must not be a destination of the plan, whichever is declared
// first: every kind of destination against a gather's source and a fill's device value, in both
// orders. (A write target declared after the reader was once accepted: the step then wrote and
// read that memory in one launch, a race between blocks on CUDA.) The plan keeps nothing refused.
TEMPLATE_TEST_CASE("step_batch: a destination over what a gather or fill reads is refused in either order",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  enum class dest { upload, writes, gather, fill };
  const dest kind = GENERATE(dest::upload, dest::writes, dest::gather, dest::fill);
  const bool gather_reads = GENERATE(true, false);  // the reader: a gather's source, else a fill's value
  const bool reader_first = GENERATE(true, false);
  CAPTURE(static_cast<int>(kind), gather_reads, reader_first);
  std::mt19937_64 rng(5311);
  ferry::stream<B> s;
  ferry::device_buffer<i32, B> mem(256), out(64), other(8);
  const auto span = mem.span();
  ferry::step_batch<B> batch;
  // The reader reads mem[16, 32) (a gather's source) or mem[20] (a fill's value); the destination
  // covers mem[18, 26).
  auto declare_reader = [&] {
    if (gather_reads)
      return batch.add_gather(out.span(), ferry::device_span<const i32>(span.subspan(16, 16)), 8);
    batch.add_fill(out.span().subspan(60, 4), static_cast<const i32*>(span.data() + 20));
    return typename ferry::step_batch<B>::template gather<i32>{};
  };
  auto declare_destination = [&] {
    const ferry::device_span<i32> d = span.subspan(18, 8);
    switch (kind) {
      case dest::upload: (void)batch.add_upload(d, 8); break;
      case dest::writes: (void)batch.add_writes(ferry::staged_view<i32>(d.data(), 2, 4)); break;
      case dest::gather: (void)batch.add_gather(d, ferry::device_span<const i32>(other.span()), 8); break;
      case dest::fill: batch.add_fill(d, static_cast<const i32*>(other.span().data())); break;
    }
  };
  typename ferry::step_batch<B>::template gather<i32> g;
  if (reader_first) {
    g = declare_reader();
    CHECK_THROWS_AS(declare_destination(), std::invalid_argument);
  } else {
    declare_destination();
    CHECK_THROWS_AS(g = declare_reader(), std::invalid_argument);
  }
  // The step moves exactly what was accepted.
  auto want_mem = randomize(mem, ferry::stream_ref<B>(s), rng);
  auto want_out = randomize(out, ferry::stream_ref<B>(s), rng);
  const auto other_v = randomize(other, ferry::stream_ref<B>(s), rng);
  batch.begin();
  const bool gathers = reader_first && gather_reads;
  if (gathers) {
    auto idx = g.indices(8);
    for (std::size_t i = 0; i < 8; ++i) idx[i] = static_cast<i32>(7 - i);
    for (std::size_t i = 0; i < 8; ++i) want_out[i] = want_mem[16 + 7 - i];
  }
  if (reader_first && !gather_reads) std::fill(want_out.begin() + 60, want_out.end(), want_mem[20]);
  if (!reader_first && kind == dest::fill) std::fill(want_mem.begin() + 18, want_mem.begin() + 26, other_v[0]);
  batch.submit(s);
  CHECK(read<i32, B>(ferry::device_span<const i32>(mem.span()), s) == want_mem);
  CHECK(read<i32, B>(ferry::device_span<const i32>(out.span()), s) == want_out);
}

// A gather's indices are int32: they reach rows [0, 2^31). A source of 2^31 elements is reached to
// its last row (the size was once clamped to 2^31 - 1 before the comparison, refusing that row);
// a larger source is refused at add_gather, saying why. The sources are uint8 arrays of which only
// the rows the steps read exist: the gather reads nothing else.
TEMPLATE_TEST_CASE("step_batch: a gather reaches the last row of a source of 2^31 elements; a larger source is refused",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using u8 = std::uint8_t;
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::StartsWith;
  constexpr std::size_t reach = std::size_t{1} << 31;
  ferry::stream<B> s;
  ferry::device_buffer<u8, B> mem(64);
  std::vector<u8> init(64, 0);
  init[0] = 7;
  ferry::async_h2d(init, mem.span(), s);
  // A source whose row 2^31 - 1 is mem[0] (and row 2^31 - 2 would precede mem: never read).
  const auto last_row_at = [&](std::size_t rows) {
    return ferry::device_span<const u8>(
        reinterpret_cast<const u8*>(reinterpret_cast<std::uintptr_t>(mem.span().data()) - (reach - 1)), rows);
  };
  ferry::step_batch<B> batch;
  auto g = batch.add_gather(mem.span().subspan(32, 4), last_row_at(reach), 4);
  CHECK_THROWS_AS(batch.add_gather(mem.span().subspan(40, 4), last_row_at(reach + 1), 4), std::invalid_argument);
  CHECK_THROWS_WITH(batch.add_gather(mem.span().subspan(40, 4), last_row_at(reach + 1), 4),
                    StartsWith("ferry: step_batch::add_gather: a source of 2147483649 elements") && ContainsSubstring("int32"));
  batch.begin();
  g.indices(1)[0] = std::numeric_limits<i32>::max();  // row 2^31 - 1, the last
  batch.submit(s);
  const auto got = read<u8, B>(ferry::device_span<const u8>(mem.span()), s);
  CHECK(got[32] == 7);
  CHECK(got[40] == 0);  // nothing of the refused gather
}

// Ceilings on slots size nothing: max_slots is how far the ring may grow, not what it reserves
// (a ceiling of SIZE_MAX or 2^40 once sized host vectors from it at the first begin():
// std::length_error or std::bad_alloc). The ring grows one slot at a time past its initial slots.
TEMPLATE_TEST_CASE("step_batch: a ceiling of slots sizes nothing; the ring grows one slot at a time",
                   "[step][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  const std::size_t ceiling = GENERATE(std::numeric_limits<std::size_t>::max(), std::size_t{1} << 40);
  CAPTURE(ceiling);
  std::mt19937_64 rng(5321);
  ferry::stream<B> s;
  ferry::device_buffer<i32, B> dst(32);
  ferry::step_batch<B> batch(2, ceiling);
  auto up = batch.add_upload(dst.span(), 32);
  std::vector<std::vector<i32>> sent;
  {
    ferry_test::gate<B> held(s);  // every step queued behind it: each begin() inserts a slot
    for (int k = 0; k < 5; ++k) {
      batch.begin();
      sent.push_back(random_bits<i32>(32, rng));
      std::copy(sent.back().begin(), sent.back().end(), up.span(32).begin());
      batch.submit(s);
    }
    CHECK(batch.slots() == 5);
  }
  CHECK(read<i32, B>(ferry::device_span<const i32>(dst.span()), s) == sent.back());
}

// How far ahead the host may fill a step (docs/step_batch.md, back-pressure): a step's slot is held
// by its kernel, and, when it published something, by the readers of its publishes, which the
// next submit stamps (they run before that step). With max_slots == 2 the host fills step k + 1
// while step k runs when step k - 1 published nothing (its slot is free once its kernel has run);
// when it published, begin() waits for step k (throw_when_full: throws, naming the slot).
TEMPLATE_TEST_CASE("step_batch: with two slots the host fills the next step while one runs, unless the step before published",
                   "[step][reuse]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  const bool published = GENERATE(false, true);
  CAPTURE(published);
  std::mt19937_64 rng(5331);
  ferry::stream<B> s;
  ferry::device_buffer<i32, B> dst(16);
  ferry::step_batch<B, ferry::reuse::throw_when_full> batch(2, 2);
  auto up = batch.add_upload(dst.span(), 16);
  auto pub = batch.template add_publish<i32>(4);
  std::vector<i32> last;
  auto step = [&] {
    last = random_bits<i32>(16, rng);
    std::copy(last.begin(), last.end(), up.span(16).begin());
    if (published) std::fill_n(pub.span(4).begin(), 4, 5);
    batch.submit(s);
  };
  batch.begin();
  step();  // step 0, run to its end
  s.synchronize();
  {
    ferry_test::gate<B> held(s);
    batch.begin();
    step();  // step 1, held behind the gate: it still runs
    if (published) {
      CHECK_THROWS_AS(batch.begin(), ferry::capacity_error);  // step 0's slot waits for step 1
      CHECK_FALSE(batch.in_step());
    } else {
      batch.begin();  // step 0's slot is free: step 2 is filled while step 1 is held
      CHECK(batch.in_step());
    }
  }
  if (!batch.in_step()) {
    s.synchronize();  // step 1 has run: its slot and step 0's are free
    batch.begin();
  }
  step();
  CHECK(read<i32, B>(ferry::device_span<const i32>(dst.span()), s) == last);
  CHECK(batch.slots() == 2);
}

}  // namespace

// The host backend runs the epilogue as host code, and an exception it throws there is an error
// inside stream work (SPEC §2): it comes back once, as ferry::error, from the next synchronizing
// call, the step's data landed and later steps run (it once ended the process: the step's host
// task was noexcept). On CUDA the epilogue is device code, which does not throw.
namespace step_batch_errors_test {
/// Records each step's number; throws at step `fails` (host code only).
struct throws_at {
  std::uint64_t fails = 0;
  std::uint64_t* seen = nullptr;
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
#if !defined(__CUDA_ARCH__)
    if (ctx.step() == fails) throw std::runtime_error("the engine's epilogue failed at step " + std::to_string(fails));
#endif
    seen[ctx.step()] = ctx.step() + 1;
  }
};
}  // namespace step_batch_errors_test

TEST_CASE("step_batch: an epilogue that throws on the host backend comes back once from the next synchronizing call",
          "[step][bad_input]") {
  using B = ferry::backend::host;
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::StartsWith;
  using epilogue = step_batch_errors_test::throws_at;
  ferry::stream<B> s;
  ferry::device_buffer<i32, B> dst(8);
  ferry::device_buffer<std::uint64_t, B> seen(3);
  ferry::async_h2d(std::vector<std::uint64_t>(3, 0), seen.span(), s);
  ferry::step_batch<B, ferry::epilogue::functor<epilogue>> batch;
  auto up = batch.add_upload(dst.span(), 8);
  batch.set_epilogue(epilogue{1, seen.span().data()});
  for (i32 k = 0; k < 3; ++k) {
    batch.begin();
    std::fill_n(up.span(8).begin(), 8, k + 1);
    batch.submit(s);
    if (k == 1) {  // the failed step's data landed before its epilogue threw
      try {
        s.synchronize();
        FAIL("the epilogue's exception was not reported");
      } catch (const ferry::error& e) {
        CHECK_THAT(std::string(e.what()), StartsWith("ferry: ") && ContainsSubstring("the engine's epilogue failed at step 1"));
      }
      CHECK(read<i32, B>(ferry::device_span<const i32>(dst.span()), s) == std::vector<i32>(8, 2));
    }
  }
  // Reported once: step 2 and the synchronizations after it run clean.
  CHECK_NOTHROW(s.synchronize());
  CHECK(read<i32, B>(ferry::device_span<const i32>(dst.span()), s) == std::vector<i32>(8, 3));
  CHECK(read<std::uint64_t, B>(ferry::device_span<const std::uint64_t>(seen.span()), s) ==
        std::vector<std::uint64_t>{1, 0, 3});
}
