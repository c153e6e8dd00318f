// Several GPUs (SPEC §2, Devices): one portable pinned arena serves streams of two devices;
// device-bound objects (staged-write tensors, fused writers, UVA pools, paired buffers) remember
// the device current at construction, run on their own device's stream whatever device is current
// at the call, reject a stream of another device without losing anything, and never change the
// caller's current device. Runs on a machine with two or more GPUs; skipped otherwise, or failed
// when FERRY_REQUIRE_GPUS asks for two or more.
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <support/backends.hpp>
#include <staged/support.hpp>

#include <catch2/catch_test_macros.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

// ferry::cuda_device_available (include/ferry/backend/devices.hpp): false on a host-backend build;
// with the CUDA backend, true exactly when the runtime reports a device (on the GPU machine,
// FERRY_REQUIRE_GPU=1 demands true), and then usable; the same answer every time. (Without a
// driver, cudaErrorInsufficientDriver stays the runtime's last error whatever consumes it.)
TEST_CASE("devices: cuda_device_available says whether the CUDA backend can run here", "[devices]") {
  static_assert(noexcept(ferry::cuda_device_available()));
  const bool available = ferry::cuda_device_available();
#if FERRY_HAS_CUDA
  int n = 0;
  const bool runtime_sees_one = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  static_cast<void>(cudaGetLastError());
  CHECK(available == runtime_sees_one);
  if (ferry_test::gpu_required()) CHECK(available);
  if (available) {  // then the CUDA backend works (no error left behind): a stream and a copy
    CHECK(cudaPeekAtLastError() == cudaSuccess);
    ferry::stream<ferry::backend::cuda> s;
    const auto v = ferry_test::random_values<std::int32_t>(100, 1);
    ferry::device_buffer<std::int32_t, ferry::backend::cuda> d(v.size());
    ferry::async_h2d(v, d.span(), s);
    CHECK(ferry::to_host(d.span(), s) == v);
  }
#else
  CHECK_FALSE(available);  // the host backend only
#endif
  CHECK(ferry::cuda_device_available() == available);
}

#if FERRY_HAS_CUDA && defined(__CUDACC__)

namespace {

using B = ferry::backend::cuda;

void require_two_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (n >= 2) return;
  const char* want = std::getenv("FERRY_REQUIRE_GPUS");
  if (want != nullptr && std::atoi(want) >= 2) FAIL("FERRY_REQUIRE_GPUS=" << want << " but " << n << " CUDA devices found");
  SKIP("needs two CUDA devices; this machine has " << n);
}

int current_device() {
  int d = -1;
  REQUIRE(cudaGetDevice(&d) == cudaSuccess);
  return d;
}

// One stream per device, each made with its device current; device 0 is current afterwards.
std::array<ferry::stream<B>, 2> streams_of_two_devices() {
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  ferry::stream<B> s1;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ferry::stream<B> s0;
  return {std::move(s0), std::move(s1)};
}

}  // namespace

