// Tests of include/ferry/memory/slot_ring.hpp, ferry-internal: the one stamped-slot ring (the UVA
// pool and step_batch sit on it) and the warm-reuse rule the pinned arena shares. Readers are held
// with ferry_test::gate, so that "still in use" is a fact of the stream, not a timing.
#include <ferry/memory/slot_ring.hpp>

#include <ferry/ferry.hpp>
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// The steps of acquire, one by one, for the rule tests below (clients call acquire, commit and
// release only).
template <class B, ferry::reuse_policy Reuse, class Slot>
struct ferry::detail::slot_ring_access : ferry::detail::slot_ring<B, Reuse, Slot> {
  using base = slot_ring<B, Reuse, Slot>;
  using base::base;
  using base::choose;
  using base::free;
  using base::full;
  using base::insert;
  using base::next;
  using base::reserve_for_one;
  using base::stamp;
  using base::take;
  using base::when_full;
  void reserve_stamp(std::size_t i) { this->slots_[i].stamps.reserve_one(); }
  void close() noexcept { this->open_ = false; }      // a closed commit
  void rotate_to(std::size_t i) noexcept { this->cur_ = i; }  // a cancel back to slot i
  template <class GiveBack>
  void release(GiveBack&& give_back) noexcept {
    (void)base::release(0, std::forward<GiveBack>(give_back));
  }
};

using ferry::detail::after_use;
using ferry::detail::ring_order;
using ferry::detail::take_warmest;

namespace {

template <class B, class Reuse = ferry::reuse::event_fenced>
using ring_of = ferry::detail::slot_ring_access<B, Reuse, int>;
// The ring as its clients see it: acquire, commit, release.
template <class B, class Reuse>
using client_ring = ferry::detail::slot_ring<B, Reuse, int>;

// A ring of `n` slots named 0..n-1 (the payload is the slot's name, so that inserts can be told
// apart from index shifts).
template <class Ring>
Ring make_ring(ring_order order, std::size_t n, std::size_t max) {
  Ring r(order, max);
  r.reserve(n);
  for (std::size_t i = 0; i < n; ++i) r.push_back(static_cast<int>(i));
  return r;
}

// Uses slot `i` as a component does: takes it, then stamps it behind the work on `s` so far.
template <class Ring, class B>
void use(Ring& r, std::size_t i, ferry::stream_ref<B> s) {
  r.take(i);
  r.reserve_stamp(i);
  (void)r.stamp(i, s);
}

// The rule written out plainly: the newest of the `warm` newest that passed, else the oldest.
std::size_t reference_warmest(const std::vector<bool>& passed, std::size_t warm) {
  const std::size_t n = passed.size();
  for (std::size_t k = n; k-- > 0 && n - k <= warm;)
    if (passed[k]) return k;
  for (std::size_t k = 0; k < n; ++k)
    if (passed[k]) return k;
  return n;
}

}  // namespace

TEST_CASE("take_warmest: the newest of the warm ones that passed, else the oldest", "[memory][slot_ring]") {
  // Oldest first: 0 is the one used longest ago.
  CHECK(take_warmest(5, [](std::size_t) { return true; }) == 4);
  CHECK(take_warmest(5, [](std::size_t k) { return k != 4; }) == 3);
  CHECK(take_warmest(5, [](std::size_t k) { return k < 2; }) == 0);  // no warm one passed: the oldest
  CHECK(take_warmest(5, [](std::size_t k) { return k == 1; }) == 1);
  CHECK(take_warmest(5, [](std::size_t) { return false; }) == 5);
  CHECK(take_warmest(0, [](std::size_t) { return true; }) == 0);
  CHECK(take_warmest(5, [](std::size_t) { return true; }, 0) == 0);  // warm 0: rotation
  // Each thing is asked about at most once.
  std::vector<int> asked(6, 0);
  CHECK(take_warmest(6, [&](std::size_t k) { return ++asked[k], false; }) == 6);
  for (const int a : asked) CHECK(a == 1);
  // Against the plain rule on random answers.
  std::mt19937_64 rng(7);
  for (int t = 0; t < 2000; ++t) {
    const std::size_t n = rng() % 10;
    const std::size_t warm = rng() % 5;
    std::vector<bool> passed(n);
    for (std::size_t k = 0; k < n; ++k) passed[k] = rng() % 3 == 0;
    INFO("n " << n << " warm " << warm);
    CHECK(take_warmest(n, [&](std::size_t k) { return static_cast<bool>(passed[k]); }, warm) ==
          reference_warmest(passed, warm));
  }
}

