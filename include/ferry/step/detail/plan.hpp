// ferry/step/detail/plan.hpp: what a step_batch hands to its kernel. A step's table is
//
//   [ step_header (64 bytes) | step_desc[capacity] | step_view_entry[views] | epilogue ]
//
// and its contents live in the slot's other pinned blocks, addressed absolutely (UVA), so that
// contents never move while a step is being filled. Block b of the step kernel runs step_desc b,
// over bytes at absolute addresses: a copy of `count` bytes from `src` to `dst` or a fill of
// `count` bytes at `dst` with the `kind`-byte value at `src` (both run by the write plan's kernel
// body, write/kernel.cuh, as a chunk_desc over bytes from bases 0), or a piece of a record (`kind`
// has piece_flag; piece_record):
// of a gather, `count` elements at `dst` from the record at `src` (the source's address, the host
// values' address, then the int32 indices); of a scatter (scatter_flag too), `count` one-element
// writes into the target at `dst` (the values' address, then the uint32 element indices; the
// write plan's one-element writes while none of them may overlap). Blocks at or beyond `work` do
// nothing. The last block of the launch to finish (an arrival count in device memory, one per
// launch in flight) runs the epilogue with the view entries, then stores the kernel mark.
//
// Under launch::graph the table is not passed: one graph executable serves every step, and its
// kernel finds the step's table on the device, in a ring of tables indexed by the batch's device
// step counter (step_locator), which the last block advances.
#pragma once

#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/write/chunk.hpp>
#include <ferry/step/step_context.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ferry::detail {

/// The first 64 bytes of a step's table, read by the kernel through UVA, written by the host just
/// before each launch or replay.
struct alignas(64) step_header {
  std::uint64_t work;      // descriptors this step
  std::uint64_t counter;   // kernel mark: the line's mapped counter (0: none)
  std::uint64_t value;     // kernel mark: the value stored there
  std::uint64_t arrivals;  // CUDA: device address of the launch's arrival count
  std::uint64_t step;      // launch::graph: the batch's step counter's value for this step
  std::uint64_t views;     // address of the step's view entries (the epilogue's)
  std::uint64_t epilogue;  // address of the epilogue functor's bytes (the host backend's)
  std::uint64_t number;    // the step's number: the batch's submits before it
};
static_assert(sizeof(step_header) == 64, "the descriptors start 64 bytes into the table block");

/// One descriptor of a step's table, one thread block's work, over bytes at absolute addresses:
/// `kind` 0, a copy of `count` bytes from `src` to `dst`; `kind` 1, 2, 4 or 8, a fill of `count`
/// bytes at `dst` with the `kind`-byte value at `src`; `kind` with piece_flag, a piece of a
/// gather's or scatter's record at `src` (below). The first two are the write plan's descriptor
/// (write/chunk.hpp's chunk_desc, words of one byte from bases 0), with the same layout, so that
/// its kernel body runs them as they are.
struct step_desc {
  std::uint64_t dst;
  std::uint64_t src;
  std::uint32_t count;
  std::uint32_t kind;
};
static_assert(sizeof(step_desc) == sizeof(chunk_desc) && offsetof(step_desc, kind) == offsetof(chunk_desc, fill),
              "a step's copies and fills are run as the write plan's descriptors");

inline step_desc* step_descs(void* table) noexcept {
  return reinterpret_cast<step_desc*>(static_cast<std::byte*>(table) + sizeof(step_header));
}

