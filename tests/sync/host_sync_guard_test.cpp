// Tests for include/ferry/sync/host_sync_guard.hpp: the host backend's sync scope.
#include <ferry/sync/host_sync_guard.hpp>
#include <support/backends.hpp>

#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::MessageMatches;
using host = ferry::backend::host;

TEST_CASE("sync_scope<backend::host> is host_sync_guard, from this header alone (no CUPTI)", "[sync][host]") {
  STATIC_REQUIRE(std::is_same_v<ferry::sync_scope<ferry::backend::host>, ferry::host_sync_guard>);
}

TEST_CASE("host_sync_guard counts host backend synchronizations", "[host_sync_guard]") {
  ferry::stream<host> s;
  ferry::event<host> e;
  ferry::host_sync_guard g;
  CHECK(g.syncs() == 0);
  CHECK(g.report() == "host backend: no synchronizing calls and no allocations");
  s.synchronize();
  e.record(s);
  e.synchronize();
  CHECK(g.syncs() == 2);
  CHECK(g.allocations() == 0);
  CHECK(g.report() == "host backend: synchronizations x2");
  CHECK(g.count("synchronizations") == 2);
  CHECK(g.count("device frees") == 0);
  CHECK(g.count("cudaStreamSynchronize") == 0);  // names are the host backend's, as report() spells them
}

TEST_CASE("host_sync_guard counts pinned and device allocations and frees", "[host_sync_guard]") {
  std::optional<ferry::pinned_buffer<int, host>> pinned;
  {
    ferry::host_sync_guard g;
    pinned.emplace(256);
    { ferry::device_buffer<int, host> d(128); }
    CHECK(g.allocations() == 3);
    CHECK(g.syncs() == 0);
    CHECK(g.report() == "host backend: pinned allocations x1, device allocations x1, device frees x1");
    CHECK(g.count("pinned allocations") == 1);
    CHECK(g.count("device allocations") == 1);
    CHECK(g.count("device frees") == 1);
    CHECK(g.count("pinned frees") == 0);
  }
  {
    ferry::host_sync_guard g;
    pinned.reset();
    CHECK(g.allocations() == 1);
    CHECK(g.report() == "host backend: pinned frees x1");
  }
}

TEST_CASE("host_sync_guard does not count stream-ordered work", "[host_sync_guard]") {
  ferry::stream<host> s;
  std::atomic<int> ran{0};
  ferry::device_buffer<int, host> d(64);
  ferry::pinned_buffer<int, host> p(64);
  {
    ferry::host_sync_guard g;
    for (int i = 0; i < 100; ++i) ferry::enqueue_host(s, [&] { ran.fetch_add(1); });
    ferry::async_h2d(p.host(), d.span(), s);  // pinned: one stream-ordered copy
    ferry::event<host> e;
    e.record(s);
    (void)e.ready();
    CHECK(g.syncs() == 0);
    CHECK(g.allocations() == 0);
  }
  s.synchronize();
  CHECK(ran.load() == 100);
}

TEST_CASE("host_sync_guard sees every thread's host backend calls", "[host_sync_guard]") {
  // Unlike sync_guard (this thread's CUDA calls only), the host counters are process-wide.
  ferry::stream<host> s;
  ferry::host_sync_guard g;
  std::thread([&] { s.synchronize(); }).join();
  CHECK(g.syncs() == 1);
}

TEST_CASE("host_sync_guard in raise mode throws sync_error naming the calls", "[host_sync_guard]") {
  ferry::stream<host> s;
  const auto raise = ferry::host_sync_guard::mode::raise;

  SECTION("check() throws once for the calls it has not reported") {
    ferry::host_sync_guard g(raise);
    CHECK(g.guard_mode() == raise);
    CHECK_NOTHROW(g.check());
    s.synchronize();
    CHECK_THROWS_MATCHES(g.check(), ferry::sync_error,
                         MessageMatches(ContainsSubstring("synchronizations x1") && ContainsSubstring("raise mode")));
    CHECK_NOTHROW(g.check());
    s.synchronize();
    CHECK_THROWS_MATCHES(g.check(), ferry::sync_error, MessageMatches(ContainsSubstring("synchronizations x2")));
  }
  SECTION("the destructor throws when the scope ends normally") {
    auto scope = [&] {
      ferry::host_sync_guard g(raise);
      ferry::device_buffer<int, host> d(16);
    };
    CHECK_THROWS_MATCHES(scope(), ferry::sync_error,
                         MessageMatches(ContainsSubstring("device allocations x1") && ContainsSubstring("device frees x1")));
  }
  SECTION("the destructor is silent while another exception unwinds") {
    auto scope = [&] {
      ferry::host_sync_guard g(raise);
      s.synchronize();
      throw std::logic_error("the scope's own error");
    };
    CHECK_THROWS_MATCHES(scope(), std::logic_error, MessageMatches(ContainsSubstring("the scope's own error")));
  }
  SECTION("nothing seen: no throw") {
    auto scope = [&] {
      ferry::host_sync_guard g(raise);
      ferry::enqueue_host(s, [] {});
      g.check();
    };
    CHECK_NOTHROW(scope());
    s.synchronize();
  }
}

TEST_CASE("host_sync_guard in record mode never throws", "[host_sync_guard]") {
  ferry::stream<host> s;
  std::string report;
  auto scope = [&] {
    ferry::host_sync_guard g;
    CHECK(g.guard_mode() == ferry::sync_mode::record);
    s.synchronize();
    g.check();
    report = g.report();
  };
  CHECK_NOTHROW(scope());
  CHECK(report == "host backend: synchronizations x1");
}