TEMPLATE_TEST_CASE("slot_ring (warmest) takes fresh slots first, then the warmest free one", "[memory][slot_ring]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s, r;
  auto ring = make_ring<ring_of<B>>(ring_order::warmest, 4, 8);
  CHECK(ring.current() == ring.npos);
  // Fresh slots first, in order.
  for (std::size_t k = 0; k < 4; ++k) {
    const std::size_t i = ring.choose();
    REQUIRE(i == k);
    use(ring, i, ferry::stream_ref<B>(s));
  }
  s.synchronize();
  // Every slot free: the newest used before the current one (2), not the oldest (0).
  CHECK(ring.choose() == 2);
  // Hold slot 2's readers on r: the newest free warm slot is then 1.
  {
    ferry_test::gate<B> g(r);
    ring.reserve_stamp(2);
    (void)ring.stamp(2, ferry::stream_ref<B>(r));
    CHECK(ring.choose() == 1);
    // With 1 held too, no warm slot is free: the oldest free one (0).
    ring.reserve_stamp(1);
    (void)ring.stamp(1, ferry::stream_ref<B>(r));
    CHECK(ring.choose() == 0);
    CHECK(ring.next() == 0);  // the one used longest ago
    use(ring, 0, ferry::stream_ref<B>(s));
    s.synchronize();
    // Used order now 1, 2, 3, 0 (current): 3 is the warm free one.
    CHECK(ring.choose() == 3);
    use(ring, 3, ferry::stream_ref<B>(s));
    s.synchronize();
    // 0 is warm and free; 1 and 2 stay held.
    CHECK(ring.choose() == 0);
  }
  r.synchronize();
  CHECK(ring.free(2));
  // A closed current slot (its use stamped, no view into it) is offered too: the warmest of all.
  const std::size_t cur = ring.current();
  s.synchronize();
  CHECK(ring.choose() != cur);
  ring.close();
  CHECK(ring.choose() == cur);
  // The current slot is left out by identity, not by its place in the use order: a slot taken and
  // then given up (rotate_to the one before) is the newest by use and offered first.
  const std::size_t before = cur;
  use(ring, ring.choose(), ferry::stream_ref<B>(s));  // takes `cur` again (the warmest)
  const std::size_t taken = ring.choose();
  REQUIRE(taken != before);
  ring.take(taken);
  ring.rotate_to(before);  // as step_batch::cancel: the current goes back to the step before
  s.synchronize();
  CHECK(ring.choose() == taken);
  ring.release([](int&) {});
}

TEMPLATE_TEST_CASE("a moved-from slot_ring is a new one; the ring moved to keeps its order", "[memory][slot_ring]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  auto a = make_ring<ring_of<B>>(ring_order::warmest, 4, 8);
  for (std::size_t k = 0; k < 3; ++k) use(a, a.choose(), ferry::stream_ref<B>(s));
  s.synchronize();

  ring_of<B> b(std::move(a));
  REQUIRE(b.size() == 4);
  CHECK(b.current() == 2);
  CHECK(b.choose() == 3);  // the fresh one first, as before the move
  CHECK(a.empty());        // the state a move leaves is what this tests
  CHECK(a.current() == a.npos);
  CHECK(a.choose() == a.npos);
  // Used again from empty, it takes fresh slots in order, as a new ring does.
  for (int k = 0; k < 3; ++k) a.push_back(10 + k);
  for (std::size_t k = 0; k < 3; ++k) {
    REQUIRE(a.choose() == k);
    use(a, k, ferry::stream_ref<B>(s));
  }
  CHECK(a[2] == 12);

  s.synchronize();
  a.release([](int&) {});
  a = std::move(b);
  REQUIRE(a.size() == 4);
  CHECK(a.current() == 2);
  CHECK(a.choose() == 3);
  CHECK(b.empty());
  CHECK(b.current() == b.npos);
  a.release([](int&) {});
}

