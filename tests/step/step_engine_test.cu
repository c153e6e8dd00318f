// Tests for include/ferry/step/step_batch.hpp's engine step: gathers (rows from a device source in
// stream order, or from the host), the fused epilogue (every view through step_context, run once
// the whole step has landed), slots reused while steps are held, bounds, and launch::graph's one
// executable (submit and submit_with).
#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#endif
#include <step/support.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

// Epilogue functors, outside an anonymous namespace: a batch's submit carries a visibility
// attribute, which a type of internal linkage would void (nvcc warns).
namespace step_engine_test {

/// A 2-byte element type for the gathers: __half where the CUDA headers are, else uint16_t.
#if defined(__CUDACC__)
using half_t = __half;
#else
using half_t = std::uint16_t;
#endif

/// A hash of `x` salted with the step: what an epilogue writes for an element, and the values a
/// step's data are made of where the device must recompute them.
FERRY_HOST_DEVICE inline std::uint64_t mix(std::uint64_t x, std::uint64_t step) {
  x ^= (step + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 32);
}

/// The bits of an element, zero-extended.
template <class T>
FERRY_HOST_DEVICE std::uint64_t bits_of(const T& v) {
  std::uint64_t b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}

/// Writes one digest lane per view: out[lane * stride + i] = mix(bits of element i, step), and
/// meta[lane] = the view's size; meta[lanes] = the step, meta[lanes + 1] counts the runs.
struct digest {
  static constexpr unsigned lanes = 10;
  ferry::step_ref<std::int32_t> g32;
  ferry::step_ref<std::int64_t> g64;
  ferry::step_ref<float> gf;
  ferry::step_ref<half_t> gh;
  ferry::step_ref<std::uint16_t> u16;
  ferry::step_ref<std::int64_t> u64;
  ferry::step_ref<const std::int32_t> p32;
  ferry::step_ref<const double> pd;
  const std::int32_t* target = nullptr;  // a write target and a fill's destination, by pointer
  std::size_t target_n = 0;
  const std::int32_t* fill = nullptr;
  std::size_t fill_n = 0;
  std::uint64_t* out = nullptr;
  std::uint64_t* meta = nullptr;
  std::size_t stride = 0;

  template <class T>
  FERRY_HOST_DEVICE void lane(const ferry::step_context& ctx, unsigned j, const T* v, std::size_t n) const {
    for (std::size_t i = ctx.rank(); i < n; i += ctx.threads()) out[j * stride + i] = mix(bits_of(v[i]), ctx.step());
    if (ctx.rank() == 0) meta[j] = n;
  }
  template <class T>
  FERRY_HOST_DEVICE void lane(const ferry::step_context& ctx, unsigned j, ferry::step_ref<T> r) const {
    const auto v = ctx.view(r);
    lane(ctx, j, v.data(), ctx.size(r));
  }
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    lane(ctx, 0, g32);
    lane(ctx, 1, g64);
    lane(ctx, 2, gf);
    lane(ctx, 3, gh);
    lane(ctx, 4, u16);
    lane(ctx, 5, u64);
    lane(ctx, 6, p32);
    lane(ctx, 7, pd);
    lane(ctx, 8, target, target_n);
    lane(ctx, 9, fill, fill_n);
    if (ctx.rank() == 0) {
      meta[lanes] = ctx.step();
      meta[lanes + 1] += 1;
    }
  }
};

/// Keeps what each step's views held: lanes gather, upload, publish of step k go to
/// rows[((k % keep) * 3 + lane) * width + i]; stamps[(k % keep) * 4] = k + 1, then the three sizes.
struct history {
  ferry::step_ref<std::int64_t> g;
  ferry::step_ref<std::int64_t> u;
  ferry::step_ref<const std::int64_t> p;
  std::int64_t* rows = nullptr;
  std::uint64_t* stamps = nullptr;
  std::size_t width = 0, keep = 0;

  template <class T>
  FERRY_HOST_DEVICE void lane(const ferry::step_context& ctx, unsigned j, ferry::step_ref<T> r) const {
    const auto v = ctx.view(r);
    const std::size_t at = ctx.step() % keep;
    for (std::size_t i = ctx.rank(); i < v.size(); i += ctx.threads()) rows[(at * 3 + j) * width + i] = v.data()[i];
    if (ctx.rank() == 0) stamps[at * 4 + 1 + j] = ctx.size(r);
  }
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    lane(ctx, 0, g);
    lane(ctx, 1, u);
    lane(ctx, 2, p);
    if (ctx.rank() == 0) stamps[(ctx.step() % keep) * 4] = ctx.step() + 1;
  }
};

