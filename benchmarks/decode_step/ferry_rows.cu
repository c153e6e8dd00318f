// bench.decode_step's ferry rows (ferry_rows.hpp), compiled against one library tree: this one,
// or with FERRY_BENCH_ROWS_BEFORE=1 against FERRY_BENCH_BEFORE_TREE, its namespaces renamed on
// the command line (CMakeLists.txt) so that the two trees' inline code never merges.
#include "ferry_rows.hpp"

#include <decode_step/decode_step.hpp>

#include <support/guarded_steps.hpp>

#include <cuda_runtime_api.h>

#include <memory>

namespace {

using B = ferry::backend::cuda;

/// The three steps, on one stream (ferry's reference to it, its id and device looked up once).
struct steps {
  ferry::stream_ref<B> s;
  decode_step::ferry_step<B> kernel;
  decode_step::ferry_step<B, ferry::launch::graph> graph;
  decode_step::component_step<B> components;
  steps(cudaStream_t h, std::size_t in_flight)
      : s(ferry::stream_ref<B>::identified(h)), kernel(s, in_flight), graph(s, in_flight), components(s, in_flight) {}
};

template <class Step>
decode_step_ferry_rows::row row_of(steps& all, Step& step) {
  decode_step_ferry_rows::row r;
  r.step = [&all, &step] { step.run(all.s); };
  if constexpr (requires { step.slots(); }) r.slots = [&step] { return std::size_t{step.slots()}; };
  r.guard = [&all, &step] {
    auto counts = ferry_bench::guarded_steps([&] { step.run(all.s); },
                                             [&] { FERRY_CUDA_CHECK(cudaStreamSynchronize(all.s.get())); });
    return decode_step_ferry_rows::guard_counts{counts.syncs, counts.allocations, std::move(counts.report)};
  };
  return r;
}

}  // namespace

#if FERRY_BENCH_ROWS_BEFORE
decode_step_ferry_rows make_decode_step_ferry_rows_before(cudaStream_t s, std::size_t max_in_flight) {
#else
decode_step_ferry_rows make_decode_step_ferry_rows(cudaStream_t s, std::size_t max_in_flight) {
#endif
  auto all = std::make_shared<steps>(s, max_in_flight);
  decode_step_ferry_rows out;
  out.rows = {row_of(*all, all->kernel), row_of(*all, all->graph), row_of(*all, all->components)};
  out.state = all;
  return out;
}