TEMPLATE_TEST_CASE("slot_ring never offers a slot whose stamps have not all passed", "[memory][slot_ring]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  const auto order = GENERATE(ring_order::rotation, ring_order::warmest);
  ferry::stream<B> s;
  std::vector<ferry::stream<B>> readers(4);
  auto ring = make_ring<ring_of<B>>(order, 4, 4);
  std::mt19937_64 rng(order == ring_order::rotation ? 11 : 12);
  std::vector<bool> held(4, false);
  std::vector<std::unique_ptr<ferry_test::gate<B>>> gates(4);
  for (int step = 0; step < 200; ++step) {
    // Hold or let go of each slot's reader stream at random.
    for (std::size_t q = 0; q < 4; ++q) {
      if (rng() % 4 != 0) continue;
      if (gates[q]) {
        gates[q].reset();  // opens
        readers[q].synchronize();
      } else {
        gates[q] = std::make_unique<ferry_test::gate<B>>(readers[q]);
      }
    }
    const std::size_t i = ring.choose();
    if (i == ring.npos) {
      // Nothing offered: every slot but the current is held by a closed gate.
      for (std::size_t k = 0; k < ring.size(); ++k)
        if (k != ring.current()) CHECK_FALSE(ring.stamps(k).points().empty());
      for (auto& g : gates) g.reset();
      for (auto& q : readers) q.synchronize();
      continue;
    }
    INFO("step " << step << " slot " << i);
    // What it offers has passed: no stamp left, and any held reader of it has run.
    CHECK(ring.stamps(i).points().empty());
    CHECK(i != ring.current());
    use(ring, i, ferry::stream_ref<B>(s));
    // Its readers this step: one stream, held or not.
    const std::size_t q = rng() % 4;
    ring.reserve_stamp(i);
    (void)ring.stamp(i, ferry::stream_ref<B>(readers[q]));
    s.synchronize();
  }
  for (auto& g : gates) g.reset();
  for (auto& q : readers) q.synchronize();
  ring.release([](int&) {});
}

TEMPLATE_TEST_CASE("slot_ring inserts a slot before the busy one, up to max_slots", "[memory][slot_ring]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  auto ring = make_ring<ring_of<B>>(ring_order::rotation, 2, 4);
  ferry_test::gate<B> g(s);  // every stamp on s is held
  use(ring, ring.choose(), ferry::stream_ref<B>(s));
  use(ring, ring.choose(), ferry::stream_ref<B>(s));
  CHECK(ring.current() == 1);
  int name = 10;
  while (!ring.full()) {
    REQUIRE(ring.choose() == ring.npos);  // every other slot is held
    const std::size_t cur = ring.current();
    ring.reserve_for_one();
    const std::size_t at = ring.insert(name);
    CHECK(at == cur + 1);      // after the current slot: before the busy one that comes next
    CHECK(ring[at] == name);
    CHECK(ring.stamps(at).points().empty());
    use(ring, at, ferry::stream_ref<B>(s));
    ++name;
  }
  CHECK(ring.size() == 4);
  // Ring order: 0, 1, then the inserted ones after 1; the busy slot 0 keeps its place and comes next.
  CHECK(ring[0] == 0);
  CHECK(ring[1] == 1);
  CHECK(ring[2] == 10);
  CHECK(ring[3] == 11);
  CHECK(ring.next() == 0);
  CHECK(ring.choose() == ring.npos);
  g.open();
  s.synchronize();
  CHECK(ring.choose() == 0);
  // Warmest order: an inserted slot counts as used now (it is taken at once).
  auto warm = make_ring<ring_of<B>>(ring_order::warmest, 2, 3);
  {
    ferry_test::gate<B> h(s);
    use(warm, warm.choose(), ferry::stream_ref<B>(s));
    use(warm, warm.choose(), ferry::stream_ref<B>(s));
    REQUIRE(warm.choose() == warm.npos);
    warm.reserve_for_one();
    const std::size_t at = warm.insert(7);
    CHECK(at == 2);
    use(warm, at, ferry::stream_ref<B>(s));
    CHECK(warm.full());
    CHECK(warm.next() == 0);  // the one used longest ago
  }
  s.synchronize();
  CHECK(warm.choose() == 1);  // the warm one: used just before the inserted slot
  ring.release([](int&) {});
  warm.release([](int&) {});
}

