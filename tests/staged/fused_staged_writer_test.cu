// Tests for include/ferry/staged/fused_staged_writer.hpp (and staging_memory.hpp as it takes it).
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <staged/support.hpp>
#include <support/device_resource.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

using ferry_test::model;
using ferry_test::random_bits;
using ferry_test::read_back;

namespace {

// Stages the same random writes (with overlaps) into a fused tensor and its separately applied
// twin, and into the host model.
template <class T, class Fused, class Twin>
void stage_random(Fused& f, Twin& twin, model<T>& ref, std::mt19937_64& rng, std::size_t writes) {
  for (std::size_t w = 0; w < writes; ++w) {
    const std::size_t row = rng() % ref.rows;
    const std::size_t start = rng() % (ref.cols + 1);
    const std::size_t len = rng() % (ref.cols - start + 1);
    auto v = random_bits<T>(len, rng);
    f.stage_write(row, start, v);
    twin.stage_write(row, start, v);
    ref.write(row, start, v);
  }
}

template <class B, class... WriterPolicies>
void fused_vs_separate(std::uint64_t seed) {
  using T = float;
  using namespace ferry;
  stream<B> s;
  staged_write_tensor<T, B> a(9, 3000, s), a2(9, 3000, s);
  staged_write_tensor<T, B, target::uva> b(5, 40, s), b2(5, 40, s);
  staged_write_tensor<T, B, staging::h2d_copy> c(3, 5000, s), c2(3, 5000, s);
  staged_write_tensor<T, B, staging::uva_direct> idle(2, 2, s);
  model<T> ra(9, 3000), rb(5, 40), rc(3, 5000);
  fused_staged_writer<T, B, WriterPolicies...> writer(4);
  std::mt19937_64 rng(seed);
  for (int step = 0; step < 12; ++step) {
    stage_random(a, a2, ra, rng, rng() % 30);
    stage_random(b, b2, rb, rng, step % 3 == 0 ? 0 : rng() % 30);  // sometimes nothing staged
    stage_random(c, c2, rc, rng, rng() % 10);
    writer.apply(s, a, b, idle, c);
    REQUIRE(a.pending() == 0);
    REQUIRE(b.pending() == 0);
    REQUIRE(c.pending() == 0);
    a2.apply_write(s);
    b2.apply_write(s);
    c2.apply_write(s);
  }
  REQUIRE(ferry_test::same_bits(read_back<T, B>(a, s), ra.data));
  REQUIRE(ferry_test::same_bits(read_back<T, B>(a2, s), ra.data));
  REQUIRE(ferry_test::same_bits(read_back<T, B>(b, s), rb.data));
  REQUIRE(ferry_test::same_bits(read_back<T, B>(b2, s), rb.data));
  REQUIRE(ferry_test::same_bits(read_back<T, B>(c, s), rc.data));
  REQUIRE(ferry_test::same_bits(read_back<T, B>(c2, s), rc.data));
  REQUIRE(read_back<T, B>(idle, s) == std::vector<T>(4, 0.0f));
}

}  // namespace

TEMPLATE_TEST_CASE("a fused apply equals separate applies", "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  SECTION("by_target") { fused_vs_separate<TestType>(1); }
  SECTION("uva_direct") { fused_vs_separate<TestType, ferry::staging::uva_direct>(2); }
  SECTION("h2d_copy") { fused_vs_separate<TestType, ferry::staging::h2d_copy>(3); }
  SECTION("threshold 4096") { fused_vs_separate<TestType, ferry::staging::threshold<4096>>(4); }
  SECTION("graph_safe after reserve") {
    // growth::fixed needs reserve first; the tensors' writes stay untouched when it throws.
    ferry::stream<TestType> s;
    ferry::staged_write_tensor<std::int32_t, TestType> t(2, 8, s);
    ferry::fused_staged_writer<std::int32_t, TestType, ferry::presets::graph_safe> w(2);
    t.stage_write(1, 2, {4, 5, 6});
    REQUIRE_THROWS_AS(w.apply(s, t), ferry::capacity_error);
    REQUIRE(t.pending() == 1);
    w.reserve(8, 64);
    w.apply(s, t);
    REQUIRE(t.pending() == 0);
    REQUIRE(read_back<std::int32_t, TestType>(t, s) ==
            std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 5, 6, 0, 0, 0});
  }
}

