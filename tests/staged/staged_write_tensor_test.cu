// Tests for include/ferry/staged/staged_write_tensor.hpp (and the apply kernel / host loop), and
// for include/ferry/staged/staging_memory.hpp as a tensor takes it.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <staged/support.hpp>
#include <support/device_resource.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using ferry_test::caller_memory;
using ferry_test::model;
using ferry_test::random_bits;
using ferry_test::read_back;
using ferry_test::same_bits;

template <class... Ts>
struct list {};

// One randomized model run: random batches of random writes (empty, tiny, ragged, multi-chunk,
// full-row, overlapping, scalar), applied on `s`, checked against the host model after every
// few applies and at the end.
template <class B, class T, class... Ps>
void model_run(std::uint64_t seed) {
  constexpr std::size_t rows = 24;
  const std::size_t cols = 2 * ferry::detail::elements_per_chunk<T> + 300;  // full rows: 3 chunks
  ferry::stream<B> s;
  ferry::staged_write_tensor<T, B, Ps...> t(rows, cols, s);
  model<T> ref(rows, cols);
  std::mt19937_64 rng(seed);
  auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  std::size_t writes = 0;
  for (int batch = 0; batch < 64; ++batch) {
    const std::size_t n = pick(0, 70);
    std::size_t staged = 0, elements = 0;
    for (std::size_t w = 0; w < n; ++w) {
      const std::size_t row = pick(0, rows - 1);
      std::size_t start = 0, len = 0;
      switch (pick(0, 6)) {
        case 0: start = pick(0, cols); len = 0; break;                           // empty
        case 1: start = 0; len = cols; break;                                    // full row
        case 2: start = pick(0, cols - 16); len = pick(1, 16); break;            // tiny
        case 3: start = pick(0, cols - 300); len = pick(17, 300); break;         // ragged
        case 4: start = pick(0, 40); len = pick(1, cols - start); break;         // long
        case 5: start = pick(0, cols - 1); len = pick(1, cols - start); break;   // anything
        default: start = 0; len = 1; break;                                      // scalar
      }
      auto v = random_bits<T>(len, rng);
      if (len == 1 && start == 0 && pick(0, 1) == 0)
        t.stage_write_elem(row, v[0]);
      else
        t.stage_write(row, start, v);
      ref.write(row, start, v);
      if (len) {
        ++staged;
        elements += len;
      }
    }
    REQUIRE(t.pending() == staged);
    REQUIRE(t.pending_elements() == elements);
    writes += staged;
    t.apply_write(s);
    REQUIRE(t.pending() == 0);
    if (batch % 8 == 7) {
      const auto got = read_back<T, B>(t, s);
      INFO("batch " << batch << ", first difference at " << ferry_test::first_difference(got, ref.data));
      REQUIRE(same_bits(got, ref.data));
    }
  }
  REQUIRE(writes > 1000);
  const auto got = read_back<T, B>(t, s);
  INFO("first difference at " << ferry_test::first_difference(got, ref.data));
  REQUIRE(same_bits(got, ref.data));
}

