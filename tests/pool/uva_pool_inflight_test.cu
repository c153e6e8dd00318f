// The evidence for slot safety (SPEC §8): generation-stamped in-flight readers. A consumer that is
// slow on purpose reads each step's view and records what it saw — length, first and last element,
// and a checksum of every element — and must see its own generation (value = f(step, index), never
// zero) across 32 steps whose lengths alternate among {3, 17, 1500, 4090}, for int32, int64 and
// float, with 2 slots and 3 steps in flight. Under reuse::event_fenced the pool must insert slots
// instead of overwriting one still read, and turn round one reader held behind the others (using the
// free slots, inserting none). The same test, with the same misuse under
// reuse::caller_fenced, must observe the corruption (proof that it can see one).
//
// CUDA: the consumer is a kernel that spins (about 2 ms, %globaltimer) before it reads the view
// through UVA; the host keeps 3 steps in flight by waiting for step k-4's event before call k.
// Host backend: the consumer is a stream task held by a gate that the host opens 3 steps later
// (deterministic: at call k, readers k-3..k-1 are held and k-4 has finished), and that sleeps
// briefly before it reads.
//
// On CUDA, a slow kernel also reads the last view while an empty call on its stream, a call on
// another stream, or the pool's destruction (its blocks then taken by another arena user) follow.
#include <pool/pool_support.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t steps = 32;
constexpr std::size_t in_flight = 3;
constexpr std::size_t lengths[] = {3, 17, 1500, 4090};

/// What a reader saw: length, first and last element (as bits), and sum over i of
/// bits(v[i]) * (i + 1), wrapping (order-independent, sensitive to every element and position).
struct observed {
  unsigned long long n = 0, first = 0, last = 0, checksum = 0;
  friend bool operator==(const observed&, const observed&) = default;
};

template <class T>
FERRY_HOST_DEVICE unsigned long long bits_of(T x) {
  if constexpr (sizeof(T) == 4) {
    unsigned int u;
    memcpy(&u, &x, sizeof u);
    return u;
  } else {
    unsigned long long u;
    memcpy(&u, &x, sizeof u);
    return u;
  }
}

template <class T>
observed observe(const T* p, std::size_t n) {
  observed o;
  o.n = n;
  if (n == 0) return o;
  o.first = bits_of(p[0]);
  o.last = bits_of(p[n - 1]);
  for (std::size_t i = 0; i < n; ++i) o.checksum += bits_of(p[i]) * (i + 1);
  return o;
}

template <class T>
observed expected(std::size_t step) {
  const auto g = pool_test::generation<T>(step, lengths[step % 4]);
  return observe(g.data(), g.size());
}

#if defined(__CUDACC__)
__device__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// The slow consumer: thread 0 spins for `spin_ns`, then the block reads the whole view through
/// UVA and thread 0 writes what it saw into `out` (n, first, last, checksum).
template <class T>
__global__ void slow_uva_reader_kernel(ferry::device_span<const T> v, unsigned long long spin_ns,
                                       unsigned long long* out) {
  __shared__ unsigned long long partial[256];
  if (threadIdx.x == 0) {
    const unsigned long long t0 = globaltimer_ns();
    while (globaltimer_ns() - t0 < spin_ns) {
    }
  }
  __syncthreads();
  unsigned long long sum = 0;
  for (std::size_t i = threadIdx.x; i < v.size(); i += blockDim.x) sum += bits_of(v[i]) * (i + 1);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = v.size();
    out[1] = v.size() ? bits_of(v[0]) : 0;
    out[2] = v.size() ? bits_of(v[v.size() - 1]) : 0;
    out[3] = partial[0];
  }
}
#endif

