// A consumer's translation unit: host-backend round trip through ferry's public API.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <numeric>
#include <vector>

int main() {
  using B = ferry::backend::host;
  ferry::stream<B> s;
  ferry::pinned_arena<B> arena;
  std::vector<int> src(1000);
  std::iota(src.begin(), src.end(), 7);
  auto block = arena.acquire(src.size() * sizeof(int));
  std::copy(src.begin(), src.end(), reinterpret_cast<int*>(block.data));
  ferry::pinned_buffer<int, B> dst(src.size());
  ferry::enqueue_host(s, [&] {
    std::copy_n(reinterpret_cast<const int*>(block.data), src.size(), dst.host().begin());
  });
  arena.release(block, s);
  s.synchronize();
  const bool ok = std::equal(src.begin(), src.end(), dst.host().begin());
  std::printf("consumer: %s (default backend %s)\n", ok ? "ok" : "MISMATCH",
              std::is_same_v<ferry::default_backend, ferry::backend::cuda> ? "cuda" : "host");
  return ok ? 0 : 1;
}
