// ferry/detail/tuning.hpp: every tuning constant of ferry, in one place: thresholds, chunk sizes,
// thread counts, the write plan's descriptor shape, ring sizes, warm-reuse depths. Each has one
// line of why; the measurements behind them are on the pages linked here and listed in
// docs/design.md, "Tuning constants". In the base layer, so that every layer may read them.
//
// Overrides that keep working: FERRY_COPY_THREADS and FERRY_COPY_CHUNK_MIB (default_copy_pool()),
// a copy_pool's constructor arguments, uva_pool's `slots` / `max_slots`, a StagingPolicy.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ferry::detail {

// ---- the reuse core's clock (backend/detail/timeline.hpp; docs/design.md, "What the core's calls
//      cost") ----------------------------------------------------------------------------------

/// Lines (stream, device) that get a mapped completion counter; the rest use events only: one
/// pinned page of counters covers the streams of any engine.
inline constexpr std::uint32_t timeline_counted_lines = 256;
/// Recorded events a line holds before a mark asks about them rather than create another: bounds
/// the events of a line that is marked often and seldom asked about.
inline constexpr std::size_t timeline_reclaim_after = 64;
/// Devices the clock keeps spare events for (indexed by device ordinal).
inline constexpr int timeline_max_devices = 64;

// ---- bounded waits (backend/detail/wait_bound.hpp; docs/troubleshooting.md, "A wait past its
//      bound") -------------------------------------------------------------------------------

/// The bound of every wait when neither ferry::set_wait_timeout, FERRY_WAIT_TIMEOUT nor a
/// ReusePolicy gives one: generous (a step of an engine takes milliseconds; a GPU that has not
/// advanced in minutes is hung), yet short of a silent hang.
inline constexpr std::chrono::nanoseconds default_wait_timeout = std::chrono::minutes(5);
/// A bounded wait polls back to back this long (a quick wait stays as quick as a blocking call)...
inline constexpr std::chrono::nanoseconds wait_spin = std::chrono::microseconds(200);
/// ...then sleeps between polls, from this long, doubling...
inline constexpr std::chrono::nanoseconds wait_sleep_min = std::chrono::microseconds(20);
/// ...up to this long: a long wait wakes at most this late, and costs a few polls a millisecond.
inline constexpr std::chrono::nanoseconds wait_sleep_max = std::chrono::microseconds(500);

// ---- the mapping probe (backend/detail/mapping.hpp; docs/backends.md, "A live mapping, proven
//      once") ------------------------------------------------------------------------------------

/// Words (8 bytes each) the mapping probe writes, has a kernel read through the mapping and write
/// back, and compares (backend/detail/mapping.hpp): a few cache lines, read once per device.
inline constexpr std::size_t mapping_probe_words = 64;

// ---- warm reuse (memory/detail/warm_reuse.hpp, memory/pinned_arena.hpp; docs/memory.md, "The
//      pinned staging arena") ------------------------------------------------------------------

/// Recently used slots or blocks still in the host's caches: a reuse takes the newest of them
/// that has passed before any older one.
inline constexpr std::size_t warm_slots = 3;
/// Staging memory of one size class the arena cycles through while the GPU keeps up, so that it
/// stays in the host's caches; each time this much more is handed out, the oldest block in
/// flight is asked about.
inline constexpr std::size_t arena_warm_bytes = std::size_t{256} << 10;
/// Stamps a slot has room for when made (a few streams), so that stamping never allocates on a
/// hot path.
inline constexpr std::size_t slot_stamps_reserved = 4;
/// The ceiling on a slot ring's slots when the component is given none (uva_pool's
/// `max_slots`): a ring whose readers fall behind grows without blocking up to here, no further.
inline constexpr std::size_t ring_default_max_slots = 8;

// ---- the write plan (write/chunk.hpp, write/kernel.cuh; docs/performance.md,
//      "staged_write" and "decode_step") ------------------------------------------------------

/// Bytes one descriptor covers at most (one thread block): 256 threads x 2 vectors of 16 bytes.
inline constexpr std::size_t write_chunk_bytes = 8192;
/// Threads per block of the apply and step kernels.
inline constexpr unsigned write_block_threads = 256;
/// The kernels' vector width: contents congruent to their destination mod this are copied by it.
inline constexpr std::size_t write_vector_bytes = 16;
/// Vector loads each thread issues before its stores (a full chunk in one round).
inline constexpr unsigned write_vector_loads_in_flight =
    static_cast<unsigned>(write_chunk_bytes / (write_block_threads * write_vector_bytes));
