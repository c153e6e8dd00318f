// Tests of copy_pool's ferry-internal job protocol (include/ferry/transfer/detail/copy_pool_core.hpp:
// detail::pool_job, detail::pool_session), which async_h2d's large pageable pipeline drives:
// later chunks copied while an earlier one is unfinished (no barrier at chunk boundaries), and a
// slice's error rethrown to the waiting caller.
#include <ferry/transfer/copy_pool.hpp>
#include <ferry/transfer/detail/copy_pool_core.hpp>

#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <stdexcept>

namespace {
// Items 0, 1 are chunk 0 and items 2, 3 chunk 1, as the pipeline publishes them. Item 0 finishes
// only once both items of chunk 1 have finished (or after 20 s, recording the failure): a pool
// that copied chunk by chunk, with a barrier between chunks, could not finish them first.
struct two_chunks final : ferry::detail::pool_job {
  std::mutex m;
  std::condition_variable cv;
  int later_done = 0;
  bool later_first = false;
  std::atomic<int> ran{0};
  void work(std::size_t i) override {
    ran.fetch_add(1);
    std::unique_lock l(m);
    if (i == 0) {
      later_first = cv.wait_for(l, std::chrono::seconds(20), [&] { return later_done == 2; });
    } else if (i >= 2) {
      ++later_done;
      cv.notify_all();
    }
  }
};
}  // namespace

TEST_CASE("copy_pool threads copy later chunks while an earlier chunk is unfinished",
          "[transfer][pool]") {
  // (Two threads at least: the thread or caller running item 0 is held, another must run 2, 3.)
  for (std::size_t threads : {std::size_t{2}, std::size_t{3}, std::size_t{8}}) {
    CAPTURE(threads);
    ferry::copy_pool pool(threads);
    two_chunks job;
    {
      ferry::detail::pool_session session(pool, job, 4);
      session.publish(4);  // both chunks have blocks
      session.wait(0, 2);  // the caller waits for chunk 0 (running its slices too)
      {
        std::lock_guard l(job.m);
        CHECK(job.later_done == 2);  // chunk 1 was copied before chunk 0 was done
      }
      session.wait(2, 4);
    }
    CHECK(job.later_first);
    CHECK(job.ran == 4);
  }
}

TEST_CASE("copy_pool rethrows a slice's error to the waiting caller and stays usable",
          "[transfer][pool]") {
  struct failing final : ferry::detail::pool_job {
    std::atomic<int> ran{0};
    void work(std::size_t i) override {
      ran.fetch_add(1);
      if (i == 1) throw std::runtime_error("slice 1 failed");
    }
  };
  ferry::copy_pool pool(2);
  failing job;
  {
    ferry::detail::pool_session session(pool, job, 3);
    session.publish(3);
    CHECK_THROWS_AS(session.wait(0, 3), std::runtime_error);
  }
  CHECK(job.ran == 3);
  failing again;
  ferry::detail::pool_session session(pool, again, 1);
  session.publish(1);
  CHECK_NOTHROW(session.wait(0, 1));
}