/// A piece of a record (a gather's or a scatter's) has piece_flag in `kind` (a scatter's also
/// scatter_flag), the piece's number in bits 4-29, and the element size's log2 in bits 0-3;
/// `count` is the piece's elements, the ones from element piece * piece_elements of the record.
inline constexpr std::uint32_t piece_flag = 0x80000000u;
inline constexpr std::uint32_t scatter_flag = 0x40000000u;
/// Pieces a record may have (its elements: piece_elements times as many).
inline constexpr std::size_t max_pieces = std::size_t{1} << 26;
constexpr std::uint32_t piece_fill(std::uint32_t kind, std::size_t piece, std::size_t elem) noexcept {
  const std::uint32_t log2 = elem == 1 ? 0 : elem == 2 ? 1 : elem == 4 ? 2 : 3;
  return piece_flag | kind | static_cast<std::uint32_t>(piece << 4) | log2;
}
/// The first element of the record that the piece of `kind` moves.
FERRY_HOST_DEVICE constexpr std::size_t piece_first(std::uint32_t kind) noexcept {
  return static_cast<std::size_t>((kind & ~(piece_flag | scatter_flag)) >> 4) * piece_elements;
}
/// The head of a record in the slot: for a gather the device source's address and the host
/// values' (mapped; 0 when none this step), followed by the step's int32 indices; for a scatter
/// the values' address (`src` is 0), followed by the uint32 element indices into the target.
struct piece_record {
  std::uint64_t src;
  std::uint64_t values;
};
static_assert(sizeof(piece_record) == 16, "the indices follow 16 bytes into a record");

/// The host's piece of a record: a gather's `d.count` elements from the record at d.src into
/// d.dst, or a scatter's `d.count` elements into the target at d.dst.
inline void run_piece_now(const step_desc& d) noexcept {
  const auto* rec = reinterpret_cast<const piece_record*>(d.src);
  const std::size_t elem = std::size_t{1} << (d.kind & 0xfu);
  const std::size_t first = piece_first(d.kind);
  auto* dst = reinterpret_cast<std::byte*>(d.dst);
  const auto* values = reinterpret_cast<const std::byte*>(rec->values) + first * elem;
  if (d.kind & scatter_flag) {
    const auto* idx = reinterpret_cast<const std::uint32_t*>(rec + 1) + first;
    for (std::size_t i = 0; i < d.count; ++i) std::memcpy(dst + std::size_t{idx[i]} * elem, values + i * elem, elem);
    return;
  }
  const auto* idx = reinterpret_cast<const std::int32_t*>(rec + 1) + first;
  const auto* src = reinterpret_cast<const std::byte*>(rec->src);
  for (std::size_t i = 0; i < d.count; ++i) {
    const std::int32_t j = idx[i];
    std::memcpy(dst + i * elem, j >= 0 ? src + static_cast<std::size_t>(j) * elem : values + i * elem, elem);
  }
}

/// The step kernel's work on the host backend: every descriptor of the table, in order, then the
/// epilogue (`epilogue`: how to call the functor whose bytes the table holds; null: none). What
/// the epilogue throws leaves here, after the step's data has landed: the stream keeps it for its
/// next synchronizing call (SPEC §2), as it keeps an enqueue_host task's.
inline void run_step_now(const void* table, void (*epilogue)(const void* table)) {
  const auto* h = static_cast<const step_header*>(table);
  const step_desc* d = step_descs(const_cast<void*>(table));
  for (std::uint64_t i = 0; i < h->work; ++i) {
    if (d[i].kind & piece_flag) {
      run_piece_now(d[i]);
    } else {
      const chunk_desc c{d[i].dst, d[i].src, d[i].count, d[i].kind};
      run_chunks_now(&c, 1, 0, 0, 1);
    }
  }
  if (epilogue) epilogue(table);
}

/// Calls the epilogue F whose bytes the table holds, on the host, as one thread (what it throws
/// goes to the stream: run_step_now).
template <class F>
void call_epilogue_now(const void* table) {
  const auto* h = static_cast<const step_header*>(table);
  F f;
  std::memcpy(static_cast<void*>(&f), reinterpret_cast<const void*>(h->epilogue), sizeof(F));
  f(step_context(reinterpret_cast<const step_view_entry*>(h->views), h->number, 0, 1));
}


