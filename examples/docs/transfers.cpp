// async_h2d, async_h2d_packed, async_d2h and to_host, the copy_pool pipeline and cpu_gpu_buffer
// (docs/transfers.md).
#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>
#include <list>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <vector>

using B = ferry::backend::host;  // ferry::backend::cuda on a GPU

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

int main() {
  ferry::stream<B> s;
  ferry::device_buffer<std::int32_t, B> ids(256);

  // A pageable std::vector: staged through the pinned arena, one asynchronous copy. The vector
  // is consumed when the call returns: rewrite it at once.
  std::vector<std::int32_t> tokens(200);
  std::iota(tokens.begin(), tokens.end(), 1000);
  ferry::device_span<std::int32_t> got = ferry::async_h2d(tokens, ids.span(), s);
  check(got.size() == 200, "the written prefix of out");
  std::vector<std::int32_t> sent = tokens;
  tokens.assign(200, -1);  // safe: the copy reads ferry's staging block, not the vector
  check(ferry::to_host(got, s) == sent, "async_h2d");

  // Any input range; other element types only through an explicit ferry::cast<T>.
  std::list<std::int64_t> wide{1, 2, 3};
  got = ferry::async_h2d(ferry::cast<std::int32_t>(wide), ids.span(), s);
  check(ferry::to_host(got, s) == std::vector<std::int32_t>{1, 2, 3}, "cast");
  // ferry::async_h2d(wide, ids.span(), s);  // static_assert: "... element type ..."

  // Reading back on the hot path: async_d2h into pinned memory the engine keeps, and an event
  // it waits for only when it needs the data. Off the hot path (checks like the ones here),
  // ferry::to_host(span, stream) returns a std::vector once the copy is done: blocking, and
  // counted as a synchronization.
  ferry::pinned_buffer<std::int32_t, B> host_ids(256);
  ferry::pinned_span<std::int32_t> back = ferry::async_d2h(got, host_ids.host(), s);
  ferry::event<B> back_ready;
  back_ready.record(s);
  back_ready.synchronize();  // then back may be read
  check(back.size() == 3 && back[2] == 3, "async_d2h");

  // Too small an out: std::out_of_range, nothing enqueued.
  bool rejected = false;
  try {
    ferry::async_h2d(std::vector<std::int32_t>(300), ids.span(), s);
  } catch (const std::out_of_range&) {
    rejected = true;
  }
  check(rejected, "out too small");

  // Several arrays of mixed types in one staging block and one copy: each part of a byte out
  // starts at a multiple of max(alignof, 16) bytes.
  ferry::device_buffer<std::uint64_t, B> raw(64);  // 512 bytes
  ferry::device_span<std::byte> bytes(reinterpret_cast<std::byte*>(raw.data()), 512);
  std::vector<float> temperature(8, 0.7f);
  std::vector<std::int64_t> seed{11, 12, 13};
  auto [t, sd] = ferry::async_h2d_packed(bytes, s, temperature, seed);
  check(reinterpret_cast<std::byte*>(sd.data()) - bytes.data() == 32, "aligned parts");
  check(ferry::to_host(t, s) == temperature && ferry::to_host(sd, s) == seed, "packed");

  // A large pageable source goes through a copy_pool: host threads copy chunks into pinned
  // staging while earlier chunks are in flight. It blocks the host for the host-copy time.
  ferry::copy_pool pool(2, std::size_t{1} << 20, std::size_t{1} << 20);  // 2 threads, 1 MiB
  std::vector<std::int32_t> big(3 << 18);                                   // 3 MiB
  std::iota(big.begin(), big.end(), 0);
  ferry::device_buffer<std::int32_t, B> dst(big.size());
  ferry::async_h2d(big, dst.span(), s, ferry::default_arena<B>(), pool);
  check(pool.stats().copies == 1 && pool.stats().chunks == 3, "three 1 MiB chunks");
  check(ferry::to_host(dst.span(), s) == big, "pipelined upload");

  // cpu_gpu_buffer: paired pinned host and device arrays. event_fenced (the default):
  // copy_to_device copies a snapshot, so host() may be rewritten as soon as it returns.
  ferry::cpu_gpu_buffer<std::int64_t, B> logprobs(6);
  for (std::size_t i = 0; i < 6; ++i) logprobs.host()[i] = static_cast<std::int64_t>(i * i);
  logprobs.copy_to_device(6, s);
  for (auto& x : logprobs.host()) x = -1;             // does not race with the copy
  ferry::event<B> ready = logprobs.copy_to_host(6, s);  // device -> host, in stream order
  ready.synchronize();                                  // then host() may be read
  check(logprobs.host()[5] == 25, "the device received the snapshot");
}
