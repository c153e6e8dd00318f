// Built by the host compiler, linked with model.cu (nvcc): README's engine step on the CUDA
// backend, its kernel launched through launch_model. Without a CUDA device it exits with 77
// (skipped), unless FERRY_REQUIRE_GPU=1 makes that a failure.
#include <ferry/ferry.hpp>

#include "model.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

int main() {
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    const char* require = std::getenv("FERRY_REQUIRE_GPU");
    const bool required = require != nullptr && std::string(require) == "1";
    std::printf("consumer_model: %s: no CUDA device (%s)\n", required ? "FAILED" : "skipped",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return required ? 1 : 77;
  }

  constexpr std::size_t n = 300, rows = 7, cols = 11;
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int> value(-50000, 50000);

  ferry::stream<> stream;
  ferry::device_buffer<int> ids(n);
  model_table table = make_table(rows, cols);
  ferry::uva_backed<std::int64_t> positions(n);
  ferry::device_buffer<std::int64_t> out(n, stream);
  ferry::pinned_buffer<std::int64_t> result(n);

  std::vector<int> tokens(n);
  for (auto& t : tokens) t = value(rng);
  std::vector<int> expect_table(rows * cols, 0);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<int> row(cols - r);
    for (auto& v : row) v = value(rng);
    table.stage_write(r, r, row);
    std::copy(row.begin(), row.end(), expect_table.begin() + static_cast<std::ptrdiff_t>(r * cols + r));
  }
  for (auto& p : positions.host()) p = value(rng) * std::int64_t{100003};

  ferry::async_h2d(tokens, ids.span(), stream);
  apply_table(table, stream);
  const ferry::device_span<const std::int64_t> pos = positions.publish(n, stream);
  launch_model(stream, ids.span(), table.view(), pos, out.span());
  ferry::async_d2h(out.span(), result.host(), stream);
  stream.synchronize();

  // The result's kernel view (pinned memory through UVA) is host-accessible: device_span's
  // operator[] reads it from this host-compiled file, as model.cu's kernel does on the device.
  const ferry::device_span<const std::int64_t> mapped = result.device();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t want = std::int64_t{tokens[i]} * 1000 + expect_table[(i % rows) * cols + i % cols] +
                              positions.host()[i];
    if ((result.host()[i] != want || mapped[i] != want) && bad++ < 5)
      std::printf("consumer_model: out[%zu] = %lld, want %lld\n", i,
                  static_cast<long long>(result.host()[i]), static_cast<long long>(want));
  }
  std::printf("consumer_model: %s\n", bad == 0 ? "ok" : "MISMATCH");
  return bad == 0 ? 0 : 1;
}
