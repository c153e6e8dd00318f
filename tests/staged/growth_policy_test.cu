// Staged writes under a user GrowthPolicy whose answers are huge but legal (at least what is
// needed): every answer becomes bytes through checked arithmetic, the call that needed it throws
// ferry::capacity_error with the staged writes kept, and the tensor goes on at the capacity it had.
#include <staged/support.hpp>

#include <ferry/ferry.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

// A named namespace: a policy type of internal linkage would make nvcc warn about the visibility
// attribute of the apply.
namespace staged_growth_test {

// Powers of two up to 4 KiB; above, 2^63 (no pinned block holds it: a capacity_error, not a wrap).
struct huge_above_4k {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t /*current*/) {
    if (needed > 4096) return std::max<std::size_t>(needed, std::size_t{1} << 63);
    return ferry::growth::pow2::capacity_for(needed);
  }
};

}  // namespace staged_growth_test

using staged_growth_test::huge_above_4k;

TEMPLATE_TEST_CASE("staged_write_tensor under a growth policy's huge answer throws capacity_error and goes on",
                   "[staged][growth]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  using B = TestType;
  ferry::stream<B> s;
  constexpr std::size_t rows = 8, cols = 4096;
  ferry::staged_write_tensor<T, huge_above_4k, B> t(rows, cols, s);
  ferry_test::model<T> ref(rows, cols);
  std::mt19937_64 rng(0x5eed);
  auto batch = [&] {
    ferry_test::stage_random_writes(t, ref, rng, 4, 16);
    t.apply_write(s);
    CHECK(ferry_test::read_back<T, B>(t, ferry::stream_ref<B>(s)) == ref.data);
  };
  batch();
  ferry_test::stage_random_writes(t, ref, rng, 4, 16);
  const std::size_t writes = t.pending(), elements = t.pending_elements();
  // 8000 bytes of contents: the slot the policy grows to is 2^63 bytes.
  const auto big = ferry_test::random_bits<T>(2000, rng);
  CHECK_THROWS_AS(t.stage_write(1, 0, big), ferry::capacity_error);
  CHECK(t.pending() == writes);
  CHECK(t.pending_elements() == elements);
  t.apply_write(s);
  CHECK(ferry_test::read_back<T, B>(t, ferry::stream_ref<B>(s)) == ref.data);
  // The failed growth left nothing behind: the next batches take slots of the old capacity.
  for (int k = 0; k < 3; ++k) batch();
  CHECK_THROWS_AS(t.reserve(4, 2000), ferry::capacity_error);
  for (int k = 0; k < 3; ++k) batch();
  s.synchronize();
}

TEMPLATE_TEST_CASE("fused_staged_writer under a growth policy's huge answer throws capacity_error and goes on",
                   "[staged][growth]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  using B = TestType;
  ferry::stream<B> s;
  constexpr std::size_t rows = 8, cols = 4096;
  ferry::staged_write_tensor<T, B> a(rows, cols, s), b(rows, cols, s);
  ferry::fused_staged_writer<T, huge_above_4k, B> w(2);
  ferry_test::model<T> ra(rows, cols), rb(rows, cols);
  std::mt19937_64 rng(0xf05e);
  auto check_targets = [&] {
    CHECK(ferry_test::read_back<T, B>(a, ferry::stream_ref<B>(s)) == ra.data);
    CHECK(ferry_test::read_back<T, B>(b, ferry::stream_ref<B>(s)) == rb.data);
  };
  auto fused_batch = [&] {
    ferry_test::stage_random_writes(a, ra, rng, 4, 16);
    ferry_test::stage_random_writes(b, rb, rng, 4, 16);
    w.apply(s, a, b);
    check_targets();
  };
  fused_batch();
  // 300 one-element writes per tensor: the fused chunk table passes 4 KiB, and the policy answers
  // 2^63 bytes for it.
  ferry_test::stage_random_writes(a, ra, rng, 300, 1);
  ferry_test::stage_random_writes(b, rb, rng, 300, 1);
  const std::size_t pa = a.pending(), pb = b.pending();
  CHECK_THROWS_AS(w.apply(s, a, b), ferry::capacity_error);
  CHECK(a.pending() == pa);
  CHECK(b.pending() == pb);
  a.apply_write(s);
  b.apply_write(s);
  check_targets();
  // The failed growth left nothing behind: the writer goes on at the capacity it had.
  for (int k = 0; k < 3; ++k) fused_batch();
  s.synchronize();
}