/// Where the step kernel finds its table and its lane (step_lane): launch::kernel (`count` 0):
/// the table at `tables`, the lane of the step's slot; launch::graph and launch::capture: table
/// `c % count` of the ring at `tables` (`stride` bytes apart, ring_table), where c is the value of
/// the batch lane's step counter; the table's header must name step c, else the launch is not a
/// submitted (committed) step and does nothing (the counter stays). launch::capture also names the
/// batch's capture_status (`status`, mapped), where the launch reports what it found.
struct step_locator {
  std::uint64_t tables;
  std::uint64_t stride;
  std::uint64_t count;
  std::uint64_t lane;
  std::uint64_t status = 0;
};

/// The table of the ring at `loc` that the step counter's value `counted` finds.
FERRY_HOST_DEVICE constexpr std::uint64_t ring_table(const step_locator& loc, std::uint64_t counted) noexcept {
  return loc.tables + (counted % loc.count) * loc.stride;
}

// ---- launch::capture: the commit protocol, shared by the step kernel and the host runner --------
//
// A commit encodes the step into the ring's table for the counter value it will run at, and names
// that value in the table's header last (a release store): the step is then committed. A replay
// (the recorded kernel, or run_recorded_now) reads the counter, finds its table (ring_table), runs
// it when its header names the counter's value (then advances the counter and reports `ran`), and
// otherwise does no work and reports the first such replay in `missed` (a replay without a commit).

/// What the replays of a recorded step report to the host: a pinned, mapped block of the batch,
/// written by the step kernel (CUDA) or the host runner, read by the batch's next host call.
struct capture_status {
  std::uint64_t missed;   // 0, else 1 + the counter's value at the first replay that found no commit
  std::uint64_t ran;     // the counter's value after the last step a replay ran (host: the counter)
};

/// Stores `v` at `at`, a word the host reads while another thread or the device may write it
/// (CUDA: after every write of the kernel before it, through the system fence).
FERRY_HOST_DEVICE inline void store_word(std::uint64_t* at, std::uint64_t v) noexcept {
#if defined(__CUDA_ARCH__)
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(at) = v;
#else
  std::atomic_ref<std::uint64_t>(*at).store(v, std::memory_order_release);
#endif
}
/// Loads a word that another thread or the device stores with store_word.
FERRY_HOST_DEVICE inline std::uint64_t load_word(const std::uint64_t* at) noexcept {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const volatile unsigned long long*>(at);
#else
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(at)).load(std::memory_order_acquire);
#endif
}

/// The report of a replay at the counter's value `counted` into the capture_status at `status`
/// (0: none, launch::graph): `ran` when it found the committed step and ran it, else the first
/// replay that found none is kept in `missed`.
FERRY_HOST_DEVICE inline void report_replay(std::uint64_t status, std::uint64_t counted, bool ran) noexcept {
  if (status == 0) return;
  auto* st = reinterpret_cast<capture_status*>(status);
  if (ran)
    store_word(&st->ran, counted + 1);
  else if (load_word(&st->missed) == 0)
    store_word(&st->missed, counted + 1);
}

/// The host backend's replay of a recorded step (launch::capture, epilogue F; void: none): what the
/// step kernel does when a replay of the engine's graph runs it, with the batch's step counter in
/// the capture_status's `ran` word (one replay at a time: replays are ordered, as the engine's are;
/// threads waiting on `ran` are woken). Returns the counter's value after the step it ran, 0 when
/// it found none committed.
template <class F>
std::uint64_t run_recorded_now(const step_locator& loc) noexcept {
  auto* st = reinterpret_cast<capture_status*>(loc.status);
  const std::uint64_t counted = load_word(&st->ran);
  const auto* table = reinterpret_cast<const step_header*>(ring_table(loc, counted));
  const bool committed = load_word(&table->step) == counted;  // acquire: the commit's stores
  if (committed) {
    if constexpr (std::is_void_v<F>)
      run_step_now(table, nullptr);
    else
      run_step_now(table, &call_epilogue_now<F>);
  }
  report_replay(loc.status, counted, committed);
  std::atomic_ref<std::uint64_t>(st->ran).notify_all();
  return committed ? counted + 1 : 0;
}