namespace {
// A fused apply over tensors that adopted the caller's memory (random contents, a device and a
// UVA target) and an owned one: each target ends equal to its host model, the adopted ones
// started from the caller's contents.
template <class B, class... WriterPolicies>
void fused_adopted(std::uint64_t seed) {
  using T = float;
  using namespace ferry;
  using Device = staged_write_tensor<T, B>;
  using Uva = staged_write_tensor<T, B, target::uva>;
  stream<B> s;
  std::mt19937_64 rng(seed);
  model<T> ra(7, 2100), rb(4, 33), rc(6, 500);
  ra.data = random_bits<T>(ra.data.size(), rng);
  rb.data = random_bits<T>(rb.data.size(), rng);
  ferry_test::caller_memory<Device> ma(ra.data, s);
  ferry_test::caller_memory<Uva> mb(rb.data, s);
  Device a(ma.adoptable(), 7, 2100);
  Uva b(mb.adoptable(), 4, 33);
  Device c(6, 500, s);
  fused_staged_writer<T, B, WriterPolicies...> writer(3);
  auto stage = [&](auto& t, model<T>& ref, std::size_t writes) {
    for (std::size_t w = 0; w < writes; ++w) {
      const std::size_t row = rng() % ref.rows, start = rng() % (ref.cols + 1);
      const auto v = random_bits<T>(rng() % (ref.cols - start + 1), rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    }
  };
  for (int step = 0; step < 10; ++step) {
    stage(a, ra, rng() % 20);
    stage(b, rb, step % 4 == 0 ? 0 : rng() % 20);
    stage(c, rc, rng() % 20);
    writer.apply(s, a, c, b);
    REQUIRE(a.pending() + b.pending() + c.pending() == 0);
  }
  REQUIRE(a.span().data() == ma.device().data());
  REQUIRE(b.span().data() == mb.device().data());
  REQUIRE(ferry_test::same_bits(ma.read(s), ra.data));
  REQUIRE(ferry_test::same_bits(mb.read(s), rb.data));
  REQUIRE(ferry_test::same_bits(read_back<T, B>(c, s), rc.data));
}
}  // namespace

TEMPLATE_TEST_CASE("a fused apply writes into adopted targets as into owned ones", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  SECTION("by_target") { fused_adopted<TestType>(21); }
  SECTION("uva_direct") { fused_adopted<TestType, ferry::staging::uva_direct>(22); }
  SECTION("h2d_copy") { fused_adopted<TestType, ferry::staging::h2d_copy>(23); }
}

TEMPLATE_TEST_CASE("fused apply rejects a repeated tensor or too many tensors and changes nothing",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int16_t;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType> a(2, 4, s), b(2, 4, s), c(2, 4, s);
  ferry::fused_staged_writer<T, TestType> w(2);
  a.stage_write(0, 0, {1, 2});
  b.stage_write(1, 1, {3});
  REQUIRE_THROWS_AS(w.apply(s, a, a), std::invalid_argument);
  REQUIRE_THROWS_AS(w.apply(s, a, b, c), std::invalid_argument);
  REQUIRE(a.pending() == 1);
  REQUIRE(b.pending() == 1);
  REQUIRE(read_back<T, TestType>(a, s) == std::vector<T>(8, 0));
  w.apply(s, b, a);
  REQUIRE(read_back<T, TestType>(a, s) == std::vector<T>{1, 2, 0, 0, 0, 0, 0, 0});
  REQUIRE(read_back<T, TestType>(b, s) == std::vector<T>{0, 0, 0, 0, 0, 3, 0, 0});
  const auto before = ferry_test::enqueued<TestType>(s);
  w.apply(s, a, b);  // nothing staged: no launch
  REQUIRE(ferry_test::enqueued<TestType>(s) == before);
}

TEMPLATE_TEST_CASE("a fused apply over a span takes a number of tensors known at run time", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  using Tensor = ferry::staged_write_tensor<T, TestType, ferry::target::uva>;
  ferry::stream<TestType> s;
  std::mt19937_64 rng(31);
  const std::size_t n = GENERATE(1, 2, 9);
  std::vector<Tensor> tensors;
  std::vector<model<T>> refs;
  for (std::size_t i = 0; i < n; ++i) {
    tensors.emplace_back(3 + i, 40, s);
    refs.emplace_back(3 + i, 40);
  }
  std::vector<Tensor*> all;
  for (auto& t : tensors) all.push_back(&t);
  ferry::fused_staged_writer<T, TestType, ferry::staging::uva_direct> w(n);
  auto stage = [&] {
    for (std::size_t i = 0; i < n; ++i)
      for (int k = 0; k < 3; ++k) {
        const std::size_t row = rng() % refs[i].rows, start = rng() % 40;
        const auto v = random_bits<T>(rng() % (40 - start) + 1, rng);
        tensors[i].stage_write(row, start, v);
        refs[i].write(row, start, v);
      }
  };
  stage();
  // Refused with nothing changed: more than max_tensors, a tensor twice, a null pointer.
  std::vector<Tensor*> bad(all);
  bad.push_back(&tensors[0]);
  REQUIRE_THROWS_AS(w.apply(s, std::span<Tensor* const>(bad)), std::invalid_argument);
  if (n > 1) {
    bad.pop_back();
    bad[n - 1] = bad[0];
    REQUIRE_THROWS_AS(w.apply(s, std::span<Tensor* const>(bad)), std::invalid_argument);
    bad[n - 1] = nullptr;
    REQUIRE_THROWS_AS(w.apply(s, std::span<Tensor* const>(bad)), std::invalid_argument);
  }
  for (const auto& t : tensors) REQUIRE(t.pending() == 3);
  // One launch for all of them, as many operations as a variadic apply of one tensor.
  const auto before = ferry_test::enqueued<TestType>(s);
  w.apply(s, std::span<Tensor* const>(all));
  const auto one_span = ferry_test::enqueued<TestType>(s) - before;
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(tensors[i].pending() == 0);
    REQUIRE(ferry_test::same_bits(read_back<T, TestType>(tensors[i], s), refs[i].data));
  }
  stage();
  for (std::size_t i = 1; i < n; ++i) w.apply(s, std::span<Tensor* const>(all).subspan(i, 1));
  const auto before_one = ferry_test::enqueued<TestType>(s);
  w.apply(s, tensors[0]);
  REQUIRE(ferry_test::enqueued<TestType>(s) - before_one == one_span);
  for (std::size_t i = 0; i < n; ++i)
    REQUIRE(ferry_test::same_bits(read_back<T, TestType>(tensors[i], s), refs[i].data));
  const auto idle = ferry_test::enqueued<TestType>(s);
  w.apply(s, std::span<Tensor* const>(all));  // nothing staged: no launch
  w.apply(s, std::span<Tensor* const>());
  REQUIRE(ferry_test::enqueued<TestType>(s) == idle);
}