/// The value the device writer (test of stream order) puts in source element i before step k.
FERRY_HOST_DEVICE inline std::int64_t source_value(std::uint64_t k, std::uint64_t i) {
  return static_cast<std::int64_t>(mix(i, k + 0x5EED));
}
FERRY_HOST_DEVICE inline std::int32_t value32(std::uint64_t k, std::uint64_t i) {
  return static_cast<std::int32_t>(mix(i, k));
}

/// Checks, in the epilogue, that every destination of the step holds this step's values (each is
/// a function of the step and the element, written by other blocks of the same launch): flags
/// bad[k * 5 + kind] where one does not, counts the elements it checked in checked[k].
struct landed {
  ferry::step_ref<std::int32_t> up;         // up[i] == value32(k, i)
  ferry::step_ref<std::int64_t> gat;        // every 13th row from the host, the rest src[(i * 7919 + k) % src_n]
  ferry::step_ref<const std::int32_t> pub;  // pub[i] == value32(k, i + 0x10000)
  const std::int64_t* src = nullptr;
  std::size_t src_n = 0;
  const std::int32_t* target = nullptr;  // rows x cols, every row written: value32(k, 0x20000 + i)
  std::size_t target_n = 0;
  const std::int32_t* filled = nullptr;  // every element == pub[7]
  std::size_t fill_n = 0;
  std::uint32_t* bad = nullptr;
  std::uint64_t* checked = nullptr;
  std::size_t keep = 0;

  FERRY_HOST_DEVICE static std::int64_t host_row(std::uint64_t k, std::size_t i) {
    return static_cast<std::int64_t>(mix(i, k + 77));
  }
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    const std::uint64_t k = ctx.step();
    if (k >= keep) return;
    const auto u = ctx.view(up);
    const auto g = ctx.view(gat);
    const auto p = ctx.view(pub);
    for (std::size_t i = ctx.rank(); i < u.size(); i += ctx.threads())
      if (u.data()[i] != value32(k, i)) bad[k * 5 + 0] = 1;
    for (std::size_t i = ctx.rank(); i < g.size(); i += ctx.threads()) {
      const std::int64_t want = i % 13 == 0 ? host_row(k, i) : src[(i * 7919 + k) % src_n];
      if (g.data()[i] != want) bad[k * 5 + 1] = 1;
    }
    for (std::size_t i = ctx.rank(); i < p.size(); i += ctx.threads())
      if (p.data()[i] != value32(k, i + 0x10000)) bad[k * 5 + 2] = 1;
    for (std::size_t i = ctx.rank(); i < target_n; i += ctx.threads())
      if (target[i] != value32(k, 0x20000 + i)) bad[k * 5 + 3] = 1;
    const std::int32_t f = p.size() > 7 ? p.data()[7] : 0;
    for (std::size_t i = ctx.rank(); i < fill_n; i += ctx.threads())
      if (filled[i] != f) bad[k * 5 + 4] = 1;
    if (ctx.rank() == 0) checked[k] = u.size() + g.size() + p.size() + target_n + fill_n;
  }
};

}  // namespace step_engine_test

#if defined(__CUDACC__)
/// The device writer of a gather's source, enqueued before a step's submit.
__global__ void step_engine_test_write_source(std::int64_t* src, std::size_t n, std::uint64_t k) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    src[i] = step_engine_test::source_value(k, i);
}
/// An engine's node after the step graph: copies what the step uploaded.
__global__ void step_engine_test_after(const std::int64_t* uploaded, std::int64_t* seen, std::size_t n) {
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) seen[i] = uploaded[i];
}
#endif

namespace {

using namespace step_engine_test;
using ferry_test::model;
using ferry_test::random_bits;
using ferry_test::randomize;
using ferry_test::read;
using ferry_test::returns_after_open;
using ferry_test::same_bits;

template <class T>
std::vector<std::uint64_t> bits(const T* v, std::size_t n) {
  std::vector<std::uint64_t> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = bits_of(v[i]);
  return b;
}

/// A random plan of every kind with the digest epilogue, on batch type Batch: four gathers (int32,
/// int64, float, a 2-byte type) with rows from the host, two uploads, two publishes, writes into a
/// device matrix, a fill from a publish's element. Each step is random (sizes, indices, values)
/// and mirrored on the host. Under pow2 the plan declares an eighth of each maximum and the first
/// steps stay within it; later steps grow past it.
template <class B, class Batch>
struct plan {
  static constexpr bool fixed = std::is_same_v<typename Batch::growth_policy, ferry::growth::fixed>;
  static constexpr std::size_t lanes = digest::lanes, stride = 3000, rows = 8, cols = 300;

  template <class T>
  struct gather_lane {
    ferry::device_buffer<T, B> src, dst;
    std::size_t max_n;
    std::vector<T> rsrc, rdst;
    typename Batch::template gather<T> h;
    gather_lane(std::size_t src_n, std::size_t max) : src(src_n), dst(max), max_n(max) {}
  };
  template <class T>
  struct upload_lane {
    ferry::device_buffer<T, B> dst;
    std::vector<T> ref;
    typename Batch::template upload<T> h;
    explicit upload_lane(std::size_t max) : dst(max) {}
  };

