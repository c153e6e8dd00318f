// probe.host_cost's bench.h2d cases (cases.hpp).
#include "cases.hpp"

#include <ferry/memory/device_buffer.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/transfer/async_h2d.hpp>
#include <ferry/transfer/async_h2d_packed.hpp>

namespace host_cost {
namespace {

// bench.h2d's small upload: 1024 int32 from a std::vector, ferry::async_h2d into a device span.
call_case h2d_small(ferry::stream<B>& s) {
  struct st {
    std::vector<T> v = values(1024, 1);
    ferry::device_buffer<T, B> dev{1024};
  };
  ferry::default_arena<B>().reserve(1024 * sizeof(T), 64);
  return make(std::make_shared<st>(), [&s](st& x, std::size_t i) {
    x.v[0] = static_cast<T>(i);
    ferry::async_h2d(x.v, x.dev.span(), s);
  });
}

// bench.h2d's packed upload: 8 arrays of 256 B to 4 KiB, one ferry::async_h2d_packed.
call_case h2d_packed(ferry::stream<B>& s) {
  struct st {
    std::vector<std::vector<T>> parts;
    std::unique_ptr<ferry::device_buffer<T, B>> dev;
  };
  auto x = std::make_shared<st>();
  std::size_t n = 0;
  for (const std::size_t bytes : {256, 512, 1024, 2048, 4096, 256, 1024, 4096}) {
    x->parts.push_back(values(bytes / sizeof(T), static_cast<unsigned>(bytes)));
    n += bytes / sizeof(T);
  }
  x->dev = std::make_unique<ferry::device_buffer<T, B>>(n);
  ferry::default_arena<B>().reserve(n * sizeof(T), 64);
  return make(x, [&s](st& y, std::size_t) {
    auto& p = y.parts;
    (void)ferry::async_h2d_packed(y.dev->span(), s, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
  });
}

}  // namespace

std::vector<named_case> h2d_cases() {
  return {{"h2d.small_1024", h2d_small}, {"h2d.packed_8", h2d_packed}};
}

}  // namespace host_cost