TEMPLATE_TEST_CASE("fused steady state allocates nothing and never synchronizes", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType> a(32, 256, s);
  ferry::staged_write_tensor<T, TestType, ferry::target::uva> b(32, 256, s);
  a.reserve(8, 2048);
  b.reserve(8, 2048);
  ferry::fused_staged_writer<T, TestType> w(2);
  w.reserve(16, 4096);
  std::vector<T> v(256, 9);
  auto step = [&](int i) {
    for (int k = 0; k < 8; ++k) {
      a.stage_write(static_cast<std::size_t>((i + k) % 32), 0, v);
      b.stage_write(static_cast<std::size_t>((i * 3 + k) % 32), 10, std::span<const T>(v.data(), 100));
    }
    w.apply(s, a, b);
  };
  for (int i = 0; i < 4; ++i) step(i);
  s.synchronize();
  const auto before = ferry::backend_stats_of<TestType>();
  for (int i = 0; i < 1000; ++i) {
    step(i);
    s.synchronize();
  }
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.pinned_allocations == before.pinned_allocations);
  CHECK(after.device_allocations == before.device_allocations);
  CHECK(after.synchronizations - before.synchronizations == 1000);
}

TEMPLATE_TEST_CASE("fused scratch keeps its high-water mark so alternating sizes allocate nothing",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType> a(16, 512, s);  // device target: copied by by_target
  model<T> ref(16, 512);
  ferry::fused_staged_writer<T, TestType> w(1, 2);  // no reserve: growth from use
  std::mt19937_64 rng(11);
  // A small apply first, then a much larger one (the scratch grows once per slot), then
  // alternating sizes: from then on no allocation at all.
  auto step = [&](std::size_t len) {
    for (std::size_t row = 0; row < 4; ++row) {
      auto v = random_bits<T>(len, rng);
      a.stage_write(row, 0, v);
      ref.write(row, 0, v);
    }
    w.apply(s, a);
  };
  for (int i = 0; i < 4; ++i) {  // synchronized: both slots come back and see the largest size
    step(i % 2 ? 512 : 8);
    s.synchronize();
  }
  const auto before = ferry::backend_stats_of<TestType>();
  for (int i = 0; i < 40; ++i) {
    step(i % 3 ? 300 : 16);
    s.synchronize();
  }
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.device_allocations == before.device_allocations);
  CHECK(after.pinned_allocations == before.pinned_allocations);
  REQUIRE(read_back<T, TestType>(a, s) == ref.data);
}