TEST_CASE("devices: one portable arena stages uploads for streams of two devices", "[devices]") {
  require_two_devices();
  auto streams = streams_of_two_devices();
  ferry::pinned_arena<B> arena;
  constexpr std::size_t n = 4096, rounds = 16;
  std::array<ferry::device_buffer<std::int32_t, B>, 2> out = [] {
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    ferry::device_buffer<std::int32_t, B> b1(n * rounds);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    return std::array{ferry::device_buffer<std::int32_t, B>(n * rounds), std::move(b1)};
  }();
  std::array<std::vector<std::int32_t>, 2> expect{std::vector<std::int32_t>(n * rounds),
                                                  std::vector<std::int32_t>(n * rounds)};
  for (std::size_t r = 0; r < rounds; ++r) {
    for (int d = 0; d < 2; ++d) {
      REQUIRE(cudaSetDevice(d) == cudaSuccess);  // async_h2d: the stream of the current device
      const auto v = ferry_test::random_values<std::int32_t>(n, 100 * r + d);
      std::copy(v.begin(), v.end(), expect[d].begin() + static_cast<std::ptrdiff_t>(r * n));
      ferry::async_h2d(v, out[d].span().subspan(r * n, n), streams[d], arena);
      // Drained before the other device's upload: the block just used on this device is free,
      // and the next acquire hands the same block to the other device's stream.
      streams[d].synchronize();
    }
  }
  const auto stats = arena.stats();
  CHECK(stats.allocations == 1);  // one block, fenced on each device's stream in turn
  CHECK(stats.reuses == 2 * rounds - 1);
  for (int d = 0; d < 2; ++d) {
    std::vector<std::int32_t> got(n * rounds);
    REQUIRE(cudaMemcpy(got.data(), out[d].data(), got.size() * sizeof(std::int32_t), cudaMemcpyDefault) == cudaSuccess);
    CHECK(got == expect[d]);
  }
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("devices: a staged-write tensor applies on its own device from any current device", "[devices]") {
  require_two_devices();
  auto streams = streams_of_two_devices();
  constexpr std::size_t rows = 64, cols = 2048;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  ferry::staged_write_tensor<std::int32_t, B> t1(rows, cols, streams[1]);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ferry::staged_write_tensor<std::int32_t, B> t0(rows, cols, streams[0]);
  std::array<ferry::staged_write_tensor<std::int32_t, B>*, 2> t{&t0, &t1};
  std::array<ferry_test::model<std::int32_t>, 2> m{ferry_test::model<std::int32_t>(rows, cols),
                                                   ferry_test::model<std::int32_t>(rows, cols)};
  std::mt19937_64 rng(7);
  const std::uint64_t errors_before = ferry::swallowed_errors();
  for (int step = 0; step < 24; ++step) {
    for (int d = 0; d < 2; ++d) {
      // The other device is current: the apply must still run on device d, and leave it current.
      const int other = 1 - d;
      REQUIRE(cudaSetDevice(other) == cudaSuccess);
      // Small steps take the inline path, large ones read a staging slot through UVA.
      const std::size_t writes = step % 2 ? 3 : 40, max_len = step % 2 ? 16 : 1500;
      for (std::size_t w = 0; w < writes; ++w) {
        const std::size_t row = rng() % rows, start = rng() % cols;
        const std::size_t len = 1 + rng() % std::min(max_len, cols - start);
        const auto v = ferry_test::random_bits<std::int32_t>(len, rng);
        t[d]->stage_write(row, start, v);
        m[d].write(row, start, v);
      }
      t[d]->apply_write(streams[d]);
      CHECK(current_device() == other);
    }
  }
  for (int d = 0; d < 2; ++d) {
    const auto got = ferry_test::read_back<std::int32_t, B>(*t[d], streams[d]);
    INFO("device " << d << ", first difference at " << ferry_test::first_difference(got, m[d].data));
    CHECK(ferry_test::same_bits(got, m[d].data));
  }

  SECTION("a stream of another device is rejected and the staged writes are kept") {
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    t1.stage_write(3, 5, std::vector<std::int32_t>{11, 12, 13});
    REQUIRE_THROWS_AS(t1.apply_write(streams[0]), ferry::error);
    CHECK(t1.pending() == 1);
    CHECK(current_device() == 1);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    t1.apply_write(streams[1]);
    m[1].write(3, 5, {11, 12, 13});
    CHECK(ferry_test::same_bits(ferry_test::read_back<std::int32_t, B>(t1, streams[1]), m[1].data));
    CHECK(current_device() == 0);
  }
  CHECK(ferry::swallowed_errors() == errors_before);
}

TEST_CASE("devices: a fused writer applies its own device's tensors and rejects another device's", "[devices]") {
  require_two_devices();
  auto streams = streams_of_two_devices();
  constexpr std::size_t rows = 32, cols = 512;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  ferry::staged_write_tensor<float, B> a(rows, cols, streams[1]), b(rows, cols, streams[1]);
  ferry::fused_staged_writer<float, B> writer(2);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ferry::staged_write_tensor<float, B> c(rows, cols, streams[0]);
  ferry_test::model<float> ma(rows, cols), mb(rows, cols);
  std::mt19937_64 rng(11);
  for (int step = 0; step < 8; ++step) {
    for (std::size_t w = 0; w < 20; ++w) {
      const auto va = ferry_test::random_bits<float>(1 + rng() % 300, rng);
      const auto vb = ferry_test::random_bits<float>(1 + rng() % 300, rng);
      const std::size_t ra = rng() % rows, rb = rng() % rows;
      a.stage_write(ra, 0, va);
      ma.write(ra, 0, va);
      b.stage_write(rb, cols - vb.size(), vb);
      mb.write(rb, cols - vb.size(), vb);
    }
    writer.apply(streams[1], a, b);  // device 0 current
    CHECK(current_device() == 0);
  }
  CHECK(ferry_test::same_bits(ferry_test::read_back<float, B>(a, streams[1]), ma.data));
  CHECK(ferry_test::same_bits(ferry_test::read_back<float, B>(b, streams[1]), mb.data));

  a.stage_write(1, 1, std::vector<float>{1.5f});
  c.stage_write(2, 2, std::vector<float>{2.5f});
  REQUIRE_THROWS_AS(writer.apply(streams[1], c), ferry::error);  // c lives on device 0
  CHECK(c.pending() == 1);
  REQUIRE_THROWS_AS(writer.apply(streams[0], a), ferry::error);  // the writer lives on device 1
  CHECK(a.pending() == 1);
}

TEST_CASE("devices: UVA pools and paired buffers serve their own device from any current device", "[devices]") {
  require_two_devices();
  auto streams = streams_of_two_devices();
  constexpr std::size_t n = 3000;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  ferry::uva_pool<std::int64_t, B> pool(n);
  ferry::cpu_gpu_buffer<std::int64_t, B> pair(n);
  ferry::device_buffer<std::int64_t, B> out(n);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  for (int step = 0; step < 12; ++step) {
    const auto v = ferry_test::random_values<std::int64_t>(n - static_cast<std::size_t>(step), 40 + step);
    (void)pool.copy_to_device(v, out.span(), streams[1]);
    CHECK(current_device() == 0);
    std::vector<std::int64_t> got(v.size());
    streams[1].synchronize();
    REQUIRE(cudaMemcpy(got.data(), out.data(), got.size() * sizeof(std::int64_t), cudaMemcpyDefault) == cudaSuccess);
    CHECK(got == v);

    std::copy(v.begin(), v.end(), pair.host().begin());
    pair.copy_to_device(v.size(), streams[1]);
    std::fill(pair.host().begin(), pair.host().end(), 0);
    auto done = pair.copy_to_host(v.size(), streams[1]);
    done.synchronize();
    CHECK(std::vector<std::int64_t>(pair.host().begin(), pair.host().begin() + static_cast<std::ptrdiff_t>(v.size())) == v);
    CHECK(current_device() == 0);
  }
  const auto v = ferry_test::random_values<std::int64_t>(8, 99);
  REQUIRE_THROWS_AS(pool.copy_to_uva(v, streams[0]), ferry::error);
  REQUIRE_THROWS_AS(pair.copy_to_device(8, streams[0]), ferry::error);
}

#else

TEST_CASE("devices: several GPUs need the CUDA backend", "[devices]") {
  SKIP("built without nvcc or without CUDA: the staged-write applies here launch kernels");
}

#endif
