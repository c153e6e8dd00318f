// Tests for include/ferry/transfer/async_h2d_packed.hpp: typed (contiguous parts) and byte
// (mixed element types, each part aligned to max(alignof, 16)) packed uploads against a reference,
// one staging block and one copy, and every bad input enqueues nothing.
#include "transfer_support.hpp"

#include <catch2/catch_template_test_macros.hpp>

#include <cstring>
#include <list>
#include <ranges>
#include <span>
#include <vector>

using ferry_test::read_back;

TEMPLATE_TEST_CASE("typed packed upload: parts are contiguous and match their sources",
                   "[transfer][packed]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto a = ferry_test::random_values<std::int32_t>(64, 1);
  const auto b = ferry_test::random_values<std::int32_t>(1000, 2);
  const auto c = ferry_test::random_values<std::int32_t>(3, 3);
  std::list<std::int32_t> lb(b.begin(), b.end());
  ferry::pinned_buffer<std::int32_t, TestType> pc(c.size());
  std::copy(c.begin(), c.end(), pc.host().begin());
  const std::size_t total = a.size() + b.size() + c.size() + 2;
  ferry::device_buffer<std::int32_t, TestType> out(total + 5);
  const auto before = ferry_test::random_values<std::int32_t>(total + 5, 4);
  ferry_test::fill_device(out.span(), before, s);

  const auto queued = ferry_test::enqueued<TestType>(s);
  const auto st = arena.stats();
  const std::vector<std::int32_t> empty;
  auto [pa, pb, pe, pc2, pf] = ferry::async_h2d_packed(
      out.span(), s, arena, a, lb, empty, pc.host(),
      std::views::iota(std::int32_t{40}, std::int32_t{42}));
  if constexpr (std::is_same_v<TestType, ferry::backend::host>)
    CHECK(ferry_test::enqueued<TestType>(s) == queued + 1);  // one copy
  CHECK(arena.stats().reuses + arena.stats().allocations == st.reuses + st.allocations + 1);
  CHECK(pa.data() == out.data());
  CHECK(pb.data() == pa.data() + a.size());
  CHECK(pe.data() == pb.data() + b.size());
  CHECK(pe.size() == 0);
  CHECK(pc2.data() == pe.data());
  CHECK(pf.data() == pc2.data() + c.size());
  CHECK(pf.size() == 2);
  std::vector<std::int32_t> expected = before;
  std::copy(a.begin(), a.end(), expected.begin());
  std::copy(b.begin(), b.end(), expected.begin() + 64);
  std::copy(c.begin(), c.end(), expected.begin() + 1064);
  expected[1067] = 40;
  expected[1068] = 41;
  CHECK(read_back(out.span(), s) == expected);
  CHECK(arena.stats().bytes_in_use == 0);
}

TEMPLATE_TEST_CASE("byte packed upload: mixed element types each aligned to 16 bytes",
                   "[transfer][packed]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto i8 = ferry_test::random_values<std::int8_t>(3, 11);
  const auto f64 = ferry_test::random_values<double>(5, 12);
  const auto i16 = ferry_test::random_values<std::int16_t>(7, 13);
  const auto f32 = ferry_test::random_values<float>(1, 14);
  const auto u64 = ferry_test::random_values<std::uint64_t>(2, 15);
  std::list<std::int16_t> l16(i16.begin(), i16.end());
  ferry::device_buffer<std::uint8_t, TestType> storage(512);
  const ferry::device_span<std::byte> out(reinterpret_cast<std::byte*>(storage.data()), 512);
  const auto queued = ferry_test::enqueued<TestType>(s);
  auto [p8, p64, p16, p32, pu] =
      ferry::async_h2d_packed(out, s, arena, i8, std::span(f64), l16, f32, u64);
  if constexpr (std::is_same_v<TestType, ferry::backend::host>)
    CHECK(ferry_test::enqueued<TestType>(s) == queued + 1);
  static_assert(std::is_same_v<decltype(p64), ferry::device_span<double>>);
  static_assert(std::is_same_v<decltype(p16), ferry::device_span<std::int16_t>>);
  auto off = [&](const void* p) {
    return static_cast<std::size_t>(static_cast<const std::byte*>(p) - out.data());
  };
  CHECK(off(p8.data()) == 0);
  CHECK(off(p64.data()) == 16);   // 3 bytes, then the next 16-byte boundary
  CHECK(off(p16.data()) == 64);   // 16 + 40 = 56 → 64
  CHECK(off(p32.data()) == 80);   // 64 + 14 = 78 → 80
  CHECK(off(pu.data()) == 96);    // 80 + 4 = 84 → 96
  for (const void* p : {(const void*)p8.data(), (const void*)p64.data(), (const void*)p16.data(),
                        (const void*)p32.data(), (const void*)pu.data()})
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 16 == 0);
  CHECK(p8.size() == 3);
  CHECK(p64.size() == 5);
  CHECK(p16.size() == 7);
  CHECK(p32.size() == 1);
  CHECK(pu.size() == 2);
  CHECK(read_back(p8, s) == i8);
  CHECK(read_back(p64, s) == f64);
  CHECK(read_back(p16, s) == i16);
  CHECK(read_back(p32, s) == f32);
  CHECK(read_back(pu, s) == u64);
  const auto bytes = read_back(storage.span().first(112), s);
  CHECK(bytes[3] == 0);  // padding is zeroed
  CHECK(bytes[15] == 0);
}

