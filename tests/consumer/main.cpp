// A consumer's translation unit (the host compiler): the default backend is the one the consumer's
// configure chose, and a host-backend round trip through ferry's public API works.
#include <ferry/ferry.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

static_assert(std::is_same_v<ferry::default_backend, ferry::backend::FERRY_CONSUMER_BACKEND>,
              "ferry::ferry chose another default backend than this consumer's configure expects");

int main() {
  using B = ferry::backend::host;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  std::vector<int> src(1000);
  std::mt19937 rng(1201);
  std::uniform_int_distribution<int> value(-1000000, 1000000);
  for (auto& v : src) v = value(rng);
  auto block = arena.acquire(src.size() * sizeof(int));
  std::copy(src.begin(), src.end(), reinterpret_cast<int*>(block.data));
  ferry::pinned_buffer<int, B> dst(src.size());
  ferry::enqueue_host(s, [&] {
    std::copy_n(reinterpret_cast<const int*>(block.data), src.size(), dst.host().begin());
  });
  arena.release(block, s);
  s.synchronize();
  const bool ok = std::equal(src.begin(), src.end(), dst.host().begin());
  std::printf("consumer: %s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
