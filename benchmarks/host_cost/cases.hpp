// The cases of probe.host_cost (host_cost.cu): each is a row of a benchmark that measures it in
// time on the H200, with that row's data, named after it (BENCHMARK.ROW), and each benchmark's cases
// are a translation unit of their own (cases_BENCHMARK.cu), so that one benchmark's cases are
// compiled, and inlined, the same however many cases the others have. Each file includes the
// headers of what it uses, as a program does (fbd89fa's ferry.hpp, included by several files of
// one program, defines the step kernel's launch stub in each: the before build would not link).
#pragma once

#include <ferry/backend/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace host_cost {

using B = ferry::backend::cuda;
using T = std::int32_t;

inline std::vector<T> values(std::size_t n, unsigned seed) {
  std::vector<T> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& e : v) e = static_cast<T>(x = x * 1664525u + 1013904223u);
  return v;
}

// One case: what it holds, and the call. Made once; the call is made warm-up + CALLS times.
struct call_case {
  std::shared_ptr<void> state;
  std::function<void(std::size_t)> call;
};

template <class State, class Call>
call_case make(std::shared_ptr<State> st, Call c) {
  return {st, [st = st.get(), c](std::size_t i) { c(*st, i); }};
}

struct named_case {
  std::string_view name;
  call_case (*set_up)(ferry::stream<B>&);
  // Launches a kernel: its slot passes only through an event recorded after it (the stand-in's
  // kernels store no mark), so a GPU "behind" would cost it queries that a GPU's mark saves. Such
  // a case records a ferry::event after each call (the same record in both builds).
  bool launches_kernel = false;
};

// Each benchmark's cases.
std::vector<named_case> h2d_cases();
std::vector<named_case> uva_pool_cases();
std::vector<named_case> staged_write_cases();
std::vector<named_case> decode_step_cases();

}  // namespace host_cost