TEMPLATE_TEST_CASE("packed upload of 8 arrays of 256 B to 4 KiB", "[transfer][packed]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::vector<std::vector<std::int32_t>> v;
  for (int k = 0; k < 8; ++k) v.push_back(ferry_test::random_values<std::int32_t>(64u << (k % 5), 20 + k));
  std::size_t total = 0;
  for (auto& x : v) total += x.size();
  ferry::device_buffer<std::int32_t, TestType> out(total);
  auto parts = ferry::async_h2d_packed<ferry::pin::stage>(out.span(), s, v[0], v[1], v[2], v[3],
                                                          v[4], v[5], v[6], v[7]);
  std::vector<std::int32_t> expected;
  for (auto& x : v) expected.insert(expected.end(), x.begin(), x.end());
  CHECK(read_back(out.span(), s) == expected);
  CHECK(read_back(std::get<7>(parts), s) == v[7]);
}

TEMPLATE_TEST_CASE("packed upload without room throws out_of_range and enqueues nothing",
                   "[transfer][packed]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto a = ferry_test::random_values<std::int32_t>(10, 31);
  const auto b = ferry_test::random_values<std::int32_t>(10, 32);
  const auto c = ferry_test::random_values<std::int8_t>(1, 33);
  ferry::device_buffer<std::int32_t, TestType> typed(19);
  const auto typed_before = ferry_test::random_values<std::int32_t>(19, 34);
  ferry_test::fill_device(typed.span(), typed_before, s);
  ferry::device_buffer<std::uint8_t, TestType> raw_storage(96);
  const ferry::device_span<std::byte> raw(reinterpret_cast<std::byte*>(raw_storage.data()), 96);
  const auto raw_before = ferry_test::random_values<std::uint8_t>(96, 35);
  ferry_test::fill_device(raw_storage.span(), raw_before, s);

  const auto st = arena.stats();
  const auto queued = ferry_test::enqueued<TestType>(s);
  CHECK_THROWS_AS(ferry::async_h2d_packed(typed.span(), s, arena, a, b), std::out_of_range);
  // 40 bytes, then 16-aligned 80 .. 120 > 96, although 81 bytes of data would fit.
  CHECK_THROWS_AS(ferry::async_h2d_packed(raw, s, arena, a, b, c), std::out_of_range);
  CHECK_THROWS_AS(ferry::async_h2d_packed(raw.subspan(8), s, arena, c), std::invalid_argument);
  CHECK(ferry_test::same_stats(arena.stats(), st));
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  CHECK(read_back(typed.span(), s) == typed_before);
  CHECK(read_back(raw_storage.span(), s) == raw_before);

  // Only empty sources: nothing enqueued, empty spans.
  const std::vector<std::int32_t> none;
  const auto q2 = ferry_test::enqueued<TestType>(s);
  auto [e1, e2] = ferry::async_h2d_packed(typed.span(), s, arena, none, none);
  CHECK(e1.size() == 0);
  CHECK(e2.size() == 0);
  CHECK(ferry_test::enqueued<TestType>(s) == q2);
  CHECK(ferry_test::same_stats(arena.stats(), st));
}

TEMPLATE_TEST_CASE("packed parts whose bytes overflow size_t are out_of_range and enqueue nothing",
                   "[transfer][packed]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::device_buffer<std::uint64_t, TestType> typed(4);
  const auto before = ferry_test::random_values<std::uint64_t>(4, 41);
  ferry_test::fill_device(typed.span(), before, s);
  const ferry::device_span<std::byte> raw(reinterpret_cast<std::byte*>(typed.data()), 32);
  const auto small = ferry_test::random_values<std::uint64_t>(2, 42);
  const std::size_t wraps_to_0 = std::size_t{1} << 61;  // 2^64 bytes
  const auto stats = arena.stats();
  const auto queued = ferry_test::enqueued<TestType>(s);
  for (std::size_t n : {wraps_to_0, ferry_test::wrapping_count}) {
    CAPTURE(n);
    const auto huge = ferry_test::huge_source(n);
    CHECK_THROWS_AS(ferry::async_h2d_packed(typed.span(), s, arena, huge), std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d_packed(typed.span(), s, arena, small, huge),
                    std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d_packed(raw, s, arena, huge), std::out_of_range);
    CHECK_THROWS_AS(ferry::async_h2d_packed(raw, s, arena, small, huge, small), std::out_of_range);
  }
  CHECK(ferry_test::same_stats(arena.stats(), stats));
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  CHECK(read_back(typed.span(), s) == before);
}

TEMPLATE_TEST_CASE("packed upload of a source is consumed on return", "[transfer][packed]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  auto a = ferry_test::random_values<std::uint16_t>(100, 41);
  auto b = ferry_test::random_values<std::uint16_t>(50, 42);
  const auto a0 = a, b0 = b;
  ferry::device_buffer<std::uint16_t, TestType> out(150);
  {
    ferry_test::gate<TestType> g(s);
    (void)ferry::async_h2d_packed(out.span(), s, a, b);
    std::fill(a.begin(), a.end(), 0);
    std::fill(b.begin(), b.end(), 0);
  }
  auto expected = a0;
  expected.insert(expected.end(), b0.begin(), b0.end());
  CHECK(read_back(out.span(), s) == expected);
}
