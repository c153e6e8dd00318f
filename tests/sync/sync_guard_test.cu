// Tests for include/ferry/sync/sync_guard.hpp: ferry::sync_guard (CUPTI) and ferry::sync_scope<B>.
// Every case that subscribes CUPTI is tagged [no-sanitizer]: compute-sanitizer holds the one
// CUPTI subscription of the process, so those cases run in the plain ctest pass only.
#include <ferry/sync/sync_guard.hpp>
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <barrier>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::MessageMatches;

// ---- both backends: ferry::sync_scope<B> ------------------------------------------------------

#if FERRY_HAS_CUDA
namespace {
// Skips when CUPTI cannot be subscribed here (a profiler attached, ...); fails under
// FERRY_REQUIRE_GPU=1, so that the GPU machine cannot pass without running the guard.
void require_cupti() {
  try {
    ferry::sync_guard probe;
  } catch (const ferry::error& e) {
    if (ferry_test::gpu_required()) FAIL("FERRY_REQUIRE_GPU=1 but sync_guard cannot start: " << e.what());
    SKIP("sync_guard cannot start: " << e.what());
  }
}
}  // namespace
#endif

template <class B>
void require_scope() {
#if FERRY_HAS_CUDA
  if constexpr (std::is_same_v<B, ferry::backend::cuda>) require_cupti();
#endif
}

TEMPLATE_TEST_CASE("sync_scope counts synchronizations and allocations on either backend",
                   "[sync_scope][no-sanitizer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  require_scope<TestType>();
  ferry::stream<TestType> s;
  std::optional<ferry::device_buffer<int, TestType>> buffer;
  {
    ferry::sync_scope<TestType> g;
    CHECK(g.syncs() == 0);
    CHECK(g.allocations() == 0);
    s.synchronize();
    s.synchronize();
    buffer.emplace(64);
    CHECK(g.syncs() == 2);
    CHECK(g.allocations() == 1);
    CHECK_THAT(g.report(), ContainsSubstring("x2"));
    CHECK_NOTHROW(g.check());  // record mode never throws
  }
  buffer.reset();
  auto raise = [&] {
    ferry::sync_scope<TestType> g(ferry::sync_mode::raise);
    s.synchronize();
  };
  CHECK_THROWS_AS(raise(), ferry::sync_error);
  {
    ferry::sync_scope<TestType> g(ferry::sync_scope<TestType>::mode::raise);
    CHECK_NOTHROW(g.check());  // nothing seen: raise mode is silent
  }
}

// ---- CUDA: ferry::sync_guard ------------------------------------------------------------------

#if FERRY_HAS_CUDA
namespace {

void ck(cudaError_t e) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA call failed in the test: ") + cudaGetErrorName(e));
}

// Memory of every kind the cases need, made before any guard (and freed after).
struct cuda_fixture {
  static constexpr std::size_t bytes = 1 << 16;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  void* device = nullptr;
  void* device2 = nullptr;
  void* pinned = nullptr;
  std::vector<std::byte> pageable = std::vector<std::byte>(bytes, std::byte{7});
  std::vector<std::byte> registered = std::vector<std::byte>(bytes, std::byte{9});