  std::uint64_t seed;
  std::mt19937_64 rng;
  ferry::stream<B> s;
  gather_lane<std::int32_t> g32{1000, 300};
  gather_lane<std::int64_t> g64{333, 200};
  gather_lane<float> gf{64, 150};
  gather_lane<half_t> gh{4096, 250};
  upload_lane<std::uint16_t> u16{3000};
  upload_lane<std::int64_t> u64{300};
  static constexpr std::size_t np32 = 200, npd = 40, max_writes = 10, max_elements = 1500;
  ferry::device_buffer<std::int32_t, B> tgt{rows * cols}, fill{16};
  ferry::device_buffer<std::uint64_t, B> out{lanes * stride}, meta{lanes + 2};
  model<std::int32_t> mt{rows, cols};
  std::vector<std::int32_t> rfill;
  std::array<std::vector<std::uint64_t>, lanes> want;
  Batch batch;
  typename Batch::template publish<std::int32_t> p32;
  typename Batch::template publish<double> pd;
  typename Batch::template writes<std::int32_t> w;

  static std::size_t declared(std::size_t max) { return fixed ? max : std::max<std::size_t>(max / 8, 1); }

  plan(std::uint64_t seed_, std::size_t slots, std::size_t max_slots) : seed(seed_), rng(seed_), batch(slots, max_slots) {
    init(g32), init(g64), init(gf), init(gh);
    u16.ref = randomize(u16.dst, s, rng);
    u64.ref = randomize(u64.dst, s, rng);
    mt.data = randomize(tgt, s, rng);
    rfill = randomize(fill, s, rng);
    const std::vector<std::uint64_t> zeros(meta.size(), 0);
    ferry::async_h2d(zeros, meta.span(), s);
    u16.h = batch.add_upload(u16.dst.span(), declared(u16.dst.size()));
    u64.h = batch.add_upload(u64.dst.span(), declared(u64.dst.size()));
    p32 = batch.template add_publish<std::int32_t>(declared(np32));
    pd = batch.template add_publish<double>(declared(npd));
    const ferry::staged_view<std::int32_t> target(tgt.span().data(), rows, cols);
    w = fixed ? batch.add_writes(target, max_writes, max_elements) : batch.add_writes(target);
    batch.add_fill(fill.span(), p32, 3);
    batch.set_epilogue(digest{g32.h.ref(), g64.h.ref(), gf.h.ref(), gh.h.ref(), u16.h.ref(), u64.h.ref(), p32.ref(),
                              pd.ref(), tgt.span().data(), tgt.size(), fill.span().data(), fill.size(),
                              out.span().data(), meta.span().data(), stride});
    s.synchronize();
  }
  template <class T>
  void init(gather_lane<T>& g) {
    g.rsrc = randomize(g.src, s, rng);
    g.rdst = randomize(g.dst, s, rng);
    g.h = batch.add_gather(g.dst.span(), ferry::device_span<const T>(g.src.span()), declared(g.max_n));
  }

  std::size_t pick(std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); }

  template <class T>
  void fill_gather(gather_lane<T>& g, unsigned lane, std::size_t limit) {
    const std::size_t n = pick(0, limit);
    auto idx = g.h.indices(n);
    REQUIRE(idx.size() == n);
    bool any_host = false;
    for (auto& x : idx) {
      const bool host = pick(0, 4) == 0;
      x = host ? ferry::from_host : static_cast<std::int32_t>(pick(0, g.rsrc.size() - 1));
      any_host |= host;
    }
    std::vector<T> hv;
    if (any_host || pick(0, 2) == 0) {  // host_values() is needed only for rows from the host
      hv = random_bits<T>(n, rng);
      auto h = g.h.host_values();
      REQUIRE(h.size() == n);
      std::copy(hv.begin(), hv.end(), h.begin());
    }
    for (std::size_t i = 0; i < n; ++i)
      g.rdst[i] = idx[i] == ferry::from_host ? hv[i] : g.rsrc[static_cast<std::size_t>(idx[i])];
    want[lane] = bits(g.rdst.data(), n);
  }
  template <class T, class H>
  void fill_span(H& h, std::vector<T>* ref, unsigned lane, std::size_t lo, std::size_t limit) {
    const auto v = random_bits<T>(pick(lo, limit), rng);
    auto out = h.span(v.size());
    REQUIRE(out.size() == v.size());
    std::copy(v.begin(), v.end(), out.begin());
    if (ref) std::copy(v.begin(), v.end(), ref->begin());
    want[lane] = bits(v.data(), v.size());
    if (lane == 6) std::fill(rfill.begin(), rfill.end(), v[3]);
  }
  void fill_writes(std::size_t limit) {
    std::size_t left = limit;
    for (std::size_t count = pick(0, max_writes); count > 0; --count) {
      const std::size_t row = pick(0, rows - 1), start = pick(0, cols);
      const auto v = random_bits<std::int32_t>(pick(0, std::min(cols - start, left)), rng);
      w.stage_write(row, start, v);
      mt.write(row, start, v);
      left -= v.size();
    }
    want[8] = bits(mt.data.data(), mt.data.size());
  }