/// Runs the in-flight scenario for element type T on backend B with pool type Pool; returns what
/// each step's reader saw. `keep_closed`: host backend only, every reader stays held until all
/// steps are written (the misuse scenario for caller_fenced, free of real data races).
template <class T, class B, class Pool>
std::vector<observed> run_in_flight(Pool& pool, bool keep_closed = false) {
  ferry::stream<B> s;
  std::vector<observed> seen(steps);
  if constexpr (std::is_same_v<B, ferry::backend::host>) {
    std::vector<std::unique_ptr<ferry_test::gate<B>>> gates;
    std::vector<ferry::event<B>> done(steps);
    for (std::size_t k = 0; k < steps; ++k) {
      // At call k, readers k-3, k-2 and k-1 are held by their gates; reader k-4 has finished.
      if (!keep_closed && k > in_flight) done[k - in_flight - 1].synchronize();
      const auto src = pool_test::generation<T>(k, lengths[k % 4]);
      const auto v = pool.copy_to_uva(src, s);
      gates.push_back(std::make_unique<ferry_test::gate<B>>(s));
      ferry::enqueue_host(s, [v, out = &seen[k]] {
        std::this_thread::sleep_for(std::chrono::microseconds(50));  // slow on purpose
        *out = observe(v.data(), v.size());
      });
      done[k].record(s);
      if (!keep_closed && k >= in_flight) gates[k - in_flight]->open();
    }
    for (auto& g : gates) g->open();
    s.synchronize();
  } else {
#if defined(__CUDACC__) && FERRY_HAS_CUDA
    ferry::device_buffer<unsigned long long, B> results(4 * steps);
    ferry::pinned_buffer<unsigned long long, B> back(4 * steps);
    std::vector<ferry::event<B>> done(steps);
    for (std::size_t k = 0; k < steps; ++k) {
      // At call k, readers k-3 (running), k-2 and k-1 are in flight; reader k-4 has finished.
      if (k > in_flight) done[k - in_flight - 1].synchronize();
      const auto src = pool_test::generation<T>(k, lengths[k % 4]);
      const auto v = pool.copy_to_uva(src, s);
      slow_uva_reader_kernel<T><<<1, 256, 0, s.get()>>>(v, 2'000'000ull, results.data() + 4 * k);
      REQUIRE(cudaPeekAtLastError() == cudaSuccess);
      done[k].record(s);
    }
    ferry::async_d2h(results.span(), back.host(), s);
    s.synchronize();
    for (std::size_t k = 0; k < steps; ++k) {
      const auto* r = back.host().data() + 4 * k;
      seen[k] = observed{r[0], r[1], r[2], r[3]};
    }
#else
    (void)pool;
    (void)keep_closed;
    SKIP("the CUDA in-flight readers are kernels: build this test with nvcc");
#endif
  }
  return seen;
}

template <class T, class B>
void check_event_fenced_in_flight() {
  CAPTURE(sizeof(T), std::is_floating_point_v<T>);
  ferry::uva_pool<T, B> pool(4, 2);  // 2 slots, small: slots grow while readers are in flight
  const auto seen = run_in_flight<T, B>(pool);
  for (std::size_t k = 0; k < steps; ++k) {
    CAPTURE(k);
    CHECK(seen[k] == expected<T>(k));
  }
  const auto st = pool.stats();
  CHECK(st.fence_hits > 0);  // the readers really were in flight when their slots came around
  CHECK(st.inserted > 0);
  CHECK(st.slots <= 8);
  CHECK(st.calls == steps);
}

}  // namespace

TEMPLATE_TEST_CASE("uva_pool event_fenced never overwrites a slot an in-flight reader reads",
                   "[pool][inflight]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  check_event_fenced_in_flight<std::int32_t, TestType>();
  check_event_fenced_in_flight<std::int64_t, TestType>();
  check_event_fenced_in_flight<float, TestType>();
}