TEMPLATE_TEST_CASE("a fused apply keeps what is staged in a tensor's regrown slot", "[staged]",
                   STAGED_BACKENDS) {
  // Resolving a tensor's overlaps may grow its chunk table inside a slot that holds more contents
  // than its capacity asked for (staged_write_tensor_test has the same case through apply_write).
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  std::mt19937_64 rng(71);
  ferry::staged_write_tensor<T, TestType> t(2, 8192, s);
  model<T> ref(2, 8192);
  ferry::fused_staged_writer<T, TestType> w(1);
  auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
    auto v = random_bits<T>(len, rng);
    t.stage_write(row, start, v);
    ref.write(row, start, v);
  };
  stage(0, 0, 4000);
  w.apply(s, t);
  for (std::size_t i = 0; i < 9; ++i) stage(1, 3 * i, 1);
  stage(0, 0, 8000);
  for (std::size_t i = 0; i < 3; ++i) stage(0, 100 + 2500 * i, 1);
  w.apply(s, t);
  REQUIRE(ferry_test::same_bits(read_back<T, TestType>(t, s), ref.data));
}

TEMPLATE_TEST_CASE("destroying a caller_fenced writer waits for its queued apply", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  constexpr std::size_t rows = 4, cols = 3000;
  ferry::stream<B> s;
  ferry::staged_write_tensor<T, B, ferry::target::uva> a(rows, cols, s);
  model<T> ref(rows, cols);
  using Writer =
      ferry::fused_staged_writer<T, B, ferry::reuse::caller_fenced, ferry::staging::uva_direct>;
  auto w = std::make_unique<Writer>(1);
  std::mt19937_64 rng(81);
  auto& arena = ferry::default_arena<B>();
  ferry_test::gate<B> g(s);
  for (std::size_t row = 0; row < rows; ++row) {
    auto v = random_bits<T>(cols - row, rng);
    a.stage_write(row, row, v);
    ref.write(row, row, v);
  }
  const std::size_t before = arena.stats().bytes_in_use;
  w->apply(s, a);
  const std::size_t slot_bytes = arena.stats().bytes_in_use - before;  // the writer's chunk table
  REQUIRE_FALSE(ferry_test::destroy_behind_gate(w, g, slot_bytes));
  // The destructor waited for the apply: the UVA target (host memory) already holds it.
  std::vector<T> got(rows * cols);
  std::memcpy(got.data(), a.span().data(), got.size() * sizeof(T));
  INFO("first difference at " << ferry_test::first_difference(got, ref.data));
  REQUIRE(ferry_test::same_bits(got, ref.data));
}

