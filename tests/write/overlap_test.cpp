// Tests of include/ferry/write/overlap.hpp, ferry-internal: the overlap tracker suspects every
// batch whose writes overlap, and tells apart the rows of a target larger than its table while
// they find entries (a false alarm costs a sort and a descriptor per small write, not data).
#include <ferry/write/overlap.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

using ferry::detail::overlap_tracker;
using ferry::detail::overlap_tracker_rows;

namespace {
struct noted {
  std::uint64_t row, lo, hi;
};

bool overlaps(const std::vector<noted>& ws) {
  for (std::size_t i = 0; i < ws.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (ws[i].row == ws[j].row && ws[i].lo < ws[j].hi && ws[j].lo < ws[i].hi) return true;
  return false;
}
}  // namespace

TEST_CASE("overlap_tracker: every batch with an overlap is suspected, on targets below, at and above its table's rows") {
  std::mt19937_64 rng(11);
  for (const std::size_t rows : {std::size_t{5}, overlap_tracker_rows, 2 * overlap_tracker_rows + 3, std::size_t{1} << 20}) {
    overlap_tracker t(rows, 64);
    std::size_t suspected = 0, with_overlap = 0;
    for (int batch = 0; batch < 400; ++batch) {
      t.reset();
      std::vector<noted> ws;
      const int n = 1 + static_cast<int>(rng() % 64);
      // rows drawn from a few, so that rows sharing a home and rows met twice are both common
      const std::uint64_t base = rng() % rows;
      for (int k = 0; k < n; ++k) {
        const std::uint64_t row = (base + (rng() % 6) * overlap_tracker_rows + rng() % 3) % rows;
        const std::uint64_t lo = rng() % 60, hi = lo + 1 + rng() % 4;
        ws.push_back({row, lo, hi});
        t.note(row, lo, hi);
      }
      const bool truth = overlaps(ws);
      with_overlap += truth;
      suspected += t.suspect();
      if (truth) REQUIRE(t.suspect());
    }
    CHECK(with_overlap > 50);  // the draw makes overlaps, and batches without
    CHECK(with_overlap < 400);
    CHECK(suspected < 400);  // a row's hull is conservative (a write inside it is suspected), not every batch
  }
}

TEST_CASE("overlap_tracker: distinct rows of a target larger than its table, rows a table's size apart among them, are not suspected") {
  const std::size_t rows = 2 * overlap_tracker_rows;  // an engine's block table of 8,192 rows
  overlap_tracker t(rows, 512);
  // rows r and r + 4096, one entry under row mod 4096 (this tracker's table before): told apart
  for (std::uint64_t r = 0; r < 64; ++r) {
    t.note(r, 0, 64);
    t.note(r + overlap_tracker_rows, 0, 64);
  }
  CHECK_FALSE(t.suspect());
  t.note(7 + overlap_tracker_rows, 63, 65);  // and an overlap among them is seen
  CHECK(t.suspect());

  // a step's 736 writes to distinct rows drawn from the 8,192, appends after the prompt's blocks
  std::vector<std::uint64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(3);
  for (int step = 0; step < 200; ++step) {
    std::shuffle(all.begin(), all.end(), rng);
    t.reset();
    for (std::size_t k = 0; k < 736; ++k) t.note(all[k], 0, 64);
    for (std::size_t k = 0; k < 100; ++k) t.note(all[k], 64, 65);
    REQUIRE_FALSE(t.suspect());
  }
}

TEST_CASE("overlap_tracker: a batch forgets the last one's writes, and resolved() keeps the hulls") {
  overlap_tracker t(3 * overlap_tracker_rows, 16);
  t.note(5, 0, 8);
  t.note(5 + overlap_tracker_rows, 0, 8);
  t.reset();
  t.note(5 + overlap_tracker_rows, 4, 6);
  t.note(5, 2, 3);
  CHECK_FALSE(t.suspect());
  t.note(5, 2, 3);
  CHECK(t.suspect());
  t.resolved();
  CHECK_FALSE(t.suspect());
  t.note(5 + overlap_tracker_rows, 5, 7);  // still within the hull of this batch
  CHECK(t.suspect());
}
