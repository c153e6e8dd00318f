// Tests of include/ferry/write/recorder.hpp, ferry-internal: the write plan's placement rule and
// its one capacity formula, which every staging slot, fused apply and step write target is sized by.
#include <ferry/write/recorder.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using ferry::detail::chunk_desc;
using ferry::detail::write_recorder;

TEST_CASE("placement: a write of congruence_min_bytes or more starts congruent to its destination mod 16, a smaller one at the next element") {
  using ferry::detail::congruence_min_bytes;
  using ferry::detail::write_vector_bytes;
  for (std::uintptr_t at = 0; at < 64; ++at) {
    for (std::uintptr_t dst = 0; dst < 32; dst += 4) {
      const std::size_t big = write_recorder::placement_pad(at, dst, congruence_min_bytes, 4);
      CHECK(big < write_vector_bytes);
      CHECK((at + big) % write_vector_bytes == dst % write_vector_bytes);
      const std::size_t small = write_recorder::placement_pad(at, dst, congruence_min_bytes - 4, 4);
      CHECK(small < 4);
      CHECK((at + small) % 4 == 0);
    }
  }
}

TEST_CASE("capacity: 2 writes + ceil(elements / per chunk) descriptors, elements and 16 bytes a write of contents") {
  write_recorder::room r{};
  const std::size_t per = ferry::detail::write_chunk_bytes / 4;
  REQUIRE(write_recorder::capacity(3, 2 * per + 1, 4, r));
  CHECK(r.descs == 2 * 3 + 3);
  CHECK(r.bytes == (2 * per + 1) * 4 + 3 * ferry::detail::write_vector_bytes);
  REQUIRE(write_recorder::capacity(0, 0, 8, r));
  CHECK((r.descs == 0 && r.bytes == 0));
  constexpr std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  r = {7, 7};
  CHECK_FALSE(write_recorder::capacity(huge + 1, 0, 4, r));  // 2 * writes
  CHECK_FALSE(write_recorder::capacity(1, huge, 4, r));      // elements * elem
  CHECK((r.descs == 7 && r.bytes == 7));                     // unchanged
}

// The formula bounds what a batch takes: random writes into a rows x cols target, each recorded
// as the owners do (bounds, split into chunks, contents placed by the rule), then resolved
// later-wins; the table before and after resolving, and the contents with their padding, stay
// within capacity(writes, elements).
TEST_CASE("capacity bounds the recorded and the resolved table of random overlapping writes") {
  std::mt19937_64 rng(7);
  constexpr std::size_t elem = 2;
  constexpr std::size_t per = ferry::detail::elements_per_chunk<std::uint16_t>;
  for (int round = 0; round < 300; ++round) {
    const std::size_t rows = 1 + rng() % 4, cols = 1 + rng() % (3 * per);
    write_recorder rec(rows, cols);
    std::vector<chunk_desc> table;
    std::size_t writes = 0, elements = 0, used = 0;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int w = 0; w < n; ++w) {
      const std::size_t row = rng() % rows, start = rng() % (cols + 1);
      const std::size_t len = rng() % 4 == 0 ? rng() % (cols - start + 1) : std::min<std::size_t>(rng() % 8, cols - start);
      const std::uint64_t dst = rec.destination(row, start, len);
      if (len == 0) continue;
      const std::size_t off = used + write_recorder::placement_pad(used, dst * elem, len * elem, elem);
      const std::size_t at = table.size();
      table.resize(at + write_recorder::chunks_of(len, per));
      write_recorder::split(table.data() + at, dst, off / elem, len, per);
      rec.note(row, start, len);
      used = off + len * elem;
      ++writes;
      elements += len;
    }
    write_recorder::room r{};
    REQUIRE(write_recorder::capacity(writes, elements, elem, r));
    CHECK(table.size() <= r.descs);
    CHECK(used <= r.bytes);
    rec.reserve(r.descs, "recorder_test");
    if (const auto* out = rec.resolve(table.data(), table.size(), per)) {
      CHECK(out->size() <= r.descs);
      for (std::size_t i = 1; i < out->size(); ++i) CHECK((*out)[i - 1].dst + (*out)[i - 1].count <= (*out)[i].dst);
    }
  }
}