TEMPLATE_TEST_CASE("reserve keeps the caller_fenced rotation of a writer's slots", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType> a(2, 64, s);
  model<T> ref(2, 64);
  ferry::fused_staged_writer<T, TestType, ferry::reuse::caller_fenced> w(1, 3);
  std::mt19937_64 rng(91);
  auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
    auto v = random_bits<T>(len, rng);
    a.stage_write(row, start, v);
    ref.write(row, start, v);
  };
  {
    ferry_test::gate<TestType> g(s);  // the caller holds every apply: within 3 applies
    stage(0, 0, 64);
    w.apply(s, a);
    w.reserve(1, 1);  // within the first slot: it stays in the rotation, its apply pending
    stage(1, 0, 64);
    w.apply(s, a);
    stage(0, 20, 30);
    w.apply(s, a);
    g.open();
  }
  REQUIRE(read_back<T, TestType>(a, s) == ref.data);
}

TEMPLATE_TEST_CASE("fused reserve of sizes that cannot be represented throws and changes nothing",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max(), e62 = std::size_t{1} << 62;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType> a(4, 300, s);
  ferry::staged_write_tensor<T, TestType, ferry::target::uva> b(4, 300, s);
  model<T> ra(4, 300), rb(4, 300);
  ferry::fused_staged_writer<T, TestType, ferry::growth::fixed> w(2);
  w.reserve(4, 600);
  std::mt19937_64 rng(101);
  auto stage = [&](auto& t, model<T>& ref, std::size_t row, std::size_t start, std::size_t len) {
    auto v = random_bits<T>(len, rng);
    t.stage_write(row, start, v);
    ref.write(row, start, v);
  };
  stage(a, ra, 1, 5, 200);
  const auto stats = ferry::backend_stats_of<TestType>();
  for (const auto& r : {std::array{e62, std::size_t{0}}, std::array{e62 / 2, std::size_t{0}},
                        std::array{std::size_t{0}, max}, std::array{std::size_t{0}, e62},
                        std::array{max, max}, std::array{e62 / 8, e62 / 8}}) {
    INFO("reserve(" << r[0] << ", " << r[1] << ")");
    REQUIRE_THROWS_AS(w.reserve(r[0], r[1]), ferry::capacity_error);
  }
  CHECK(ferry::backend_stats_of<TestType>().pinned_allocations == stats.pinned_allocations);
  CHECK(ferry::backend_stats_of<TestType>().device_allocations == stats.device_allocations);
  REQUIRE(a.pending() == 1);
  stage(a, ra, 2, 0, 300);
  stage(b, rb, 0, 10, 50);
  w.apply(s, a, b);
  REQUIRE(read_back<T, TestType>(a, s) == ra.data);
  REQUIRE(read_back<T, TestType>(b, s) == rb.data);
  // growth::fixed: the capacity is still what reserve(4, 600) gave.
  for (std::size_t row = 0; row < 4; ++row) stage(a, ra, row, 0, 300);
  REQUIRE_THROWS_AS(w.apply(s, a), ferry::capacity_error);
  REQUIRE(a.pending() == 4);
}

