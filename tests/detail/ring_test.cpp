// Tests of include/ferry/detail/ring.hpp, ferry-internal: the FIFO the reuse core's clients keep
// their used blocks and slots in.
#include <ferry/detail/ring.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <deque>
#include <random>
#include <utility>

using ferry::detail::ring;

namespace {

// Counts its move assignments: the work take() does.
struct counted {
  int value = 0;
  static inline std::size_t moves = 0;
  counted() = default;
  explicit counted(int v) : value(v) {}
  counted(const counted&) = default;
  counted(counted&& o) noexcept : value(o.value) {}
  counted& operator=(const counted&) = default;
  counted& operator=(counted&& o) noexcept {
    value = o.value;
    ++moves;
    return *this;
  }
};

}  // namespace

TEST_CASE("ring keeps FIFO order through pushes, pops, inserts and takes anywhere, across wrap-around",
          "[ring]") {
  std::mt19937 gen(11);
  ring<int> r;
  std::deque<int> ref;
  int next = 1;
  for (int step = 0; step < 20000; ++step) {
    const unsigned op = gen() % 10;
    if (op < 4 || ref.empty()) {
      r.push_back(next);
      ref.push_back(next++);
    } else if (op < 6) {
      REQUIRE(r.pop_front() == ref.front());
      ref.pop_front();
    } else if (op < 8) {
      const std::size_t i = gen() % ref.size();
      REQUIRE(r.take(i) == ref[i]);
      ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const std::size_t i = gen() % (ref.size() + 1);  // size() inserts at the back
      r.insert(i, next);
      ref.insert(ref.begin() + static_cast<std::ptrdiff_t>(i), next++);
    }
    REQUIRE(r.capacity() >= r.size());
    REQUIRE(r.size() == ref.size());
    if (!ref.empty()) {
      REQUIRE(r.front() == ref.front());
      REQUIRE(r.back() == ref.back());
    }
    if (step % 97 == 0)
      for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(r[i] == ref[i]);
  }
}

TEST_CASE("ring::clear empties it and keeps its storage", "[ring]") {
  ring<int> r;
  for (int i = 0; i < 20; ++i) r.push_back(i);
  (void)r.pop_front();  // the head away from 0
  const std::size_t cap = r.capacity();
  r.clear();
  CHECK(r.empty());
  CHECK(r.capacity() == cap);
  for (int i = 0; i < 3; ++i) r.push_back(100 + i);
  REQUIRE(r.size() == 3);
  CHECK(r.front() == 100);
  CHECK(r.back() == 102);
}

TEST_CASE("ring::reserve keeps the elements and their order", "[ring]") {
  ring<int> r;
  for (int i = 0; i < 6; ++i) r.push_back(i);
  (void)r.pop_front();
  (void)r.pop_front();
  for (int i = 6; i < 10; ++i) r.push_back(i);  // wraps around the first 8 places
  r.reserve(100);
  REQUIRE(r.size() == 8);
  for (std::size_t i = 0; i < r.size(); ++i) CHECK(r[i] == static_cast<int>(i) + 2);
}

TEST_CASE("ring::take moves the shorter side: one of the newest or oldest of a long ring moves a few",
          "[ring]") {
  ring<counted> r;
  for (int i = 0; i < 300; ++i) r.push_back(counted(i));
  counted::moves = 0;
  CHECK(r.take(r.size() - 2).value == 298);  // the second newest: the newest moves up
  CHECK(counted::moves <= 2);
  counted::moves = 0;
  CHECK(r.take(1).value == 1);  // the second oldest: the oldest moves back
  CHECK(counted::moves <= 2);
  REQUIRE(r.size() == 298);
  CHECK(r.front().value == 0);
  CHECK(r[1].value == 2);
  CHECK(r.back().value == 299);
  CHECK(r[r.size() - 2].value == 297);
}

TEST_CASE("a moved-from ring is empty, without storage, and usable again", "[ring]") {
  ring<int> a;
  for (int i = 0; i < 12; ++i) a.push_back(i);  // grown to 16, head at 0
  for (int i = 0; i < 5; ++i) (void)a.pop_front();

  ring<int> b(std::move(a));
  REQUIRE(b.size() == 7);
  CHECK(b.front() == 5);
  CHECK(b.back() == 11);
  CHECK(a.empty());  // the state a move leaves is what this tests
  CHECK(a.capacity() == 0);
  // Before the move emptied it, the source kept its size and mask over no storage: this wrote
  // past the end of an empty vector.
  for (int i = 0; i < 20; ++i) a.push_back(100 + i);
  REQUIRE(a.size() == 20);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == 100 + static_cast<int>(i));

  ring<int> c;
  c.push_back(-1);
  c = std::move(b);
  REQUIRE(c.size() == 7);
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i] == 5 + static_cast<int>(i));
  CHECK(b.empty());
  b.push_back(7);
  CHECK(b.front() == 7);
}
