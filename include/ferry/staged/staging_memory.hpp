// ferry/staged/staging_memory.hpp: staging_memory<B>, where staged writes get their memory: the
// pinned arena of their staging slots and, optionally, an engine's device memory resource.
#pragma once

#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/resource.hpp>

#include <optional>

namespace ferry {

/// Where a staged_write_tensor or a fused_staged_writer gets its memory; the optional last
/// argument of `staged_write_tensor(rows, cols, stream, slots, memory)`, of the constructors that
/// adopt a target (`staged_write_tensor(target, rows, cols, slots, memory)`) and of
/// `fused_staged_writer(max_tensors, slots, memory)`:
///
///     ferry::staging_memory<B>{.arena = &arena, .device = pool}
///
///  - `arena`: the pinned arena of the staging slots (which must outlive the owner); default:
///    default_arena<B>().
///  - `device`: an engine's device_memory_resource (which must outlive the owner) for the device
///    memory: the target of a tensor under target::device that it allocates (a UVA target is
///    pinned memory from ferry, an adopted one the caller's), and the device scratch that
///    contents are copied into when the staging policy copies (H2D). Empty (the default): ferry's
///    own allocation (cudaMalloc, cudaMallocAsync).
///
/// Device memory from the resource is stream-ordered, always `device_alignment`-aligned, and
/// given back with the size and alignment it was allocated with:
///  - The target: allocated on the constructor's stream, given back on it once every apply of
///    the tensor has passed (the destructor waits for them), as device_buffer(n, stream,
///    resource): that stream must outlive the tensor.
///  - The scratch: one per stream that applies with a copy (stream order alone keeps an apply's
///    copy behind the last apply's read on that stream), allocated on that stream at its first
///    copying apply, sized to the slots' content capacity (so once per stream and size). A stream
///    that has none takes over another stream's once the reuse core has seen that scratch's last
///    apply pass (under reuse::caller_fenced, once the caller's rotation says so). A scratch
///    outgrown by a later apply is given back at once on that apply's stream. At destruction,
///    after waiting for every apply, each scratch is given back on the stream of the last apply
///    that copied through it: every earlier use, on any stream, had passed before that stream
///    took it, so that stream's order covers them all. The streams an owner applies on must
///    therefore outlive it. reserve() allocates no scratch from the resource (it has no stream to
///    allocate on in order): it comes from it at each stream's first copying apply.
///  - The resource returning null or throwing std::bad_alloc is ferry::out_of_memory (a block that
///    is not device_alignment-aligned is given back, ferry::error); in an apply that happens
///    before the launch is enqueued, so the staged writes are kept and the apply can be retried.
///    backend_stats_of counts ferry's own allocations only, not the resource's.
template <class B = default_backend>
struct staging_memory {
  /// The arena of the staging slots (never null).
  pinned_arena<B>* arena = &default_arena<B>();
  /// The device memory's resource; empty: ferry's own allocation.
  std::optional<device_resource_ref<B>> device = std::nullopt;
};

}  // namespace ferry
