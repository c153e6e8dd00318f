// Tests for include/ferry/backend/event.hpp: event record/ready/synchronize and stream waits.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

TEMPLATE_TEST_CASE("an event is ready only once its stream has passed it", "[event]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::atomic<bool> ran{false};
  ferry::event<TestType> e;
  {
    ferry_test::gate<TestType> g(s);
    ferry::enqueue_host(s, [&] { ran = true; });
    e.record(s);
    CHECK_FALSE(e.ready());
  }
  e.synchronize();
  CHECK(ran.load());  // synchronize() ordered after the work before the record
  CHECK(e.ready());
}

TEMPLATE_TEST_CASE("stream.wait(event) orders one stream after another without blocking",
                        "[event]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> producer;
  ferry::stream<TestType> consumer;
  std::atomic<int> produced{0};
  int seen = -1;
  ferry::event<TestType> e;
  {
    ferry_test::gate<TestType> g(producer);
    ferry::enqueue_host(producer, [&] { produced = 42; });
    e.record(producer);
    consumer.wait(e);  // returns at once: the producer is still held
    ferry::enqueue_host(consumer, [&] { seen = produced.load(); });
  }
  consumer.synchronize();
  CHECK(seen == 42);
}

TEMPLATE_TEST_CASE("an error in stream work is thrown by an event recorded after it", "[event]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::enqueue_host(s, [] { throw std::logic_error("boom"); });
  ferry::event<TestType> e;
  e.record(s);
  CHECK_THROWS_AS(e.synchronize(), ferry::error);
  CHECK_NOTHROW(s.synchronize());  // handed out once
}

// Returns once every task enqueued on `s` so far has run, without a synchronizing call (which
// would take the stream's errors).
template <class B>
static void reach(ferry::stream_ref<B> s) {
  auto reached = std::make_shared<std::promise<void>>();
  ferry::enqueue_host(s, [reached] { reached->set_value(); });
  reached->get_future().wait();
}

TEMPLATE_TEST_CASE("an event does not throw an error of work enqueued after it", "[event]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::atomic<int> ran{0};
  ferry::enqueue_host(s, [&] { ++ran; });
  ferry::event<TestType> before;
  before.record(s);
  ferry::enqueue_host(s, [] { throw std::runtime_error("later failure"); });
  reach<TestType>(s);
  CHECK_NOTHROW(before.synchronize());
  CHECK(ran == 1);
  REQUIRE_THROWS_WITH(s.synchronize(), Catch::Matchers::ContainsSubstring("later failure"));
  CHECK_NOTHROW(s.synchronize());  // thrown once
}

TEMPLATE_TEST_CASE("each event throws the first error before it, once; later errors wait for later calls",
                   "[event]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::event<TestType> first;
  ferry::event<TestType> second;
  ferry::event<TestType> third;
  ferry::enqueue_host(s, [] { throw std::runtime_error("first failure"); });
  ferry::enqueue_host(s, [] { throw std::runtime_error("also before the first event"); });
  first.record(s);
  ferry::enqueue_host(s, [] { throw std::runtime_error("second failure"); });
  second.record(s);
  third.record(s);
  ferry::enqueue_host(s, [] { throw std::runtime_error("third failure"); });
  reach<TestType>(s);
  REQUIRE_THROWS_WITH(first.synchronize(), Catch::Matchers::ContainsSubstring("first failure"));
  CHECK_NOTHROW(first.synchronize());
  REQUIRE_THROWS_WITH(second.synchronize(), Catch::Matchers::ContainsSubstring("second failure"));
  CHECK_NOTHROW(third.synchronize());
  REQUIRE_THROWS_WITH(s.synchronize(), Catch::Matchers::ContainsSubstring("third failure"));
  CHECK_NOTHROW(s.synchronize());
}

TEMPLATE_TEST_CASE("synchronize() counts one synchronization, whether or not it blocks", "[event]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  auto syncs = [] { return ferry::backend_stats_of<TestType>().synchronizations; };
  ferry::event<TestType> done;
  ferry::enqueue_host(s, [] {});
  done.record(s);
  s.synchronize();
  auto before = syncs();
  done.synchronize();  // already passed
  CHECK(syncs() == before + 1);

  ferry::event<TestType> held;
  auto g = std::make_unique<ferry_test::gate<TestType>>(s);
  held.record(s);
  before = syncs();
  std::thread opener([&] {
    while (syncs() == before) std::this_thread::yield();  // synchronize() has counted: it blocks
    g->open();
  });
  held.synchronize();
  opener.join();
  CHECK(syncs() == before + 1);
}
