// Benchmark support: the SPEC §10 method (host time = bursts of operations with the stream drained
// between bursts, median over bursts, ferry's bursts interleaved with its baselines'; device time =
// operations queued behind a kernel that holds the stream), one table printed with ferry beside its
// baselines as ratios, and the JSON results format ({"benchmark", "machine", "date", "rows",
// "targets"}).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <unistd.h>

namespace ferry_bench {

struct options {
  std::string json;  ///< --json FILE
  int bursts = 40;   ///< --bursts N (median over N bursts)
  int burst = 256;   ///< --burst N (operations per burst)
  bool quick = false;  ///< --quick: few bursts, for smoke runs on machines without a GPU
  std::string torch;          ///< --torch FILE: output of the PyTorch baseline script peer_torch.py (same run)
  std::string torch_step;     ///< --torch-step FILE: JSON of the PyTorch baseline script decode_step_torch.py
  std::string before_json;    ///< --before-json FILE: the before tree's rows, where built in (decode_step)
};

inline options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    if (a == "--json") o.json = next();
    else if (a == "--bursts") o.bursts = std::stoi(next());
    else if (a == "--burst") o.burst = std::stoi(next());
    else if (a == "--quick") { o.quick = true; o.bursts = 5; o.burst = 16; }
    else if (a == "--torch") o.torch = next();
    else if (a == "--torch-step") o.torch_step = next();
    else if (a == "--before-json") o.before_json = next();
    else throw std::runtime_error("unknown argument " + a +
                                  " (use --json FILE, --bursts N, --burst N, --quick, --torch FILE, --torch-step FILE, "
                                  "--before-json FILE)");
  }
  return o;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// One figure of peer_torch.py's output: the line whose label contains `label`, field `key`
/// ("host_us" or "device_us"); NaN when the file or line is missing.
inline double torch_figure(const std::string& file, const std::string& label, const std::string& key) {
  std::ifstream f(file);
  std::string line;
  while (std::getline(f, line)) {
    if (line.find(label) == std::string::npos) continue;
    const auto k = line.find(key + " ");
    if (k == std::string::npos) continue;
    return std::stod(line.substr(k + key.size() + 1));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

/// A number field of a flat JSON object (decode_step_torch.py --json); NaN when missing.
inline double json_number(const std::string& file, const std::string& key) {
  std::ifstream f(file);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  const auto k = s.find("\"" + key + "\"");
  if (k == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  const auto c = s.find(':', k);
  return std::stod(s.substr(c + 1));
}

/// One burst of a variant that times itself: runs `count` operations and returns the host
/// microseconds it timed (all of them, or only the calls when it does untimed work between).
using timed_burst = std::function<double(std::size_t count)>;

/// A time budget for one interleaved measurement, for benchmarks whose largest cases would
/// otherwise take minutes: once `seconds` (wall time, warm-up included) have passed and every
/// variant has at least `min_bursts` measured bursts, no further round starts (`o.bursts` stays
/// the most); when the first warm-up round alone shows that the warm-up and `min_bursts` rounds
/// would not fit, the other warm-up rounds are left out. `bursts` and `seconds_used` report what
/// ran. seconds = 0: no budget.
struct time_budget {
  double seconds = 0;
  int min_bursts = 5;
  int bursts = 0;           ///< out: measured rounds
  double seconds_used = 0;  ///< out: wall time of the whole measurement
};

/// Host microseconds per operation of several variants measured alike (SPEC §10: bursts of
/// `o.burst` operations, `drain()` between bursts, untimed; median over `o.bursts` bursts), their
/// bursts interleaved: burst b of every variant runs before burst b + 1 of any, in an order
/// rotated every burst, so that ferry and its baselines see the same machine state and any drift
/// of clock or device load falls on all of them alike. With a `budget`, fewer rounds where they
/// are long (time_budget).
template <class Drain>
std::vector<double> interleaved_us(const options& o, const std::vector<timed_burst>& variants, Drain&& drain,
                                   int warmup_bursts = 3, time_budget* budget = nullptr) {
  const std::size_t m = variants.size();
  const auto n = static_cast<std::size_t>(o.burst);
  std::vector<std::vector<double>> per(m);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const bool budgeted = budget != nullptr && budget->seconds > 0;
  int measured = 0;
  for (int b = -warmup_bursts; b < o.bursts; ++b) {
    if (budgeted && b >= 0 && measured >= budget->min_bursts && elapsed_s() >= budget->seconds) break;
    for (std::size_t j = 0; j < m; ++j) {
      const std::size_t k = (j + static_cast<std::size_t>(b + warmup_bursts)) % m;
      const double us = variants[k](n);
      drain();
      if (b >= 0) per[k].push_back(us / static_cast<double>(n));
    }
    if (b >= 0) ++measured;
    // One warm-up round done: skip the others when they and min_bursts rounds would overrun.
    if (budgeted && b == -warmup_bursts && b < -1 &&
        elapsed_s() * (warmup_bursts + budget->min_bursts) > budget->seconds)
      b = -1;
  }
  if (budget != nullptr) {
    budget->bursts = measured;
    budget->seconds_used = elapsed_s();
  }
  std::vector<double> r(m);
  for (std::size_t k = 0; k < m; ++k) r[k] = median(per[k]);
  return r;
}

struct no_op {
  void operator()() const noexcept {}
};

/// interleaved_us for operations timed whole: op(i) with i counting across a variant's bursts
/// (so inputs can rotate); `before()` runs ahead of every burst, untimed (a kernel that holds the
/// stream: the GPU behind).
template <class Drain, class Before = no_op>
std::vector<double> host_us_interleaved(const options& o, const std::vector<std::function<void(std::size_t)>>& ops,
                                        Drain&& drain, Before&& before = Before{}, int warmup_bursts = 3,
                                        time_budget* budget = nullptr) {
  std::vector<std::size_t> next(ops.size(), 0);
  std::vector<timed_burst> timed;
  for (std::size_t k = 0; k < ops.size(); ++k)
    timed.push_back([&, k](std::size_t count) {
      before();
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < count; ++i) ops[k](next[k]++);
      const auto t1 = std::chrono::steady_clock::now();
      return std::chrono::duration<double, std::micro>(t1 - t0).count();
    });
  return interleaved_us(o, timed, drain, warmup_bursts, budget);
}

using value = std::variant<double, std::string>;
using row = std::vector<std::pair<std::string, value>>;

struct target {
  std::string name;
  double value;
  std::string op;  ///< "<=" or ">="
  double goal;
  /// A target whose value could not be measured (NaN) is not met.
  [[nodiscard]] bool met() const { return op == "<=" ? value <= goal : value >= goal; }
};

inline std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') { r += "\\n"; continue; }
    r += c;
  }
  return r;
}