  /// Step k: every few steps a gather's source is rewritten first (stream-ordered, before begin).
  template <class Submit>
  void step(long k, Submit&& submit) {
    if (k % 5 == 2) g64.rsrc = randomize(g64.src, s, rng);
    if (k % 7 == 3) gh.rsrc = randomize(gh.src, s, rng);
    const bool small = !fixed && k < 8;
    const auto lim = [&](std::size_t max) { return small ? declared(max) : max; };
    batch.begin();
    fill_gather(g32, 0, lim(g32.max_n));
    fill_gather(g64, 1, lim(g64.max_n));
    fill_gather(gf, 2, lim(gf.max_n));
    fill_gather(gh, 3, lim(gh.max_n));
    fill_span<std::uint16_t>(u16.h, &u16.ref, 4, 0, lim(u16.dst.size()));
    fill_span<std::int64_t>(u64.h, &u64.ref, 5, 0, lim(u64.dst.size()));
    fill_span<std::int32_t>(p32, nullptr, 6, 4, std::max<std::size_t>(lim(np32), 4));
    fill_span<double>(pd, nullptr, 7, 0, lim(npd));
    fill_writes(lim(max_elements));
    want[9] = bits(rfill.data(), rfill.size());
    submit();
  }
  void step(long k) {
    step(k, [&] { batch.submit(s); });
  }

  /// The epilogue's lanes against the reference, then every destination.
  void check(long k) {
    INFO("seed " << seed << ", step " << k);
    const auto o = read<std::uint64_t, B>(out.span(), s);
    const auto m = read<std::uint64_t, B>(meta.span(), s);
    for (unsigned j = 0; j < lanes; ++j) {
      INFO("epilogue lane " << j);
      REQUIRE(m[j] == want[j].size());
      std::vector<std::uint64_t> expect(want[j].size());
      for (std::size_t i = 0; i < expect.size(); ++i) expect[i] = mix(want[j][i], static_cast<std::uint64_t>(k));
      CHECK(std::equal(expect.begin(), expect.end(), o.begin() + static_cast<std::ptrdiff_t>(j * stride)));
    }
    CHECK(m[lanes] == static_cast<std::uint64_t>(k));
    CHECK(m[lanes + 1] == static_cast<std::uint64_t>(k) + 1);  // one run per step
    CHECK(same_bits(read<std::int32_t, B>(g32.dst.span(), s), g32.rdst));
    CHECK(same_bits(read<std::int64_t, B>(g64.dst.span(), s), g64.rdst));
    CHECK(same_bits(read<float, B>(gf.dst.span(), s), gf.rdst));
    CHECK(same_bits(read<half_t, B>(gh.dst.span(), s), gh.rdst));
    CHECK(same_bits(read<std::uint16_t, B>(u16.dst.span(), s), u16.ref));
    CHECK(same_bits(read<std::int64_t, B>(u64.dst.span(), s), u64.ref));
    CHECK(same_bits(read<std::int32_t, B>(tgt.span(), s), mt.data));
    REQUIRE(same_bits(read<std::int32_t, B>(fill.span(), s), rfill));
  }
};

template <class B, class... Ps>
void plan_run(std::uint64_t seed, long steps) {
  using batch_t = ferry::step_batch<B, Ps..., ferry::epilogue::functor<digest>>;
  plan<B, batch_t> p(seed, 2, 8);
  for (long k = 0; k < steps; ++k) {
    p.step(k);
    p.check(k);
  }
}

/// Enqueues on `s` a writer of every element of `src` with source_value(k, i): a kernel on CUDA, a
/// host task on the host backend.
template <class B>
void write_source(ferry::stream_ref<B> s, ferry::device_span<std::int64_t> src, std::uint64_t k) {
  if constexpr (std::is_same_v<B, ferry::backend::host>) {
    ferry::enqueue_host(s, [p = src.data(), n = src.size(), k] {
      for (std::size_t i = 0; i < n; ++i) p[i] = source_value(k, i);
    });
  } else {
#if defined(__CUDACC__)
    step_engine_test_write_source<<<4, 128, 0, s.get()>>>(src.data(), src.size(), k);
    REQUIRE(cudaPeekAtLastError() == cudaSuccess);
#endif
  }
}