TEMPLATE_TEST_CASE("slot_ring when full: event_fenced waits, throw_when_full throws and changes nothing",
                   "[memory][slot_ring]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s;
  SECTION("event_fenced: back-pressure waits for the slot, once, counted") {
    auto ring = make_ring<ring_of<B>>(ring_order::rotation, 2, 2);
    std::atomic<bool> read{false};
    ferry_test::gate<B> g(s);
    use(ring, ring.choose(), ferry::stream_ref<B>(s));  // slot 0
    ferry::enqueue_host(ferry::stream_ref<B>(s), [&] { read.store(true); });  // slot 0's reader
    (void)ring.stamp(0, ferry::stream_ref<B>(s));
    use(ring, ring.choose(), ferry::stream_ref<B>(s));  // slot 1
    REQUIRE(ring.choose() == ring.npos);
    REQUIRE(ring.full());
    const auto waits = ferry::detail::ring_waits;
    const auto syncs = ferry::backend_stats_of<B>().synchronizations;
    bool blocked = false;
    CHECK(ferry_test::returns_after_open(g, [&] { blocked = ring.when_full(ring.next(), [] { return std::string("x"); }); }));
    CHECK(blocked);
    CHECK(read.load());  // the reader ran before the wait returned
    CHECK(ferry::detail::ring_waits == waits + 1);
    CHECK(ferry::backend_stats_of<B>().synchronizations > syncs);
    CHECK(ring.stamps(0).points().empty());
    // Nothing held: the wait does not block, and is not counted.
    s.synchronize();
    CHECK_FALSE(ring.when_full(1, [] { return std::string("x"); }));
    CHECK(ferry::detail::ring_waits == waits + 1);
    ring.release([](int&) {});
  }
  SECTION("throw_when_full: capacity_error with the ring's description, stamps kept") {
    using Catch::Matchers::ContainsSubstring;
    auto ring = make_ring<ring_of<B, ferry::reuse::throw_when_full>>(ring_order::rotation, 2, 2);
    {
      ferry_test::gate<B> g(s);
      use(ring, ring.choose(), ferry::stream_ref<B>(s));
      use(ring, ring.choose(), ferry::stream_ref<B>(s));
      const auto held = ring.stamps(0).points();
      REQUIRE(held.size() == 1);
      const auto waits = ferry::detail::ring_waits;
      const std::string point = "stream point (line " + std::to_string(held[0].line) + ", seq " +
                                std::to_string(held[0].seq) + ") has passed";
      REQUIRE_THROWS_MATCHES(
          ring.when_full(ring.next(),
                         [&] { return "ferry: test ring: " + ring.held_text(ring.next(), [](auto&, auto, auto) {}); }),
          ferry::capacity_error, Catch::Matchers::MessageMatches(ContainsSubstring("ferry: test ring: slot 0 is held until " + point)));
      CHECK(ferry::detail::ring_waits == waits);
      CHECK(ring.stamps(0).points().size() == 1);  // nothing changed
      CHECK(ring.choose() == ring.npos);
    }
    s.synchronize();
    CHECK(ring.choose() == 0);
    ring.release([](int&) {});
  }
}

TEMPLATE_TEST_CASE("slot_ring under caller_fenced stamps nothing and rotates", "[memory][slot_ring]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  const auto order = GENERATE(ring_order::rotation, ring_order::warmest);
  ferry::stream<B> s;
  auto ring = make_ring<ring_of<B, ferry::reuse::caller_fenced>>(order, 3, 3);
  ferry_test::gate<B> g(s);  // readers held: the caller's promise, not checked
  const auto enqueues = ferry::backend_stats_of<B>().enqueues;
  std::vector<std::size_t> seen;
  for (int k = 0; k < 7; ++k) {
    const std::size_t i = ring.choose();
    seen.push_back(i);
    ring.take(i);
    CHECK(ring.stamp(i, ferry::stream_ref<B>(s)) == 0);
    CHECK(ring.stamps(i).points().empty());
    CHECK(ring.free(i));
  }
  CHECK(seen == std::vector<std::size_t>{0, 1, 2, 0, 1, 2, 0});
  CHECK(ferry::backend_stats_of<B>().enqueues == enqueues);  // not one mark made
  CHECK(ring.choose(1) == ring.npos);  // one candidate only: the next in rotation
  g.open();
  s.synchronize();
  ring.release([](int&) {});
}