template <class B, class T>
void model_all_policies(std::uint64_t seed) {
  using namespace ferry;
  DYNAMIC_SECTION("element size " << sizeof(T) << " device target by_target") {
    model_run<B, T, target::device, staging::by_target>(seed);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " device target uva_direct") {
    model_run<B, T, target::device, staging::uva_direct>(seed + 1);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " device target h2d_copy") {
    model_run<B, T, target::device, staging::h2d_copy>(seed + 2);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " device target threshold 256") {
    model_run<B, T, target::device, staging::threshold<256>>(seed + 3);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva target by_target") {
    model_run<B, T, target::uva, staging::by_target>(seed + 4);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva target uva_direct") {
    model_run<B, T, target::uva, staging::uva_direct>(seed + 5);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva target h2d_copy") {
    model_run<B, T, target::uva, staging::h2d_copy>(seed + 6);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva target threshold 256") {
    model_run<B, T, target::uva, staging::threshold<256>>(seed + 7);
  }
  // target::uva_or_device where the mapping is live: target::uva's runs.
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva_or_device target by_target") {
    model_run<B, T, target::uva_or_device, staging::by_target>(seed + 4);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva_or_device target uva_direct") {
    model_run<B, T, target::uva_or_device, staging::uva_direct>(seed + 5);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva_or_device target h2d_copy") {
    model_run<B, T, target::uva_or_device, staging::h2d_copy>(seed + 6);
  }
  DYNAMIC_SECTION("element size " << sizeof(T) << " uva_or_device target threshold 256") {
    model_run<B, T, target::uva_or_device, staging::threshold<256>>(seed + 7);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("staged writes match a host model for every target and staging policy",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  SECTION("int32") { model_all_policies<TestType, std::int32_t>(100); }
  SECTION("int64") { model_all_policies<TestType, std::int64_t>(200); }
  SECTION("float") { model_all_policies<TestType, float>(300); }
  SECTION("int8") { model_all_policies<TestType, std::int8_t>(400); }
  SECTION("uint16") { model_all_policies<TestType, std::uint16_t>(500); }
  SECTION("double") { model_all_policies<TestType, double>(600); }
#if FERRY_HAS_HALF
  SECTION("half") { model_all_policies<TestType, __half>(700); }
#endif
}

TEMPLATE_TEST_CASE("stage_write checks bounds even for empty ranges and records nothing on error",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<std::int32_t, TestType> t(4, 10, s);
  const std::vector<std::int32_t> three{1, 2, 3}, none;
  t.stage_write(1, 0, three);
  REQUIRE(t.pending() == 1);
  using Catch::Matchers::ContainsSubstring;
  REQUIRE_THROWS_WITH(t.stage_write(4, 0, three),
                      ContainsSubstring("row 4") && ContainsSubstring("start 0") && ContainsSubstring("len 3"));
  REQUIRE_THROWS_AS(t.stage_write(0, 8, three), std::out_of_range);   // past the row's end
  REQUIRE_THROWS_AS(t.stage_write(0, 11, none), std::out_of_range);   // empty, start > cols
  REQUIRE_THROWS_WITH(t.stage_write(9, 0, none), ContainsSubstring("row 9") && ContainsSubstring("len 0"));
  REQUIRE_THROWS_AS(t.stage_write_elem(4, std::int32_t{1}), std::out_of_range);
  REQUIRE_THROWS_AS(t.stage_write(0, 0, std::vector<std::int32_t>(11)), std::out_of_range);
  REQUIRE(t.pending() == 1);
  REQUIRE(t.pending_elements() == 3);
  t.stage_write(0, 10, none);  // start == cols with nothing: in bounds, a no-op
  t.stage_write(3, 7, three);  // ends exactly at the row's end
  REQUIRE(t.pending() == 2);
  t.apply_write(s);
  const auto got = read_back<std::int32_t, TestType>(t, s);
  model<std::int32_t> ref(4, 10);
  ref.write(1, 0, three);
  ref.write(3, 7, three);
  REQUIRE(got == ref.data);
}

TEMPLATE_TEST_CASE("once each staging slot has been used and its apply has run, staging allocates nothing",
                   "[staged]", STAGED_BACKENDS) {
  // What makes stage_write safe inside a stream capture (docs/python.md): the staging slots are made
  // by the first applies, one per slot; after them a stage takes a free slot and allocates nothing.
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  const std::size_t slots = GENERATE(1, 2, 3);
  ferry::staged_write_tensor<T, TestType> t(2, 8, s, slots);
  for (std::size_t k = 0; k < slots; ++k) {
    t.stage_write(0, k, {static_cast<T>(k + 1)});
    t.apply_write(s);
  }
  s.synchronize();
  const auto before = ferry::backend_stats_of<TestType>();
  t.stage_write(1, 2, {5, 6});
  CHECK(ferry::backend_stats_of<TestType>().pinned_allocations == before.pinned_allocations);
  CHECK(ferry::backend_stats_of<TestType>().device_allocations == before.device_allocations);
  t.apply_write(s);
  std::vector<T> want(16, 0);
  for (std::size_t k = 0; k < slots; ++k) want[k] = static_cast<T>(k + 1);
  want[10] = 5, want[11] = 6;
  REQUIRE(read_back<T, TestType>(t, s) == want);
}

TEMPLATE_TEST_CASE("clear drops staged writes and an empty apply does nothing", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<std::int64_t, TestType> t(3, 5, s);
  t.stage_write(0, 0, {1, 2, 3});
  t.stage_write(2, 1, {4});
  REQUIRE(t.pending() == 2);
  REQUIRE(t.pending_elements() == 4);
  t.clear();
  REQUIRE(t.pending() == 0);
  REQUIRE(t.pending_elements() == 0);
  s.synchronize();
  const auto before = ferry_test::enqueued<TestType>(s);
  t.apply_write(s);  // nothing staged: no launch
  REQUIRE(ferry_test::enqueued<TestType>(s) == before);
  t.stage_write(1, 2, {7, 8, 9});
  t.apply_write(s);
  const auto got = read_back<std::int64_t, TestType>(t, s);
  REQUIRE(got == std::vector<std::int64_t>{0, 0, 0, 0, 0, 0, 0, 7, 8, 9, 0, 0, 0, 0, 0});
}

TEMPLATE_TEST_CASE("within one apply the write staged later wins", "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  const std::size_t cols = 3 * ferry::detail::elements_per_chunk<T>;
  ferry::stream<TestType> s;
  std::mt19937_64 rng(42);
  auto run = [&](auto tag) {
    using Tensor = decltype(tag);
    Tensor t(6, cols, s);
    model<T> ref(6, cols);
    auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
      auto v = random_bits<T>(len, rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    };
    stage(0, 0, cols);          // a full row (3 chunks) ...
    stage(0, 100, 5000);        // ... overwritten across chunk boundaries
    stage(0, 4000, 10);         // ... and again inside
    stage(1, 10, 20);           // identical writes: the second wins
    stage(1, 10, 20);
    stage(2, 50, 100);          // nested, then an outer one that covers all
    stage(2, 60, 10);
    stage(2, 40, 200);
    stage(3, 500, 10);          // disjoint writes to one row in decreasing order (no overlap)
    stage(3, 100, 10);
    stage(3, 0, 50);
    stage(4, 7, 1);             // many one-element writes to the same element
    for (int i = 0; i < 50; ++i) stage(4, 7, 1);
    stage(5, 0, cols);          // later row-sized writes shadow earlier ones completely
    stage(5, 0, cols);
    t.apply_write(s);
    const auto got = read_back<T, TestType>(t, s);
    INFO("first difference at " << ferry_test::first_difference(got, ref.data));
    REQUIRE(got == ref.data);
    // Across applies, stream order decides: the later apply wins.
    stage(0, 0, 10);
    t.apply_write(s);
    stage(0, 5, 10);
    t.apply_write(s);
    REQUIRE(read_back<T, TestType>(t, s) == ref.data);
  };
  SECTION("h2d_copy") { run(ferry::staged_write_tensor<T, TestType, ferry::staging::h2d_copy>(1, 1)); }
  SECTION("uva_direct") { run(ferry::staged_write_tensor<T, TestType, ferry::staging::uva_direct>(1, 1)); }
  SECTION("uva target") { run(ferry::staged_write_tensor<T, TestType, ferry::target::uva>(1, 1)); }
}

TEMPLATE_TEST_CASE("applies behind a held stream never block and never reuse a slot in flight",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::uint16_t;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType, ferry::staging::threshold<512>> t(8, 700, s, 2);
  model<T> ref(8, 700);
  std::mt19937_64 rng(7);
  {
    ferry_test::gate<TestType> g(s);  // nothing on s runs until the gate opens
    for (int i = 0; i < 64; ++i) {
      // The same rows every time: a rewritten slot in flight would show up as wrong values.
      for (std::size_t row = 0; row < 8; ++row) {
        auto v = random_bits<T>(i % 2 ? 700 : 100, rng);  // both sides of the threshold
        t.stage_write(row, 0, v);
        ref.write(row, 0, v);
      }
      t.apply_write(s);
    }
    g.open();
  }
  REQUIRE(read_back<T, TestType>(t, s) == ref.data);
}

TEMPLATE_TEST_CASE("a slot whose apply has passed is reused past an older one held on another stream",
                   "[staged]", STAGED_BACKENDS) {
  // Slot A's apply waits behind a held stream; slot B's ran on another stream. Staging takes the
  // oldest slot whose stamp has passed (B, again and again), not a fresh block per apply.
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> held, other;
  ferry::staged_write_tensor<T, TestType, ferry::staging::uva_direct> t(4, 2048, 2);  // 8 KiB rows: no inline apply
  model<T> ref(4, 2048);
  std::mt19937_64 rng(11);
  auto apply_row = [&](std::size_t row, ferry::stream_ref<TestType> s) {
    const auto v = random_bits<T>(2048, rng);
    t.stage_write(row, 0, v);
    ref.write(row, 0, v);
    t.apply_write(s);
  };
  {
    ferry_test::gate<TestType> g(held);
    apply_row(0, held);
    apply_row(1, other);
    other.synchronize();
    const std::size_t in_use = ferry::default_arena<TestType>().stats().bytes_in_use;
    for (std::size_t i = 0; i < 8; ++i) {
      apply_row(2 + i % 2, other);
      other.synchronize();
    }
    CHECK(ferry::default_arena<TestType>().stats().bytes_in_use == in_use);
    g.open();
  }
  REQUIRE(read_back<T, TestType>(t, held) == ref.data);
}

TEMPLATE_TEST_CASE("the H2D scratch belongs to a stream: one per stream, taken over once passed",
                   "[staged][resource]", STAGED_BACKENDS) {
  // Applies on one stream copy into that stream's scratch (its order guards the reuse), even
  // behind a held stream; a stream whose peer's scratch is still read gets its own; a new stream
  // takes over one whose last apply has passed. Rows 0-3 go to `held`, rows 4-7 to the others,
  // so that applies on unordered streams never write the same element.
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  constexpr std::size_t rows = 8, cols = 512;
  ferry::stream<B> held, second, third;  // the streams the tensor applies on outlive it
  ferry_test::counting_device_resource<B> pool;
  {
    ferry::staged_write_tensor<T, B, ferry::staging::h2d_copy> t(rows, cols, held, 4,
                                                                {.device = pool});
    t.reserve(16, 16 * cols);  // the slots' content capacity: no apply below outgrows it
    REQUIRE(pool.allocations == 1);  // the target
    held.synchronize();  // the target's zero fill, enqueued on `held`, is not ordered before `second`
    model<T> ref(rows, cols);
    std::mt19937_64 rng(803);
    auto apply_rows = [&](std::size_t first_row, ferry::stream_ref<B> s) {
      for (int w = 0; w < 8; ++w) {
        const std::size_t len = 1 + rng() % cols, start = rng() % (cols - len + 1);
        const std::size_t row = first_row + rng() % 4;
        const auto v = random_bits<T>(len, rng);
        t.stage_write(row, start, v);
        ref.write(row, start, v);
      }
      t.apply_write(s);
    };
    {
      ferry_test::gate<B> g(held);
      for (int i = 0; i < 6; ++i) apply_rows(0, held);
      CHECK(pool.allocations == 2);  // one scratch for six applies, none of which has run
      apply_rows(4, second);
      CHECK(pool.allocations == 3);  // held's scratch is still read: a scratch of its own
      apply_rows(4, second);
      CHECK(pool.allocations == 3);
      g.open();
    }
    held.synchronize();
    second.synchronize();
    apply_rows(4, third);
    CHECK(pool.allocations == 3);  // took over a passed one
    REQUIRE(same_bits(read_back<T, B>(t, third), ref.data));
  }
  CHECK(pool.all_given_back());
  CHECK(pool.given_back_on({held, second, third}));
}

TEMPLATE_TEST_CASE("small in-place applies interleave with slot applies behind a held stream",
                   "[staged]", STAGED_BACKENDS) {
  // On CUDA an apply whose chunk table and contents fit in 4 KiB travels in the launch's
  // parameters and leaves its slot current; larger ones read their slot through UVA. Both kinds,
  // interleaved and queued behind a held stream, must keep every value and the write order.
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::uint16_t;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType, ferry::staging::uva_direct> t(8, 700, s, 2);
  model<T> ref(8, 700);
  std::mt19937_64 rng(8);
  {
    ferry_test::gate<TestType> g(s);
    for (int i = 0; i < 96; ++i) {
      const std::size_t len = i % 3 == 2 ? 700 : 1 + static_cast<std::size_t>(rng() % 40);  // small twice, large once
      for (std::size_t row = 0; row < 8; ++row) {
        const std::size_t start = len == 700 ? 0 : static_cast<std::size_t>(rng() % (700 - len));
        auto v = random_bits<T>(len, rng);
        t.stage_write(row, start, v);
        ref.write(row, start, v);
      }
      if (i % 5 == 0) {  // an overlap within one small apply: the later write wins
        auto v = random_bits<T>(3, rng);
        t.stage_write(1, 2, v);
        ref.write(1, 2, v);
      }
      t.apply_write(s);
    }
    g.open();
  }
  REQUIRE(read_back<T, TestType>(t, s) == ref.data);
}

TEMPLATE_TEST_CASE("reserve under growth::fixed bounds what one apply may hold", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<float, TestType, ferry::growth::fixed> t(4, 64, s);
  const std::vector<float> v(10, 1.5f);
  REQUIRE_THROWS_AS(t.stage_write(0, 0, v), ferry::capacity_error);  // no capacity yet
  REQUIRE(t.pending() == 0);
  t.reserve(3, 25);
  t.stage_write(0, 0, v);
  t.stage_write(1, 0, v);
  REQUIRE_THROWS_AS(t.stage_write(2, 0, v), ferry::capacity_error);  // 30 elements > 25
  REQUIRE(t.pending() == 2);
  REQUIRE(t.pending_elements() == 20);
  t.stage_write(2, 0, {2.5f, 3.5f, 4.5f, 5.5f, 6.5f});
  REQUIRE_THROWS_AS(t.stage_write_elem(3, 1.0f), ferry::capacity_error);  // a 4th write
  REQUIRE(t.pending() == 3);
  t.apply_write(s);
  const auto got = read_back<float, TestType>(t, s);
  REQUIRE(got[0] == 1.5f);
  REQUIRE(got[64 + 9] == 1.5f);
  REQUIRE(got[128 + 4] == 6.5f);
  REQUIRE(got[192] == 0.0f);
  t.stage_write_elem(3, 1.0f);  // the capacity is per apply
  t.apply_write(s);
  REQUIRE(read_back<float, TestType>(t, s)[192] == 1.0f);
}

TEMPLATE_TEST_CASE("growth::fixed: limits from separate reserve calls hold together", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::mt19937_64 rng(41);
  ferry::staged_write_tensor<int, TestType, ferry::growth::fixed> t(8, 1024, s);
  ferry_test::model<int> m(8, 1024);
  t.reserve(8, 0);    // 8 writes...
  t.reserve(0, 896);  // ...of 896 elements in all (a slot of exactly 4 KiB): one apply holds both
  for (std::size_t r = 0; r < 8; ++r) {
    // Large writes at an odd start: each needs alignment padding beyond the 896 elements.
    const auto v = ferry_test::random_bits<int>(112, rng);
    t.stage_write(r, 1 + r, v);
    m.write(r, 1 + r, v);
  }
  REQUIRE(t.pending_elements() == 896);
  t.apply_write(s);
  REQUIRE(ferry_test::same_bits(read_back<int, TestType>(t, s), m.data));
}

TEMPLATE_TEST_CASE("an apply that throws before its launch keeps the staged writes", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<std::int32_t, TestType, ferry::staging::h2d_copy> t(2, 4, s);
  t.stage_write(0, 1, {5, 6});
  t.stage_write(0, 2, {7});  // an overlap, so the apply resolves it first
  const auto before = read_back<std::int32_t, TestType>(t, s);
  if constexpr (std::is_same_v<TestType, ferry::backend::host>) {
    ferry::stream<TestType> dead;
    ferry::stream<TestType> taken(std::move(dead));
    REQUIRE_THROWS_AS(t.apply_write(dead), ferry::error);  // a moved-from stream
  } else {
#if defined(__CUDACC__)
    ferry::stream<TestType> cap;
    REQUIRE(cudaStreamBeginCapture(cap.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    REQUIRE_THROWS_AS(t.apply_write(cap), ferry::error);  // a capturing stream
    cudaGraph_t g = nullptr;
    REQUIRE(cudaStreamEndCapture(cap.get(), &g) == cudaSuccess);
    if (g) cudaGraphDestroy(g);
#endif
  }
  REQUIRE(t.pending() == 2);
  REQUIRE(read_back<std::int32_t, TestType>(t, s) == before);  // target unchanged
  t.apply_write(s);
  REQUIRE(read_back<std::int32_t, TestType>(t, s) == std::vector<std::int32_t>{0, 5, 7, 0, 0, 0, 0, 0});
}

TEMPLATE_TEST_CASE("steady-state applies allocate nothing and never synchronize", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  auto run = [](auto tag) {
    using Tensor = decltype(tag);
    ferry::stream<TestType> s;
    Tensor t(64, 512, s);
    t.reserve(17, 17 * 512);
    std::mt19937_64 rng(3);
    auto v = random_bits<T>(512, rng);
    auto step = [&](int i) {
      for (int w = 0; w < 16; ++w)
        t.stage_write(static_cast<std::size_t>((i * 16 + w) % 64), static_cast<std::size_t>(w * 3),
                      std::span<const T>(v.data(), static_cast<std::size_t>(1 + (i * 37 + w * 11) % 450)));
      if (i % 5 == 0) t.stage_write(1, 0, std::span<const T>(v.data(), 50));  // an overlap now and then
      t.apply_write(s);
    };
    for (int i = 0; i < 8; ++i) {  // warm-up: the largest size seen
      step(i);
      s.synchronize();  // caller_fenced: a slot is rewritten two applies later, so each is waited for
    }
    const auto before = ferry::backend_stats_of<TestType>();
    for (int i = 0; i < 1000; ++i) {
      step(i);
      s.synchronize();  // the test's own synchronization (one per step), so slots come back
    }
    const auto after = ferry::backend_stats_of<TestType>();
    CHECK(after.pinned_allocations == before.pinned_allocations);
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.synchronizations - before.synchronizations == 1000);  // the test's, none of ferry's
  };
  SECTION("h2d_copy") { run(ferry::staged_write_tensor<T, TestType, ferry::staging::h2d_copy>(1, 1)); }
  SECTION("uva_direct") { run(ferry::staged_write_tensor<T, TestType, ferry::presets::block_table>(1, 1)); }
  SECTION("graph_safe uva target") {
    run(ferry::staged_write_tensor<T, TestType, ferry::presets::graph_safe, ferry::target::uva>(1, 1));
  }
  SECTION("caller_fenced") {
    run(ferry::staged_write_tensor<T, TestType, ferry::reuse::caller_fenced>(1, 1));
  }
}

TEMPLATE_TEST_CASE("span view scalars and moves", "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<std::int64_t, TestType, ferry::target::uva> t(3, 7, s);
  REQUIRE(t.rows() == 3);
  REQUIRE(t.cols() == 7);
  REQUIRE(t.span().size() == 21);
  auto v = t.view();
  REQUIRE(v.extent(0) == 3);
  REQUIRE(v.extent(1) == 7);
  REQUIRE(static_cast<void*>(v.data_handle()) == static_cast<void*>(t.span().data()));
  t.stage_write_elem(2, std::int32_t{-5});  // widening, same signedness: allowed
  t.stage_write(1, 3, std::vector<long long>{11, 12});  // long long and int64_t: the same element
  const auto span = t.span();
  ferry::staged_write_tensor<std::int64_t, TestType, ferry::target::uva> moved(std::move(t));
  REQUIRE(moved.span().data() == span.data());  // spans stay valid
  REQUIRE(moved.pending() == 2);
  REQUIRE(t.pending() == 0);  // NOLINT: moved-from is empty
  REQUIRE(t.size() == 0);     // NOLINT
  moved.apply_write(s);
  s.synchronize();
  // A UVA target is host memory: readable in place once the stream has passed the apply.
  const auto* host = moved.span().data();
  REQUIRE(host[14] == -5);
  REQUIRE(host[10] == 11);
  REQUIRE(host[11] == 12);
  REQUIRE(host[0] == 0);
}

TEMPLATE_TEST_CASE("slots must be at least one", "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  using Tensor = ferry::staged_write_tensor<std::int8_t, TestType>;
  REQUIRE_THROWS_AS(Tensor(2, 2, s, 0), std::invalid_argument);
}

TEMPLATE_TEST_CASE("a staging slot regrown mid-batch keeps everything staged in it", "[staged]",
                   STAGED_BACKENDS) {
  // The slot of a batch may be larger than the capacity wanted so far (a larger block reused, or
  // a block rounded up for a grown chunk table); growing its chunk table (resolving overlaps, or
  // reserve) must still keep every byte staged in it.
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  std::mt19937_64 rng(31);
  ferry::staged_write_tensor<T, TestType> t(2, 8192, s);
  model<T> ref(2, 8192);
  auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
    auto v = random_bits<T>(len, rng);
    t.stage_write(row, start, v);
    ref.write(row, start, v);
  };
  stage(0, 0, 4000);
  t.apply_write(s);
  for (std::size_t i = 0; i < 9; ++i) stage(1, 3 * i, 1);  // 16 descriptors: a 32 KiB slot
  stage(0, 0, 8000);                                       // fills that slot's contents
  SECTION("overlaps resolved into more chunks than the table holds") {
    for (std::size_t i = 0; i < 3; ++i) stage(0, 100 + 2500 * i, 1);
  }
  SECTION("reserve") { t.reserve(20, 0); }
  t.apply_write(s);
  const auto got = read_back<T, TestType>(t, s);
  INFO("first difference at " << ferry_test::first_difference(got, ref.data));
  REQUIRE(same_bits(got, ref.data));
}

namespace {
// Random runs shaped like the case above: a first batch, then batches that start with many tiny
// writes (a larger chunk table, a larger block), go on with large writes, then overlap them or
// call reserve, of random sizes. Checked against the host model after each run.
template <class B, class... Ps>
void regrow_run(std::uint64_t seed) {
  using T = std::int32_t;
  using Tensor = ferry::staged_write_tensor<T, B, Ps...>;
  constexpr bool fixed = std::is_same_v<typename Tensor::growth_policy, ferry::growth::fixed>;
  constexpr std::size_t rows = 3, cols = 8192;
  std::mt19937_64 rng(seed);
  auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  ferry::stream<B> s;
  for (int run = 0; run < 24; ++run) {
    Tensor t(rows, cols, s);
    if constexpr (fixed) t.reserve(64, 3 * cols);  // the capacity
    model<T> ref(rows, cols);
    auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
      auto v = random_bits<T>(len, rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    };
    auto stage_any = [&](std::size_t row, std::size_t len) {
      stage(row, pick(0, cols - len), len);
    };
    stage_any(0, pick(1, cols));
    t.apply_write(s);
    for (int batch = 0; batch < 3; ++batch) {
      for (std::size_t i = pick(0, 40); i > 0; --i) stage_any(pick(0, rows - 1), pick(1, 4));
      for (std::size_t i = pick(1, 2); i > 0; --i)
        stage_any(pick(0, rows - 1), pick(cols / 4, cols));
      if (pick(0, 1) == 0)
        for (std::size_t i = pick(1, 12); i > 0; --i) stage_any(pick(0, rows - 1), pick(1, 64));
      else
        t.reserve(pick(1, 64), pick(0, cols));
      t.apply_write(s);
    }
    const auto got = read_back<T, B>(t, s);
    INFO("run " << run << ", first difference at " << ferry_test::first_difference(got, ref.data));
    REQUIRE(same_bits(got, ref.data));
  }
}
}  // namespace

TEMPLATE_TEST_CASE("random writes and reserves between them match a host model", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using namespace ferry;
  SECTION("device target") { regrow_run<TestType>(41); }
  SECTION("uva target") { regrow_run<TestType, target::uva>(42); }
  SECTION("graph_safe") { regrow_run<TestType, presets::graph_safe>(43); }
  SECTION("graph_safe uva target") { regrow_run<TestType, presets::graph_safe, target::uva>(44); }
  SECTION("uva_or_device target (the mapping live: uva)") { regrow_run<TestType, target::uva_or_device>(42); }
}

TEMPLATE_TEST_CASE("destroying a caller_fenced tensor waits for its queued apply", "[staged]",
                   STAGED_BACKENDS) {
  // caller_fenced records no fences, yet the destructor must not hand the slot back to the
  // arena (nor free the target) before the queued apply has read it.
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  constexpr std::size_t rows = 4, cols = 3000;
  ferry::stream<B> s;
  using Tensor = ferry::staged_write_tensor<T, B, ferry::reuse::caller_fenced>;
  auto t = std::make_unique<Tensor>(rows, cols, s);
  model<T> ref(rows, cols);
  ferry::pinned_buffer<T, B> seen(rows * cols);  // the target as the stream sees it after the apply
  std::mt19937_64 rng(21);
  auto& arena = ferry::default_arena<B>();
  ferry_test::gate<B> g(s);
  const std::size_t before = arena.stats().bytes_in_use;
  for (std::size_t row = 0; row < rows; ++row) {
    auto v = random_bits<T>(cols, rng);
    t->stage_write(row, 0, v);
    ref.write(row, 0, v);
  }
  const std::size_t slot_bytes = arena.stats().bytes_in_use - before;
  t->apply_write(s);
  ferry::async_d2h(t->span(), seen.host(), s);
  REQUIRE_FALSE(ferry_test::destroy_behind_gate(t, g, slot_bytes));
  const std::vector<T> got(seen.host().begin(), seen.host().end());  // the destructor waited
  INFO("first difference at " << ferry_test::first_difference(got, ref.data));
  REQUIRE(same_bits(got, ref.data));
}

TEMPLATE_TEST_CASE("reserve keeps the caller_fenced rotation of slots", "[staged]",
                   STAGED_BACKENDS) {
  // With 3 slots the slot of apply k is rewritten first by apply k + 3: reserve's new slots come
  // before the slot the held apply still reads.
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType, ferry::reuse::caller_fenced> t(2, 64, s, 3);
  model<T> ref(2, 64);
  std::mt19937_64 rng(51);
  auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
    auto v = random_bits<T>(len, rng);
    t.stage_write(row, start, v);
    ref.write(row, start, v);
  };
  {
    ferry_test::gate<TestType> g(s);  // the caller holds every apply: within 3 applies
    stage(0, 0, 64);
    stage(1, 0, 64);
    t.apply_write(s);
    t.reserve(1, 16);  // within the first slot: it stays in the rotation, its apply pending
    stage(0, 10, 20);
    t.apply_write(s);
    stage(1, 30, 30);
    t.apply_write(s);
    g.open();
  }
  REQUIRE(read_back<T, TestType>(t, s) == ref.data);
}

