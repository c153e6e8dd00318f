// Streams, events, enqueue_host and errors in stream work (docs/backends.md).
// Runs on the host backend; the same calls work with ferry::backend::cuda on a GPU.
#include <ferry/ferry.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

using B = ferry::backend::host;

static void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

int main() {
  ferry::stream<B> a, b;  // two in-order queues, each run by its own worker thread
  std::vector<int> order;

  // enqueue_host returns at once; the function runs in stream order.
  ferry::enqueue_host(a, [&] { order.push_back(1); });
  ferry::event<B> first;
  first.record(a);  // the current end of a's work
  b.wait(first);    // b's later work waits for it; the host does not block
  ferry::enqueue_host(b, [&] { order.push_back(2); });
  b.synchronize();  // the one host-blocking wait
  check(first.ready(), "a has passed the event");
  check(order == std::vector<int>{1, 2}, "b ran after a");

  // A stream_ref is a non-owning, trivially copyable handle; every function taking a stream
  // accepts a stream or a stream_ref. stream_ref<B> r = nullptr; does not compile.
  ferry::stream_ref<B> r = a;
  check(r == a, "a reference names the same queue");

  // An error inside stream work is kept, later work still runs, and the next synchronizing call
  // on that stream throws it, once, as a ferry::error.
  std::atomic<bool> later_ran{false};
  ferry::enqueue_host(r, [] { throw std::runtime_error("bad input"); });
  ferry::enqueue_host(r, [&] { later_ran = true; });
  bool thrown = false;
  try {
    a.synchronize();
  } catch (const ferry::error&) {
    thrown = true;
  }
  check(thrown && later_ran, "the error surfaced at the synchronizing call");
  a.synchronize();  // thrown once: nothing left to report

  // The backend's own counters: what ferry allocated and how often it blocked the host.
  const ferry::backend_stats before = ferry::backend_stats_of<B>();
  a.synchronize();
  check(ferry::backend_stats_of<B>().synchronizations == before.synchronizations + 1,
        "a synchronize is counted");
}
