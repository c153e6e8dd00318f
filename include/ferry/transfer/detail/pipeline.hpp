// ferry/transfer/detail/pipeline.hpp: the large pageable upload (SPEC §5): a copy_pool's threads
// copy chunks of the source into arena blocks while the calling thread enqueues each chunk's
// asynchronous copy as soon as its host copy is done.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/event.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/transfer/copy_pool.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace ferry::detail {

/// Uploads `bytes` bytes from pageable `src` to `dst` on `s` in chunks of pool.chunk_bytes().
///
/// The calling thread acquires one arena block per chunk, as far ahead as the arena allows (with
/// an uncapped arena: the whole source, so a busy stream never makes it wait), and publishes each
/// to the pool, whose threads memcpy the chunk in. In chunk order, the calling thread waits for a
/// chunk's host copy, enqueues its copy_async, and gives its block back fenced on `s`. When the
/// arena's cap is reached, it waits for the oldest enqueued chunk's fence (counted in the pool's
/// stats) and tries again; with nothing of its own in flight it rethrows the capacity_error
/// (chunks already enqueued stay enqueued). Returns once every chunk is enqueued: the host was
/// blocked for the host-copy time, and `src` may be reused at once.
template <class B>
void pipelined_upload(std::byte* dst, const std::byte* src, std::size_t bytes, stream_ref<B> s,
                      pinned_arena<B>& arena, copy_pool& pool) {
  using ops = backend_ops<B>;
  const std::size_t chunk = pool.chunk_bytes();
  const std::size_t count = (bytes + chunk - 1) / chunk;

  struct job final : pool_job {
    const std::byte* src;
    std::size_t bytes;
    std::size_t chunk;
    std::vector<pinned_block> blocks;
    void work(std::size_t i) override {
      const std::size_t off = i * chunk;
      std::memcpy(blocks[i].data, src + off, std::min(chunk, bytes - off));
    }
  } j;
  j.src = src;
  j.bytes = bytes;
  j.chunk = chunk;
  j.blocks.resize(count);

  // Waiting on the oldest chunk's fence needs an event per chunk; only a capped arena can make the
  // pipeline wait, so only then are they made.
  const bool capped = arena.stats().byte_cap != pinned_arena<B>::unlimited;
  std::vector<event<B>> fences(capped ? count : 0);

  std::size_t acquired = 0;  // chunks with a block, published to the pool
  std::size_t enqueued = 0;  // chunks whose copy is enqueued and block given back
  std::size_t waited = 0;    // enqueued chunks whose fence was waited for
  try {
    copy_pool::session session(pool, j, count);
    while (enqueued < count) {
      // 1. Acquire and publish as far ahead as the arena allows.
      bool blocked = false;
      while (acquired < count) {
        try {
          j.blocks[acquired] = arena.acquire(chunk);
        } catch (const capacity_error&) {
          if (acquired == enqueued && waited == enqueued) throw;  // nothing of ours in flight
          blocked = true;
          break;
        }
        session.publish(++acquired);
      }
      // 2. Enqueue the next chunk once its host copy is done.
      if (enqueued < acquired) {
        session.wait(enqueued);
        const std::size_t off = enqueued * chunk;
        pinned_block& b = j.blocks[enqueued];
        ops::copy_async(dst + off, b.data, std::min(chunk, bytes - off), s);
        arena.release(b, s);
        b = {};
        if (capped) fences[enqueued].record(s);
        ++enqueued;
      } else if (blocked) {
        // 3. Every block of ours is in flight and the cap is reached: wait for the oldest.
        session.count_wait();
        fences[waited++].synchronize();
      }
    }
    session.count_copy(count, bytes);
  } catch (...) {
    for (std::size_t i = enqueued; i < acquired; ++i)
      if (j.blocks[i]) arena.release(j.blocks[i]);
    throw;
  }
}

}  // namespace ferry::detail