TEMPLATE_TEST_CASE("size requests that cannot be represented throw and change nothing", "[staged]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  auto run = [](auto tag) {
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max(), e62 = std::size_t{1} << 62;
    static constexpr std::size_t huge[][2] = {
        {e62, 0}, {e62 / 2, 0}, {0, max}, {0, e62}, {max, max}, {e62 / 8, e62 / 8}};
    using Tensor = decltype(tag);
    constexpr bool fixed = std::is_same_v<typename Tensor::growth_policy, ferry::growth::fixed>;
    ferry::stream<TestType> s;
    Tensor t(4, 300, s);
    t.reserve(4, 600);
    model<T> ref(4, 300);
    std::mt19937_64 rng(61);
    auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
      auto v = random_bits<T>(len, rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    };
    stage(1, 5, 200);
    const auto stats = ferry::backend_stats_of<TestType>();
    for (const auto& r : huge) {
      INFO("reserve(" << r[0] << ", " << r[1] << ")");
      REQUIRE_THROWS_AS(t.reserve(r[0], r[1]), ferry::capacity_error);
    }
    CHECK(ferry::backend_stats_of<TestType>().pinned_allocations == stats.pinned_allocations);
    CHECK(ferry::backend_stats_of<TestType>().device_allocations == stats.device_allocations);
    REQUIRE(t.pending() == 1);
    REQUIRE(t.pending_elements() == 200);
    stage(2, 0, 300);
    stage(1, 100, 50);  // an overlap
    stage(3, 299, 1);
    if constexpr (fixed)  // the capacity is still 4 writes of 600 elements
      REQUIRE_THROWS_AS(t.stage_write(0, 0, std::vector<T>(51, 1)), ferry::capacity_error);
    t.apply_write(s);
    REQUIRE(read_back<T, TestType>(t, s) == ref.data);
  };
  SECTION("pow2") { run(ferry::staged_write_tensor<T, TestType>(1, 1)); }
  SECTION("fixed") { run(ferry::staged_write_tensor<T, TestType, ferry::growth::fixed>(1, 1)); }
  SECTION("caller_fenced uva target") {
    using namespace ferry;
    run(staged_write_tensor<T, TestType, reuse::caller_fenced, target::uva>(1, 1));
  }
}

