// Tests of include/ferry/sync/detail/cupti_hooks.hpp, ferry-internal: the table of hooked
// runtime calls and sync_guard's CUPTI callback, driven directly (no driver needed).
#include <ferry/sync/sync_guard.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>

TEST_CASE("sync_guard hooks the synchronizing calls and only those", "[sync_guard][no-sanitizer]") {
  using ferry::detail::sync_hook_index;
  using ferry::detail::sync_hook_kind;
  using ferry::detail::sync_hooks;
  auto kind_of = [](CUpti_CallbackId cbid) -> std::optional<sync_hook_kind> {
    const int h = sync_hook_index[cbid];
    if (h < 0) return std::nullopt;
    return sync_hooks[h].kind;
  };
  for (std::size_t h = 0; h < ferry::detail::sync_hook_count; ++h) {
    INFO(sync_hooks[h].name);
    CHECK(sync_hook_index[sync_hooks[h].cbid] == static_cast<int>(h));  // each cbid once
  }
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020) == sync_hook_kind::sync);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020) == sync_hook_kind::sync);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000) == sync_hook_kind::sync);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020) == sync_hook_kind::sync);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020) == sync_hook_kind::sync);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020) == sync_hook_kind::sync);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020) == sync_hook_kind::sync);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020) == sync_hook_kind::async);
  CHECK(kind_of(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000) == sync_hook_kind::async);
  for (CUpti_CallbackId a : {CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
                             CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
                             CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
                             CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000,
                             CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000, CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000})
    CHECK(kind_of(a) == sync_hook_kind::allocate);
  for (CUpti_CallbackId n : {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020,
                             CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_v3020,
                             CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000,
                             CUPTI_RUNTIME_TRACE_CBID_cudaPointerGetAttributes_v4000, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
                             CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020})
    CHECK_FALSE(kind_of(n).has_value());
  CHECK(ferry::detail::sync_hook_name(static_cast<std::size_t>(
            sync_hook_index[CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000])) == "cudaStreamSynchronize");
  CHECK(ferry::detail::sync_hook_name(static_cast<std::size_t>(
            sync_hook_index[CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DFromArrayAsync_v3020])) == "cudaMemcpy2DFromArrayAsync");
}

TEST_CASE("sync_guard's callback records entries into the calling thread's guards only", "[sync_guard][no-sanitizer]") {
  using namespace ferry::detail;
  sync_thread_state& t = sync_thread();
  REQUIRE(t.innermost == nullptr);  // no guard is alive in this test
  sync_guard_node outer, inner;
  inner.outer = &outer;
  t.innermost = &inner;
  auto fire = [](CUpti_CallbackId cbid, CUpti_ApiCallbackSite site, const void* params = nullptr,
                 CUpti_CallbackDomain domain = CUPTI_CB_DOMAIN_RUNTIME_API) {
    CUpti_CallbackData d{};
    d.callbackSite = site;
    d.functionParams = params;
    sync_guard_callback(nullptr, domain, cbid, &d);
  };
  auto total = [](const sync_guard_node& g) {
    std::uint64_t n = 0;
    for (const auto& c : g.counts) n += c.load();
    return n;
  };
  const auto stream_sync = CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020;
  fire(stream_sync, CUPTI_API_ENTER);
  fire(stream_sync, CUPTI_API_EXIT);                                     // counted once, on entry
  fire(stream_sync, CUPTI_API_ENTER, nullptr, CUPTI_CB_DOMAIN_DRIVER_API);  // another domain
  fire(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_ENTER);  // not hooked
  int a = 0, b = 0;
  cudaMemcpyAsync_v3020_params d2d{&a, &b, sizeof a, cudaMemcpyDeviceToDevice, nullptr};
  fire(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, CUPTI_API_ENTER, &d2d);  // no host memory touched
  cudaMemcpyAsync_v3020_params null_src{&a, nullptr, sizeof a, cudaMemcpyHostToDevice, nullptr};
  fire(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, CUPTI_API_ENTER, &null_src);
  std::thread([&] { fire(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, CUPTI_API_ENTER); }).join();
  const auto h = static_cast<std::size_t>(sync_hook_index[stream_sync]);
  CHECK(inner.counts[h].load() == 1);
  CHECK(outer.counts[h].load() == 1);
  CHECK(total(inner) == 1);
  CHECK(total(outer) == 1);
  t.innermost = &outer;  // the inner guard ends: only the outer one counts now
  fire(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020, CUPTI_API_ENTER);
  CHECK(total(inner) == 1);
  CHECK(total(outer) == 2);
  t.innermost = nullptr;
  fire(stream_sync, CUPTI_API_ENTER);  // no guard on this thread: nothing recorded, no crash
  CHECK(total(outer) == 2);
}

