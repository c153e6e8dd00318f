// ferry/transfer/detail/pipeline.hpp: the large pageable upload (SPEC §5): a copy_pool's threads
// copy slices of the source into arena blocks, from one queue that runs across chunk boundaries,
// while the calling thread enqueues each chunk's asynchronous copy as soon as its slices are done.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/transfer/copy_pool.hpp>
#include <ferry/transfer/detail/copy_pool_core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

namespace ferry::detail {

/// Uploads `bytes` bytes from pageable `src` to `dst` on `s` in chunks of pool.chunk_bytes().
///
/// Every chunk is cut into slices of copy_slice_bytes (the last slices of a partial last chunk
/// are shorter or empty), and all slices of all chunks form one queue, item k being slice
/// k % per_chunk of chunk k / per_chunk. A chunk's slices are published to the pool as soon as the
/// chunk has a block, and the pool's threads take slices in order whatever chunk they belong to,
/// so host copying never stops at a chunk boundary. The calling thread owns every backend call:
/// in chunk order it waits for a chunk's slices (running unstarted slices of that chunk itself
/// meanwhile), enqueues the chunk's copy_async and marks the stream after it (the reuse core,
/// backend/detail/timeline.hpp). It keeps `depth` chunks published ahead of the one it waits for
/// (at least two, and at least one slice per pool thread beyond the awaited chunk), so the
/// threads always find work.
///
/// Blocks: the next chunk takes the oldest block this copy has enqueued if the stream has passed
/// that copy (the core's passed(); counted in pipeline_stats::reused): on an idle stream the DMA
/// keeps up with the host copy, so a handful of cache-warm blocks go round instead of one fresh
/// block per chunk. Otherwise it takes a block from the arena, so a busy stream never makes
/// the call wait while the arena's cap allows: the whole source is staged. At the cap it waits for
/// the stamp of its oldest enqueued chunk (counted in pipeline_stats::waits, and as a
/// synchronization when it blocks) and reuses that block; with nothing of its own enqueued or
/// being copied, it rethrows the capacity_error (chunks already enqueued stay enqueued). Its
/// blocks go back to the arena, released on `s`, at the end.
/// Returns once every chunk is enqueued: the host was blocked for the host-copy time, and `src`
/// may be reused at once. (Not a slot_ring: its blocks live for one call and go round in strict
/// FIFO order behind the arena's cap, so the ring's persistence, warm order and release add nothing.)
template <class B>
void pipelined_upload(std::byte* dst, const std::byte* src, std::size_t bytes, stream_ref<B> s,
                      pinned_arena<B>& arena, copy_pool& pool) {
  using ops = backend_ops<B>;
  // A source smaller than a chunk is one chunk of its own size (ceil_div is wrap-free).
  const std::size_t chunk = std::min(pool.chunk_bytes(), bytes);
  const std::size_t count = ceil_div(bytes, chunk);
  const std::size_t slice = std::min(chunk, copy_slice_bytes);
  const std::size_t per_chunk = ceil_div(chunk, slice);
  const std::size_t depth = std::max<std::size_t>(2, ceil_div(pool.threads(), per_chunk) + 1);

  struct job final : pool_job {
    const std::byte* src = nullptr;
    std::size_t bytes = 0;
    std::size_t chunk = 0;
    std::size_t slice = 0;
    std::size_t per_chunk = 0;
    std::vector<pinned_block> blocks;  // by chunk: set before the chunk is published
    void work(std::size_t k) override {
      const std::size_t i = k / per_chunk;
      const std::size_t off = i * chunk;
      const std::size_t len = std::min(chunk, bytes - off);
      const std::size_t b = std::min(len, (k % per_chunk) * slice);
      const std::size_t e = std::min(len, b + slice);
      if (b < e) std::memcpy(blocks[i].data + b, src + off + b, e - b);
    }
  } j;
  j.src = src;
  j.bytes = bytes;
  j.chunk = chunk;
  j.slice = slice;
  j.per_chunk = per_chunk;
  j.blocks.resize(count);

  struct held {
    pinned_block block;
    stamp at;  // the end of the block's last copy
  };
  std::vector<held> enqueued_blocks;  // in chunk order; [oldest, end) still held by this copy
  enqueued_blocks.reserve(count);
  std::size_t oldest = 0;
  auto& core = shared_timeline<B>();

  std::size_t acquired = 0;  // chunks with a block, published to the pool
  std::size_t enqueued = 0;  // chunks whose copy is enqueued
  std::size_t reused = 0;    // chunks staged in a block of this copy
  auto give_back = [&] {
    for (std::size_t i = enqueued; i < acquired; ++i)
      if (j.blocks[i]) arena.release(std::exchange(j.blocks[i], {}));
    for (; oldest < enqueued_blocks.size(); ++oldest)
      arena.release(enqueued_blocks[oldest].block, s);
  };
  try {
    {
      pool_session session(pool, j, count * per_chunk);
      // A block for the next chunk, or none when the arena's cap is reached.
      auto next_block = [&]() -> pinned_block {
        if (oldest < enqueued_blocks.size() && core.passed(enqueued_blocks[oldest].at)) {
          ++reused;
          return enqueued_blocks[oldest++].block;
        }
        try {
          return arena.acquire(chunk);
        } catch (const capacity_error&) {
          if (acquired == enqueued && oldest == enqueued_blocks.size()) throw;  // nothing of ours
          return {};
        }
      };
      while (enqueued < count) {
        // 1. Keep `depth` chunks published ahead.
        while (acquired < count && acquired < enqueued + depth) {
          const pinned_block b = next_block();
          if (!b) break;
          j.blocks[acquired] = b;
          session.publish(++acquired * per_chunk);
        }
        if (enqueued < acquired) {
          // 2. Enqueue the oldest chunk being copied once its slices are done.
          session.wait(enqueued * per_chunk, (enqueued + 1) * per_chunk);
          const std::size_t off = enqueued * chunk;
          ops::copy_async(dst + off, j.blocks[enqueued].data, std::min(chunk, bytes - off), s);
          enqueued_blocks.push_back({std::exchange(j.blocks[enqueued], {}), stamp{}});
          ++enqueued;
          enqueued_blocks.back().at = core.mark(s);
        } else {
          // 3. Every chunk of ours is enqueued and the cap is reached: wait for the oldest.
          session.count_wait();
          core.wait(enqueued_blocks[oldest].at);
        }
      }
      session.count_copy(count, reused, bytes);
    }  // the session has ended: no pool thread touches the blocks any more
    give_back();
  } catch (...) {
    give_back();
    throw;
  }
}

}  // namespace ferry::detail