namespace {
// An adopted target: its random contents are kept (not zero-filled), random staged writes go
// into the caller's memory (the host model starts from those contents), moves keep the address,
// and the memory outlives the tensor with the applied contents (never freed by it).
template <class B, class T, class... Ps>
void adopted_run(std::uint64_t seed) {
  using Tensor = ferry::staged_write_tensor<T, B, Ps...>;
  constexpr std::size_t rows = 13;
  const std::size_t cols = 8192 / sizeof(T) + 77;  // a full row: more than 8 KiB (2 chunks)
  ferry::stream<B> s;
  std::mt19937_64 rng(seed);
  model<T> ref(rows, cols);
  ref.data = random_bits<T>(rows * cols, rng);
  caller_memory<Tensor> mem(ref.data, s);
  constexpr bool uva = caller_memory<Tensor>::uva;
  const auto before = ferry::backend_stats_of<B>();
  auto t = std::make_unique<Tensor>(mem.adoptable(), rows, cols);
  const auto made = ferry::backend_stats_of<B>();
  // The tensor allocated no target of its own.
  if constexpr (uva)
    CHECK(made.pinned_allocations == before.pinned_allocations);
  else
    CHECK(made.device_allocations == before.device_allocations);
  REQUIRE(t->rows() == rows);
  REQUIRE(t->cols() == cols);
  REQUIRE(t->span().data() == mem.device().data());
  REQUIRE(t->span().size() == rows * cols);
  REQUIRE(t->view().data_handle() == mem.device().data());
  REQUIRE(same_bits(mem.read(s), ref.data));  // the caller's contents, not zeros
  auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  // caller_fenced: the caller makes sure an apply has read its slot before the slot is staged
  // into again (the next apply but one), here by draining the stream before each batch.
  auto stage_batch = [&](Tensor& x) {
    if constexpr (!Tensor::reuse_policy::ferry_fences) s.synchronize();
    for (std::size_t w = pick(1, 40); w > 0; --w) {
      const std::size_t row = pick(0, rows - 1), start = pick(0, cols);
      const auto v = random_bits<T>(pick(0, cols - start), rng);
      x.stage_write(row, start, v);
      ref.write(row, start, v);
    }
  };
  for (int batch = 0; batch < 8; ++batch) {
    stage_batch(*t);
    t->apply_write(s);
  }
  INFO("first difference at " << ferry_test::first_difference(mem.read(s), ref.data));
  REQUIRE(same_bits(mem.read(s), ref.data));
  // A move keeps the caller's address; the moved-to tensor writes into it.
  Tensor moved(std::move(*t));
  REQUIRE(moved.span().data() == mem.device().data());
  REQUIRE(t->size() == 0);  // NOLINT: moved-from is empty
  stage_batch(moved);
  moved.apply_write(s);
  // Assigning over the adopting tensor frees none of the caller's memory.
  moved = Tensor(rows, cols, s);
  REQUIRE(moved.span().data() != mem.device().data());
  REQUIRE(same_bits(mem.read(s), ref.data));
  // Back to the adopting tensor: applied and destroyed without waiting; the memory stays.
  *t = Tensor(mem.adoptable(), rows, cols);
  stage_batch(*t);
  t->apply_write(s);
  t.reset();
  REQUIRE(same_bits(mem.read(s), ref.data));
}
}  // namespace

