// Proving a hot path free of synchronization and allocation (docs/sync_guard.md).
// ferry::sync_scope<B> is ferry::sync_guard (CUPTI) on CUDA and ferry::host_sync_guard (the host
// backend's counters) on the host backend: the proof is written once for both.
#include <ferry/ferry.hpp>
#include <ferry/sync/sync_guard.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using B = ferry::backend::host;  // ferry::backend::cuda on a GPU (link ferry::sync_guard)

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

int main() {
  ferry::stream<B> s;
  ferry::device_buffer<std::int32_t, B> ids(256);
  ferry::uva_backed<std::int64_t, B> positions(256);
  std::vector<std::int32_t> tokens(256);

  auto step = [&](int i) {
    for (auto& t : tokens) t = i;
    ferry::async_h2d(tokens, ids.span(), s);
    for (auto& p : positions.host()) ++p;
    return positions.publish(256, s);  // a kernel would read ids and this view
  };

  step(0);  // warm-up: the arena and the pool allocate what steady state reuses
  s.synchronize();

  {
    ferry::sync_scope<B> guard(ferry::sync_mode::raise);
    for (int i = 1; i <= 100; ++i) {
      step(i);
      // The engine's pace: the step's work is done before the next step reuses its memory
      // (polling an event is not a synchronizing call; a GPU keeps pace by itself).
      ferry::event<B> done;
      done.record(s);
      while (!done.ready()) std::this_thread::yield();
    }
    guard.check();  // raise mode: throws ferry::sync_error naming the calls, if there were any
    check(guard.syncs() == 0 && guard.allocations() == 0, "steady state: 0 syncs, 0 allocations");
  }

  {
    ferry::sync_scope<B> guard;  // record mode: count and name, never throw
    s.synchronize();
    check(guard.syncs() == 1, "a synchronize is seen");
    check(guard.report().find("synchronizations x1") != std::string::npos, "and named");
  }
}
