// Tests for include/ferry/detail/nvtx.hpp: ferry's NVTX ranges are off by default and on where
// FERRY_NVTX is defined (this file builds twice: test.detail.nvtx_test, and
// test.detail.nvtx_on_test with ferry::nvtx where the toolkit has NVTX v3); a step's submit, a
// staged apply and an upload run inside them with the same results either way.
#include <ferry/ferry.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

namespace {
using B = ferry::backend::host;
using submit_scope = ferry::detail::nvtx_scope<ferry::detail::nvtx_names::step_submit>;
}  // namespace

TEST_CASE("ferry's NVTX ranges are on exactly where FERRY_NVTX is defined", "[detail][nvtx]") {
#if defined(FERRY_NVTX)
  STATIC_REQUIRE(ferry::detail::nvtx_enabled);
  STATIC_REQUIRE(!std::is_empty_v<submit_scope>);  // an nvtx3 scoped range
#else
  STATIC_REQUIRE(!ferry::detail::nvtx_enabled);
  STATIC_REQUIRE(std::is_empty_v<submit_scope>);  // nothing at all
#endif
}

TEST_CASE("a step's submit, a staged apply and an upload inside their ranges", "[detail][nvtx]") {
  ferry::stream<B> s;
  ferry::device_buffer<std::int32_t, B> up{4}, got{4};
  ferry::staged_write_tensor<std::int32_t, B> t{2, 3, s};
  ferry::step_batch<B> batch;
  auto u = batch.add_upload(got.span(), 4);

  const std::vector<std::int32_t> v{1, 2, 3, 4};
  ferry::async_h2d(v, up.span(), s);
  t.stage_write(1, 0, std::vector<std::int32_t>{7, 8, 9});
  t.apply_write(s);
  batch.begin();
  auto span = u.span(4);
  for (std::size_t i = 0; i < 4; ++i) span[i] = static_cast<std::int32_t>(10 + i);
  batch.submit(s);
  s.synchronize();

  CHECK(std::vector<std::int32_t>(up.data(), up.data() + 4) == v);
  CHECK(std::vector<std::int32_t>(got.data(), got.data() + 4) == std::vector<std::int32_t>{10, 11, 12, 13});
  const std::int32_t* row = t.span().data() + 3;
  CHECK(std::vector<std::int32_t>(row, row + 3) == std::vector<std::int32_t>{7, 8, 9});
  CHECK(batch.steps() == 1);
}