TEMPLATE_TEST_CASE("an adopted target keeps the caller's contents and memory and takes the writes",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using namespace ferry;
  SECTION("device target by_target") { adopted_run<TestType, std::int32_t>(81); }
  SECTION("device target uva_direct float") {
    adopted_run<TestType, float, staging::uva_direct>(82);
  }
  SECTION("device target h2d_copy caller_fenced int64") {
    adopted_run<TestType, std::int64_t, staging::h2d_copy, reuse::caller_fenced>(83);
  }
  SECTION("uva target by_target") { adopted_run<TestType, std::int32_t, target::uva>(84); }
  SECTION("uva target h2d_copy uint16") {
    adopted_run<TestType, std::uint16_t, target::uva, staging::h2d_copy>(85);
  }
  SECTION("uva_or_device target adopting pinned memory (as target::uva)") {
    adopted_run<TestType, std::int32_t, target::uva_or_device>(84);
  }
}

TEMPLATE_TEST_CASE("adopting memory of the wrong size or a null address throws and keeps it",
                   "[staged]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  using Catch::Matchers::ContainsSubstring;
  auto run = [](auto tag) {
    using Tensor = decltype(tag);
    ferry::stream<B> s;
    std::mt19937_64 rng(91);
    const auto init = random_bits<T>(12, rng);
    caller_memory<Tensor> mem(init, s);
    const auto before = ferry::backend_stats_of<B>();
    REQUIRE_THROWS_WITH(Tensor(mem.adoptable(), 4, 4),
                        ContainsSubstring("ferry: ") && ContainsSubstring("holds 12 elements") &&
                            ContainsSubstring("4 x 4") && ContainsSubstring("needs 16"));
    REQUIRE_THROWS_AS(Tensor(mem.adoptable(), 3, 3), std::invalid_argument);
    REQUIRE_THROWS_AS(Tensor(mem.adoptable().first(11), 3, 4), std::invalid_argument);
    REQUIRE_THROWS_AS(Tensor(mem.adoptable(), 0, 12), std::invalid_argument);
    REQUIRE_THROWS_AS(Tensor(mem.adoptable(), std::size_t{1} << 62, 4), std::invalid_argument);
    const auto after = ferry::backend_stats_of<B>();
    CHECK(after.pinned_allocations == before.pinned_allocations);
    CHECK(after.device_allocations == before.device_allocations);
    REQUIRE(mem.read(s) == init);
    // A null address with elements: rejected; without elements, an empty target.
    if constexpr (!caller_memory<Tensor>::uva)
      REQUIRE_THROWS_WITH(Tensor(ferry::device_span<T>(nullptr, 12), 3, 4),
                          ContainsSubstring("ferry: ") && ContainsSubstring("12 elements") &&
                              ContainsSubstring("null address"));
    Tensor empty(decltype(mem.adoptable()){}, 0, 5);
    REQUIRE(empty.size() == 0);
    REQUIRE_THROWS_AS(empty.stage_write(0, 0, std::vector<T>{}), std::out_of_range);
  };
  SECTION("device target") { run(ferry::staged_write_tensor<T, B>(1, 1)); }
  SECTION("uva target") { run(ferry::staged_write_tensor<T, B, ferry::target::uva>(1, 1)); }
}