/// A plan of one gather (from `src`), one upload and one publish, with the history epilogue that
/// keeps the views of the last `keep` steps; each step's expected views are kept on the host.
template <class B, class Batch>
struct held {
  static constexpr std::size_t width = 64, src_n = 512;
  std::uint64_t seed;
  std::mt19937_64 rng;
  std::size_t keep;
  ferry::stream<B> s;
  ferry::device_buffer<std::int64_t, B> src{src_n}, gdst{width}, udst{width};
  ferry::device_buffer<std::int64_t, B> rows;
  ferry::device_buffer<std::uint64_t, B> stamps;
  std::vector<std::int64_t> rsrc;
  std::vector<std::array<std::vector<std::int64_t>, 3>> expect;  // per step: gather, upload, publish
  Batch batch;
  typename Batch::template gather<std::int64_t> g;
  typename Batch::template upload<std::int64_t> u;
  typename Batch::template publish<std::int64_t> p;

  held(std::uint64_t seed_, std::size_t keep_, std::size_t slots, std::size_t max_slots)
      : seed(seed_), rng(seed_), keep(keep_), rows(keep_ * 3 * width), stamps(keep_ * 4), batch(slots, max_slots) {
    rsrc = randomize(src, s, rng);
    const std::vector<std::uint64_t> zeros(stamps.size(), 0);
    ferry::async_h2d(zeros, stamps.span(), s);
    g = batch.add_gather(gdst.span(), ferry::device_span<const std::int64_t>(src.span()), width);
    u = batch.add_upload(udst.span(), width);
    p = batch.template add_publish<std::int64_t>(width);
    batch.set_epilogue(history{g.ref(), u.ref(), p.ref(), rows.span().data(), stamps.span().data(), width, keep});
    s.synchronize();
  }

  /// Fills and submits step k (batch.steps()); `writer`: the source is rewritten on the stream first.
  void step(bool writer) {
    const std::uint64_t k = batch.steps();
    if (writer) {
      write_source<B>(s, src.span(), k);
      for (std::size_t i = 0; i < src_n; ++i) rsrc[i] = source_value(k, i);
    }
    batch.begin();
    std::array<std::vector<std::int64_t>, 3> e;
    const std::size_t n = 1 + rng() % width;
    auto idx = g.indices(n);
    const auto hv = random_bits<std::int64_t>(n, rng);
    for (std::size_t i = 0; i < n; ++i) {
      idx[i] = rng() % 6 == 0 ? ferry::from_host : static_cast<std::int32_t>(rng() % src_n);
      e[0].push_back(idx[i] == ferry::from_host ? hv[i] : rsrc[static_cast<std::size_t>(idx[i])]);
    }
    std::copy(hv.begin(), hv.end(), g.host_values().begin());
    e[1] = random_bits<std::int64_t>(1 + rng() % width, rng);
    std::copy(e[1].begin(), e[1].end(), u.span(e[1].size()).begin());
    e[2] = random_bits<std::int64_t>(1 + rng() % width, rng);
    std::copy(e[2].begin(), e[2].end(), p.span(e[2].size()).begin());
    batch.submit(s);
    expect.push_back(std::move(e));
  }

  /// What the epilogue of step k left as its stamp (k + 1 once it ran; 0 while none of the steps
  /// sharing its place has run). Synchronizes the stream.
  std::uint64_t stamp(std::size_t k) { return read<std::uint64_t, B>(stamps.span(), s)[(k % keep) * 4]; }

  /// Steps [from, expect.size()) as their epilogues saw them (the stream synchronized by the read).
  void check(std::size_t from) {
    REQUIRE(expect.size() - from <= keep);
    const auto r = read<std::int64_t, B>(rows.span(), s);
    const auto st = read<std::uint64_t, B>(stamps.span(), s);
    for (std::size_t k = from; k < expect.size(); ++k) {
      INFO("seed " << seed << ", step " << k);
      const std::size_t at = k % keep;
      REQUIRE(st[at * 4] == k + 1);  // step k's epilogue ran, and no later step's since
      for (unsigned j = 0; j < 3; ++j) {
        INFO("lane " << j << " (gather, upload, publish)");
        REQUIRE(st[at * 4 + 1 + j] == expect[k][j].size());
        const auto* got = r.data() + (at * 3 + j) * width;
        CHECK(std::equal(expect[k][j].begin(), expect[k][j].end(), got));
      }
    }
  }
};

}  // namespace

TEMPLATE_TEST_CASE("step_engine: random plans with gathers and an epilogue match a host reference", "[step][engine]",
                   STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  SECTION("pow2, launch::kernel: steps grow past the declared sizes mid-run") { plan_run<TestType>(101, 40); }
  SECTION("growth::fixed, launch::kernel") { plan_run<TestType, ferry::growth::fixed>(102, 40); }
  SECTION("graph_safe, launch::graph") { plan_run<TestType, ferry::presets::graph_safe, ferry::launch::graph>(103, 40); }
}

