// async_decode: an asynchronous decode loop with speculative decoding (async_decode.hpp): requests
// join and leave, the device keeps per-request state that the host never reads, and every step is
// ONE ferry::step_batch (its gathers take the previous step's sampled tokens and state, its
// epilogue derives positions, seq_lens and slot mappings) followed by a stand-in sampler. Runs on
// the GPU when there is one and on ferry's host backend otherwise.
//
// Checks:
//  - every K steps, after a synchronize (outside the loop), the block table, num_computed, sampled,
//    accepted and the last step's input_ids, positions, seq_lens and slot_mapping are read back and
//    compared with a host model that replays the scheduler and the sampler; the first difference
//    is printed and the program exits 1;
//  - the steps between two checks run inside a ferry::sync_scope: after the first K steps
//    (warm-up) every one of them must make 0 synchronizing calls and 0 allocations, else exit 1.
//
// Usage: async_decode [--steps N] [--check K] [--seed S] [--host] [--graph]
//   --steps N  steps (default 2048), --check K  steps between checks (default 8, 1..256),
//   --seed S   the scheduler's seed (default 1), --host  the host backend even with a GPU,
//   --graph    submit each step as one graph replay (ferry::launch::graph).
// With FERRY_REQUIRE_GPU=1 a missing GPU is an error.
#include "async_decode.hpp"

#include <ferry/sync/sync_guard.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

using namespace async_decode;

struct options {
  long steps = 2048;
  long check = 8;
  std::uint64_t seed = 1;
  bool force_host = false;
  bool graph = false;
};

/// The host model: the same scheduler, the device's state as plain arrays, the epilogue's rule
/// written out again, and the same sampler function.
struct reference {
  scheduler sched;
  std::vector<std::int32_t> table = std::vector<std::int32_t>(max_requests * max_blocks, 0);
  std::vector<std::int32_t> num_computed = initial_state(0), sampled = initial_state(1), accepted = initial_state(2);
  std::vector<std::int32_t> rows, input_ids, seq_lens;
  std::vector<std::int64_t> positions, slot_mapping;

  explicit reference(std::uint64_t seed) : sched(seed) {}

  void step() {
    const std::uint64_t t = sched.next([&](std::size_t slot, std::size_t col, std::span<const std::int32_t> ids) {
      std::copy(ids.begin(), ids.end(), table.begin() + static_cast<std::ptrdiff_t>(slot * max_blocks + col));
    });
    const std::vector<request>& q = sched.rows();
    const std::size_t n = q.size();
    rows.assign(n, 0);
    input_ids.assign(n, 0);
    seq_lens.assign(n, 0);
    positions.assign(n, 0);
    slot_mapping.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(q[i].slot);
      rows[i] = q[i].slot;
      input_ids[i] = q[i].joined ? q[i].first : sampled[r];
      const std::int64_t pos = q[i].joined ? q[i].prompt : std::int64_t{num_computed[r]} + accepted[r];
      if (pos > q[i].bound) throw std::logic_error("the reference passed the scheduler's bound");
      positions[i] = pos;
      seq_lens[i] = static_cast<std::int32_t>(pos + 1);
      slot_mapping[i] = std::int64_t{table[r * max_blocks + static_cast<std::size_t>(pos / block_size)]} * block_size +
                        pos % block_size;
      num_computed[r] = static_cast<std::int32_t>(pos + 1);
    }
    const sampler_args a{t, n, rows.data(), input_ids.data(), positions.data(), sampled.data(), accepted.data()};
    for (std::size_t i = 0; i < n; ++i) sample_row(a, i);
  }
};

/// Pinned buffers the device arrays are read back into.
template <class B>
struct readback {
  ferry::pinned_buffer<std::int32_t, B> table{max_requests * max_blocks};
  ferry::pinned_buffer<std::int32_t, B> num_computed{max_requests}, sampled{max_requests}, accepted{max_requests};
  ferry::pinned_buffer<std::int32_t, B> input_ids{batch}, seq_lens{batch};
  ferry::pinned_buffer<std::int64_t, B> positions{batch}, slot_mapping{batch};
};

/// Prints the first difference of `got` and `want`; true when they are equal.
template <class T>
bool same(const char* what, std::uint64_t step, ferry::pinned_span<T> got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    std::printf("MISMATCH after step %llu: %s has %zu elements, the reference %zu\n",
                static_cast<unsigned long long>(step), what, got.size(), want.size());
    return false;
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    std::printf("MISMATCH after step %llu: %s[%zu] is %lld, the reference %lld\n", static_cast<unsigned long long>(step),
                what, i, static_cast<long long>(got[i]), static_cast<long long>(want[i]));
    return false;
  }
  return true;
}