TEMPLATE_TEST_CASE("staging_memory: docs/staged_writes.md's example, one arena and one device resource for a "
                   "tensor and a fused writer", "[staged][resource]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  constexpr std::size_t rows = 4, cols = 8;
  ferry::stream<B> stream;
  ferry_test::counting_device_resource<B> engine_device_pool;
  {
    // [staging_memory]
    ferry::pinned_arena<B> arena;  // or arena(engine_pinned_pool): an engine's pinned_resource_ref
    ferry::staged_write_tensor<std::int32_t, B, ferry::staging::h2d_copy> table(rows, cols, stream, 2,
        {.arena = &arena, .device = engine_device_pool});  // a device_memory_resource
    ferry::fused_staged_writer<std::int32_t, B> writer(4, 2,
        {.arena = &arena, .device = engine_device_pool});
    // [/staging_memory]
    table.stage_write(1, 2, std::vector<std::int32_t>{5, 6});
    writer.apply(stream, table);
    std::vector<std::int32_t> expect(rows * cols, 0);
    expect[1 * cols + 2] = 5;
    expect[1 * cols + 3] = 6;
    CHECK(ferry::to_host(table.span(), stream) == expect);
    CHECK(engine_device_pool.allocations >= 1);  // the target, and the scratch of the apply
    CHECK(arena.stats().allocations >= 1);
  }
}

TEMPLATE_TEST_CASE("staging_memory: an engine's arena and device resource back a tensor's memory",
                   "[staged][resource]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  constexpr std::size_t rows = 16, cols = 3000;
  ferry::stream<B> s, s2;  // the streams the tensors apply on outlive them
  ferry_test::counting_device_resource<B> pool;
  ferry::pinned_arena<B> arena;
  const auto default_before = ferry::default_arena<B>().stats();
  const auto backend_before = ferry::backend_stats_of<B>();
  {
    ferry::staged_write_tensor<T, B, ferry::staging::h2d_copy> t(rows, cols, s, 3,
                                                                {.arena = &arena, .device = pool});
    REQUIRE(pool.allocations == 1);  // the target, on the constructor's stream
    REQUIRE(pool.live.count(t.span().data()) == 1);
    CHECK(pool.live.at(t.span().data()).bytes == rows * cols * sizeof(T));
    CHECK(pool.allocation_streams.back() == ferry::stream_ref<B>(s));
    t.reserve(40, 8000);  // pinned slots only: a resource's scratch comes at a copying apply
    CHECK(pool.calls == 1);
    CHECK(arena.stats().allocations >= 3);
    model<T> ref(rows, cols);
    REQUIRE(read_back<T, B>(t, s) == ref.data);  // zero-filled
    std::mt19937_64 rng(800);
    ferry::stream_ref<B> prev = s;
    for (int batch = 0; batch < 36; ++batch) {
      // Growing batches (a stream's scratch is outgrown and given back), on two
      // streams (the stream switch waits for the previous one: applies on two streams are not
      // ordered with each other).
      const std::size_t writes = 1 + rng() % (4 + batch);
      ferry_test::stage_random_writes(t, ref, rng, writes, batch < 18 ? 300 : 3000);
      const ferry::stream_ref<B> on = batch % 4 == 3 ? s2 : s;
      if (!(on == prev)) prev.synchronize();
      t.apply_write(on);
      prev = on;
      if (batch % 6 == 5) {
        on.synchronize();
        INFO("batch " << batch);
        REQUIRE(same_bits(read_back<T, B>(t, on), ref.data));
      }
    }
    prev.synchronize();
    // Behind a held stream: every apply takes a slot no other apply reads, and copies into the
    // stream's one scratch (no larger than before: nothing new from the resource).
    const auto before_held = pool.allocations;
    {
      ferry_test::gate<B> g(s);
      for (int i = 0; i < 6; ++i) {
        ferry_test::stage_random_writes(t, ref, rng, 4, 300);
        t.apply_write(s);
      }
      CHECK(pool.allocations == before_held);
      g.open();
    }
    REQUIRE(same_bits(read_back<T, B>(t, s), ref.data));
    CHECK(pool.allocations >= 3);  // the target and scratch
    CHECK(pool.deallocations >= 1);  // an outgrown scratch, given back at its apply
    CHECK(pool.given_back_on({s, s2}));
    CHECK(ferry::default_arena<B>().stats().allocations == default_before.allocations);
  }
  {
    // A UVA target is ferry's pinned memory; the scratch comes from the resource.
    using uva_tensor = ferry::staged_write_tensor<T, B, ferry::target::uva, ferry::staging::h2d_copy>;
    uva_tensor u(4, 100, s, 2, {.device = pool});
    const auto target_calls = pool.calls;
    model<T> ref(4, 100);
    std::mt19937_64 rng(801);
    ferry_test::stage_random_writes(u, ref, rng, 12, 100);
    u.apply_write(s);
    REQUIRE(same_bits(read_back<T, B>(u, s), ref.data));
    CHECK_FALSE(pool.owns(u.span().data(), 1));
    CHECK(pool.calls == target_calls + 1);  // the scratch
  }
  {
    // An adopted target stays the caller's (here a buffer from the same resource, with random
    // contents); the tensor's scratch comes from the resource.
    std::mt19937_64 rng(802);
    model<T> ref(8, 50);
    ref.data = random_bits<T>(8 * 50, rng);
    ferry::device_buffer<T, B> mine(ref.data.size(), s, pool);
    ferry::async_h2d(ref.data, mine.span(), s);
    const auto calls = pool.calls;
    ferry::staged_write_tensor<T, B, ferry::staging::h2d_copy> a(mine.span(), 8, 50, 2,
                                                                {.device = pool});
    CHECK(pool.calls == calls);  // nothing for the target
    ferry_test::stage_random_writes(a, ref, rng, 10, 50);
    a.apply_write(s);
    REQUIRE(same_bits(read_back<T, B>(a, s), ref.data));
    CHECK(a.span().data() == mine.data());
    CHECK(pool.calls == calls + 1);  // the scratch
  }
  s.synchronize();
  s2.synchronize();
  CHECK(pool.all_given_back());  // each block once, with its size and alignment
  CHECK(pool.given_back_on({s, s2}));
  // Every device byte came from the resource: ferry allocated none of its own.
  CHECK(ferry::backend_stats_of<B>().device_allocations == backend_before.device_allocations);
}