TEMPLATE_TEST_CASE("staging_memory: an engine's arena and device resource back a writer's memory",
                   "[staged][resource]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = float;
  using namespace ferry;
  stream<B> s, s2;  // the streams the writer applies on outlive it
  ferry_test::counting_device_resource<B> pool;
  pinned_arena<B> arena, tensor_arena;
  // The tensors stage in an arena of their own (their device memory is ferry's); the writer's
  // staging comes from `arena`, its scratch from the resource.
  staged_write_tensor<T, B> a(9, 3000, s, 2, {.arena = &tensor_arena});
  staged_write_tensor<T, B, target::uva> b(5, 400, s, 2, {.arena = &tensor_arena});
  model<T> ra(9, 3000), rb(5, 400);
  const auto default_before = default_arena<B>().stats();
  const auto device_before = backend_stats_of<B>().device_allocations;  // a's target is ferry's
  std::mt19937_64 rng(60);
  using ferry_test::stage_random_writes;
  {
    fused_staged_writer<T, B, staging::h2d_copy> w(2, 3, {.arena = &arena, .device = pool});
    w.reserve(64, 4096);  // the chunk tables only: a resource's scratch comes at a copying apply
    CHECK(pool.calls == 0);
    CHECK(arena.stats().allocations >= 3);
    stream_ref<B> prev = s;
    for (int step = 0; step < 30; ++step) {
      // Growing: the stream's scratch is outgrown.
      stage_random_writes(a, ra, rng, 1 + rng() % (3 + step), step < 15 ? 200 : 3000);
      stage_random_writes(b, rb, rng, rng() % 20, 400);
      const stream_ref<B> on = step % 5 == 4 ? s2 : s;
      if (!(on == prev)) prev.synchronize();  // applies on two streams are not ordered otherwise
      w.apply(on, a, b);
      prev = on;
    }
    prev.synchronize();
    {
      // Every apply behind it takes its own slot, and copies into the stream's one scratch (no
      // larger than before: nothing new from the resource).
      ferry_test::gate<B> g(s);
      const auto before_held = pool.allocations;
      for (int i = 0; i < 5; ++i) {
        stage_random_writes(a, ra, rng, 2, 200);
        w.apply(s, a, b);
      }
      CHECK(pool.allocations == before_held);
      g.open();
    }
    REQUIRE(ferry_test::same_bits(read_back<T, B>(a, s), ra.data));
    REQUIRE(ferry_test::same_bits(read_back<T, B>(b, s), rb.data));
    CHECK(pool.allocations >= 2);
    CHECK(pool.deallocations >= 1);  // an outgrown scratch, given back at its apply
    CHECK(default_arena<B>().stats().allocations == default_before.allocations);
  }
  s.synchronize();
  s2.synchronize();
  CHECK(pool.all_given_back());
  CHECK(pool.given_back_on({s, s2}));
  CHECK(backend_stats_of<B>().device_allocations == device_before);
  CHECK(tensor_arena.stats().allocations >= 2);
}