/// A device lane: the arrival count of one launch in flight and (launch::graph) the batch's step
/// counter. Lanes are taken from a per-device pool, zero at the start; `step` is where the lane's
/// step counter stands when taken (a lane given back keeps its count).
struct step_lane {
  std::uint64_t address = 0;  // device address (0: none, the host backend)
  std::uint64_t step = 0;
};

/// A slot's graph under launch::graph: the graph (a cudaGraph_t: one kernel node, what an engine
/// adds as a child node of its own graph) and its executable.
struct step_graph {
  void* graph = nullptr;
  void* exec = nullptr;
};

/// How backend B runs a step with epilogue F (void: none): `preload<F>()`, `launch<F>(stream,
/// table, blocks, lane, f)` (the step kernel over `blocks` blocks; `table` is the mapped address), for
/// launch::graph (`graphs`) the one graph of a batch: `make_graph<F>(locator, blocks, device, f)`,
/// `replay(stream, graph)`, `destroy_graph(graph)`; for launch::capture on CUDA
/// `record<F>(stream, locator, blocks, f)` (the step kernel launched on a capturing stream); and
/// the device lanes (step_lane): `take_lane(device)`, `give_lane(device, lane)`. Specialized per backend (below;
/// step_kernel.cuh, nvcc only); this primary template is what a translation unit not built by
/// nvcc gets for CUDA: neither a construction (which preloads the step kernel) nor a submit
/// compiles. What making and giving back slots needs (lanes, the graph) a batch reaches through the
/// step_slot_ops its constructor took, so that a host-compiled file may begin steps and destroy it.
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
  template <class F, class... Args>
  static void launch(Args&&...) {
    static_assert(dependent_false<B, Args...>,
                  "ferry: step_batch::submit launches a CUDA kernel: build this translation unit "
                  "with nvcc and include <ferry/ferry.cuh>.");
  }
  template <class F, class... Args>
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
  template <class F, class... Args>
  static void record(Args&&...) {
    static_assert(dependent_false<B, Args...>,
                  "ferry: step_batch::record records the CUDA step kernel into a capture: build this "
                  "translation unit with nvcc and include <ferry/ferry.cuh>.");
  }
};

/// The host backend runs a step table as one host task; launch::graph runs the same way (no
/// graphs on the host), and needs no lanes.
template <>
struct step_ops<backend::host> {
  static constexpr bool graphs = false;
  template <class F>
  static void preload() noexcept {}
  /// The table and contents must stay unmodified until the stream has run the task.
  template <class F>
  static void launch(stream_ref<backend::host> s, const void* table, std::size_t, const step_lane&, const F*) {
    if constexpr (std::is_void_v<F>)
      enqueue_host(s, [table] { run_step_now(table, nullptr); });
    else
      enqueue_host(s, [table] { run_step_now(table, &call_epilogue_now<F>); });
  }
  template <class F>
  static step_graph make_graph(const step_locator&, std::size_t, int, const F*) noexcept {
    return {};
  }
  static void replay(stream_ref<backend::host>, const step_graph&) noexcept {}
  static void destroy_graph(const step_graph&) noexcept {}
  static step_lane take_lane(int) noexcept { return {}; }
  static void give_lane(int, const step_lane&) noexcept {}
};

/// The calls of step_ops<B> that making and giving back a batch's slots need (epilogue F), taken
/// where the batch is constructed (nvcc's translation unit on CUDA): begin(), reserve() and the
/// destructor reach them through these pointers in whichever translation unit they run.
template <class F>
struct step_slot_ops {
  step_lane (*take_lane)(int device);
  void (*give_lane)(int device, const step_lane& lane) noexcept;
  step_graph (*make_graph)(const step_locator& at, std::size_t blocks, int device, const F* f);
  void (*destroy_graph)(const step_graph& graph);
};
template <class B, class F>
inline constexpr step_slot_ops<F> step_slot_ops_of{&step_ops<B>::take_lane, &step_ops<B>::give_lane,
                                                   &step_ops<B>::template make_graph<F>,
                                                   &step_ops<B>::destroy_graph};

}  // namespace ferry::detail