TEMPLATE_TEST_CASE("slot_ring release waits for every slot's readers before giving it back", "[memory][slot_ring]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  ferry::stream<B> s, r;
  auto ring = make_ring<ring_of<B>>(ring_order::rotation, 3, 3);
  std::atomic<int> reads{0};
  ferry_test::gate<B> g(r);
  use(ring, ring.choose(), ferry::stream_ref<B>(s));  // slot 0, read on s (free)
  use(ring, ring.choose(), ferry::stream_ref<B>(r));  // slot 1, read on r behind the gate
  ferry::enqueue_host(ferry::stream_ref<B>(r), [&] { reads.fetch_add(1); });
  ring.reserve_stamp(1);
  (void)ring.stamp(1, ferry::stream_ref<B>(r));
  s.synchronize();
  std::vector<int> given;
  int reads_at_give_back = -1;
  CHECK(ferry_test::returns_after_open(g, [&] {
    ring.release([&](int& slot) {
      given.push_back(slot);
      if (slot == 1) reads_at_give_back = reads.load();
    });
  }));
  CHECK(given == std::vector<int>{0, 1, 2});
  CHECK(reads_at_give_back == 1);  // slot 1 went back only after its reader ran
  CHECK(ring.empty());
  CHECK(ring.current() == ring.npos);
}

// The use order that choose() reads (warmest) against a model, over random takes, closes and
// cancels (rotate_to the slot before) on a ring of many slots, every slot free: choose() offers
// the slot used last other than the open current one. Guards take()'s move to the newest place
// and choose()'s lookup of the current slot, wherever a cancel left it.
TEMPLATE_TEST_CASE("slot_ring (warmest) keeps the use order of a model over random takes and cancels",
                   "[memory][slot_ring]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  constexpr std::size_t n = 40;
  auto ring = make_ring<ring_of<B>>(ring_order::warmest, n, n);
  std::vector<std::size_t> used;  // the model: oldest first
  std::size_t cur = ring.npos;
  bool open = false;
  std::mt19937_64 rng(0x51075);
  for (std::size_t k = 0; k < n; ++k) {  // fresh slots first, in order
    REQUIRE(ring.choose() == k);
    ring.take(k);
    used.push_back(k);
    cur = k;
    open = true;
  }
  for (int op = 0; op < 5000; ++op) {
    std::size_t want = ring.npos;  // the newest slot by use that is not the open current one
    for (std::size_t j = used.size(); j-- > 0;)
      if (!(open && used[j] == cur)) {
        want = used[j];
        break;
      }
    REQUIRE(ring.choose() == want);
    const auto r = rng() % 8;
    const std::size_t i = r < 5 ? want : static_cast<std::size_t>(rng() % n);  // the warmest, or any slot
    if (r == 7 && cur != ring.npos) {
      // A cancel: slot i taken, then the current goes back to the one before.
      const std::size_t before = cur;
      ring.take(i);
      ring.rotate_to(before);
      cur = before;
    } else if (r == 6) {
      ring.close();
      open = false;
      continue;
    } else {
      ring.take(i);
      cur = i;
    }
    used.erase(std::find(used.begin(), used.end(), i));
    used.push_back(i);
    open = true;
  }
  ring.release([](int&) {});
}

namespace {
// A client of slot_ring::acquire that records what the ring asked of it: slots are named by the
// order they were made; fit() counts; `stream` is the acquiring use's stream.
template <class B>
struct test_client {
  ferry::stream_ref<B> on;
  int made = 0, fitted = 0;
  int make() { return 100 + made++; }
  void fit(int&) { ++fitted; }
  std::string describe(std::size_t next) const {
    return "ferry: test client: slot " + std::to_string(next) + " is held";
  }
  ferry::stream_ref<B> stream() const { return on; }
};
}  // namespace

