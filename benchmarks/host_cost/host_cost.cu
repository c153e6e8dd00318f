// probe.host_cost: ferry's own host work per call, counted in instructions, with no GPU and no
// driver. It links stub_cuda_runtime.cpp in place of the CUDA runtime (every runtime call returns
// at once), so that tools/host-cost, which runs it under valgrind twice with different numbers of
// calls, reads what one call costs in ferry's code alone: a count that does not move from run to
// run, where a time on the H200 moves by a tenth between runs (docs/contributing.md, "Host work in
// instructions: tools/host-cost"). Built against a before tree too (probe.host_cost.before, as the
// benchmarks are), the two counts are the same call of two libraries.
//
//   probe.host_cost CASE CALLS   warms CASE up, then makes CALLS calls of it
//   probe.host_cost --list       the cases, a line each: its name, then "kernel" if it launches one
//   probe.host_cost --all CALLS  every case in turn (a test: the stand-in answers all they call)
//
// The cases are rows of the benchmarks, with their data (cases.hpp, a file per benchmark).
#include "cases.hpp"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <vector>

using namespace host_cost;

int main(int argc, char** argv) try {
  std::vector<named_case> cases;
  for (auto* of : {h2d_cases, uva_pool_cases, staged_write_cases, decode_step_cases})
    for (const named_case& c : of()) cases.push_back(c);
  const std::string_view what = argc > 1 ? argv[1] : "";
  if (what == "--list") {
    for (const auto& c : cases)
      std::printf("%.*s %s\n", static_cast<int>(c.name.size()), c.name.data(), c.launches_kernel ? "kernel" : "-");
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: probe.host_cost CASE CALLS | --all CALLS | --list\n");
    return 2;
  }
  const std::size_t calls = std::strtoull(argv[2], nullptr, 10);
  bool found = false;
  for (const auto& c : cases) {
    if (c.name != what && what != "--all") continue;
    found = true;
    ferry::stream<B> s;
    call_case k = c.set_up(s);
    constexpr std::size_t warm_up = 64;  // every slot, block and event the case needs is made here
    for (std::size_t i = 0; i < warm_up; ++i) k.call(i);
    s.synchronize();
    for (std::size_t i = 0; i < calls; ++i) k.call(warm_up + i);
    s.synchronize();
  }
  if (!found) {
    std::fprintf(stderr, "probe.host_cost: no case %s (--list names them)\n", argv[1]);
    return 2;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "probe.host_cost: %s\n", e.what());
  return 1;
}