inline std::string json_value(const value& v) {
  if (auto d = std::get_if<double>(&v)) {
    if (!std::isfinite(*d)) return "null";  // a figure that could not be measured in this run
    std::ostringstream os;
    os << std::setprecision(6) << *d;
    return os.str();
  }
  return "\"" + json_escape(std::get<std::string>(v)) + "\"";
}

/// The machine: the GPU name when known (set_machine), else the host name.
struct report {
  std::string benchmark;
  std::string machine;
  std::vector<row> rows;
  std::vector<target> targets;
  std::vector<row> host_profile;  ///< where rows' host time goes (support/host_profile.hpp), if sampled

  explicit report(std::string name) : benchmark(std::move(name)) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    machine = host;
  }

  /// Adds a row and prints it at once, one line (progress: the table comes at the end).
  void add(row r) {
    std::ostringstream line;
    line << "  case done:";
    for (const auto& [k, v] : r) {
      line << ' ' << k << '=';
      if (const auto d = std::get_if<double>(&v)) line << *d; else line << std::get<std::string>(v);
    }
    std::cout << line.str() << std::endl;
    rows.push_back(std::move(r));
  }
  void add_target(std::string name, double v, std::string op, double goal) {
    targets.push_back({std::move(name), v, std::move(op), goal});
  }

  static std::string today() {
    std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
    return buf;
  }

  /// Prints the rows as one table (columns in first-seen order) and the targets with met/MISSED.
  void print(std::ostream& os = std::cout) const {
    os << "== " << benchmark << " on " << machine << ", " << today() << "\n";
    std::vector<std::string> cols;
    for (auto& r : rows)
      for (auto& [k, v] : r)
        if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
    auto cell = [](const value& v) {
      if (auto d = std::get_if<double>(&v)) {
        std::ostringstream s;
        s << std::fixed << std::setprecision(*d >= 100 ? 1 : 2) << *d;
        return s.str();
      }
      return std::get<std::string>(v);
    };
    std::vector<std::size_t> w(cols.size());
    for (std::size_t c = 0; c < cols.size(); ++c) w[c] = cols[c].size();
    for (auto& r : rows)
      for (auto& [k, v] : r) {
        auto c = std::find(cols.begin(), cols.end(), k) - cols.begin();
        w[c] = std::max(w[c], cell(v).size());
      }
    for (std::size_t c = 0; c < cols.size(); ++c) os << std::setw(static_cast<int>(w[c]) + 2) << cols[c];
    os << "\n";
    for (auto& r : rows) {
      for (std::size_t c = 0; c < cols.size(); ++c) {
        std::string s;
        for (auto& [k, v] : r)
          if (k == cols[c]) s = cell(v);
        os << std::setw(static_cast<int>(w[c]) + 2) << s;
      }
      os << "\n";
    }
    for (auto& t : targets)
      os << "target " << t.name << ": " << cell(t.value) << " " << t.op << " " << cell(t.goal)
         << (t.met() ? "  met" : "  MISSED") << "\n";
  }

  void write_json(const std::string& path) const {
    if (path.empty()) return;
    std::ofstream f(path);
    f << "{\n  \"benchmark\": " << json_value(benchmark) << ",\n  \"machine\": " << json_value(machine)
      << ",\n  \"date\": " << json_value(today()) << ",\n  \"rows\": [";
    auto objects = [&f](const std::vector<row>& list) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        f << (i ? ",\n    {" : "\n    {");
        for (std::size_t k = 0; k < list[i].size(); ++k)
          f << (k ? ", " : "") << json_value(list[i][k].first) << ": " << json_value(list[i][k].second);
        f << "}";
      }
    };
    objects(rows);
    if (!host_profile.empty()) {
      f << "\n  ],\n  \"host_profile\": [";
      objects(host_profile);
    }
    f << "\n  ],\n  \"targets\": [";
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const auto& t = targets[i];
      f << (i ? ",\n    " : "\n    ") << "{\"name\": " << json_value(t.name)
        << ", \"value\": " << json_value(t.value) << ", \"op\": " << json_value(t.op)
        << ", \"target\": " << json_value(t.goal) << ", \"met\": " << (t.met() ? "true" : "false") << "}";
    }
    f << "\n  ]\n}\n";
  }
};

}  // namespace ferry_bench