TEMPLATE_TEST_CASE("step_engine: a gather reads its device source in stream order, behind the writer enqueued before submit",
                   "[step][engine][gather]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  auto run = [](auto& h) {
    {
      // every step's writer, gather and epilogue held: step k + 1 is prepared and submitted
      // before step k's writer has run
      ferry_test::gate<B> g(h.s);
      for (int k = 0; k < 8; ++k) h.step(true);
      g.open();
    }
    h.check(0);
    for (int k = 0; k < 8; ++k) h.step(k % 2 == 0);  // the stream free, no synchronization between steps
    h.check(8);
  };
  SECTION("pow2, launch::kernel") {
    held<B, ferry::step_batch<B, ferry::epilogue::functor<history>>> h(201, 16, 2, 16);
    run(h);
  }
  SECTION("graph_safe, launch::graph") {
    held<B, ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::graph, ferry::epilogue::functor<history>>>
        h(202, 16, 2, 16);
    run(h);
  }
}

TEMPLATE_TEST_CASE("step_engine: a gather index out of bounds, or a row from the host without host_values(), "
                   "makes submit throw std::out_of_range with nothing enqueued",
                   "[step][engine][bad_input]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  held<B, ferry::step_batch<B, ferry::epilogue::functor<history>>> h(301, 16, 2, 8);
  using H = decltype(h);
  INFO("seed 301");
  h.step(false);  // a good step first, which calls host_values() (the next step must again)
  h.check(0);
  const std::int32_t bad[] = {static_cast<std::int32_t>(H::src_n), static_cast<std::int32_t>(H::src_n) + 1,
                              std::numeric_limits<std::int32_t>::max(), -2, std::numeric_limits<std::int32_t>::min(),
                              ferry::from_host};
  for (std::size_t c = 0; c < std::size(bad); ++c) {
    const bool fix = c % 2 == 1;  // the row from the host is fixed by calling host_values()
    INFO("index " << bad[c] << (bad[c] == ferry::from_host ? " without host_values()" : "") << ", then "
                  << (fix ? "fixed" : "cancelled"));
    h.batch.begin();
    const std::size_t n = 2 + h.rng() % (H::width - 1), at = h.rng() % n;
    auto idx = h.g.indices(n);
    for (auto& x : idx) x = static_cast<std::int32_t>(h.rng() % H::src_n);
    idx[at] = bad[c];
    // host values given for a bad index: only ferry::from_host (-1) takes them, never another negative
    std::vector<std::int64_t> hv;
    if (bad[c] != ferry::from_host) {
      hv = random_bits<std::int64_t>(n, h.rng);
      std::copy(hv.begin(), hv.end(), h.g.host_values().begin());
    }
    const auto up = random_bits<std::int64_t>(n, h.rng);
    std::copy(up.begin(), up.end(), h.u.span(n).begin());
    const auto pub = random_bits<std::int64_t>(n, h.rng);
    std::copy(pub.begin(), pub.end(), h.p.span(n).begin());
    const auto steps = h.batch.steps();
    const auto tasks = ferry_test::enqueued<B>(h.s);
    for (int retry = 0; retry < 2; ++retry) {
      CHECK_THROWS_AS(h.batch.submit(h.s), std::out_of_range);
      CHECK(h.batch.in_step());
      CHECK(h.batch.steps() == steps);
      CHECK(ferry_test::enqueued<B>(h.s) == tasks);
    }
    CHECK_THROWS_WITH(h.batch.submit(h.s), Catch::Matchers::StartsWith("ferry: "));
    CHECK(h.stamp(steps) == 0);  // nothing ran for the refused step
    h.check(0);
    if (fix) {
      if (bad[c] == ferry::from_host) {
        hv = random_bits<std::int64_t>(n, h.rng);
        std::copy(hv.begin(), hv.end(), h.g.host_values().begin());
      } else {
        idx[at] = static_cast<std::int32_t>(h.rng() % H::src_n);
      }
      std::array<std::vector<std::int64_t>, 3> e{{{}, up, pub}};
      for (std::size_t i = 0; i < n; ++i)
        e[0].push_back(idx[i] == ferry::from_host ? hv[i] : h.rsrc[static_cast<std::size_t>(idx[i])]);
      h.batch.submit(h.s);
      h.expect.push_back(std::move(e));
    } else {
      const auto before = ferry_test::enqueued<B>(h.s);
      h.batch.cancel();
      CHECK_FALSE(h.batch.in_step());
      CHECK(ferry_test::enqueued<B>(h.s) == before);
      h.step(false);
    }
    CHECK(h.batch.steps() == steps + 1);
    h.check(h.expect.size() - 1);
    // the step's destinations hold its views
    CHECK(same_bits(read<std::int64_t, B>(h.gdst.span().first(h.expect.back()[0].size()), h.s), h.expect.back()[0]));
    CHECK(same_bits(read<std::int64_t, B>(h.udst.span().first(h.expect.back()[1].size()), h.s), h.expect.back()[1]));
  }
}

