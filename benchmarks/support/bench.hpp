// The one harness of every benchmark binary (SPEC §10): options, the interleaved rounds, the A/A
// twins, one table printed with ferry beside its baselines, and the JSON results format
// ({"benchmark", "machine", "date", "aa", "rounds", "aa_spread", "rows", "targets"}).
//
// Interleaved rounds: every variant (a row of the table) runs one burst per round, in an order
// rotated every round, so that ferry and its baselines see the same machine state and any drift of
// clock or device load falls on all of them alike; a variant's figure is the median over the
// rounds. A/A (--aa): every variant also runs as its own twin, the same code and state, in the
// same rounds; the twin's figure beside the variant's is the noise of that figure, and a target
// computed again from the twins gives the target's noise: a missed target whose distance to its
// goal is smaller is "within noise". A target is judged only on >= 5 rounds (min_rounds). A ratio
// against a peer that the same-run floor itself misses is reported, not targeted (SPEC §10).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <unistd.h>

namespace ferry_bench {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
/// The fewest interleaved rounds a target is judged on (SPEC §10).
constexpr int min_rounds = 5;

struct options {
  std::string json;        ///< --json FILE
  int bursts = 40;         ///< --bursts N: interleaved rounds, each figure the median over them
  int burst = 256;         ///< --burst N: operations per burst
  bool quick = false;      ///< --quick: few short rounds, a smoke run
  bool aa = false;         ///< --aa: every variant runs beside its twin (A/A)
  std::string torch;       ///< --torch CMD: the PyTorch-in-Python peer, started as `CMD --serve` (torch_peer.hpp)
  std::string points;      ///< --points WxP,...: staged_write's grid points (default: all 16)
};

inline options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    if (a == "--json") o.json = next();
    else if (a == "--bursts") o.bursts = std::stoi(next());
    else if (a == "--burst") o.burst = std::stoi(next());
    else if (a == "--quick") { o.quick = true; o.bursts = 5; o.burst = 16; }
    else if (a == "--aa") o.aa = true;
    else if (a == "--torch") o.torch = next();
    else if (a == "--points") o.points = next();
    else throw std::runtime_error("unknown argument " + a + " (use --json FILE, --bursts N, --burst N, --quick, --aa, "
                                  "--torch CMD, --points WxP,...)");
  }
  return o;
}

/// The median of the finite values (NaN: a sample that could not be taken); NaN when none is.
inline double median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return nan;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline double micros(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

/// One burst of a variant: runs `count` operations and returns microseconds per operation (NaN: no
/// sample this round).
using timed_burst = std::function<double(std::size_t count)>;

/// A time budget for one interleaved measurement, for cases whose rounds are long: once `seconds`
/// (warm-up included) have passed and `min_rounds` rounds are in, no round starts (`o.bursts` stays
/// the most); when the first warm-up round shows that the warm-up and `min_rounds` rounds would not
/// fit, the other warm-up rounds are left out. `rounds` and `seconds_used` report what ran.
struct time_budget {
  double seconds = 0;
  int min_rounds = ferry_bench::min_rounds;
  int rounds = 0;           ///< out
  double seconds_used = 0;  ///< out
};

/// Each variant's median over the rounds and, with --aa, its twin's.
struct timings {
  std::vector<double> us, twin;
  double operator[](std::size_t k) const { return us[k]; }
  [[nodiscard]] std::size_t size() const { return us.size(); }
  /// The variant against itself: its twin's figure over its own, minus 1 (NaN without --aa).
  [[nodiscard]] double aa(std::size_t k) const { return twin[k] / us[k] - 1; }
};

/// The interleaved rounds (see the file comment): `warmup` rounds not kept, then o.bursts rounds of
/// o.burst operations per variant (and twin), `drain()` after every burst and `between(round)`
/// before every round (untimed; rounds of the warm-up are negative).
template <class Drain>
timings interleaved(const options& o, const std::vector<timed_burst>& variants, Drain&& drain, int warmup = 3,
                    time_budget* budget = nullptr, const std::function<void(int)>& between = {}) {
  const std::size_t m = variants.size(), slots = o.aa ? 2 * m : m;
  std::vector<std::vector<double>> per(slots);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return micros(start, std::chrono::steady_clock::now()) * 1e-6; };
  const bool budgeted = budget != nullptr && budget->seconds > 0;
  int rounds = 0;
  for (int b = -warmup; b < o.bursts; ++b) {
    if (budgeted && b >= 0 && rounds >= budget->min_rounds && elapsed_s() >= budget->seconds) break;
    if (between) between(b);
    for (std::size_t j = 0; j < slots; ++j) {
      const std::size_t k = (j + static_cast<std::size_t>(b + warmup)) % slots;
      const double us = variants[k % m](static_cast<std::size_t>(o.burst));
      drain();
      if (b >= 0) per[k].push_back(us);
    }
    if (b >= 0) ++rounds;
    if (budgeted && b == -warmup && b < -1 && elapsed_s() * (warmup + budget->min_rounds) > budget->seconds) b = -1;
  }
  if (budget != nullptr) {
    budget->rounds = rounds;
    budget->seconds_used = elapsed_s();
  }
  timings t{std::vector<double>(m), std::vector<double>(m, nan)};
  for (std::size_t k = 0; k < m; ++k) {
    t.us[k] = median(per[k]);
    if (o.aa) t.twin[k] = median(per[m + k]);
  }
  return t;
}

