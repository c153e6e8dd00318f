// <ferry/ferry.hpp>: everything a C++20 host compiler and the CUDA runtime library can build.
// Kernel-launching members need <ferry/ferry.cuh> and nvcc.
#pragma once

#include <ferry/config.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/policies.hpp>

#include <ferry/backend/devices.hpp>
#include <ferry/backend/event.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/backend/wait_timeout.hpp>

#include <ferry/memory/device_buffer.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/resource.hpp>
#include <ferry/memory/pinned_buffer.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/memory/staged_view.hpp>

#include <ferry/transfer/async_d2h.hpp>
#include <ferry/transfer/async_h2d.hpp>
#include <ferry/transfer/async_h2d_packed.hpp>
#include <ferry/transfer/copy_pool.hpp>
#include <ferry/transfer/cpu_gpu_buffer.hpp>
#include <ferry/transfer/to_host.hpp>

// Sync scopes: the host backend's (ferry::sync_guard needs CUPTI: <ferry/sync/sync_guard.hpp>).
#include <ferry/sync/host_sync_guard.hpp>
#include <ferry/sync/sync_mode.hpp>

#include <ferry/pool/pool_stats.hpp>
#include <ferry/pool/uva_backed.hpp>
#include <ferry/pool/uva_pool.hpp>

#include <ferry/staged/fused_staged_writer.hpp>
#include <ferry/staged/staged_write_tensor.hpp>
#include <ferry/staged/staging_memory.hpp>

#include <ferry/step/step_batch.hpp>