TEMPLATE_TEST_CASE("step_engine: every step's epilogue sees its own views while slots are reused behind held steps",
                   "[step][engine][reuse]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  SECTION("pow2, event_fenced: rounds of 7 held steps, then released") {
    held<B, ferry::step_batch<B, ferry::epilogue::functor<history>>> h(401, 8, 2, 12);
    std::size_t slots = 0;
    for (int round = 0; round < 6; ++round) {
      const std::size_t from = h.expect.size();
      {
        ferry_test::gate<B> g(h.s);
        for (int k = 0; k < 7; ++k) h.step(k % 3 == 0);
      }
      h.check(from);
      // the ring is reused, not grown, once it holds a round and the step before it
      if (round == 1) slots = h.batch.slots();
      if (round > 1) CHECK(h.batch.slots() == slots);
    }
  }
  SECTION("graph_safe, launch::graph, max_slots == slots: a full ring waits, then 40 steps run unsynchronized") {
    held<B, ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::graph, ferry::epilogue::functor<history>>>
        h(402, 48, 3, 3);
    ferry_test::gate<B> g(h.s);
    for (int k = 0; k < 3; ++k) h.step(true);
    CHECK(returns_after_open(g, [&] { h.step(true); }));  // the 4th begin() waited for step 0's slot
    for (int k = 0; k < 40; ++k) h.step(k % 4 == 0);
    CHECK(h.batch.slots() == 3);
    h.check(0);
  }
}

TEMPLATE_TEST_CASE("step_engine: the epilogue runs after every upload, gather, write and fill of its launch has landed",
                   "[step][engine][epilogue]", STAGED_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  constexpr std::size_t nu = (std::size_t{64} << 10) / sizeof(std::int32_t);  // 64 KiB: several blocks
  constexpr std::size_t ng = 4096, src_n = 3001, np = 1024, rows = 16, cols = 512, nf = 2048, keep = 24;
  auto run = [&]<class Batch>(std::uint64_t seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    ferry::stream<B> s;
    ferry::device_buffer<std::int32_t, B> udst(nu), tgt(rows * cols), fdst(nf);
    ferry::device_buffer<std::int64_t, B> src(src_n), gdst(ng);
    ferry::device_buffer<std::uint32_t, B> bad(keep * 5);
    ferry::device_buffer<std::uint64_t, B> checked(keep);
    (void)randomize(src, s, rng);
    ferry::async_h2d(std::vector<std::uint32_t>(bad.size(), 0), bad.span(), s);
    ferry::async_h2d(std::vector<std::uint64_t>(keep, 0), checked.span(), s);
    Batch batch(2, 16);
    constexpr bool fixed = std::is_same_v<typename Batch::growth_policy, ferry::growth::fixed>;
    auto u = batch.add_upload(udst.span(), fixed ? nu : 16);  // pow2: the first step grows the slots
    auto g = batch.add_gather(gdst.span(), ferry::device_span<const std::int64_t>(src.span()), fixed ? ng : 16);
    auto p = batch.template add_publish<std::int32_t>(np);
    auto w = batch.add_writes(ferry::staged_view<std::int32_t>(tgt.span().data(), rows, cols), rows, rows * cols);
    batch.add_fill(fdst.span(), p, 7);
    batch.set_epilogue(landed{u.ref(), g.ref(), p.ref(), src.span().data(), src_n, tgt.span().data(), tgt.size(),
                              fdst.span().data(), nf, bad.span().data(), checked.span().data(), keep});
    std::vector<std::uint64_t> want(keep);
    for (std::uint64_t k = 0; k < keep; ++k) {  // no synchronization between steps
      batch.begin();
      const std::size_t n = k == 0 ? nu : nu - rng() % 64;
      auto us = u.span(n);
      for (std::size_t i = 0; i < n; ++i) us[i] = value32(k, i);
      const std::size_t m = ng - rng() % 16;
      auto idx = g.indices(m);
      auto hv = g.host_values();
      for (std::size_t i = 0; i < m; ++i) {
        idx[i] = i % 13 == 0 ? ferry::from_host : static_cast<std::int32_t>((i * 7919 + k) % src_n);
        hv[i] = i % 13 == 0 ? landed::host_row(k, i) : static_cast<std::int64_t>(rng());  // unused rows: junk
      }
      auto ps = p.span(np);
      for (std::size_t i = 0; i < np; ++i) ps[i] = value32(k, i + 0x10000);
      for (std::size_t r = 0; r < rows; ++r) {
        std::vector<std::int32_t> row(cols);
        for (std::size_t c = 0; c < cols; ++c) row[c] = value32(k, 0x20000 + r * cols + c);
        w.stage_write(r, 0, row);
      }
      batch.submit(s);
      want[k] = n + m + np + rows * cols + nf;
    }
    const auto flags = read<std::uint32_t, B>(bad.span(), s);
    const auto counts = read<std::uint64_t, B>(checked.span(), s);
    for (std::size_t k = 0; k < keep; ++k) {
      INFO("step " << k << ": flags upload, gather, publish, writes, fill");
      CHECK(counts[k] == want[k]);
      CHECK(std::vector<std::uint32_t>(flags.begin() + 5 * k, flags.begin() + 5 * k + 5) == std::vector<std::uint32_t>(5, 0));
    }
  };
  SECTION("pow2, launch::kernel") { run.template operator()<ferry::step_batch<B, ferry::epilogue::functor<landed>>>(601); }
  SECTION("graph_safe, launch::graph") {
    run.template operator()<ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::graph,
                                              ferry::epilogue::functor<landed>>>(602);
  }
}

