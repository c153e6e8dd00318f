// Tests for include/ferry/backend/event.hpp: event record/ready/synchronize and stream waits.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <atomic>
#include <stdexcept>

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
