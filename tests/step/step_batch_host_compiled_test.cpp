// Tests of include/ferry/step/step_batch.hpp on CUDA from a file the host compiler builds: a batch
// constructed and submitted in a .cu (step_batch_host_compiled_factory.cu), held, begun, filled and
// destroyed here (docs/step_batch.md). Every slot begin() makes here takes a device lane of the
// step kernel's module, and the destructor here gives them back.
#include <ferry/ferry.hpp>

#include <support/backends.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

using cuda_backend = ferry::backend::cuda;
using batch_t = ferry::step_batch<cuda_backend>;

batch_t make_host_compiled_batch();
void submit_host_compiled_batch(batch_t& batch, ferry::stream_ref<cuda_backend> s);

TEST_CASE("step_batch on CUDA begun and destroyed in a host-compiled file runs every step", "[step_batch]") {
  FERRY_REQUIRE_BACKEND(cuda_backend);
  constexpr std::size_t n = 1000, steps = 6;
  ferry::stream<cuda_backend> s;
  ferry::device_buffer<std::int32_t, cuda_backend> dst(n * steps);
  const auto data = ferry_test::random_values<std::int32_t>(n * steps, 29);
  // Twice: the second batch takes the lanes the first one's destructor (here) gave back.
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    batch_t batch = make_host_compiled_batch();
    std::vector<batch_t::upload<std::int32_t>> parts;
    for (std::size_t k = 0; k < steps; ++k) parts.push_back(batch.add_upload(dst.span().subspan(k * n, n), n));
    {
      ferry_test::gate<cuda_backend> g(s);  // every step held: begin() here makes a slot (and lane) for each
      for (std::size_t k = 0; k < steps; ++k) {
        batch.begin();
        auto span = parts[k].span(n);
        std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(k * n), n, span.begin());
        submit_host_compiled_batch(batch, s);
      }
      CHECK(batch.slots() == steps);
    }
    s.synchronize();  // a step run on a lane of no module would fault here
    std::vector<std::int32_t> back(n * steps);
    REQUIRE(cudaMemcpy(back.data(), dst.data(), back.size() * sizeof(std::int32_t), cudaMemcpyDefault) ==
            cudaSuccess);
    CHECK(back == data);
    REQUIRE(cudaMemset(dst.data(), 0, back.size() * sizeof(std::int32_t)) == cudaSuccess);
  }
}