/// Reads back the device's arrays (one synchronize) and compares them with the reference's.
template <class B, class E>
bool check(const E& e, const reference& ref, readback<B>& rb, ferry::stream_ref<B> s) {
  auto table = ferry::async_d2h(e.block_table(), rb.table.host(), s);
  auto num_computed = ferry::async_d2h(e.num_computed(), rb.num_computed.host(), s);
  auto sampled = ferry::async_d2h(e.sampled(), rb.sampled.host(), s);
  auto accepted = ferry::async_d2h(e.accepted(), rb.accepted.host(), s);
  auto input_ids = ferry::async_d2h(e.input_ids(), rb.input_ids.host(), s);
  auto positions = ferry::async_d2h(e.positions(), rb.positions.host(), s);
  auto seq_lens = ferry::async_d2h(e.seq_lens(), rb.seq_lens.host(), s);
  auto slot_mapping = ferry::async_d2h(e.slot_mapping(), rb.slot_mapping.host(), s);
  s.synchronize();
  const std::uint64_t t = ref.sched.steps() - 1;
  return same("input_ids", t, input_ids, ref.input_ids) && same("positions", t, positions, ref.positions) &&
         same("seq_lens", t, seq_lens, ref.seq_lens) && same("slot_mapping", t, slot_mapping, ref.slot_mapping) &&
         same("num_computed", t, num_computed, ref.num_computed) && same("sampled", t, sampled, ref.sampled) &&
         same("accepted", t, accepted, ref.accepted) && same("block_table", t, table, ref.table);
}

template <class B, class Launch>
int run(const options& o, const char* where) {
  ferry::stream<B> s;
  // At most `check` steps are in flight between two checks: a ring of check + 2 slots never
  // waits, and max_slots == slots never allocates after reserve().
  engine<B, Launch> e(s, o.seed, static_cast<std::size_t>(o.check) + 2);
  reference ref(o.seed);
  readback<B> rb;
  std::printf("async_decode on %s: up to %zu of %zu requests, block table %zu x %zu int32, one step_batch %s "
              "+ a sampler per step\n",
              where, batch, max_requests, max_requests, max_blocks,
              Launch::replays_graph ? "graph replay" : "kernel launch");

  // Held for the whole run so that CUDA's one CUPTI subscription is made once, not once per
  // guarded stretch below (its own counts, the checks' synchronizes included, are not read).
  const ferry::sync_scope<B> subscription;
  std::uint64_t syncs = 0, allocations = 0, rows = 0, checks = 0;
  for (long done = 0; done < o.steps;) {
    const long m = std::min(o.check, o.steps - done);
    {
      ferry::sync_scope<B> guard;
      for (long k = 0; k < m; ++k) e.step(s);
      if (done > 0) {  // the first K steps warm up
        syncs += guard.syncs();
        allocations += guard.allocations();
        if (guard.syncs() + guard.allocations() != 0) std::printf("steps %ld..%ld: %s\n", done, done + m - 1, guard.report().c_str());
      }
    }
    for (long k = 0; k < m; ++k) {
      ref.step();
      rows += ref.rows.size();
    }
    done += m;
    ++checks;
    if (!check<B>(e, ref, rb, s)) {
      std::printf("check: FAILED\n");
      return 1;
    }
  }
  const scheduler& q = ref.sched;
  std::printf("check: %llu read-backs over %llu steps equal to the host reference (%llu requests joined, %llu left, "
              "%llu of them at the table's 1024 tokens, %.1f rows a step)\n",
              static_cast<unsigned long long>(checks), static_cast<unsigned long long>(q.steps()),
              static_cast<unsigned long long>(q.joined()), static_cast<unsigned long long>(q.left()),
              static_cast<unsigned long long>(q.left_full()),
              static_cast<double>(rows) / static_cast<double>(q.steps()));
  std::printf("steady state: %llu syncs, %llu allocations in %ld steps\n", static_cast<unsigned long long>(syncs),
              static_cast<unsigned long long>(allocations), std::max(0L, o.steps - o.check));
  if (syncs + allocations != 0) {
    std::printf("check: FAILED (the loop synchronized or allocated)\n");
    return 1;
  }
  return 0;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&] {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
      const long v = std::stol(argv[++i]);
      if (v < 1) throw std::invalid_argument(a + " must be at least 1");
      return v;
    };
    if (a == "--steps") o.steps = number();
    else if (a == "--check") o.check = std::min(256L, number());
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(number());
    else if (a == "--host") o.force_host = true;
    else if (a == "--graph") o.graph = true;
    else throw std::invalid_argument("unknown argument " + a + " (use --steps N, --check K, --seed S, --host, --graph)");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    const char* require = std::getenv("FERRY_REQUIRE_GPU");
#if defined(__CUDACC__)
    const bool gpu = !o.force_host && ferry::cuda_device_available();
#else
    const bool gpu = false;  // built as C++: the sampler kernel needs nvcc
#endif
    if (!gpu && !o.force_host && require != nullptr && std::string(require) == "1") {
      std::fprintf(stderr, "async_decode: FERRY_REQUIRE_GPU=1 but no CUDA device was found\n");
      return 2;
    }
#if defined(__CUDACC__)
    if (gpu) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) throw std::runtime_error("cudaGetDeviceProperties failed");
      const std::string where = std::string("the GPU (") + p.name + ")";
      return o.graph ? run<ferry::backend::cuda, ferry::launch::graph>(o, where.c_str())
                     : run<ferry::backend::cuda, ferry::launch::kernel>(o, where.c_str());
    }
#endif
#if defined(__CUDACC__)
    const char* where = o.force_host ? "the host backend (--host)" : "the host backend (no CUDA device found)";
#else
    const char* where = "the host backend (built without nvcc)";
#endif
    return o.graph ? run<ferry::backend::host, ferry::launch::graph>(o, where)
                   : run<ferry::backend::host, ferry::launch::kernel>(o, where);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "async_decode: %s\n", e.what());
    return 1;
  }
}
