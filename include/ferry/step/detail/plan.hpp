// ferry/step/detail/plan.hpp: what a step_batch hands to its kernel. A slot's table block is
//
//   [ step_header (64 bytes) | chunk_desc[capacity] ]
//
// and its contents live in other pinned blocks of the slot, addressed absolutely (UVA), so that
// contents never move while a step is being filled. The descriptors are the write plan's
// (staged/detail/layout.hpp) over bytes at absolute addresses: block b of the step kernel runs
// descriptor b, a copy of `count` bytes from `src` to `dst`, or a fill of `count` bytes at `dst`
// with the `fill`-byte value at `src`. Blocks at or beyond `work` do nothing but finish the
// kernel mark.
#pragma once

#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/staged/detail/layout.hpp>

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// The first 64 bytes of a slot's table block, read by the kernel through UVA: the step's
/// descriptor count and its kernel mark (written by the host just before each launch or replay).
struct alignas(64) step_header {
  std::uint64_t work;
  std::uint64_t counter;      // kernel_mark::counter
  std::uint64_t blocks_done;  // kernel_mark::blocks_done
  std::uint64_t value;        // kernel_mark::value
};
static_assert(sizeof(step_header) == 64, "the descriptors start 64 bytes into the table block");

inline chunk_desc* step_descs(void* table) noexcept {
  return reinterpret_cast<chunk_desc*>(static_cast<std::byte*>(table) + sizeof(step_header));
}

/// The step kernel's work on the host backend: every descriptor of the table, in order.
inline void run_step_now(const void* table) noexcept {
  run_chunks_now(step_descs(const_cast<void*>(table)), static_cast<const step_header*>(table)->work, 0, 0, 1);
}

/// A slot's graph under launch::graph: the graph (a cudaGraph_t: one kernel node over the slot's
/// table, what an engine adds as a child node of its own graph) and its executable.
struct step_graph {
  void* graph = nullptr;
  void* exec = nullptr;
};

/// How backend B runs a step table: `preload()`, `launch(stream, table, blocks)` (the step kernel
/// over `blocks` blocks; `table` is the mapped address), and for launch::graph (`graphs`) the
/// per-slot graph: `make_graph(table, blocks, device)`, `replay(stream, graph)`,
/// `destroy_graph(graph)`. Specialized per backend (below; step_kernel.cuh, nvcc only); this
/// primary template is what a translation unit not built by nvcc gets for CUDA: neither a
/// construction (which preloads the step kernel) nor a submit compiles.
template <class B>
struct step_ops {
  static constexpr bool graphs = true;
  template <class... None>
  static void preload() noexcept {
    static_assert(dependent_false<B, None...>,
                  "ferry: step_batch loads its CUDA step kernel when constructed (CUDA loads "
                  "modules lazily, and a first submit behind a held stream would never return): "
                  "construct it in a translation unit built with nvcc that includes "
                  "<ferry/ferry.cuh>, e.g. a factory function returning the batch.");
  }
  template <class... Args>
  static void launch(Args&&...) {
    static_assert(dependent_false<B, Args...>,
                  "ferry: step_batch::submit launches a CUDA kernel: build this translation unit "
                  "with nvcc and include <ferry/ferry.cuh>.");
  }
  template <class... Args>
  static step_graph make_graph(Args&&...) {
    static_assert(dependent_false<B, Args...>,
                  "ferry: step_batch with launch::graph builds CUDA graphs: build this translation "
                  "unit with nvcc and include <ferry/ferry.cuh>.");
    return {};
  }
  template <class... Args>
  static void replay(Args&&...) {
    static_assert(dependent_false<B, Args...>,
                  "ferry: step_batch::submit replays a CUDA graph: build this translation unit "
                  "with nvcc and include <ferry/ferry.cuh>.");
  }
  static void destroy_graph(const step_graph&) noexcept {}
};

/// The host backend runs a step table as one host task; launch::graph runs the same way (no
/// graphs on the host).
template <>
struct step_ops<backend::host> {
  static constexpr bool graphs = false;
  static void preload() noexcept {}
  /// The table and contents must stay unmodified until the stream has run the task.
  static void launch(stream_ref<backend::host> s, const void* table, std::size_t) {
    enqueue_host(s, [table] { run_step_now(table); });
  }
  static step_graph make_graph(const void*, std::size_t, int) noexcept { return {}; }
  static void replay(stream_ref<backend::host>, const step_graph&) noexcept {}
  static void destroy_graph(const step_graph&) noexcept {}
};

}  // namespace ferry::detail
