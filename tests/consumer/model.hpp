// The consumer's model launchers, defined in model.cu (nvcc) and called from main_model.cpp (the
// host compiler): README's `launch_model(stream, ids.span(), table.view(), pos)`. Every ferry type
// in these signatures must be the same type in both translation units, or the program cannot link.
#pragma once

#include <ferry/ferry.hpp>

#include <cstddef>
#include <cstdint>

using model_table = ferry::staged_write_tensor<int, ferry::presets::block_table>;

/// A rows x cols table, constructed where nvcc builds ferry's kernels: its constructor loads the
/// apply kernel, which a host-compiled file cannot (a static_assert says so there).
model_table make_table(std::size_t rows, std::size_t cols);

/// table.apply_write(stream): the apply kernel needs an nvcc translation unit.
void apply_table(model_table& table, ferry::stream_ref<ferry::backend::cuda> stream);

/// out[i] = ids[i] * 1000 + table(i % rows, i % cols) + pos[i], for every i < out.size().
void launch_model(ferry::stream_ref<ferry::backend::cuda> stream, ferry::device_span<int> ids,
                  ferry::staged_view<int> table, ferry::device_span<const std::int64_t> pos,
                  ferry::device_span<std::int64_t> out);