TEMPLATE_TEST_CASE("slot_ring::acquire, commit and release: the protocol a component asks for", "[memory][slot_ring]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using Catch::Matchers::ContainsSubstring;
  ferry::stream<B> s;
  const ferry::stream_ref<B> sr(s);
  SECTION("rotation: a view's readers are stamped by the next acquire; a busy slot is walked past, then one inserted") {
    auto ring = make_ring<client_ring<B, ferry::reuse::event_fenced>>(ring_order::rotation, 2, 3);
    test_client<B> c{sr};
    ferry_test::gate<B> g(s);  // every stamp on s is held
    CHECK(ring.acquire(c) == 0);
    CHECK(c.fitted == 1);
    ring.commit({}, after_use::view);
    CHECK(ring.counts().stamps == 0);  // the view's readers are not known yet
    CHECK(ring.acquire(c) == 1);       // slot 0's readers on s stamped: held by the gate
    CHECK(ring.counts().stamps == 1);
    ring.commit({}, after_use::view);
    // Slot 0 comes next and is held; slot 1 is the call before: a slot is inserted after it.
    CHECK(ring.acquire(c) == 2);
    CHECK(ring[2] == 100);
    CHECK(ring.counts().hits == 1);
    CHECK(ring.counts().inserted == 1);
    ring.commit({}, after_use::view);
    g.open();
    s.synchronize();
    CHECK(ring.acquire(c) == 0);  // free again, and next in rotation
    ring.commit({}, after_use::view);
    CHECK(ring.uses() == 4);
    int given = 0;
    CHECK(ring.release(0, [&](int&) { ++given; }));
    CHECK(given == 3);
    CHECK(ring.empty());
  }
  SECTION("a full ring under throw_when_full: capacity_error with the client's description, nothing changed") {
    auto ring = make_ring<client_ring<B, ferry::reuse::throw_when_full>>(ring_order::rotation, 2, 2);
    test_client<B> c{sr};
    {
      ferry_test::gate<B> g(s);
      CHECK(ring.acquire(c) == 0);
      ring.commit({}, after_use::view);
      CHECK(ring.acquire(c) == 1);
      ring.commit({}, after_use::view);
      REQUIRE_THROWS_MATCHES(ring.acquire(c), ferry::capacity_error,
                             Catch::Matchers::MessageMatches(ContainsSubstring("ferry: test client: slot 0 is held")));
      CHECK(ring.size() == 2);
      CHECK(ring.current() == 1);
      CHECK(c.made == 0);
    }
    s.synchronize();
    CHECK(ring.acquire(c) == 0);
    ring.commit({}, after_use::view);
    CHECK(ring.release(0, [](int&) {}));
  }
  SECTION("rotation: the walk past a busy slot never takes the view's slot, whose readers the acquire stamps first") {
    auto ring = make_ring<client_ring<B, ferry::reuse::throw_when_full>>(ring_order::rotation, 3, 3);
    ferry::stream<B> t;  // never held
    test_client<B> c{sr};
    {
      ferry_test::gate<B> g(s);
      for (std::size_t i = 0; i < 3; ++i) {
        CHECK(ring.acquire(c) == i);  // the view before is stamped on s: held
        ring.commit({}, after_use::view);
      }
      ring.rotate(ferry::stream_ref<B>(t));  // a use that writes nothing: slot 2's readers on t
      t.synchronize();
      CHECK(ring.current() == 0);
      // Slot 0 comes next and is held; slot 1 is held; slot 2 (the view) is read by work on s
      // enqueued before this acquire: stamped before the walk, so held too.
      REQUIRE_THROWS_AS(ring.acquire(c), ferry::capacity_error);
      CHECK(ring.counts().hits == 1);
    }
    s.synchronize();
    CHECK(ring.acquire(c) == 1);
    ring.commit({}, after_use::view);
    CHECK(ring.release(0, [](int&) {}));
  }
  SECTION("warmest, made lazily: new slots until `made_lazily`, then the warmest free one; closed uses") {
    client_ring<B, ferry::reuse::event_fenced> ring(ring_order::warmest, 8, 2);
    test_client<B> c{sr};
    CHECK(ring.acquire(c) == 0);
    ring.commit(ferry::detail::shared_timeline<B>().mark(sr), after_use::closed);
    CHECK(ring.acquire(c) == 1);  // fewer than 2 slots: a new one
    CHECK(c.made == 2);
    ring.commit(ferry::detail::shared_timeline<B>().mark(sr), after_use::closed);
    s.synchronize();
    CHECK(ring.acquire(c) == 1);  // closed and passed: the one just used is the warmest
    CHECK(c.made == 2);
    CHECK(c.fitted == 1);
    ring.cancel();                // handed back unused: slot 1 was the last commit's
    CHECK(ring.current() == 1);
    CHECK(ring.release(0, [](int&) {}));
  }
  SECTION("abandon: the slot and the pending view's leave the ring, never given back") {
    auto ring = make_ring<client_ring<B, ferry::reuse::event_fenced>>(ring_order::warmest, 3, 4);
    test_client<B> c{sr};
    const std::size_t a = ring.acquire(c);
    ring.commit(ferry::detail::shared_timeline<B>().mark(sr), after_use::view);
    const std::size_t b = ring.acquire(c);
    CHECK(b != a);
    ring.abandon();
    CHECK(ring.size() == 1);
    CHECK(ring.current() == ring.npos);
    std::vector<int> given;
    s.synchronize();
    CHECK_FALSE(ring.release(0, [&](int& v) { given.push_back(v); }));  // something leaked
    CHECK(given.size() == 1);
  }
}