TEST_CASE("the in-flight reader test observes the corruption of caller_fenced misuse",
          "[pool][inflight]") {
  using B = ferry::backend::host;
  SECTION("step k+2 written into the slot step k's held reader reads") {
    ferry::stream<B> s;
    ferry::uva_pool<std::int32_t, ferry::reuse::caller_fenced, B> pool(16, 2);
    std::vector<std::int32_t> seen0;
    const auto src = [](std::size_t k) { return pool_test::generation<std::int32_t>(k, 16); };
    {
      ferry_test::gate<B> g(s);
      const auto v0 = pool.copy_to_uva(src(0), s);
      pool_test::enqueue_reader(ferry::stream_ref<B>(s), v0, &seen0);  // held by the gate
      (void)pool.copy_to_uva(src(1), s);
      const auto v2 = pool.copy_to_uva(src(2), s);  // the caller's misuse: step 0 is still read
      CHECK(v2.data() == v0.data());
    }  // the gate opens: the reader runs after the rewrite
    s.synchronize();
    CHECK(seen0 != src(0));  // the test sees the wrong generation...
    CHECK(seen0 == src(2));  // ...namely step 2's
  }
  SECTION("the 32-step scenario with every reader held") {
    std::size_t wrong = 0;
    ferry::uva_pool<std::int32_t, ferry::reuse::caller_fenced, B> pool(4, 2);
    const auto seen = run_in_flight<std::int32_t, B>(pool, true);
    for (std::size_t k = 0; k < steps; ++k) wrong += seen[k] == expected<std::int32_t>(k) ? 0 : 1;
    CHECK(wrong > steps / 2);
    // The same held readers under fences: nothing is wrong (slots are inserted up to max_slots,
    // so only 8 steps fit; throw_when_full makes the ninth throw, where event_fenced would wait
    // for a gate only this thread opens).
    ferry::uva_pool<std::int32_t, ferry::reuse::throw_when_full, B> fenced(4, 2, 8);
    ferry::stream<B> s;
    std::vector<observed> ok(8);
    {
      ferry_test::gate<B> g(s);
      for (std::size_t k = 0; k < 8; ++k) {
        const auto v = fenced.copy_to_uva(pool_test::generation<std::int32_t>(k, lengths[k % 4]), s);
        ferry::enqueue_host(s, [v, out = &ok[k]] { *out = observe(v.data(), v.size()); });
      }
      CHECK_THROWS_AS(fenced.copy_to_uva(pool_test::generation<std::int32_t>(8, 3), s),
                      ferry::capacity_error);
    }
    s.synchronize();
    for (std::size_t k = 0; k < 8; ++k) CHECK(ok[k] == expected<std::int32_t>(k));
  }
}

TEST_CASE("uva_pool keeps a slow kernel's view across an empty call and the pool's destruction",
          "[pool][inflight]") {
#if defined(__CUDACC__) && FERRY_HAS_CUDA
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  using T = std::int32_t;
  constexpr unsigned long long spin_ns = 20'000'000;  // the reader still runs while the host goes on
  ferry::stream<B> s0;
  ferry::stream<B> s1;
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<unsigned long long, B> results(4);
  ferry::pinned_buffer<unsigned long long, B> back(4);
  const auto src = pool_test::generation<T>(5, lengths[2]);
  const std::vector<T> nines(lengths[2], 9);
  std::vector<ferry::pinned_block> taken;
  SECTION("an empty call on the reader's stream, then a call on another stream") {
    ferry::uva_pool<T, B> pool(lengths[2], 2, 8, arena);
    const auto v1 = pool.copy_to_uva(src, s0);
    slow_uva_reader_kernel<T><<<1, 256, 0, s0.get()>>>(v1, spin_ns, results.data());
    REQUIRE(cudaPeekAtLastError() == cudaSuccess);
    (void)pool.copy_to_uva(std::span<const T>{}, s0);
    const auto v3 = pool.copy_to_uva(nines, s1);
    CHECK(v3.data() != v1.data());
    s0.synchronize();
  }
  SECTION("the pool destroyed, its blocks taken by another arena user") {
    {
      ferry::uva_pool<T, B> pool(lengths[2], 2, 8, arena);
      const auto v = pool.copy_to_uva(src, s0);
      slow_uva_reader_kernel<T><<<1, 256, 0, s0.get()>>>(v, spin_ns, results.data());
      REQUIRE(cudaPeekAtLastError() == cudaSuccess);
    }
    for (int k = 0; k < 2; ++k) {
      taken.push_back(arena.acquire(lengths[2] * sizeof(T)));
      std::fill_n(reinterpret_cast<T*>(taken.back().data), lengths[2], 9);
    }
  }
  ferry::async_d2h(results.span(), back.host(), s0);
  s0.synchronize();
  const auto* r = back.host().data();
  CHECK(observed{r[0], r[1], r[2], r[3]} == observe(src.data(), src.size()));
  for (const auto& b : taken) arena.release(b);
#else
  SKIP("the CUDA in-flight readers are kernels: build this test with nvcc");
#endif
}

