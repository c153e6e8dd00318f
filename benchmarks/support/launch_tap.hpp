// Benchmark support: tells support/launch_tap.cpp (liblaunch_tap.so, loaded with LD_PRELOAD by
// tools/gpu-check's launch phase) which row and regime the calling thread's next launches belong
// to. Without the tap loaded, tap_row does nothing. The strings must live until the process exits.
#pragma once

#include <dlfcn.h>

namespace ferry_bench {

inline void tap_row(const char* row, const char* regime) noexcept {
  using row_fn = void (*)(const char*, const char*);
  static const auto tap = reinterpret_cast<row_fn>(dlsym(RTLD_DEFAULT, "ferry_launch_tap_row"));
  if (tap) tap(row, regime);
}

}  // namespace ferry_bench
