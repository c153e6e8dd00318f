// User-defined policies in every component of their family, on both backends: a x1.5 geometric
// GrowthPolicy (uva_pool, staged_write_tensor, fused_staged_writer) and ReusePolicies of the
// user's own, fenced and unfenced (uva_pool, cpu_gpu_buffer, staged_write_tensor). A user type
// means what its members say, whatever ferry's own tags are.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif

#include <staged/support.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

using ferry_test::model;
using ferry_test::random_bits;
using ferry_test::read_back;
using ferry_test::same_bits;

// Named (not anonymous) namespace: the components' kernel-launching members instantiated for
// these types keep external linkage, as their hidden visibility requires.
namespace user_policies {

/// Capacity grows by half of itself (or to what is needed, when that is more). Records the calls,
/// which all come from the test's thread.
struct geometric {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    ++calls;
    if (current > 0) ++calls_with_current;
    return std::max(needed, current + current / 2);
  }
  static void reset() { calls = calls_with_current = 0; }
  static inline std::size_t calls = 0;
  static inline std::size_t calls_with_current = 0;
};
static_assert(ferry::growth_policy<geometric>);

/// ferry fences, under a name of the user's.
struct user_fenced {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = true;
};
/// The caller fences, under a name of the user's.
struct user_unfenced {
  using ferry_policy_family = ferry::families::reuse;
  static constexpr bool ferry_fences = false;
};
static_assert(ferry::reuse_policy<user_fenced> && ferry::reuse_policy<user_unfenced>);

}  // namespace user_policies

using user_policies::geometric;
using user_policies::user_fenced;
using user_policies::user_unfenced;

TEMPLATE_TEST_CASE("uva_pool grows slots by a user growth policy", "[policies]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::uva_pool<std::int32_t, geometric, TestType> pool(100, 1);
  std::size_t expected = 100;
  for (std::size_t n : {101, 150, 151, 400}) {
    if (n > expected) expected = std::max(n, expected + expected / 2);  // 150, 225, 400
    const auto v = ferry_test::random_values<std::int32_t>(n, n);
    const auto view = pool.copy_to_uva(v, s);
    CHECK(pool.capacity(0) == expected);
    CHECK(std::vector<std::int32_t>(view.data(), view.data() + view.size()) == v);
    s.synchronize();
  }
  CHECK(pool.stats().grows == 3);
}

TEMPLATE_TEST_CASE("staged_write_tensor grows its staging by a user growth policy", "[policies]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  geometric::reset();
  ferry::stream<TestType> s;
  ferry::staged_write_tensor<T, TestType, geometric> t(8, 3000, s);
  model<T> ref(8, 3000);
  std::mt19937_64 rng(7);
  for (std::size_t step = 0; step < 6; ++step) {  // batches of growing size: staging grows
    for (std::size_t row = 0; row < 8; ++row) {
      const std::size_t len = 1 + rng() % (500 * (step + 1));
      const std::size_t start = rng() % (3000 - len + 1);
      const auto v = random_bits<T>(len, rng);
      t.stage_write(row, start, v);
      ref.write(row, start, v);
    }
    t.apply_write(s);
  }
  CHECK(same_bits(read_back<T, TestType>(t, s), ref.data));
  CHECK(geometric::calls > 0);               // the policy sized the staging
  CHECK(geometric::calls_with_current > 0);  // and saw the capacity it grew from
}

TEMPLATE_TEST_CASE("staged_write_tensor under a user growth policy stops growing with its batches",
                   "[policies]", STAGED_BACKENDS) {
  // Every apply hands its slot on, so the next batch starts without a current slot: that must not
  // count as a need to grow (a policy that grows from the current capacity would grow each step).
  FERRY_REQUIRE_BACKEND(TestType);
  using T = std::int32_t;
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::staged_write_tensor<T, TestType, geometric> t(8, 512, s, 2,
                                                       ferry::staging_memory<TestType>{.arena = &arena});
  model<T> ref(8, 512);
  std::mt19937_64 rng(5);
  auto step = [&] {
    for (std::size_t row = 0; row < 8; ++row) {
      const auto v = random_bits<T>(100, rng);
      t.stage_write(row, 7, v);
      ref.write(row, 7, v);
    }
    t.apply_write(s);
    s.synchronize();  // every slot free again: the ring never needs a third
  };
  for (int i = 0; i < 4; ++i) step();
  geometric::reset();
  const auto before = arena.stats();
  for (int i = 0; i < 40; ++i) step();
  CHECK(geometric::calls == 0);
  CHECK(arena.stats().allocations == before.allocations);
  CHECK(arena.stats().bytes_reserved == before.bytes_reserved);
  CHECK(same_bits(read_back<T, TestType>(t, s), ref.data));
}

TEMPLATE_TEST_CASE("fused_staged_writer grows its table and scratch by a user growth policy",
                   "[policies]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using T = float;
  using namespace ferry;
  stream<TestType> s;
  staged_write_tensor<T, TestType> a(4, 2000, s);                     // read in place
  staged_write_tensor<T, TestType, staging::h2d_copy> c(4, 2000, s);  // copied: scratch
  model<T> ra(4, 2000), rc(4, 2000);
  geometric::reset();  // from here on only the writer grows by it (the tensors grow by pow2)
  fused_staged_writer<T, TestType, geometric> writer(2);
  std::mt19937_64 rng(11);
  for (std::size_t step = 0; step < 5; ++step) {
    for (std::size_t w = 0; w < 4 * (step + 1); ++w) {
      const std::size_t row = rng() % 4, len = 1 + rng() % 400, start = rng() % (2000 - len + 1);
      auto v = random_bits<T>(len, rng);
      a.stage_write(row, start, v);
      ra.write(row, start, v);
      v = random_bits<T>(len, rng);
      c.stage_write(row, start, v);
      rc.write(row, start, v);
    }
    writer.apply(s, a, c);
  }
  CHECK(same_bits(read_back<T, TestType>(a, s), ra.data));
  CHECK(same_bits(read_back<T, TestType>(c, s), rc.data));
  CHECK(geometric::calls > 0);
  CHECK(geometric::calls_with_current > 0);
}