static_assert(write_chunk_bytes % (write_block_threads * write_vector_bytes) == 0,
              "ferry: a chunk is a whole number of rounds of the block's vectors");
/// Scalar loads each thread issues before its stores where source and destination are not
/// congruent: enough in flight to cover a read through PCIe.
inline constexpr unsigned write_scalar_loads_in_flight = 8;
/// Elements of a gather or scatter record (step_batch) one block of the step kernel moves (4 per
/// thread: the indices' reads through PCIe overlap).
inline constexpr std::size_t piece_elements = 4 * write_block_threads;
/// Device lanes (a launch's arrival count, a batch's step counter) per device, for every
/// step_batch of the process: a slot in use holds one under launch::kernel, a batch one under
/// launch::graph.
inline constexpr std::size_t step_lane_count = 4096;
/// Staged writes of at least this many bytes get contents congruent to their destination (the
/// padding costs more than it saves below).
inline constexpr std::size_t congruence_min_bytes = 64;
/// How far ahead of its write pointers staging prefetches a slot's lines (8 cache lines).
inline constexpr std::size_t staging_prefetch_bytes = 512;
/// Entries of the overlap tracker's table (it stays in L1): a batch's rows are told apart exactly
/// while each finds an entry within overlap_tracker_probes of its home.
inline constexpr std::size_t overlap_tracker_rows = 4096;
/// Entries the overlap tracker tries for a row (its home, then the next ones) before it suspects
/// the batch of an overlap.
inline constexpr std::size_t overlap_tracker_probes = 8;
/// The inline apply's small parameter block: a cheaper launch for the smallest applies.
inline constexpr std::size_t inline_apply_small_bytes = 512;
/// The inline apply's largest parameter block: what every CUDA 12 toolkit accepts (kernel
/// parameters up to 4 KiB).
inline constexpr std::size_t inline_apply_max_bytes = 4032;
/// The smallest device scratch a staged tensor allocates (so that small applies do not regrow it).
inline constexpr std::size_t scratch_min_bytes = 256;

// ---- the copy pool (transfer/copy_pool.hpp, transfer/detail/copy_tuning.hpp; docs/transfers.md,
//      "Large pageable sources: the copy pool") ---------------------------------------------

/// Pageable sources larger than this take the copy pool's pipeline: below it, one memcpy into an
/// arena block costs less than waking threads (ferry::large_copy_threshold).
inline constexpr std::size_t large_copy_threshold = std::size_t{4} << 20;
/// The pipeline's chunk size when none is given or measured (ferry::default_copy_chunk_bytes).
inline constexpr std::size_t default_copy_chunk_bytes = std::size_t{16} << 20;
/// The pool's thread count when none is given or measured (ferry::default_copy_threads).
inline constexpr std::size_t default_copy_threads = 12;
/// The pipeline's unit of host copying: the threads take slices from one queue that runs across
/// chunk boundaries (ferry::copy_slice_bytes; a default chunk is 8 slices).
inline constexpr std::size_t copy_slice_bytes = std::size_t{2} << 20;
/// Team sizes default_copy_pool()'s measurement tries: fine enough to find where the copy rate
/// stops growing, coarse enough to measure in a few milliseconds.
inline constexpr std::size_t copy_team_sizes[] = {1, 2, 4, 8, 12, 16, 24, 32};
/// The fewest threads that copy at least this fraction of the fastest team's rate: more threads
/// add little and contend with the DMA for the same memory.
inline constexpr double copy_knee_fraction = 0.9;
/// A chunk is what the chosen threads copy in this time: the per-chunk call and fence stay a few
/// percent of it, while fill and drain stay about 10% of a large upload.
inline constexpr double copy_chunk_seconds = 250e-6;
/// Chunk sizes stay within [copy_chunk_min, copy_chunk_max], powers of two: below, a chunk is
/// smaller than the smallest pipelined upload; above, fill and drain dominate.
inline constexpr std::size_t copy_chunk_min = std::size_t{4} << 20;
inline constexpr std::size_t copy_chunk_max = std::size_t{32} << 20;
/// The measurement: each team copies this many bytes through a destination of
/// copy_calibration_chunk bytes, best of copy_calibration_reps runs (a few tens of ms in all).
inline constexpr std::size_t copy_calibration_bytes = std::size_t{32} << 20;
inline constexpr std::size_t copy_calibration_chunk = std::size_t{8} << 20;
inline constexpr int copy_calibration_reps = 3;
/// The first pinned block that gathers a single-pass source (doubled as it fills): one page.
inline constexpr std::size_t gather_first_block_bytes = 4096;

}  // namespace ferry::detail