TEMPLATE_TEST_CASE("uva_pool turns round one held reader's slot without inserting or rewriting it",
                   "[pool][inflight]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  using T = std::int32_t;
  constexpr std::size_t calls = 16;
  ferry::stream<B> s;     // the pool's calls, and a reader of each view
  ferry::stream<B> slow;  // one reader that stays behind for every call (behind a gate)
  ferry::uva_pool<T, B> pool(lengths[3], 4, 4);  // slots == max_slots: no room to insert
  const auto held_src = pool_test::generation<T>(100, lengths[3]);
  std::vector<observed> seen(calls + 1);
#if defined(__CUDACC__) && FERRY_HAS_CUDA
  ferry::device_buffer<unsigned long long, B> results(4 * (calls + 1));
  ferry::pinned_buffer<unsigned long long, B> back(4 * (calls + 1));
#endif
  // Reads `v` on `on` (a host task, or a kernel through UVA) and records what it saw as reader k.
  auto read_view = [&](ferry::device_span<const T> v, ferry::stream<B>& on, std::size_t k) {
    if constexpr (std::is_same_v<B, ferry::backend::host>) {
      ferry::enqueue_host(on, [v, out = &seen[k]] { *out = observe(v.data(), v.size()); });
    } else {
#if defined(__CUDACC__) && FERRY_HAS_CUDA
      slow_uva_reader_kernel<T><<<1, 256, 0, on.get()>>>(v, 0, results.data() + 4 * k);
      REQUIRE(cudaPeekAtLastError() == cudaSuccess);
#else
      (void)v, (void)on, (void)k;
      SKIP("the CUDA in-flight readers are kernels: build this test with nvcc");
#endif
    }
  };
  std::size_t hits = 0;
  ferry::device_span<const T> held;
  {
    ferry_test::gate<B> g(slow);
    held = pool.copy_to_uva(held_src, s);  // slot 1
    read_view(held, slow, 0);              // held by the gate past every call below
    pool.record_use(slow);
    for (std::size_t k = 1; k <= calls; ++k) {
      const std::size_t prev = pool.current_slot();
      const auto v = pool.copy_to_uva(pool_test::generation<T>(k, lengths[k % 4]), s);
      CHECK(v.data() != held.data());
      CHECK(pool.current_slot() == (prev == 0 ? 2 : (prev + 1) % 4));  // slot 1 passed over
      hits += prev == 0 ? 1 : 0;
      read_view(v, s, k);
      s.synchronize();  // this reader is done: only the held reader keeps a slot
    }
    CHECK(pool.stats().inserted == 0);
    CHECK(pool.slots() == 4);
    CHECK(pool.stats().calls == calls + 1);
    CHECK(pool.stats().fence_hits == hits);
    CHECK(hits == 5);
  }
  slow.synchronize();
#if defined(__CUDACC__) && FERRY_HAS_CUDA
  if constexpr (!std::is_same_v<B, ferry::backend::host>) {
    ferry::async_d2h(results.span(), back.host(), s);
    s.synchronize();
    for (std::size_t k = 0; k <= calls; ++k) {
      const auto* r = back.host().data() + 4 * k;
      seen[k] = observed{r[0], r[1], r[2], r[3]};
    }
  }
#endif
  CHECK(seen[0] == observe(held_src.data(), held_src.size()));
  for (std::size_t k = 1; k <= calls; ++k) {
    CAPTURE(k);
    CHECK(seen[k] == expected<T>(k));
  }
}