struct no_op {
  void operator()() const noexcept {}
};

/// A variant timed on the host: op(i), i counting across its bursts (inputs may rotate); `before()`
/// ahead of every burst, untimed (a kernel that holds the stream: the GPU behind).
template <class Op, class Before = no_op>
timed_burst host_burst(Op op, Before before = {}) {
  return [op = std::move(op), before = std::move(before), i = std::size_t{0}](std::size_t count) mutable {
    before();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < count; ++k) op(i++);
    return micros(t0, std::chrono::steady_clock::now()) / static_cast<double>(count);
  };
}

/// interleaved() of operations timed on the host (host_burst).
template <class Drain, class Before = no_op>
timings host_us_interleaved(const options& o, const std::vector<std::function<void(std::size_t)>>& ops, Drain&& drain,
                            Before before = {}, int warmup = 3, time_budget* budget = nullptr) {
  std::vector<timed_burst> v;
  for (const auto& op : ops) v.push_back(host_burst(op, before));
  return interleaved(o, v, drain, warmup, budget);
}

using value = std::variant<double, std::string>;
using row = std::vector<std::pair<std::string, value>>;

struct target {
  std::string name;
  double value;
  std::string op;  ///< "<=" or ">="
  double goal;
  double noise = nan;  ///< |the target computed from the twins - value| (NaN without --aa)
  double floor = nan;  ///< a peer ratio: the same ratio of the same-run floor (NaN: not a peer ratio)
  int rounds = min_rounds;  ///< the interleaved rounds it was measured on
  /// A target whose value could not be measured (NaN) is not met.
  [[nodiscard]] bool met() const { return meets(value); }
  [[nodiscard]] bool meets(double v) const { return op == "<=" ? v <= goal : v >= goal; }
  /// A peer ratio that the floor itself misses: reported, not targeted.
  [[nodiscard]] bool reported() const { return std::isfinite(floor) && !meets(floor); }
  /// "met", "within noise" (missed by less than its A/A noise), "missed", "reported" (the floor
  /// misses it too) or "not judged" (fewer than min_rounds rounds).
  [[nodiscard]] std::string verdict() const {
    if (reported()) return "reported";
    if (rounds < min_rounds) return "not judged";
    return met() ? "met" : std::abs(value - goal) <= noise ? "within noise" : "missed";
  }
};

inline std::string json_value(const value& v) {
  if (const auto d = std::get_if<double>(&v)) {
    if (!std::isfinite(*d)) return "null";  // a figure that could not be measured in this run
    std::ostringstream os;
    os << std::setprecision(6) << *d;
    return os.str();
  }
  std::string r = "\"";
  for (const char c : std::get<std::string>(v)) {
    if (c == '"' || c == '\\') r += '\\';
    r += c == '\n' ? ' ' : c;
  }
  return r + "\"";
}

inline std::string cell(const value& v) {
  if (const auto d = std::get_if<double>(&v)) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(std::abs(*d) >= 100 ? 1 : std::abs(*d) >= 1 ? 2 : 3) << *d;
    return s.str();
  }
  return std::get<std::string>(v);
}

/// One benchmark's rows and targets; the machine is the GPU's name (gpu.cuh), else the host's.
struct report {
  std::string benchmark, machine;
  bool aa = false;
  int rounds = 0;
  std::vector<row> rows;
  std::vector<target> targets;

