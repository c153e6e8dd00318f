// <ferry/ferry.hpp>: everything a C++20 host compiler and the CUDA runtime library can build.
// Kernel-launching members need <ferry/ferry.cuh> and nvcc.
#pragma once

#include <ferry/config.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/policies.hpp>

#include <ferry/backend/event.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/backend/stream.hpp>

#include <ferry/memory/device_buffer.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/pinned_buffer.hpp>
#include <ferry/memory/pinned_span.hpp>
