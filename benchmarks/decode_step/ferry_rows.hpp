// bench.decode_step's ferry rows behind an interface that names no ferry type, so that one process
// times the rows of two library trees side by side: ferry_rows.cu is compiled once against this
// tree and, where FERRY_BENCH_BEFORE_TREE is set, once more against that tree with its namespaces
// renamed (CMakeLists.txt), and both are linked into bench.decode_step. Their rows then run
// interleaved with each other and with the same floors, so that a before/after comparison does not
// depend on how fast each process happened to run. (This header holds none of the renamed tokens.)
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

/// One tree's ferry rows of the decode step, all on the stream they were made for.
struct decode_step_ferry_rows {
  /// What a row's untimed guard pass counted per step (ferry::sync_guard of that tree).
  struct guard_counts {
    double syncs = 0, allocations = 0;
    std::string report;  ///< of the last burst that made any
  };
  struct row {
    std::function<void()> step;           ///< one step
    std::function<std::size_t()> slots;   ///< its ring's depth (empty: no ring of its own)
    std::function<guard_counts()> guard;  ///< the guard pass (drains the stream around it)
  };
  /// step_batch with launch::kernel, step_batch with launch::graph, the step from components.
  std::vector<row> rows;
  std::shared_ptr<void> state;  ///< the steps the rows run
};

/// This tree's rows on `s` (an existing stream), each with rings for `max_in_flight` steps.
decode_step_ferry_rows make_decode_step_ferry_rows(cudaStream_t s, std::size_t max_in_flight);
/// The same rows built against FERRY_BENCH_BEFORE_TREE (FERRY_BENCH_DECODE_BEFORE=1 only).
decode_step_ferry_rows make_decode_step_ferry_rows_before(cudaStream_t s, std::size_t max_in_flight);
