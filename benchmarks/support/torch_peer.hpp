// Benchmark support: the PyTorch-in-Python peers (support/torch_peer.py says what each case is) as
// variants of this process's interleaved rounds. PyTorch in Python cannot run in a C++ process, so
// one Python process is started once (`CMD --serve`, from --torch CMD) and asked, round by round,
// for one burst at a time: "host CASE N" answers the host µs per operation that Python measured,
// after which it drains its own stream (untimed), so that its burst runs in the same round, between
// the same bursts of ferry's rows, as an in-process row. Without --torch, or when the process or a
// case fails, its figures are NaN and why() says why (its rows say "not measured").
#pragma once

#include "bench.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

extern char** environ;

namespace ferry_bench {

class torch_peer {
 public:
  explicit torch_peer(const std::string& cmd) {
    if (cmd.empty()) {
      why_ = "no --torch CMD";
      return;
    }
    std::signal(SIGPIPE, SIG_IGN);  // a peer that died answers EOF, not a signal
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) {
      why_ = "pipe() failed";
      return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&fa, fd);
    const std::string line = cmd + " --serve";
    const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
    const int rc = posix_spawn(&pid_, "/bin/sh", &fa, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
    if (rc != 0) pid_ = -1;
    const std::string hello = read_line();
    if (hello.rfind("ready", 0) != 0) why_ = "the PyTorch peer did not start (" + cmd + "): " + hello;
    else std::cout << "PyTorch peer " << hello.substr(6) << ": " << cmd << "\n";
  }
  torch_peer(const torch_peer&) = delete;
  torch_peer& operator=(const torch_peer&) = delete;
  ~torch_peer() {
    if (to_) std::fputs("quit\n", to_), std::fclose(to_);
    if (from_) std::fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  /// Empty while the peer runs; else why its figures are missing.
  [[nodiscard]] const std::string& why() const noexcept { return why_; }
  /// "PyTorch in Python (...): " + what, or the row's name when the peer or the case is absent.
  [[nodiscard]] std::string label(const std::string& what) const {
    return "PyTorch in Python, " + what + (why_.empty() ? "" : " (not measured: " + why_ + ")");
  }
  /// µs per operation of `kind` ("host" or "device") of a burst of n operations of `what`; NaN on
  /// failure (the first failure of a case is printed).
  double ask(const std::string& kind, const std::string& what, std::size_t n) {
    if (!why_.empty()) return nan;
    std::fprintf(to_, "%s %s %zu\n", kind.c_str(), what.c_str(), n);
    std::fflush(to_);
    const std::string reply = read_line();
    if (reply.rfind("ok ", 0) == 0) return std::stod(reply.substr(3));
    if (reply.rfind("error ", 0) != 0) why_ = "the PyTorch peer exited (" + reply + ")";
    else if (failed_.find(" " + what + ";") == std::string::npos) {
      failed_ += " " + what + ";";
      std::cout << "PyTorch peer: " << what << ": " << reply << "\n";
    }
    return nan;
  }
  /// A variant of interleaved(): host time of `what` (untimed drain in Python).
  timed_burst host(std::string what) {
    return [this, what = std::move(what)](std::size_t n) { return ask("host", what, n); };
  }

 private:
  std::string read_line() {
    char buf[4096];
    if (!from_ || !std::fgets(buf, sizeof buf, from_)) return "EOF";
    std::string s = buf;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  pid_t pid_ = -1;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
  std::string why_, failed_;
};

}  // namespace ferry_bench
