// The harness (bench.hpp) on the host: the interleaved rounds with A/A twins, and how a target is
// judged against its A/A noise.
#include "bench.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cstdio>
#include <map>

namespace fb = ferry_bench;

TEST_CASE("bench: each round runs every variant and its twin once, in a rotated order") {
  fb::options o;
  o.bursts = 4;
  o.burst = 2;
  o.aa = true;
  std::vector<std::size_t> order;
  std::map<std::size_t, double> fixed{{0, 3.0}, {1, 5.0}};
  std::vector<fb::timed_burst> v;
  for (std::size_t k = 0; k < 2; ++k)
    v.push_back([&, k](std::size_t n) {
      CHECK(n == 2);
      order.push_back(k);
      return fixed[k] + static_cast<double>(order.size() % 2) * 0.5;  // twins see other samples
    });
  int drains = 0, between = 0;
  const auto t = fb::interleaved(o, v, [&] { ++drains; }, 1, nullptr, [&](int round) { between += round; });
  REQUIRE(order.size() == 20);  // (1 warm-up + 4) rounds x 4 slots
  CHECK(drains == 20);
  CHECK(between == -1 + 0 + 1 + 2 + 3);
  for (std::size_t r = 0; r < 5; ++r) {  // slots of round r: (j + r) % 4 for j = 0..3, variant = slot % 2
    for (std::size_t j = 0; j < 4; ++j) CHECK(order[r * 4 + j] == (j + r) % 4 % 2);
  }
  CHECK(t.size() == 2);
  CHECK(t[0] >= 3.0);
  CHECK(t[0] <= 3.5);
  CHECK(t.twin[1] >= 5.0);
  CHECK(t.aa(0) == t.twin[0] / t[0] - 1);

  o.aa = false;
  const auto plain = fb::interleaved(o, v, [] {}, 0);
  CHECK(std::isnan(plain.twin[0]));
  CHECK(std::isnan(plain.aa(1)));
}

TEST_CASE("bench: host_burst times per operation, and the median skips samples not taken") {
  std::size_t calls = 0;
  auto b = fb::host_burst([&](std::size_t i) { CHECK(i == calls++); });
  CHECK(b(3) >= 0);
  CHECK(b(2) >= 0);
  CHECK(calls == 5);
  CHECK(fb::median({4, fb::nan, 1, 3}) == 3);
  CHECK(std::isnan(fb::median({fb::nan})));
}

TEST_CASE("bench: a missed target within its A/A noise is judged within noise") {
  fb::options o;
  fb::report rep("harness", o);
  rep.add_target("met", 1.10, "<=", 1.15, 1.20);
  rep.add_target("within", 1.16, "<=", 1.15, 1.14);       // noise 0.02 > 0.01 over
  rep.add_target("missed", 1.20, "<=", 1.15, 1.18);       // noise 0.02 < 0.05 over
  rep.add_target("no noise", 1.16, "<=", 1.15);            // not measured: missed
  rep.add_target("at least", 7.9, ">=", 8, 8.3);
  rep.add_target("not measured", fb::nan, ">=", 8, fb::nan);
  rep.add_peer_target("peer, floor misses", 6, ">=", 8, 7.5, 6.1);  // the floor itself misses: reported
  rep.add_peer_target("peer, floor meets", 6, ">=", 8, 9, 6.1);
  rep.rounds = 4;
  rep.add_target("too few rounds", 1.0, "<=", 1.15);
  const char* want[] = {"met", "within noise", "missed", "missed", "within noise", "missed", "reported", "missed", "not judged"};
  for (std::size_t k = 0; k < rep.targets.size(); ++k) CHECK(rep.targets[k].verdict() == want[k]);
  const std::string path = "bench_test.json";
  rep.write_json(path);
  std::ifstream f(path);
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  CHECK(s.find("\"name\": \"within\", \"value\": 1.16, \"op\": \"<=\", \"target\": 1.15, \"noise\": 0.02, \"floor\": null, "
               "\"met\": false, \"verdict\": \"within noise\"") != std::string::npos);
  CHECK(s.find("\"noise\": null") != std::string::npos);
  CHECK(s.find("\"aa\": false") != std::string::npos);
  CHECK(s.find("\"rounds\": 4") != std::string::npos);
  CHECK(s.find("\"floor\": 7.5, \"met\": false, \"verdict\": \"reported\"") != std::string::npos);
  CHECK_THROWS(rep.write_json("no-such-folder/harness.json"));  // never a silent loss of the results
}

TEST_CASE("bench: the A/A spread is the median and the largest magnitude of the rows' A/A figures") {
  fb::options o;
  fb::report rep("harness", o);
  CHECK(std::isnan(rep.aa_spread().first));
  rep.rows = {{{"A/A", 0.02}}, {{"A/A", -0.05}}, {{"A/A", fb::nan}}, {{"A/A", 0.01}}, {{"other", 3.0}}};
  CHECK(rep.aa_spread().first == 0.02);
  CHECK(rep.aa_spread().second == 0.05);
}