namespace {

// Three calls on a pool of two slots while the stream is held: the third call comes back to the
// first call's slot while its reader waits. Returns whether the pool inserted a slot instead of
// rewriting it, and checks what every reader saw.
template <class Reuse, class B>
bool pool_inserts_for_held_reader() {
  ferry::stream<B> s;
  ferry::uva_pool<std::int32_t, Reuse, B> pool(64, 2, 3);
  std::vector<std::int32_t> seen[3], sent[3];
  const std::int32_t* data[3];
  {
    ferry_test::gate<B> g(s);
    for (std::size_t k = 0; k < 3; ++k) {
      sent[k] = ferry_test::random_values<std::int32_t>(64, 100 + k);
      const auto v = pool.copy_to_uva(sent[k], s);
      data[k] = v.data();
      ferry::enqueue_host(s, [v, out = &seen[k]] { out->assign(v.data(), v.data() + v.size()); });
    }
  }
  s.synchronize();
  const bool inserted = pool.slots() == 3;
  if (inserted) {  // every reader saw its own values
    CHECK(std::set<const std::int32_t*>{data[0], data[1], data[2]}.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) CHECK(seen[k] == sent[k]);
  } else {  // the first slot was rewritten under its reader: the caller's fence was missing
    CHECK(data[2] == data[0]);
    CHECK(seen[0] == sent[2]);
  }
  return inserted;
}

// copy_to_device while the stream is held, then host() rewritten at once: returns the values the
// device received.
template <class Reuse, class B>
std::vector<double> buffer_sends_after_rewrite(const std::vector<double>& first,
                                               const std::vector<double>& second) {
  ferry::stream<B> s;
  ferry::cpu_gpu_buffer<double, Reuse, B> buf(first.size());
  std::copy(first.begin(), first.end(), buf.host().begin());
  {
    ferry_test::gate<B> g(s);
    buf.copy_to_device(first.size(), s);
    std::copy(second.begin(), second.end(), buf.host().begin());
  }
  s.synchronize();
  std::fill(buf.host().begin(), buf.host().end(), 0.0);
  buf.copy_to_host(first.size(), s).synchronize();
  return {buf.host().begin(), buf.host().end()};
}

// Three applies through two staging slots while the stream is held (writes too large for the
// inline path, so every apply reads its slot): returns whether the target equals the model, i.e.
// the third batch did not rewrite the first one's slot under it.
template <class Reuse, class B>
bool staged_applies_survive_held_stream() {
  using T = std::int32_t;
  ferry::stream<B> s;
  ferry::staged_write_tensor<T, B, Reuse> t(3, 2048, s, 2);
  model<T> ref(3, 2048);
  std::mt19937_64 rng(23);
  {
    ferry_test::gate<B> g(s);
    for (std::size_t row = 0; row < 3; ++row) {  // one row per apply: apply 0's row is its own
      const auto v = random_bits<T>(2048, rng);
      t.stage_write(row, 0, v);
      ref.write(row, 0, v);
      t.apply_write(s);
    }
  }
  return same_bits(read_back<T, B>(t, s), ref.data);
}

}  // namespace

TEMPLATE_TEST_CASE("uva_pool reads ferry_fences from a user reuse policy", "[policies]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  CHECK(pool_inserts_for_held_reader<ferry::reuse::event_fenced, TestType>());
  CHECK(pool_inserts_for_held_reader<user_fenced, TestType>());
  CHECK_FALSE(pool_inserts_for_held_reader<ferry::reuse::caller_fenced, TestType>());
  CHECK_FALSE(pool_inserts_for_held_reader<user_unfenced, TestType>());
}

TEMPLATE_TEST_CASE("cpu_gpu_buffer reads ferry_fences from a user reuse policy", "[policies]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  const auto first = ferry_test::random_values<double>(777, 1);
  const auto second = ferry_test::random_values<double>(777, 2);
  // Fenced: host() was snapshotted, the device gets the values of the call.
  CHECK(buffer_sends_after_rewrite<ferry::reuse::event_fenced, TestType>(first, second) == first);
  CHECK(buffer_sends_after_rewrite<user_fenced, TestType>(first, second) == first);
  // Unfenced: host() is copied in place when the stream gets there.
  CHECK(buffer_sends_after_rewrite<ferry::reuse::caller_fenced, TestType>(first, second) == second);
  CHECK(buffer_sends_after_rewrite<user_unfenced, TestType>(first, second) == second);
}

TEMPLATE_TEST_CASE("staged_write_tensor reads ferry_fences from a user reuse policy", "[policies]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  CHECK(staged_applies_survive_held_stream<ferry::reuse::event_fenced, TestType>());
  CHECK(staged_applies_survive_held_stream<user_fenced, TestType>());
  CHECK_FALSE(staged_applies_survive_held_stream<ferry::reuse::caller_fenced, TestType>());
  CHECK_FALSE(staged_applies_survive_held_stream<user_unfenced, TestType>());
}