#if defined(__CUDACC__)
TEST_CASE("step_engine: launch::graph runs 1000 changing steps through one executable, each checked", "[step][engine][graph]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  plan_run<B, ferry::presets::graph_safe, ferry::launch::graph>(501, 1000);
}

TEST_CASE("step_engine: submit_with hands one step graph every step; an engine graph built once runs 200 steps; "
          "a replay before the next submit does no step work",
          "[step][engine][graph]") {
  using B = ferry::backend::cuda;
  FERRY_REQUIRE_BACKEND(B);
  using batch_t = ferry::step_batch<B, ferry::presets::graph_safe, ferry::launch::graph, ferry::epilogue::functor<digest>>;
  plan<B, batch_t> h(502, 2, 8);
  h.batch.reserve();
  const std::size_t n64 = h.u64.dst.size();
  ferry::device_buffer<std::int64_t, B> seen(n64);
  cudaGraph_t handed = nullptr;
  cudaGraphExec_t exec = nullptr;
  int builds = 0;
  // The engine's graph, built on the first step only: [step graph] -> [a kernel reading the upload].
  auto launch = [&](cudaGraph_t step) {
    if (exec == nullptr) {
      handed = step;
      ++builds;
      cudaGraph_t gr = nullptr;
      REQUIRE(cudaGraphCreate(&gr, 0) == cudaSuccess);
      cudaGraphNode_t child = nullptr, after = nullptr;
      REQUIRE(cudaGraphAddChildGraphNode(&child, gr, nullptr, 0, step) == cudaSuccess);
      const std::int64_t* up = h.u64.dst.span().data();
      std::int64_t* out = seen.span().data();
      std::size_t n = n64;
      void* args[] = {&up, &out, &n};
      cudaKernelNodeParams kp{};
      kp.func = reinterpret_cast<void*>(&step_engine_test_after);
      kp.gridDim = dim3(1);
      kp.blockDim = dim3(256);
      kp.kernelParams = args;
      REQUIRE(cudaGraphAddKernelNode(&after, gr, &child, 1, &kp) == cudaSuccess);
      REQUIRE(cudaGraphInstantiate(&exec, gr, 0) == cudaSuccess);
      REQUIRE(cudaGraphDestroy(gr) == cudaSuccess);
    }
    REQUIRE(step == handed);  // the same cudaGraph_t every step
    REQUIRE(cudaGraphLaunch(exec, h.s.get()) == cudaSuccess);
  };
  long k = 0;
  for (; k < 200; ++k) {
    h.step(k, [&] { h.batch.submit_with(h.s, launch); });
    h.check(k);
    INFO("step " << k);
    REQUIRE(same_bits(read<std::int64_t, B>(seen.span(), h.s), h.u64.ref));  // the engine's node ran after the step
    if (k % 50 == 49) {
      // A replay of the engine's executable that no submit asked for, before the next submit (docs:
      // every launch is a step; this checks the kernel's guard): its kernel node runs, the step's does no work
      // (no upload again over the poisoned destination, no epilogue: the step's lanes and count stay).
      h.u64.ref = randomize(h.u64.dst, ferry::stream_ref<B>(h.s), h.rng);
      REQUIRE(cudaGraphLaunch(exec, h.s.get()) == cudaSuccess);
      h.check(k);
      CHECK(same_bits(read<std::int64_t, B>(seen.span(), h.s), h.u64.ref));
    }
  }
  {  // a burst with the stream held: slots are inserted, and the graph handed stays the same
    ferry_test::gate<B> g(h.s);
    for (int i = 0; i < 5; ++i, ++k) h.step(k, [&] { h.batch.submit_with(h.s, launch); });
  }
  h.check(k - 1);
  CHECK(builds == 1);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
}
#endif