  cuda_fixture() {
    ck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ck(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    ck(cudaMalloc(&device, bytes));
    ck(cudaMalloc(&device2, bytes));
    ck(cudaHostAlloc(&pinned, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    ck(cudaHostRegister(registered.data(), bytes, cudaHostRegisterDefault));
  }
  ~cuda_fixture() {
    (void)cudaStreamSynchronize(stream);
    (void)cudaHostUnregister(registered.data());
    (void)cudaFreeHost(pinned);
    (void)cudaFree(device2);
    (void)cudaFree(device);
    (void)cudaEventDestroy(event);
    (void)cudaStreamDestroy(stream);
  }
};

// One call inside a fresh guard: exactly one synchronizing call, named `api` in the report.
template <class F>
void expect_sync(const std::string& api, F&& call, const std::string& shown_as = "") {
  INFO("call: " << api);
  ferry::sync_guard g;
  call();
  CHECK(g.syncs() == 1);
  CHECK(g.allocations() == 0);
  CHECK(g.count(api) == 1);
  CHECK_THAT(g.report(), ContainsSubstring((shown_as.empty() ? api : shown_as) + " x1"));
}

// One call inside a fresh guard: exactly one allocation or free, named `api` in the report.
template <class F>
void expect_allocation(const std::string& api, F&& call) {
  INFO("call: " << api);
  ferry::sync_guard g;
  call();
  CHECK(g.allocations() == 1);
  CHECK(g.syncs() == 0);
  CHECK(g.count(api) == 1);
  CHECK_THAT(g.report(), ContainsSubstring(api + " x1"));
}

void CUPTIAPI ignore_callbacks(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// Whether another subscriber could take CUPTI now (it subscribes and at once unsubscribes).
bool cupti_free() {
  CUpti_SubscriberHandle h = nullptr;
  if (cuptiSubscribe(&h, &ignore_callbacks, nullptr) != CUPTI_SUCCESS) return false;
  (void)cuptiUnsubscribe(h);
  return true;
}

}  // namespace

#if defined(__CUDACC__)
__global__ void sync_guard_test_kernel(int* out) { out[threadIdx.x] = static_cast<int>(threadIdx.x); }
/// Keeps its stream busy for about `cycles` GPU clock cycles (device-side, not a host sleep).
__global__ void sync_guard_test_spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
#endif

TEST_CASE("sync_guard starts only where it can observe CUDA calls", "[sync_guard][no-sanitizer]") {
  if (ferry_test::gpu_present()) {
    CHECK_NOTHROW(ferry::sync_guard{});  // the GPU cases below cover what it sees
  } else {
    REQUIRE_THROWS_MATCHES(ferry::sync_guard{}, ferry::error,
                           MessageMatches(ContainsSubstring("cannot observe CUDA calls")));
  }
}

TEST_CASE("sync_guard catches every kind of synchronizing call on cuda", "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  cuda_fixture f;
  const std::size_t n = cuda_fixture::bytes;

  expect_sync("cudaDeviceSynchronize", [&] { ck(cudaDeviceSynchronize()); });
  expect_sync("cudaStreamSynchronize", [&] { ck(cudaStreamSynchronize(f.stream)); });
  ck(cudaEventRecord(f.event, f.stream));
  expect_sync("cudaEventSynchronize", [&] { ck(cudaEventSynchronize(f.event)); });
  expect_sync("cudaMemcpy", [&] { ck(cudaMemcpy(f.device, f.pageable.data(), n, cudaMemcpyHostToDevice)); });
  expect_sync("cudaMemcpy", [&] { ck(cudaMemcpy(f.device2, f.device, n, cudaMemcpyDeviceToDevice)); });
  expect_sync("cudaMemcpy", [&] { ck(cudaMemcpy(f.pinned, f.device, n, cudaMemcpyDefault)); });
  expect_sync("cudaMemcpy2D", [&] { ck(cudaMemcpy2D(f.device, 256, f.pageable.data(), 256, 256, 4, cudaMemcpyHostToDevice)); });
  expect_sync("cudaMemset", [&] { ck(cudaMemset(f.device, 0, n)); });
  expect_sync("cudaMemset2D", [&] { ck(cudaMemset2D(f.device, 256, 1, 256, 4)); });

  // async copies that touch pageable host memory, in every direction and kind
  const std::string pageable_async = "cudaMemcpyAsync (pageable host memory)";
  expect_sync("cudaMemcpyAsync", [&] { ck(cudaMemcpyAsync(f.device, f.pageable.data(), n, cudaMemcpyHostToDevice, f.stream)); },
              pageable_async);
  expect_sync("cudaMemcpyAsync", [&] { ck(cudaMemcpyAsync(f.pageable.data(), f.device, n, cudaMemcpyDeviceToHost, f.stream)); },
              pageable_async);
  expect_sync("cudaMemcpyAsync", [&] { ck(cudaMemcpyAsync(f.device, f.pageable.data(), n, cudaMemcpyDefault, f.stream)); },
              pageable_async);
  expect_sync("cudaMemcpyAsync", [&] { ck(cudaMemcpyAsync(f.pinned, f.pageable.data(), n, cudaMemcpyHostToHost, f.stream)); },
              pageable_async);
  expect_sync("cudaMemcpy2DAsync",
              [&] { ck(cudaMemcpy2DAsync(f.device, 256, f.pageable.data(), 256, 256, 4, cudaMemcpyHostToDevice, f.stream)); },
              "cudaMemcpy2DAsync (pageable host memory)");

  // through ferry: the same runtime calls
  ferry::stream<ferry::backend::cuda> s;
  expect_sync("cudaStreamSynchronize", [&] { s.synchronize(); });
  ferry::event<ferry::backend::cuda> e;
  sync_guard_test_spin<<<1, 1, 0, s.get()>>>(1'000'000'000);  // about half a second
  e.record(s);
  CHECK_FALSE(e.ready());
  {
    // Still pending: it blocks, bounded (ferry polls instead of calling cudaEventSynchronize), and
    // the guard counts it as one of ferry's own waits.
    ferry::sync_guard g;
    e.synchronize();
    CHECK(g.syncs() == 1);
    CHECK(g.count("cudaEventSynchronize") == 0);
    CHECK_THAT(g.report(), ContainsSubstring("ferry's own bounded waits (a full ring, an event, a blocking copy, "
                                             "a device synchronize) x1"));
  }
  ck(cudaStreamSynchronize(f.stream));
}

TEST_CASE("sync_guard catches every kind of allocation and free on cuda", "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  cuda_fixture f;
  void* p = nullptr;
  expect_allocation("cudaMalloc", [&] { ck(cudaMalloc(&p, 4096)); });
  expect_allocation("cudaFree", [&] { ck(cudaFree(p)); });
  expect_allocation("cudaMallocAsync", [&] { ck(cudaMallocAsync(&p, 4096, f.stream)); });
  expect_allocation("cudaFreeAsync", [&] { ck(cudaFreeAsync(p, f.stream)); });
  ck(cudaStreamSynchronize(f.stream));
  expect_allocation("cudaHostAlloc", [&] { ck(cudaHostAlloc(&p, 4096, cudaHostAllocMapped)); });
  expect_allocation("cudaFreeHost", [&] { ck(cudaFreeHost(p)); });
  expect_allocation("cudaMallocHost", [&] { ck(cudaMallocHost(&p, 4096)); });
  expect_allocation("cudaFreeHost", [&] { ck(cudaFreeHost(p)); });
  expect_allocation("cudaMallocManaged", [&] { ck(cudaMallocManaged(&p, 4096)); });
  expect_allocation("cudaFree", [&] { ck(cudaFree(p)); });
  std::size_t pitch = 0;
  expect_allocation("cudaMallocPitch", [&] { ck(cudaMallocPitch(&p, &pitch, 100, 4)); });
  expect_allocation("cudaFree", [&] { ck(cudaFree(p)); });
  std::vector<std::byte> host(4096);
  expect_allocation("cudaHostRegister", [&] { ck(cudaHostRegister(host.data(), host.size(), cudaHostRegisterDefault)); });
  expect_allocation("cudaHostUnregister", [&] { ck(cudaHostUnregister(host.data())); });

  // through ferry: its buffers allocate and free with the same runtime calls (the mapping of
  // pinned memory proven first: the probe's own allocation, once per process and device, is not
  // what this counts)
  { ferry::pinned_buffer<int, ferry::backend::cuda> proven(1); }
  {
    ferry::sync_guard g;
    { ferry::device_buffer<int, ferry::backend::cuda> b(1024); }
    { ferry::pinned_buffer<int, ferry::backend::cuda> b(1024); }
    CHECK(g.count("cudaMalloc") == 1);
    CHECK(g.count("cudaFree") == 1);
    CHECK(g.count("cudaHostAlloc") == 1);
    CHECK(g.count("cudaFreeHost") == 1);
    CHECK(g.allocations() == 4);
    CHECK(g.syncs() == 0);
  }
}

TEST_CASE("sync_guard does not count launches or async copies between pinned and device memory",
          "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  cuda_fixture f;
  const std::size_t n = cuda_fixture::bytes;
  cudaStream_t other = nullptr;
  ck(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  ck(cudaDeviceSynchronize());
  {
    ferry::sync_guard g;
#if defined(__CUDACC__)
    sync_guard_test_kernel<<<1, 32, 0, f.stream>>>(static_cast<int*>(f.device));
    ck(cudaPeekAtLastError());
#endif
    ck(cudaMemcpyAsync(f.device, f.pinned, n, cudaMemcpyHostToDevice, f.stream));
    ck(cudaMemcpyAsync(f.pinned, f.device, n, cudaMemcpyDeviceToHost, f.stream));
    ck(cudaMemcpyAsync(f.device, f.pinned, n, cudaMemcpyDefault, f.stream));
    ck(cudaMemcpyAsync(f.device, f.registered.data(), n, cudaMemcpyHostToDevice, f.stream));
    ck(cudaMemcpyAsync(f.device2, f.device, n, cudaMemcpyDeviceToDevice, f.stream));
    ck(cudaMemcpy2DAsync(f.device, 256, f.pinned, 256, 256, 4, cudaMemcpyHostToDevice, f.stream));
    ck(cudaMemsetAsync(f.device, 0, n, f.stream));
    ck(cudaEventRecord(f.event, f.stream));
    ck(cudaStreamWaitEvent(other, f.event, 0));
    (void)cudaEventQuery(f.event);
    (void)cudaStreamQuery(f.stream);
    cudaPointerAttributes attr{};
    ck(cudaPointerGetAttributes(&attr, f.pageable.data()));
    CHECK(g.syncs() == 0);
    CHECK(g.allocations() == 0);
    CHECK(g.report() == "no synchronizing calls and no allocations");
    // The same guard does see a pageable copy: it was listening all along.
    ck(cudaMemcpyAsync(f.device, f.pageable.data(), n, cudaMemcpyHostToDevice, f.stream));
    CHECK(g.syncs() == 1);
    CHECK(g.count("cudaMemcpyAsync") == 1);
  }
  ck(cudaStreamSynchronize(f.stream));
  ck(cudaStreamDestroy(other));
}

TEST_CASE("sync_guard nests and shares one subscription", "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  cuda_fixture f;
  REQUIRE(cupti_free());
  {
    ferry::sync_guard outer;
    ck(cudaStreamSynchronize(f.stream));
    {
      ferry::sync_guard inner;
      void* p = nullptr;
      ck(cudaDeviceSynchronize());
      ck(cudaMalloc(&p, 256));
      ck(cudaFree(p));
      CHECK(inner.syncs() == 1);
      CHECK(inner.allocations() == 2);
      CHECK(inner.count("cudaStreamSynchronize") == 0);  // made before the inner guard
    }
    CHECK(outer.syncs() == 2);
    CHECK(outer.allocations() == 2);
    // The inner guard's end did not end the subscription: the outer one still counts, and CUPTI
    // is still taken.
    ck(cudaStreamSynchronize(f.stream));
    CHECK(outer.syncs() == 3);
    CHECK(outer.count("cudaStreamSynchronize") == 2);
    CHECK_FALSE(cupti_free());
    CHECK_THAT(outer.report(), ContainsSubstring("cudaStreamSynchronize x2") && ContainsSubstring("cudaDeviceSynchronize x1") &&
                                   ContainsSubstring("cudaMalloc x1") && ContainsSubstring("cudaFree x1"));
  }
  // The last guard gave the subscription back.
  CHECK(cupti_free());
}

TEST_CASE("sync_guard counts only the calls of its own thread", "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  cuda_fixture f;
  std::barrier step(2);
  std::uint64_t other_syncs = 99, other_allocations = 99;
  std::exception_ptr other_error;
  {
    ferry::sync_guard mine;
    std::thread other([&] {
      try {
        step.arrive_and_wait();  // 1: `mine` is alive
        ck(cudaStreamSynchronize(f.stream));
        void* p = nullptr;
        ck(cudaMalloc(&p, 256));
        {
          ferry::sync_guard theirs;  // shares the subscription with `mine`
          ck(cudaDeviceSynchronize());
          ck(cudaFree(p));
          step.arrive_and_wait();  // 2: the main thread makes its calls while `theirs` is alive
          step.arrive_and_wait();  // 3
          other_syncs = theirs.syncs();
          other_allocations = theirs.allocations();
        }
      } catch (...) {
        other_error = std::current_exception();
        step.arrive_and_drop();  // the main thread's remaining phases complete without this one
      }
    });
    step.arrive_and_wait();  // 1
    step.arrive_and_wait();  // 2
    ck(cudaEventRecord(f.event, f.stream));
    ck(cudaEventSynchronize(f.event));
    step.arrive_and_wait();  // 3
    other.join();
    if (other_error) std::rethrow_exception(other_error);
    CHECK(mine.syncs() == 1);
    CHECK(mine.count("cudaEventSynchronize") == 1);
    CHECK(mine.allocations() == 0);
    CHECK(other_syncs == 1);         // its cudaDeviceSynchronize, not the main thread's event sync
    CHECK(other_allocations == 1);   // its cudaFree (the cudaMalloc came before its guard)
  }
  CHECK(cupti_free());
}

TEST_CASE("sync_guard in raise mode throws sync_error naming the calls", "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  cuda_fixture f;
  const auto raise = ferry::sync_guard::mode::raise;

  SECTION("check() throws for calls it has not reported yet") {
    ferry::sync_guard g(raise);
    CHECK(g.guard_mode() == raise);
    CHECK_NOTHROW(g.check());
    ck(cudaStreamSynchronize(f.stream));
    CHECK_THROWS_MATCHES(g.check(), ferry::sync_error,
                         MessageMatches(ContainsSubstring("cudaStreamSynchronize x1") && ContainsSubstring("raise mode")));
    CHECK_NOTHROW(g.check());  // reported once; the destructor stays silent too
  }
  SECTION("the destructor throws when the scope ends normally") {
    auto scope = [&] {
      ferry::sync_guard g(raise);
      void* p = nullptr;
      ck(cudaMalloc(&p, 256));
      ck(cudaFree(p));
    };
    CHECK_THROWS_MATCHES(scope(), ferry::sync_error,
                         MessageMatches(ContainsSubstring("cudaMalloc x1") && ContainsSubstring("cudaFree x1")));
    CHECK(cupti_free());  // it released the subscription before throwing
  }
  SECTION("the destructor is silent while another exception unwinds") {
    auto scope = [&] {
      ferry::sync_guard g(raise);
      ck(cudaDeviceSynchronize());
      throw std::logic_error("the scope's own error");
    };
    CHECK_THROWS_MATCHES(scope(), std::logic_error, MessageMatches(ContainsSubstring("the scope's own error")));
  }
  SECTION("a pageable async copy is an error in raise mode") {
    auto scope = [&] {
      ferry::sync_guard g(raise);
      ck(cudaMemcpyAsync(f.device, f.pageable.data(), 64, cudaMemcpyHostToDevice, f.stream));
    };
    CHECK_THROWS_MATCHES(scope(), ferry::sync_error,
                         MessageMatches(ContainsSubstring("cudaMemcpyAsync (pageable host memory) x1")));
  }
  SECTION("nothing seen: no throw") {
    auto scope = [&] {
      ferry::sync_guard g(raise);
      ck(cudaMemcpyAsync(f.device, f.pinned, 64, cudaMemcpyHostToDevice, f.stream));
      g.check();
    };
    CHECK_NOTHROW(scope());
  }
  ck(cudaStreamSynchronize(f.stream));
}

TEST_CASE("sync_guard in record mode never throws", "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  cuda_fixture f;
  std::string report;
  auto scope = [&] {
    ferry::sync_guard g;  // record is the default
    CHECK(g.guard_mode() == ferry::sync_guard::mode::record);
    for (int i = 0; i < 3; ++i) ck(cudaStreamSynchronize(f.stream));
    g.check();
    report = g.report();
  };
  CHECK_NOTHROW(scope());
  CHECK(report == "cudaStreamSynchronize x3");
}

TEST_CASE("sync_guard refuses to start when CUPTI is already taken", "[sync_guard][cuda][no-sanitizer]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  require_cupti();
  CUpti_SubscriberHandle h = nullptr;
  REQUIRE(cuptiSubscribe(&h, &ignore_callbacks, nullptr) == CUPTI_SUCCESS);
  CHECK_THROWS_MATCHES(ferry::sync_guard{}, ferry::error,
                       MessageMatches(ContainsSubstring("cuptiSubscribe failed") && ContainsSubstring("never reports a silent zero")));
  REQUIRE(cuptiUnsubscribe(h) == CUPTI_SUCCESS);
  // Once CUPTI is free again, a guard starts and counts.
  ferry::sync_guard g;
  ck(cudaDeviceSynchronize());
  CHECK(g.syncs() == 1);
}
#endif  // FERRY_HAS_CUDA