TEMPLATE_TEST_CASE("a device resource that runs out: out_of_memory, the writes kept for a retry",
                   "[staged][resource]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::uint16_t;
  using failure = typename ferry_test::counting_device_resource<B>::failure;
  using Tensor = ferry::staged_write_tensor<T, B, ferry::staging::h2d_copy>;
  constexpr std::size_t rows = 8, cols = 5000;
  ferry::stream<B> s;
  ferry_test::counting_device_resource<B> pool;
  const failure how = GENERATE(failure::null, failure::bad_alloc);
  {
    pool.fail = how;  // the target
    REQUIRE_THROWS_AS(Tensor(rows, cols, s, 2, {.device = pool}), ferry::out_of_memory);
    CHECK(pool.live.empty());
    pool.fail = failure::none;
  }
  {
    Tensor t(rows, cols, s, 2, {.device = pool});
    model<T> ref(rows, cols);
    std::mt19937_64 rng(900);
    ferry_test::stage_random_writes(t, ref, rng, 10, 100);
    t.apply_write(s);  // a slot and the stream's scratch
    REQUIRE(same_bits(read_back<T, B>(t, s), ref.data));
    const auto applied = ref.data;
    ferry_test::stage_random_writes(t, ref, rng, 40, 5000);  // more than that scratch holds
    const std::size_t writes = t.pending(), elements = t.pending_elements();
    pool.fail = how;
    const auto calls = pool.calls;
    REQUIRE_THROWS_AS(t.apply_write(s), ferry::out_of_memory);
    CHECK(pool.calls == calls + 1);
    CHECK(t.pending() == writes);
    CHECK(t.pending_elements() == elements);
    REQUIRE(same_bits(read_back<T, B>(t, s), applied));  // the target unchanged
    pool.fail = failure::none;
    t.apply_write(s);  // retried
    CHECK(t.pending() == 0);
    REQUIRE(same_bits(read_back<T, B>(t, s), ref.data));
  }
  s.synchronize();
  CHECK(pool.all_given_back());
}

#if defined(__CUDACC__)

namespace {
__global__ void read_target(ferry::staged_view<std::int32_t> v, std::int32_t* out) {
  const std::size_t cols = v.extent(1);
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < v.extent(0) * cols;
       i += gridDim.x * blockDim.x)
    out[i] = v(i / cols, i % cols);
}
}  // namespace

TEST_CASE("64-bit offsets: writing the last row of a target past 2^31 elements", "[staged][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  using B = ferry::backend::cuda;
  constexpr std::size_t rows = 2560, cols = 1000000;
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  if (free_bytes < rows * cols * sizeof(std::int32_t) + (1ull << 30)) SKIP("not enough device memory");
  ferry::stream<B> s;
  auto run = [&](auto tag) {
    using Tensor = decltype(tag);
    Tensor t(rows, cols, s);
    std::mt19937_64 rng(99);
    auto last = random_bits<std::int32_t>(cols, rng);
    auto piece = random_bits<std::int32_t>(1000, rng);
    t.stage_write(rows - 1, 0, last);
    t.stage_write(rows - 1, cols - 1000, piece);  // overlaps the end of the row: later wins
    t.stage_write(rows - 2, cols - 3, {1, 2, 3});
    t.apply_write(s);
    std::copy(piece.begin(), piece.end(), last.end() - 1000);
    ferry::pinned_buffer<std::int32_t, B> out(cols + 3);
    ferry::async_d2h(t.span().subspan((rows - 1) * cols - 3, cols + 3), out.host(), s);
    s.synchronize();
    REQUIRE(out.host()[0] == 1);
    REQUIRE(out.host()[2] == 3);
    REQUIRE(std::equal(last.begin(), last.end(), out.host().begin() + 3));
  };
  SECTION("uva_direct") { run(ferry::staged_write_tensor<std::int32_t, B, ferry::staging::uva_direct>(1, 1)); }
  SECTION("h2d_copy") { run(ferry::staged_write_tensor<std::int32_t, B, ferry::staging::h2d_copy>(1, 1)); }
}