  report(std::string name, const options& o) : benchmark(std::move(name)), aa(o.aa), rounds(o.bursts) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    machine = host;
  }

  /// Adds a row and prints it at once, one line (progress: the table comes at the end).
  void add(row r) {
    std::cout << "  case done:";
    for (const auto& [k, v] : r) std::cout << ' ' << k << '=' << cell(v);
    std::cout << std::endl;
    rows.push_back(std::move(r));
  }
  /// A target; `twin` is the same target computed from the twins' figures (A/A), NaN without.
  void add_target(std::string name, double v, std::string op, double goal, double twin = nan) {
    targets.push_back({std::move(name), v, std::move(op), goal, std::abs(twin - v), nan, rounds});
  }
  /// A ratio against a peer: `floor` is the same ratio for the same-run floor; when the floor
  /// misses the goal too, the target is reported, not targeted.
  void add_peer_target(std::string name, double v, std::string op, double goal, double floor, double twin = nan) {
    add_target(std::move(name), v, std::move(op), goal, twin);
    targets.back().floor = floor;
  }
  /// The rows' A/A figures (column "A/A"): the median and the largest magnitude (NaN: none).
  [[nodiscard]] std::pair<double, double> aa_spread() const {
    std::vector<double> v;
    for (const auto& r : rows)
      for (const auto& [k, x] : r)
        if (const auto d = std::get_if<double>(&x); k == "A/A" && d && std::isfinite(*d)) v.push_back(std::abs(*d));
    return {median(v), v.empty() ? nan : *std::max_element(v.begin(), v.end())};
  }

  static std::string today() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
    return buf;
  }

  /// The rows as one table (columns in first-seen order), then the targets with their verdicts.
  void print(std::ostream& os = std::cout) const {
    const auto [aa_median, aa_max] = aa_spread();
    os << "== " << benchmark << " on " << machine << ", " << today() << ", " << rounds << " interleaved rounds"
       << (aa ? ", A/A twins: spread over rows median " + cell(aa_median) + ", max " + cell(aa_max) : "") << "\n";
    std::vector<std::string> cols;
    std::vector<std::size_t> w;
    for (const auto& r : rows)
      for (const auto& [k, v] : r) {
        const auto c = static_cast<std::size_t>(std::find(cols.begin(), cols.end(), k) - cols.begin());
        if (c == cols.size()) {
          cols.push_back(k);
          w.push_back(k.size());
        }
        w[c] = std::max(w[c], cell(v).size());
      }
    for (std::size_t c = 0; c < cols.size(); ++c) os << std::setw(static_cast<int>(w[c]) + 2) << cols[c];
    os << "\n";
    for (const auto& r : rows) {
      for (std::size_t c = 0; c < cols.size(); ++c) {
        std::string s;
        for (const auto& [k, v] : r)
          if (k == cols[c]) s = cell(v);
        os << std::setw(static_cast<int>(w[c]) + 2) << s;
      }
      os << "\n";
    }
    for (const auto& t : targets)
      os << "target " << t.name << ": " << cell(t.value) << " " << t.op << " " << cell(t.goal)
         << (std::isfinite(t.noise) ? " (A/A noise " + cell(t.noise) + ")" : "")
         << (std::isfinite(t.floor) ? " (the floor: " + cell(t.floor) + ")" : "") << "  " << t.verdict() << "\n";
  }

  void write_json(const std::string& path) const {
    if (path.empty()) return;
    std::ofstream f(path);
    if (!f) throw std::runtime_error("cannot write " + path);
    f << "{\n  \"benchmark\": " << json_value(benchmark) << ",\n  \"machine\": " << json_value(machine)
      << ",\n  \"date\": " << json_value(today()) << ",\n  \"aa\": " << (aa ? "true" : "false")
      << ",\n  \"rounds\": " << rounds << ",\n  \"aa_spread\": {\"median\": " << json_value(aa_spread().first)
      << ", \"max\": " << json_value(aa_spread().second) << "},\n  \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      f << (i ? ",\n    {" : "\n    {");
      for (std::size_t k = 0; k < rows[i].size(); ++k)
        f << (k ? ", " : "") << json_value(rows[i][k].first) << ": " << json_value(rows[i][k].second);
      f << "}";
    }
    f << "\n  ],\n  \"targets\": [";
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const auto& t = targets[i];
      f << (i ? ",\n    " : "\n    ") << "{\"name\": " << json_value(t.name) << ", \"value\": " << json_value(t.value)
        << ", \"op\": " << json_value(t.op) << ", \"target\": " << json_value(t.goal)
        << ", \"noise\": " << json_value(t.noise) << ", \"floor\": " << json_value(t.floor)
        << ", \"met\": " << (t.met() ? "true" : "false")
        << ", \"verdict\": " << json_value(t.verdict()) << "}";
    }
    f << "\n  ]\n}\n";
  }
};

}  // namespace ferry_bench