// Resolving overlaps rewrites a tensor's chunk table before the writer's launch; an apply that
// fails after that keeps counting writes and elements, not the chunks left by the resolution.
TEMPLATE_TEST_CASE("a writer that fails after resolving overlaps keeps every tensor's counts",
                   "[staged][resource]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  using failure = typename ferry_test::counting_device_resource<B>::failure;
  using namespace ferry;
  stream<B> s;
  ferry_test::counting_device_resource<B> pool;
  {
    staged_write_tensor<T, B> a(2, 700, s);
    staged_write_tensor<T, B> b(2, 90, s);
    model<T> ra(2, 700), rb(2, 90);
    fused_staged_writer<T, B, staging::h2d_copy> w(2, 2, {.device = pool});
    std::mt19937_64 rng(67);
    auto write = [&](auto& t, model<T>& ref, std::size_t row, std::size_t start, std::size_t len) {
      const auto v = ferry_test::random_bits<T>(len, rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    };
    // a: a full row, then two writes inside it: 3 writes resolve into 5 chunks. Contents of 64
    // bytes or more are padded to their destination's alignment.
    write(a, ra, 0, 0, 700);
    write(a, ra, 0, 101, 10);
    write(a, ra, 0, 203, 30);
    // b: a write, then one that covers it: 2 writes resolve into 1 chunk.
    write(b, rb, 1, 3, 10);
    write(b, rb, 1, 0, 90);
    REQUIRE(a.pending() == 3);
    REQUIRE(a.pending_elements() == 740);
    REQUIRE(b.pending() == 2);
    REQUIRE(b.pending_elements() == 100);
    pool.fail = failure::bad_alloc;  // the writer's scratch, after both tensors are resolved
    REQUIRE_THROWS_AS(w.apply(s, a, b), out_of_memory);
    CHECK(a.pending() == 3);
    CHECK(a.pending_elements() == 740);
    CHECK(b.pending() == 2);
    CHECK(b.pending_elements() == 100);
    pool.fail = failure::none;
    w.apply(s, a, b);
    CHECK(a.pending() == 0);
    CHECK(b.pending_elements() == 0);
    REQUIRE(ferry_test::same_bits(read_back<T, B>(a, s), ra.data));
    REQUIRE(ferry_test::same_bits(read_back<T, B>(b, s), rb.data));
  }
  s.synchronize();
  CHECK(pool.all_given_back());
}

TEMPLATE_TEST_CASE("a writer whose device resource runs out: out_of_memory, every tensor's writes kept",
                   "[staged][resource]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  using failure = typename ferry_test::counting_device_resource<B>::failure;
  using namespace ferry;
  stream<B> s;
  ferry_test::counting_device_resource<B> pool;
  const failure how = GENERATE(failure::null, failure::bad_alloc);
  {
    staged_write_tensor<T, B> a(6, 700, s);
    staged_write_tensor<T, B, target::uva> b(3, 90, s);
    model<T> ra(6, 700), rb(3, 90);
    fused_staged_writer<T, B, staging::h2d_copy> w(2, 2, {.device = pool});
    std::mt19937_64 rng(61);
    ferry_test::stage_random_writes(a, ra, rng, 2, 100);
    ferry_test::stage_random_writes(b, rb, rng, 2, 90);
    w.apply(s, a, b);  // the first slot and the stream's scratch (at most 2 KiB)
    const auto applied_a = read_back<T, B>(a, s), applied_b = read_back<T, B>(b, s);
    REQUIRE(ferry_test::same_bits(applied_a, ra.data));
    REQUIRE(ferry_test::same_bits(applied_b, rb.data));
    for (std::size_t row = 0; row < 5; ++row) {  // 14 000 bytes: the scratch must grow
      const auto v = ferry_test::random_bits<T>(700, rng);
      a.stage_write(row, 0, v);
      ra.write(row, 0, v);
    }
    ferry_test::stage_random_writes(b, rb, rng, 2, 90);
    pool.fail = how;  // the grown scratch
    REQUIRE_THROWS_AS(w.apply(s, a, b), out_of_memory);
    CHECK(pool.calls == 2);
    CHECK(a.pending() == 5);
    CHECK(b.pending() == 2);
    REQUIRE(read_back<T, B>(a, s) == applied_a);  // nothing applied
    REQUIRE(read_back<T, B>(b, s) == applied_b);
    pool.fail = failure::none;
    w.apply(s, a, b);  // retried
    CHECK(a.pending() == 0);
    REQUIRE(ferry_test::same_bits(read_back<T, B>(a, s), ra.data));
    REQUIRE(ferry_test::same_bits(read_back<T, B>(b, s), rb.data));
  }
  s.synchronize();
  CHECK(pool.all_given_back());
}