TEST_CASE("graph pattern: eager applies then replays of a captured graph that reads the target",
          "[staged][cuda]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  using B = ferry::backend::cuda;
  using T = std::int32_t;
  constexpr std::size_t rows = 16, cols = 300;
  ferry::stream<B> s;
  ferry::staged_write_tensor<T, B, ferry::presets::graph_safe> t(rows, cols, s);
  t.reserve(32, 32 * cols);
  ferry::device_buffer<T, B> out(rows * cols);
  ferry::pinned_buffer<T, B> host(rows * cols);
  // Any ferry call on a capturing stream throws (apply_write is eager, not capture-safe).
  {
    ferry::stream<B> cap;
    REQUIRE(cudaStreamBeginCapture(cap.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    t.stage_write(0, 0, {1});
    REQUIRE_THROWS_AS(t.apply_write(cap), ferry::error);
    cudaGraph_t g = nullptr;
    REQUIRE(cudaStreamEndCapture(cap.get(), &g) == cudaSuccess);
    if (g) cudaGraphDestroy(g);
    t.clear();
  }
  // Capture once: a kernel that reads the target (its address never changes) into `out`.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  s.synchronize();
  REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  read_target<<<8, 128, 0, s.get()>>>(t.view(), out.data());
  REQUIRE(cudaStreamEndCapture(s.get(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  model<T> ref(rows, cols);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 6; ++step) {
    for (int w = 0; w < 20; ++w) {
      const std::size_t row = rng() % rows, start = rng() % cols, len = rng() % (cols - start + 1);
      auto v = random_bits<T>(len, rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    }
    t.apply_write(s);                                   // eager, before the replay
    REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);
    ferry::async_d2h(out.span(), host.host(), s);
    s.synchronize();
    INFO("step " << step);
    REQUIRE(std::equal(ref.data.begin(), ref.data.end(), host.host().begin()));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

#endif  // __CUDACC__

// A reserve whose sizes fit size_t but that no slot of the arena holds: the arena refuses it
// (ferry::capacity_error) before any host memory is sized from the request. The overlap resolver's
// host vectors were once reserved first, from the requested chunk count: std::bad_alloc, or an
// AddressSanitizer abort (fuzz: tests/fuzz/corpus/staged/regression-reserve-host-vectors).
TEMPLATE_TEST_CASE("reserve past what the arena holds throws capacity_error before sizing host memory, and changes nothing",
                   "[staged][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::uint8_t;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena(std::size_t{64} << 20);  // as the fuzz targets: 64 MiB at most
  std::mt19937_64 rng(0xf022);
  auto run = [&](auto& t) {
    model<T> ref(4, 16);
    t.reserve(2, 20);
    auto stage = [&](std::size_t row, std::size_t start, std::size_t len) {
      auto v = random_bits<T>(len, rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    };
    stage(1, 3, 10);
    const auto before = arena.stats();
    // 2^62 bytes of contents, 2^56, half of size_t: each fits size_t, none a 64 MiB arena.
    for (const std::size_t n : {std::size_t{1} << 62, std::size_t{1} << 56, std::size_t{1} << 40,
                                std::numeric_limits<std::size_t>::max() / 2}) {
      INFO("reserve(0, " << n << ")");
      REQUIRE_THROWS_AS(t.reserve(0, n), ferry::capacity_error);
      REQUIRE_THROWS_WITH(t.reserve(0, n), Catch::Matchers::StartsWith("ferry: "));
      REQUIRE_THROWS_AS(t.reserve(n / 16, 0), ferry::capacity_error);  // writes: descriptors
    }
    CHECK(arena.stats().bytes_reserved == before.bytes_reserved);
    CHECK(arena.stats().allocations == before.allocations);
    REQUIRE(t.pending() == 1);
    REQUIRE(t.pending_elements() == 10);
    stage(2, 0, 10);
    if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(t)>::growth_policy, ferry::growth::fixed>)
      REQUIRE_THROWS_AS(t.stage_write(0, 0, std::vector<T>(1, 1)), ferry::capacity_error);  // still 2 writes
    t.apply_write(s);
    REQUIRE(read_back<T, B>(t, s) == ref.data);
  };
  SECTION("growth::fixed") {
    ferry::staged_write_tensor<T, ferry::growth::fixed, B> t(4, 16, s, 2, {.arena = &arena});
    run(t);
  }
  SECTION("growth::pow2") {
    ferry::staged_write_tensor<T, B> t(4, 16, s, 2, {.arena = &arena});
    run(t);
  }
}

// A reserve whose slots fit the arena one by one but not all together: refused before any block
// is taken. It once took the slots that fit and then threw, leaving them held: a later small write
// needed a fresh slot and found the arena full (fuzz: tests/fuzz/corpus/staged/regression-reserve-fills-arena).
TEMPLATE_TEST_CASE("a reserve refused by the arena after the ring grew keeps the current slot, and the next apply lands",
                   "[staged][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::uint8_t;
  // The fuzz input staged/regression-reserve-moves-ring: the ring's storage grows (moving its
  // slots) before the arena refuses a block; the current slot must still be the one applied next.
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena(std::size_t{64} << 20);
  ferry::staged_write_tensor<T, B> t(1, 1, s, 2, {.arena = &arena});
  model<T> ref(1, 1);
  t.stage_write_elem(0, T{0x5e});
  ref.write(0, 0, std::vector<T>{0x5e});
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  for (int i = 0; i < 3; ++i) REQUIRE_THROWS_AS(t.reserve(huge, huge), ferry::capacity_error);
  CHECK(t.pending() == 1);
  try {
    t.reserve(262143, 1);
  } catch (const ferry::capacity_error&) {
    // refused or not, the staged write and the current slot are kept
  }
  CHECK(t.pending() == 1);
  t.apply_write(s);
  REQUIRE(read_back<T, B>(t, s) == ref.data);
  t.stage_write_elem(0, T{0x21});
  ref.write(0, 0, std::vector<T>{0x21});
  t.apply_write(s);
  REQUIRE(read_back<T, B>(t, s) == ref.data);
}

TEMPLATE_TEST_CASE("reserve of more slots than the arena's cap holds takes no block, and later writes go on",
                   "[staged][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena(std::size_t{64} << 20);  // two 32 MiB blocks at most
  ferry::staged_write_tensor<T, B> t(8, 64, s, 3, {.arena = &arena});
  model<T> ref(8, 64);
  std::mt19937_64 rng(0xf024);
  const auto before = arena.stats();
  // 20 MB of contents: a 32 MiB block per slot, three slots.
  REQUIRE_THROWS_AS(t.reserve(1, 5'000'000), ferry::capacity_error);
  REQUIRE_THROWS_WITH(t.reserve(1, 5'000'000), Catch::Matchers::StartsWith("ferry: "));
  CHECK(arena.stats().bytes_in_use == before.bytes_in_use);
  CHECK(arena.stats().bytes_reserved == before.bytes_reserved);
  for (int batch = 0; batch < 4; ++batch) {
    for (std::size_t row = 0; row < 8; row += 3) {
      auto v = random_bits<T>(17, rng);
      t.stage_write(row, static_cast<std::size_t>(batch) * 5, v);
      ref.write(row, static_cast<std::size_t>(batch) * 5, v);
    }
    t.apply_write(s);
    REQUIRE(read_back<T, B>(t, s) == ref.data);
  }
  t.reserve(4, 1'000'000);  // what fits is still taken
}

TEMPLATE_TEST_CASE("target::uva_or_device places its target where the device's mapping allows it", "[staged][mapping]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using namespace ferry;
  stream<B> s;
  SECTION("mapping live: pinned memory, as target::uva (the host reads the target in place)") {
    staged_write_tensor<std::int32_t, B, target::uva_or_device> t(2, 8, s);
    REQUIRE(t.target_memory() == memory_kind::uva);
    t.stage_write(1, 2, {7, 8, 9});
    t.apply_write(s);
    s.synchronize();
    CHECK(t.span().data()[8 + 3] == 8);
  }
  SECTION("mapping dead (the probe's test hook): device memory, every apply copied") {
    ferry_test::dead_mapping<B> dead;
    staged_write_tensor<std::int32_t, B, target::uva_or_device> t(2, 8, s);
    CHECK(t.target_memory() == memory_kind::device);
    staged_write_tensor<std::int32_t, B, target::uva_or_device> u(2, 8);  // without a stream
    CHECK(u.target_memory() == memory_kind::device);
    t.stage_write(1, 2, {7, 8, 9});
    t.apply_write(s);
    CHECK(ferry_test::read_back<std::int32_t, B>(t, s) ==
          std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 8, 9, 0, 0, 0});
  }
}

TEMPLATE_TEST_CASE("where the mapping is dead, staged writes into device memory match a host model and read nothing "
                   "in place; a target of pinned memory throws at construction",
                   "[staged][mapping]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using namespace ferry;
  using Catch::Matchers::ContainsSubstring;
  ferry_test::dead_mapping<B> dead;
  SECTION("uva_or_device by_target") { model_run<B, std::int32_t, target::uva_or_device, staging::by_target>(901); }
  SECTION("uva_or_device uva_direct") { model_run<B, float, target::uva_or_device, staging::uva_direct>(902); }
  SECTION("uva_or_device h2d_copy") { model_run<B, std::uint16_t, target::uva_or_device, staging::h2d_copy>(903); }
  SECTION("uva_or_device threshold 256") {
    model_run<B, std::int64_t, target::uva_or_device, staging::threshold<256>>(904);
  }
  SECTION("device target uva_direct") { model_run<B, std::int8_t, target::device, staging::uva_direct>(905); }
  SECTION("device target by_target") { model_run<B, double, target::device, staging::by_target>(906); }
  SECTION("reserves between writes") { regrow_run<B, target::uva_or_device>(907); }
  SECTION("reserves between writes, graph_safe") { regrow_run<B, presets::graph_safe, target::device>(908); }
  SECTION("an adopted device target") { adopted_run<B, std::int32_t, target::device, staging::uva_direct>(909); }
  SECTION("target::uva and adopted pinned memory: ferry::error naming the cause and the way out") {
    stream<B> s;
    const std::string what = "ferry: staged_write_tensor (a target of pinned memory): kernels on device ";
    CHECK_THROWS_WITH((staged_write_tensor<std::int32_t, B, target::uva>(2, 8, s)),
                      Catch::Matchers::StartsWith(what) && ContainsSubstring("target::uva_or_device"));
    pinned_buffer<std::int32_t, B> mine(16, copies_only);
    CHECK_THROWS_WITH((staged_write_tensor<std::int32_t, B, target::uva_or_device>(mine.host(), 2, 8)),
                      Catch::Matchers::StartsWith(what) && ContainsSubstring("not live"));
  }
}

TEMPLATE_TEST_CASE("where the mapping is dead, contents are never read in place: uva_direct copies them", "[staged][mapping]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using namespace ferry;
  stream<B> s;
  const std::vector<std::int32_t> row(2048, 5);  // 8 KiB: past the inline apply on CUDA
  // The enqueues of one apply: in place, the apply alone; copied, the copy and the apply.
  auto enqueues_of_apply = [&] {
    staged_write_tensor<std::int32_t, B, target::device, staging::uva_direct> t(2, 2048, s);
    t.stage_write(1, 0, row);
    const auto before = ferry_test::enqueued<B>(s);
    t.apply_write(s);
    const auto n = ferry_test::enqueued<B>(s) - before;
    const auto got = ferry_test::read_back<std::int32_t, B>(t, s);
    CHECK(std::equal(row.begin(), row.end(), got.begin() + 2048));
    return n;
  };
  const auto live = enqueues_of_apply();
  ferry_test::dead_mapping<B> dead;
  CHECK(enqueues_of_apply() >= live + 1);  // CUDA: and an event where the kernel's counter was
}
