// Randomized differential test: every component driven by seeded random operations (several
// streams, readers held behind gates, moves, reserve/clear, sources freed right after each call)
// and checked against a host model in stream order. Replay or extend with FERRY_DIFF_SEED and
// FERRY_DIFF_OPS (FERRY_DIFF_OVERFLOW=0 leaves out the operations whose sizes overflow); the
// operations run per component are printed at the end of the run.
#include <differential/harness.hpp>

#if defined(__CUDACC__)
#include <ferry/ferry.cuh>
#define DIFF_BACKENDS ferry::backend::host, ferry::backend::cuda
#else
#define DIFF_BACKENDS ferry::backend::host
#endif

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/reporters/catch_reporter_event_listener.hpp>
#include <catch2/reporters/catch_reporter_registrars.hpp>

#include <deque>
#include <iostream>
#include <limits>
#include <list>
#include <ranges>
#include <set>
#include <span>

namespace {

using diff::bench;

// Prints the operations run per component once the run ends.
class op_counts : public Catch::EventListenerBase {
 public:
  using Catch::EventListenerBase::EventListenerBase;
  void testRunEnded(const Catch::TestRunStats&) override {
    std::lock_guard lock(diff::counts().m);
    for (const auto& [what, n] : diff::counts().ops)
      std::cout << "differential: " << what << ": " << n << " operations\n";
  }
};
CATCH_REGISTER_LISTENER(op_counts)

/// A single-pass (input, not forward) range over a vector's elements.
template <class E>
class single_pass {
 public:
  explicit single_pass(const std::vector<E>& v) : p_(v.data()), end_(v.data() + v.size()) {}
  struct iterator {
    using value_type = E;
    using difference_type = std::ptrdiff_t;
    single_pass* r = nullptr;
    E operator*() const { return *r->p_; }
    iterator& operator++() {
      ++r->p_;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& i, std::default_sentinel_t) { return i.r->p_ == i.r->end_; }
  };
  iterator begin() { return {this}; }
  std::default_sentinel_t end() const { return {}; }

  const E* p_;
  const E* end_;
};

/// Overwrites a source the component has consumed, then frees it.
template <class C>
void scrub(C& c) {
  for (auto& x : c) std::memset(static_cast<void*>(&x), 0xA5, sizeof(x));
  C().swap(c);
}

// A count of E whose byte size overflows size_t; none exists for 1-byte types (the operations that
// use it test `overflows<E>` first).
template <class E>
constexpr bool overflows = sizeof(E) > 1;
template <class E>
constexpr std::size_t huge_count = std::numeric_limits<std::size_t>::max() / sizeof(E) + 2;

// ---------------------------------------------------------------------------------------------
// pinned_arena: blocks acquired, stamped, read on a stream, released behind that stream's fence.
// Model: blocks out (never overlapping), free blocks by address with the stream and epoch of
// their release (a block released unfenced, or on a stream synchronized since, has passed);
// bytes reserved and in use. A capacity_error while a passed block of the class is free is
// spurious.
template <class B>
void arena_episode(bench<B>& b, std::uint64_t ops) {
  using arena_t = ferry::pinned_arena<B>;
  const std::size_t cap = b.chance(30) ? arena_t::unlimited : (std::size_t{16} << 10) * (1 + b.below(4));
  arena_t arena(cap);
  struct out_block {
    ferry::pinned_block block;
    std::uint64_t gen;
  };
  struct free_block {
    std::size_t capacity;
    std::optional<std::size_t> lane;
    std::uint64_t epoch;
  };
  std::map<std::byte*, out_block> out;
  std::map<std::byte*, free_block> freed;
  std::map<std::size_t, std::size_t> anonymous;  // reserved blocks never seen, by capacity
  std::size_t reserved = 0, in_use = 0;

  auto class_bytes = [](std::size_t bytes) { return std::bit_ceil(std::max<std::size_t>(bytes, 256)); };
  auto passed = [&](const free_block& f) { return !f.lane || b.lane.done(*f.lane, f.epoch); };
  auto stamp_block = [&](out_block& o) {
    o.gen = ++b.gen;
    for (std::size_t i = 0; i < o.block.capacity; i += 8) {
      const auto v = diff::stamp<std::uint64_t>(b.seed, o.gen, i);
      std::memcpy(o.block.data + i, &v, 8);
    }
  };
  auto expected = [&](const out_block& o) {
    std::vector<std::uint64_t> w(o.block.capacity / 8);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = diff::stamp<std::uint64_t>(b.seed, o.gen, i * 8);
    return w;
  };
  auto view = [](const out_block& o) {
    return ferry::device_span<const std::uint64_t>(
        reinterpret_cast<const std::uint64_t*>(o.block.data), o.block.capacity / 8);
  };
  auto check_stats = [&] {
    const auto st = arena.stats();
    if (st.bytes_reserved != reserved || st.bytes_in_use != in_use)
      b.mismatch("stats: reserved " + std::to_string(st.bytes_reserved) + " (model " +
                 std::to_string(reserved) + "), in use " + std::to_string(st.bytes_in_use) +
                 " (model " + std::to_string(in_use) + ")");
  };
  auto pick_out = [&] {
    auto it = out.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(b.below(out.size())));
    return it;
  };

  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    if (r < 35 && out.size() < 64) {  // acquire
      // Mostly a few classes, so that several streams hold blocks of one class.
      const std::size_t bytes = b.chance(60) ? (std::size_t{256} << (2 * b.below(3))) - b.below(2)
                                             : b.size_upto(std::size_t{32} << 10);
      const std::size_t size = class_bytes(bytes);
      const auto before = arena.stats();
      ferry::pinned_block blk;
      try {
        blk = arena.acquire(bytes);
      } catch (const ferry::capacity_error&) {
        bool free_passed = anonymous[size] > 0;
        for (const auto& [p, f] : freed) free_passed |= f.capacity == size && passed(f);
        if (free_passed) b.mismatch("spurious capacity_error: a passed free block of " + std::to_string(size) + " bytes exists");
        if (reserved + size <= cap && !free_passed) b.mismatch("capacity_error below the cap");
        check_stats();
        return;
      }
      const auto after = arena.stats();
      const auto addr = reinterpret_cast<std::uintptr_t>(blk.data);
      if (!blk || blk.capacity != size || addr % 256 != 0) {
        b.mismatch("acquire(" + std::to_string(bytes) + ") gave a block of " + std::to_string(blk.capacity) + " bytes");
        return;
      }
      auto next = out.lower_bound(blk.data);
      if ((next != out.end() && next->first < blk.data + blk.capacity) ||
          (next != out.begin() && std::prev(next)->first + std::prev(next)->second.block.capacity > blk.data))
        b.mismatch("acquire handed out a block overlapping one still out");
      if (auto f = freed.find(blk.data); f != freed.end()) {
        if (f->second.capacity != size) b.mismatch("a free block came back with another size");
        if (after.reuses != before.reuses + 1) b.mismatch("a reused block not counted as a reuse");
        freed.erase(f);
      } else if (after.reuses == before.reuses + 1) {
        if (anonymous[size] == 0) b.mismatch("a reuse of a block the model does not know");
        else --anonymous[size];
      } else {
        if (after.allocations != before.allocations + 1) b.mismatch("neither a reuse nor an allocation");
        reserved += size;
        if (reserved > cap) b.mismatch("the arena went past its byte cap");
      }
      in_use += size;
      out_block o{blk, 0};
      stamp_block(o);
      out.emplace(blk.data, o);
      check_stats();
    } else if (r < 60 && !out.empty()) {  // read on a stream, release behind its fence
      auto it = pick_out();
      const std::size_t l = b.any_lane();
      const std::size_t readers = 1 + b.below(2);
      for (std::size_t k = 0; k < readers; ++k) b.expect(l, view(it->second), expected(it->second), "block read in stream order");
      arena.release(it->second.block, b.lane[l]);
      in_use -= it->second.block.capacity;
      freed[it->first] = {it->second.block.capacity, l, b.lane.epoch[l]};
      out.erase(it);
      check_stats();
    } else if (r < 68 && !out.empty()) {  // release unused: unfenced, or on a stream
      auto it = pick_out();
      if (b.chance(50)) {
        arena.release(it->second.block);
        freed[it->first] = {it->second.block.capacity, std::nullopt, 0};
      } else {
        const std::size_t l = b.any_lane();
        arena.release(it->second.block, b.lane[l]);
        freed[it->first] = {it->second.block.capacity, l, b.lane.epoch[l]};
      }
      in_use -= it->second.block.capacity;
      out.erase(it);
      check_stats();
    } else if (r < 72) {  // reserve
      const std::size_t bytes = b.size_upto(std::size_t{16} << 10);
      const std::size_t size = class_bytes(bytes);
      const std::size_t count = 1 + b.below(3);
      std::size_t have = anonymous[size];
      for (const auto& [p, f] : freed) have += f.capacity == size;
      const std::size_t need = count > have ? count - have : 0;
      const std::size_t fits = cap == arena_t::unlimited ? need : std::min(need, (cap - reserved) / size);
      try {
        arena.reserve(bytes, count);
        if (fits < need) b.mismatch("reserve past the cap did not throw");
      } catch (const ferry::capacity_error&) {
        if (fits == need) b.mismatch("reserve within the cap threw");
      }
      anonymous[size] += fits;
      reserved += fits * size;
      check_stats();
    } else if (r < 74) {  // trim: waits for the fences, frees every free block
      b.lane.open_all();
      arena.trim();
      for (const auto& [p, f] : freed) reserved -= f.capacity;
      for (const auto& [size, n] : anonymous) reserved -= size * n;
      freed.clear();
      anonymous.clear();
      check_stats();
    } else {
      b.lane_op();
    }
  });
  for (auto& [p, o] : out) arena.release(o.block);
}

TEMPLATE_TEST_CASE("differential: pinned_arena", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  // At least five streams: a free list scan must look past several streams still in flight.
  diff::run_component<TestType>("pinned_arena", [](auto& b, std::uint64_t ops) { arena_episode(b, ops); }, 5);
}


// ---------------------------------------------------------------------------------------------
// async_h2d: sources of every kind (contiguous, gathered, single-pass, pinned, and through the
// chunked pipeline) into each stream's own device buffer; the written part is checked in stream
// order after the source was overwritten and freed. Model: each stream's buffer contents.
template <class E, class Pin>
struct h2d_combo {
  using elem = E;
  using pin = Pin;
};

template <class B>
struct per_lane_targets {
  std::vector<std::unique_ptr<ferry::device_buffer<std::byte, B>>> bufs;
};

template <class B, class C>
void h2d_episode(bench<B>& b, std::uint64_t ops) {
  using E = typename C::elem;
  using Pin = typename C::pin;
  constexpr bool pinned_only = std::is_same_v<Pin, ferry::pin::require>;
  constexpr bool blocking = std::is_same_v<Pin, ferry::pin::allow_sync>;
  constexpr std::size_t cap = (std::size_t{48} << 10) / sizeof(E);
  ferry::pinned_arena<B> arena;
  ferry::copy_pool pipeline(2, std::size_t{4} << 10, std::size_t{16} << 10);
  std::vector<ferry::device_buffer<E, B>> dest;
  std::vector<std::vector<E>> model;
  for (std::size_t l = 0; l < b.lane.size(); ++l) {
    dest.emplace_back(cap);
    model.emplace_back(cap);
  }
  for (std::size_t l = 0; l < b.lane.size(); ++l) {  // a known start: fresh values on each stream
    model[l] = b.template fresh<E>(cap);
    std::vector<E> src = model[l];
    ferry::async_h2d<ferry::pin::stage>(src, dest[l].span(), b.lane[l], arena);
  }
  diff::scratch_pool<B>& pinned_sources = *b.scratch;
  auto whole = [&](std::size_t l) {
    b.expect(l, ferry::device_span<const E>(dest[l].span()), model[l], "whole destination");
  };

  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    const std::size_t l = b.any_lane();
    if (r < 75) {
      const std::size_t n = b.size_upto(cap);
      const std::size_t off = b.below(cap - n + 1);
      std::vector<E> vals = b.template fresh<E>(n);
      const ferry::device_span<E> out = dest[l].span().subspan(off, cap - off);
      if (blocking) b.lane.open_all();  // a host-blocking copy waits for the stream
      ferry::device_span<E> got;
      const unsigned kind = pinned_only ? 0 : static_cast<unsigned>(b.rng() % 5);
      if (kind == 0) {  // pinned: DMA'd in place, kept until the stream has passed the copy
        auto* buf = pinned_sources.take(n * sizeof(E));
        E* p = reinterpret_cast<E*>(buf->host().data());
        std::copy(vals.begin(), vals.end(), p);
        got = ferry::async_h2d<Pin>(ferry::assume_pinned(std::span<E>(p, n)), out, b.lane[l], arena);
        ferry::enqueue_host(b.lane[l], [buf, pool = &pinned_sources] { pool->give(buf); });
      } else if constexpr (!pinned_only) {
        if (kind == 1 || kind == 2) {  // contiguous (large ones through the pipeline)
          std::vector<E> src = vals;
          got = ferry::async_h2d<Pin>(src, out, b.lane[l], arena, pipeline);
          scrub(src);
        } else if (kind == 3) {  // sized, not contiguous: gathered
          std::deque<E> src(vals.begin(), vals.end());
          got = ferry::async_h2d<Pin>(src, out, b.lane[l], arena);
          scrub(src);
        } else {  // single pass
          std::vector<E> backing = vals;
          got = ferry::async_h2d<Pin>(single_pass<E>(backing), out, b.lane[l], arena);
          scrub(backing);
        }
      }
      if (got.data() != out.data() || got.size() != n) b.mismatch("async_h2d returned another span than out.first(n)");
      std::copy(vals.begin(), vals.end(), model[l].begin() + static_cast<std::ptrdiff_t>(off));
      b.expect(l, ferry::device_span<const E>(got), std::move(vals), "async_h2d destination");
      if (b.chance(10)) whole(l);
    } else if (r < 80) {  // out too small: out_of_range, nothing enqueued
      const std::size_t n = 1 + b.below(64);
      std::vector<E> src = b.template fresh<E>(n);
      b.template expect_throw<std::out_of_range>([&] {
        if constexpr (pinned_only) {
          auto* buf = pinned_sources.take(n * sizeof(E));
          std::copy(src.begin(), src.end(), reinterpret_cast<E*>(buf->host().data()));
          try {
            ferry::async_h2d<Pin>(ferry::assume_pinned(std::span<E>(reinterpret_cast<E*>(buf->host().data()), n)),
                                  dest[l].span().first(n - 1), b.lane[l], arena);
          } catch (...) {
            pinned_sources.give(buf);
            throw;
          }
          pinned_sources.give(buf);
        } else {
          if (blocking) b.lane.open_all();
          ferry::async_h2d<Pin>(src, dest[l].span().first(n - 1), b.lane[l], arena);
        }
      }, "async_h2d into a too small out");
      whole(l);
    } else if (r < 82 && b.overflow_ops && overflows<E>) {  // a count whose byte size overflows: an exception, nothing enqueued
      const ferry::device_span<E> out(dest[l].span().data(), huge_count<E>);
      b.template expect_throw<std::exception>([&] {
        if constexpr (pinned_only) {
          E* p = dest[l].span().data();  // never read: the call must reject the size first
          ferry::async_h2d<Pin>(ferry::assume_pinned(std::span<E>(p, huge_count<E>)), out, b.lane[l], arena);
        } else {
          if (blocking) b.lane.open_all();
          auto src = std::views::iota(std::size_t{0}, huge_count<E>) |
                     std::views::transform([](std::size_t i) { return static_cast<E>(i + 1); });
          ferry::async_h2d<Pin>(src, out, b.lane[l], arena);
        }
      }, "async_h2d of a count whose byte size overflows");
      whole(l);
    } else {
      b.lane_op();
    }
  });
}

TEMPLATE_TEST_CASE("differential: async_h2d", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  diff::run_component<TestType>("async_h2d", [](auto& b, std::uint64_t ops) {
    diff::dispatch<h2d_combo<std::int32_t, ferry::pin::stage>, h2d_combo<float, ferry::pin::allow_sync>,
                   h2d_combo<std::int64_t, ferry::pin::require>, h2d_combo<std::uint8_t, ferry::pin::stage>,
                   h2d_combo<std::uint16_t, ferry::pin::stage>>(
        b.rng(), [&]<class C>() { h2d_episode<TestType, C>(b, ops); });
  });
}

// ---------------------------------------------------------------------------------------------
// async_h2d_packed: three sources (contiguous, gathered, pinned or a list) into a typed out
// (parts contiguous) or a byte out (mixed element types, parts aligned to max(alignof, 16),
// padding zero). Model: the bytes of each stream's destination.
template <class E, class Pin>
struct packed_combo {
  using elem = E;
  using pin = Pin;
};

template <class B, class C>
void packed_episode(bench<B>& b, std::uint64_t ops) {
  using E = typename C::elem;
  using Pin = typename C::pin;
  constexpr bool pinned_only = std::is_same_v<Pin, ferry::pin::require>;
  constexpr bool blocking = std::is_same_v<Pin, ferry::pin::allow_sync>;
  constexpr std::size_t room = std::size_t{24} << 10;  // bytes per stream
  ferry::pinned_arena<B> arena;
  std::vector<ferry::device_buffer<std::uint64_t, B>> dest;
  std::vector<std::vector<std::byte>> model;
  for (std::size_t l = 0; l < b.lane.size(); ++l) {
    dest.emplace_back(room / 8);
    const auto init = b.template fresh<std::uint64_t>(room / 8);
    model.emplace_back(room);
    std::memcpy(model.back().data(), init.data(), room);
    std::vector<std::uint64_t> src = init;
    ferry::async_h2d(src, dest[l].span(), b.lane[l], arena);
  }
  diff::scratch_pool<B>& pinned_sources = *b.scratch;
  auto bytes_of = [&](std::size_t l) {
    return ferry::device_span<std::byte>(reinterpret_cast<std::byte*>(dest[l].span().data()), room);
  };
  auto as_u8 = [](const std::vector<std::byte>& v) {
    std::vector<std::uint8_t> u(v.size());
    std::memcpy(u.data(), v.data(), v.size());
    return u;
  };
  auto whole = [&](std::size_t l) {
    b.expect(l, ferry::device_span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(dest[l].span().data()), room),
             as_u8(model[l]), "whole packed destination");
  };
  // A pinned copy of `v`; packed uploads gather every source, so it is scrubbed and given back
  // once the call has returned.
  std::vector<typename diff::scratch_pool<B>::buffer*> leased;
  auto pinned_copy = [&](const auto& v) {
    using V = typename std::decay_t<decltype(v)>::value_type;
    auto* buf = pinned_sources.take(v.size() * sizeof(V) + 8);
    leased.push_back(buf);
    V* p = reinterpret_cast<V*>(buf->host().data());
    std::copy(v.begin(), v.end(), p);
    return ferry::assume_pinned(std::span<V>(p, v.size()));
  };
  auto give_back = [&] {
    for (auto* buf : leased) {
      std::fill(buf->host().begin(), buf->host().end(), 0xA5A5A5A5A5A5A5A5ull);
      pinned_sources.give(buf);
    }
    leased.clear();
  };

  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    const std::size_t l = b.any_lane();
    if (r < 80) {
      const bool typed = b.chance(50);
      const bool too_small = b.chance(5);
      std::vector<E> a = b.template fresh<E>(b.size_upto(room / sizeof(E) / 4));
      std::vector<E> c = b.template fresh<E>(b.size_upto(room / sizeof(E) / 4));
      std::vector<double> d = b.template fresh<double>(b.size_upto(room / 8 / 4));
      std::vector<std::uint8_t> u = b.template fresh<std::uint8_t>(b.size_upto(room / 4));
      // Expected layout.
      std::vector<std::byte> want = model[l];
      std::vector<std::pair<std::size_t, std::size_t>> parts;  // byte offset, bytes
      std::size_t end = 0;
      auto place = [&](const void* p, std::size_t bytes, std::size_t align) {
        const std::size_t off = (end + align - 1) / align * align;
        if (off <= room) std::fill(want.begin() + static_cast<std::ptrdiff_t>(end),
                                   want.begin() + static_cast<std::ptrdiff_t>(std::min(off, room)), std::byte{0});
        if (bytes != 0 && off + bytes <= room) std::memcpy(want.data() + off, p, bytes);
        parts.emplace_back(off, bytes);
        end = off + bytes;
      };
      if (typed) {
        place(a.data(), a.size() * sizeof(E), 1);
        place(c.data(), c.size() * sizeof(E), 1);
      } else {
        place(a.data(), a.size() * sizeof(E), std::max<std::size_t>(alignof(E), 16));
        place(d.data(), d.size() * 8, 16);
        place(u.data(), u.size(), 16);
      }
      const std::size_t avail = too_small ? (end == 0 ? 0 : end - 1) : room;
      if (blocking) b.lane.open_all();
      auto call = [&](auto out, auto&&... srcs) {
        return ferry::async_h2d_packed<Pin>(out, b.lane[l], arena, static_cast<decltype(srcs)&&>(srcs)...);
      };
      try {
        if (typed) {
          const ferry::device_span<E> out(reinterpret_cast<E*>(dest[l].span().data()), avail / sizeof(E));
          std::tuple<ferry::device_span<E>, ferry::device_span<E>> got;
          if constexpr (pinned_only) {
            got = call(out, pinned_copy(a), pinned_copy(c));
          } else {
            std::list<E> cl(c.begin(), c.end());
            got = call(out, a, cl);
            scrub(cl);
          }
          if (std::get<0>(got).data() != reinterpret_cast<E*>(bytes_of(l).data() + parts[0].first) ||
              std::get<1>(got).data() != reinterpret_cast<E*>(bytes_of(l).data() + parts[1].first) ||
              std::get<0>(got).size() != a.size() || std::get<1>(got).size() != c.size())
            b.mismatch("async_h2d_packed (typed) returned other parts than the layout");
        } else {
          const ferry::device_span<std::byte> out = bytes_of(l).first(avail);
          std::tuple<ferry::device_span<E>, ferry::device_span<double>, ferry::device_span<std::uint8_t>> got;
          if constexpr (pinned_only) {
            got = call(out, pinned_copy(a), pinned_copy(d), pinned_copy(u));
          } else {
            std::deque<double> dq(d.begin(), d.end());
            got = call(out, a, dq, pinned_copy(u));
            scrub(dq);
          }
          auto* base = bytes_of(l).data();
          if (reinterpret_cast<std::byte*>(std::get<0>(got).data()) != base + parts[0].first ||
              reinterpret_cast<std::byte*>(std::get<1>(got).data()) != base + parts[1].first ||
              reinterpret_cast<std::byte*>(std::get<2>(got).data()) != base + parts[2].first ||
              std::get<0>(got).size() != a.size() || std::get<1>(got).size() != d.size() ||
              std::get<2>(got).size() != u.size())
            b.mismatch("async_h2d_packed (bytes) returned other parts than the layout");
        }
        if (too_small && end != 0) b.mismatch("async_h2d_packed into a too small out did not throw");
        if (end != 0 && !(too_small)) model[l] = want;
      } catch (const std::out_of_range&) {
        if (!too_small || end == 0) b.mismatch("async_h2d_packed threw out_of_range with room enough");
      }
      give_back();
      scrub(a);
      scrub(c);
      auto written = as_u8(model[l]);
      written.resize(std::min(end, room));
      const ferry::device_span<const std::uint8_t> region(
          reinterpret_cast<const std::uint8_t*>(dest[l].span().data()), written.size());
      b.expect(l, region, std::move(written), "async_h2d_packed destination");
      if (b.chance(10)) whole(l);
    } else if (r < 82 && b.overflow_ops && overflows<E>) {  // counts whose byte sizes overflow: an exception, nothing enqueued
      // An out whose byte size is representable: only the parts' sizes overflow.
      const ferry::device_span<E> out(reinterpret_cast<E*>(dest[l].span().data()),
                                      std::numeric_limits<std::size_t>::max() / sizeof(E));
      b.template expect_throw<std::exception>([&] {
        if constexpr (pinned_only) {
          E* p = reinterpret_cast<E*>(dest[l].span().data());  // never read
          const auto big = ferry::assume_pinned(std::span<E>(p, huge_count<E> / 2 + 1));
          (void)ferry::async_h2d_packed<Pin>(out, b.lane[l], arena, big, big);
        } else {
          if (blocking) b.lane.open_all();
          auto big = std::views::iota(std::size_t{0}, huge_count<E> / 2 + 1) |
                     std::views::transform([](std::size_t i) { return static_cast<E>(i + 1); });
          (void)ferry::async_h2d_packed<Pin>(out, b.lane[l], arena, big, big);
        }
      }, "async_h2d_packed of counts whose byte size overflows");
      whole(l);
    } else {
      b.lane_op();
    }
  });
}

TEMPLATE_TEST_CASE("differential: async_h2d_packed", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  diff::run_component<TestType>("async_h2d_packed", [](auto& b, std::uint64_t ops) {
    diff::dispatch<packed_combo<std::int32_t, ferry::pin::stage>, packed_combo<float, ferry::pin::allow_sync>,
                   packed_combo<std::int64_t, ferry::pin::require>, packed_combo<std::int16_t, ferry::pin::stage>>(
        b.rng(), [&]<class C>() { packed_episode<TestType, C>(b, ops); });
  });
}


// ---------------------------------------------------------------------------------------------
// cpu_gpu_buffer: host() written on the host, copied to the device and back on random streams.
// Model: host() and device() contents. The device array is ordered across streams (a write waits
// for earlier reads and writes); host() is rewritten only once copy_to_host's event is ready
// and, under caller_fenced, once the streams that DMA from it have passed the copies.
template <class E, class Reuse>
struct buffer_combo {
  using elem = E;
  using reuse = Reuse;
};

template <class B, class C>
void buffer_episode(bench<B>& b, std::uint64_t ops) {
  using E = typename C::elem;
  using buffer = ferry::cpu_gpu_buffer<E, typename C::reuse, B>;
  constexpr bool caller_fenced = std::is_same_v<typename C::reuse, ferry::reuse::caller_fenced>;
  ferry::pinned_arena<B> arena;
  const std::size_t size = 1 + b.size_upto(4095);
  auto buf = std::make_unique<buffer>(size, arena);
  std::vector<E> host_model(size);
  std::memset(static_cast<void*>(host_model.data()), 0, size * sizeof(E));
  std::vector<E> dev_model = host_model;
  diff::region_order<B> dev, host_dma;
  std::optional<ferry::event<B>> host_ready;  // the last copy_to_host
  for (std::size_t i = 0; i < size; ++i)
    if (std::memcmp(&buf->host()[i], &host_model[i], sizeof(E)) != 0) {
      b.mismatch("host() is not zero-filled");
      break;
    }
  dev.write(b.lane, 0);
  if constexpr (caller_fenced) host_dma.read(b.lane, 0);
  buf->copy_to_device(size, b.lane[0]);  // a known device start (zeros)

  auto host_matches = [&] {
    if (std::memcmp(buf->host().data(), host_model.data(), size * sizeof(E)) != 0)
      b.mismatch("host() differs from the model once copy_to_host's event is ready");
  };
  auto settle_host = [&] {  // copy_to_host done: host() may be read
    if (!host_ready) return;
    b.lane.open_all();
    host_ready->synchronize();
    host_ready.reset();
    host_matches();
  };
  auto check_device = [&](std::size_t n) {
    const std::size_t m = b.any_lane();
    dev.read(b.lane, m);
    b.expect(m, ferry::device_span<const E>(buf->device().first(n)),
             std::vector<E>(dev_model.begin(), dev_model.begin() + static_cast<std::ptrdiff_t>(n)),
             "cpu_gpu_buffer device()");
  };

  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    const std::size_t l = b.any_lane();
    if (r < 20) {  // rewrite part of host()
      settle_host();
      if constexpr (caller_fenced) {  // the caller's rule: DMA from host() has run
        if (host_dma.writer) b.sync(*host_dma.writer);
        for (std::size_t x : host_dma.readers) b.sync(x);
        host_dma = {};
      }
      const std::size_t n = b.size_upto(size);
      const std::size_t off = b.below(size - n + 1);
      const auto vals = b.template fresh<E>(n);
      std::copy(vals.begin(), vals.end(), buf->host().data() + off);
      std::copy(vals.begin(), vals.end(), host_model.begin() + static_cast<std::ptrdiff_t>(off));
    } else if (r < 45) {  // copy_to_device
      settle_host();
      const std::size_t n = b.size_upto(size);
      dev.write(b.lane, l);
      if constexpr (caller_fenced) host_dma.read(b.lane, l);
      const auto got = buf->copy_to_device(n, b.lane[l]);
      if (got.data() != buf->device().data() || got.size() != n) b.mismatch("copy_to_device returned another span than device().first(n)");
      std::copy(host_model.begin(), host_model.begin() + static_cast<std::ptrdiff_t>(n), dev_model.begin());
      if (b.chance(60)) check_device(n);
    } else if (r < 60) {  // copy_to_host
      settle_host();
      const std::size_t n = b.size_upto(size);
      host_dma.write(b.lane, l);
      dev.read(b.lane, l);
      host_ready = buf->copy_to_host(n, b.lane[l]);
      std::copy(dev_model.begin(), dev_model.begin() + static_cast<std::ptrdiff_t>(n), host_model.begin());
      if (b.chance(30)) settle_host();
    } else if (r < 63) {  // n past the size: out_of_range, nothing enqueued
      const std::size_t n = size + 1 + b.below(4);
      b.template expect_throw<std::out_of_range>([&] { buf->copy_to_device(n, b.lane[l]); }, "copy_to_device past the size");
      b.template expect_throw<std::out_of_range>([&] { (void)buf->copy_to_host(n, b.lane[l]); }, "copy_to_host past the size");
      check_device(size);
    } else if (r < 66) {  // move: spans stay valid
      const auto* h = buf->host().data();
      const auto* d = buf->device().data();
      auto moved = std::make_unique<buffer>(std::move(*buf));
      if (moved->host().data() != h || moved->device().data() != d || moved->size() != size)
        b.mismatch("a moved cpu_gpu_buffer changed its arrays");
      buf = std::move(moved);
    } else if (r < 68) {  // destroyed with copies queued behind a held stream
      auto tmp = std::make_unique<buffer>(1 + b.below(2048), arena);
      const auto vals = b.template fresh<E>(tmp->size());
      std::copy(vals.begin(), vals.end(), tmp->host().data());
      b.lane.hold(l);
      tmp->copy_to_device(tmp->size(), b.lane[l]);
      (void)tmp->copy_to_host(tmp->size(), b.lane[l]);
      b.lane.racing_open([&] { tmp.reset(); });
    } else if (r < 69 && b.overflow_ops && overflows<E>) {  // a size whose bytes overflow
      b.lane.open_all();  // a free waits for every stream, as cudaFree does
      b.template expect_throw<std::exception>([&] { buffer x(huge_count<E>, arena); }, "cpu_gpu_buffer of a size whose bytes overflow");
    } else if (r < 75) {
      check_device(size);
    } else {
      b.lane_op();
    }
  });
  settle_host();
}

TEMPLATE_TEST_CASE("differential: cpu_gpu_buffer", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  diff::run_component<TestType>("cpu_gpu_buffer", [](auto& b, std::uint64_t ops) {
    diff::dispatch<buffer_combo<std::int32_t, ferry::reuse::event_fenced>,
                   buffer_combo<float, ferry::reuse::caller_fenced>,
                   buffer_combo<std::int64_t, ferry::reuse::event_fenced>,
                   buffer_combo<std::uint8_t, ferry::reuse::caller_fenced>>(
        b.rng(), [&]<class C>() { buffer_episode<TestType, C>(b, ops); });
  });
}

// ---------------------------------------------------------------------------------------------
// uva_pool and uva_backed: calls of random sizes (0, growth boundaries) on random streams, each
// view read in stream order on several streams (held behind gates) and checked against the
// source, which is overwritten and freed at once. The caller's duties are the documented ones:
// event_fenced: a reader on a stream other than the next non-empty call's calls record_use
// before the next call (record_use after an empty call is a no-op, so an empty call leaves the
// readers of at most one stream to the next non-empty call there); caller_fenced: a slot's
// readers have finished before the pool comes back to it. The fencing combos use
// reuse::throw_when_full: the readers' gates are this thread's, so a full ring that waited
// (event_fenced, the default; tested in tests/pool/) would wait forever. A capacity_error must be
// legitimate: growth::fixed exceeded, or a busy slot with max_slots reached (or under
// growth::fixed) — and once every stream is idle, the same call succeeds.
template <class E, class Growth, class Reuse, bool Backed>
struct uva_combo {
  using elem = E;
  using growth = Growth;
  using reuse = Reuse;
  static constexpr bool backed = Backed;
};

template <class B, class C>
void uva_episode(bench<B>& b, std::uint64_t ops) {
  using E = typename C::elem;
  constexpr bool backed = C::backed;
  constexpr bool fenced = C::reuse::ferry_fences;
  constexpr bool fixed = std::is_same_v<typename C::growth, ferry::growth::fixed>;
  using pool_t = ferry::uva_pool<E, typename C::growth, typename C::reuse, B>;
  using obj_t = std::conditional_t<backed, ferry::uva_backed<E, typename C::growth, typename C::reuse, B>, pool_t>;
  ferry::pinned_arena<B> arena;
  const std::size_t slots = 1 + b.below(4);
  const std::size_t max_slots = slots + b.below(5);
  const std::size_t initial = backed ? 1 + b.size_upto(2047) : b.size_upto(512);
  const std::size_t max_n = backed ? initial : 2048;
  auto make = [&] { return std::make_unique<obj_t>(initial, slots, max_slots, arena); };
  auto obj = make();
  std::vector<E> host_model(backed ? initial : 0);
  auto zero_host_model = [&] {
    if (!host_model.empty()) std::memset(static_cast<void*>(host_model.data()), 0, host_model.size() * sizeof(E));
  };
  zero_host_model();
  std::vector<ferry::device_buffer<E, B>> dest;
  if constexpr (!backed)
    for (std::size_t l = 0; l < b.lane.size(); ++l) dest.emplace_back(max_n);
  std::set<std::size_t> pending;       // event_fenced: streams reading the current view, unfenced
  std::optional<std::size_t> deferred;  // event_fenced: the stream left to the next non-empty call
  std::vector<std::vector<std::pair<std::size_t, std::uint64_t>>> slot_readers(slots);  // caller_fenced
  std::size_t cur = 0;  // caller_fenced: the slot of the last call

  auto end_of_views = [&] {  // before the pool is destroyed: its readers are fenced or done
    if constexpr (fenced) {
      if (deferred) b.sync(*deferred);
      else for (std::size_t x : pending) obj->record_use(b.lane[x]);
    } else {
      for (auto& rs : slot_readers)
        for (auto [x, e] : rs)
          if (!b.lane.done(x, e)) b.sync(x);
    }
    pending.clear();
    deferred.reset();
    for (auto& rs : slot_readers) rs.clear();
    cur = 0;
  };

  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    if (r < 55) {
      const bool to_device = !backed && b.chance(20);
      std::size_t n = b.size_upto(max_n);
      if constexpr (fixed && !backed) {
        if (b.chance(70)) n = std::min(n, initial);
      }
      const bool too_big = backed && b.chance(3);  // publish(n > size): out_of_range
      if (too_big) n = initial + 1 + b.below(4);
      const bool too_small = to_device && n > 0 && b.chance(5);  // out smaller than src
      const std::size_t l = fenced && deferred && n > 0 ? *deferred : b.any_lane();
      // The caller's duties before the call.
      const bool writes = n > 0 && !too_big && !too_small;
      if constexpr (fenced) {
        if (writes) {
          for (std::size_t x : pending)
            if (x != l) obj->record_use(b.lane[x]);
          std::erase_if(pending, [&](std::size_t x) { return x != l; });
        } else if (n == 0 && !deferred) {
          std::optional<std::size_t> keep;
          if (!pending.empty() && b.chance(50)) keep = *std::next(pending.begin(), static_cast<std::ptrdiff_t>(b.below(pending.size())));
          for (std::size_t x : pending)
            if (x != keep) obj->record_use(b.lane[x]);
          pending.clear();
          if (keep) pending.insert(*keep);
          deferred = keep;
        }
      } else if (writes) {
        const std::size_t next = (cur + 1) % slots;
        for (auto [x, e] : slot_readers[next])
          if (!b.lane.done(x, e)) b.sync(x);
        slot_readers[next].clear();
      }
      std::vector<E> vals = backed ? std::vector<E>(host_model.begin(), host_model.begin() + static_cast<std::ptrdiff_t>(std::min(n, initial)))
                                   : b.template fresh<E>(n);
      const auto before = obj->stats();
      std::size_t before_slot = 0;
      bool beyond_fixed = false;
      if constexpr (!backed) {
        before_slot = obj->current_slot();
        beyond_fixed = fixed && n > obj->capacity((before_slot + 1) % obj->slots());
      }
      const bool may_be_busy = fenced && (fixed || before.slots == max_slots);
      ferry::device_span<const E> v;
      bool done = false;
      for (int attempt = 0; attempt < 2 && !done; ++attempt) {
        try {
          if constexpr (backed) {
            v = obj->publish(n, b.lane[l]);
          } else if (to_device) {
            const auto out = too_small ? dest[l].span().first(n - 1) : dest[l].span();
            std::vector<E> src = vals;
            v = obj->copy_to_device(src, out, b.lane[l]);
            scrub(src);
          } else {
            const unsigned kind = static_cast<unsigned>(b.rng() % 10);
            if (kind < 7) {
              std::vector<E> src = vals;
              v = obj->copy_to_uva(src, b.lane[l]);
              scrub(src);
            } else if (kind < 9 || n != 3) {
              std::list<E> src(vals.begin(), vals.end());
              v = obj->copy_to_uva(src, b.lane[l]);
              scrub(src);
            } else {
              v = obj->copy_to_uva({vals[0], vals[1], vals[2]}, b.lane[l]);
            }
          }
          done = true;
          if (too_big || too_small) b.mismatch("a call past the size or into a too small out did not throw");
        } catch (const std::out_of_range&) {
          if (!too_big && !too_small) throw;
          break;
        } catch (const ferry::capacity_error& e) {
          const auto after = obj->stats();
          if (after.calls != before.calls || after.slots != before.slots) b.mismatch("a call that threw changed the pool");
          if constexpr (!backed) {
            if (obj->current_slot() != before_slot) b.mismatch("a call that threw rotated the pool");
          }
          if (beyond_fixed) break;
          if (!may_be_busy || attempt == 1) {
            b.mismatch(std::string(attempt == 1 ? "capacity_error with every stream idle: " : "unexpected capacity_error: ") + e.what());
            break;
          }
          b.sync_all();  // every reader done: the same call must succeed
          pending.clear();
          deferred.reset();
        }
      }
      if (!done) {
        if constexpr (fenced) {
          if (writes) std::erase_if(pending, [&](std::size_t x) { return x != l; });
        }
        return;
      }
      const auto after = obj->stats();
      if (after.calls != before.calls + 1 || after.slots > max_slots) b.mismatch("stats after a call");
      if (v.size() != n) b.mismatch("a view of " + std::to_string(v.size()) + " elements for " + std::to_string(n));
      if constexpr (!fenced) {
        cur = (cur + 1) % slots;
        if constexpr (!backed) {
          if (obj->current_slot() != cur) b.mismatch("caller_fenced rotation: slot " + std::to_string(obj->current_slot()));
        }
      }
      if (n == 0) return;
      if constexpr (fenced) {
        pending.clear();
        deferred.reset();
      }
      if (to_device) {
        b.expect(l, v, vals, "uva_pool::copy_to_device destination");
        if constexpr (!fenced) slot_readers[cur].emplace_back(l, b.lane.epoch[l]);
        return;
      }
      if (std::memcmp(v.data(), vals.data(), n * sizeof(E)) != 0) b.mismatch("a view does not hold the source when the call returns");
      const std::size_t readers = b.below(4);
      for (std::size_t k = 0; k < readers; ++k) {
        const std::size_t m = b.any_lane();
        b.expect(m, v, vals, backed ? "published view in stream order" : "uva view in stream order");
        if constexpr (fenced) pending.insert(m);
        else slot_readers[cur].emplace_back(m, b.lane.epoch[m]);
      }
    } else if (r < 62 && backed) {  // the host owns the truth: rewrite it at any time
      if constexpr (backed) {
        const std::size_t n = b.size_upto(initial);
        const std::size_t off = b.below(initial - n + 1);
        const auto vals = b.template fresh<E>(n);
        std::copy(vals.begin(), vals.end(), obj->host().begin() + static_cast<std::ptrdiff_t>(off));
        std::copy(vals.begin(), vals.end(), host_model.begin() + static_cast<std::ptrdiff_t>(off));
      }
    } else if (r < 65) {  // move construct, or move assign over a fresh object
      if (b.chance(50)) {
        obj = std::make_unique<obj_t>(std::move(*obj));
      } else {
        auto other = make();
        *other = std::move(*obj);
        obj = std::move(other);
      }
      if constexpr (backed) {
        if (!std::equal(host_model.begin(), host_model.end(), obj->host().begin(),
                        [](const E& x, const E& y) { return std::memcmp(&x, &y, sizeof(E)) == 0; }))
          b.mismatch("a moved uva_backed lost its host state");
      }
    } else if (r < 67) {  // destroyed while streams are held, then made again
      end_of_views();
      b.lane.racing_open([&] { obj.reset(); });
      obj = make();
      zero_host_model();
    } else if (r < 68) {
      b.template expect_throw<std::invalid_argument>([&] { obj_t x(initial, 0, max_slots, arena); }, "zero slots");
    } else {
      b.lane_op();
    }
  });
  end_of_views();
}

TEMPLATE_TEST_CASE("differential: uva_pool", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using namespace ferry;
  diff::run_component<TestType>("uva_pool", [](auto& b, std::uint64_t ops) {
    diff::dispatch<uva_combo<std::int32_t, growth::pow2, reuse::throw_when_full, false>,
                   uva_combo<float, growth::fixed, reuse::throw_when_full, false>,
                   uva_combo<std::int64_t, growth::pow2, reuse::caller_fenced, false>,
                   uva_combo<std::uint16_t, growth::fixed, reuse::caller_fenced, false>,
                   uva_combo<std::uint8_t, growth::pow2, reuse::throw_when_full, false>>(
        b.rng(), [&]<class C>() { uva_episode<TestType, C>(b, ops); });
  });
}

TEMPLATE_TEST_CASE("differential: uva_backed", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using namespace ferry;
  diff::run_component<TestType>("uva_backed", [](auto& b, std::uint64_t ops) {
    diff::dispatch<uva_combo<std::int32_t, growth::pow2, reuse::throw_when_full, true>,
                   uva_combo<double, growth::fixed, reuse::throw_when_full, true>,
                   uva_combo<std::int16_t, growth::pow2, reuse::caller_fenced, true>>(
        b.rng(), [&]<class C>() { uva_episode<TestType, C>(b, ops); });
  });
}


// The model's caller_fenced rule: with 2 slots, apply k on stream 1 and apply k + 1 on stream 0,
// stream 0 synchronized: batch k + 2 rewrites apply k's slot, so stream 1 must be waited for
// although only one apply is not known done.
TEST_CASE("differential: the caller_fenced rotation waits for the oldest apply", "[differential]") {
  using B = ferry::backend::host;
  bench<B> b("rotation", diff::default_seed, 2);
  diff::rotation<B> applies;
  applies.applied(b.lane, 1);
  applies.applied(b.lane, 0);
  b.sync(0);
  applies.keep(b, 1);
  CHECK(b.lane.done(1, 0));
  applies.applied(b.lane, 0);
  applies.keep(b, 1);
  CHECK_FALSE(b.lane.done(0, 1));  // the newest slots - 1 applies stay in flight
}

// ---------------------------------------------------------------------------------------------
// staged_write_tensor and fused_staged_writer. Model: the target, and the writes staged since
// the last apply in order (applied in order, so the later write wins). The target is ordered
// across streams (an apply waits for earlier checks and applies on other streams). Under
// caller_fenced the caller's duty is the rotation's (diff::rotation): before staging into a slot,
// the apply that last read it has run — every apply but the newest slots - 1 (an apply that needs
// no slot only makes this stricter).
template <class E, class Target, class Staging, class Growth, class Reuse>
struct staged_combo {
  using elem = E;
  template <class B>
  using tensor_on = ferry::staged_write_tensor<E, Target, Staging, Growth, Reuse, B>;
};

template <class B, class Tensor>
struct tensor_under_test {
  using E = typename Tensor::value_type;
  static constexpr bool fixed = std::is_same_v<typename Tensor::growth_policy, ferry::growth::fixed>;
  static constexpr bool caller_fenced = std::is_same_v<typename Tensor::reuse_policy, ferry::reuse::caller_fenced>;
  struct write {
    std::size_t row, start;
    std::vector<E> vals;
  };

  std::size_t rows, cols, slots;
  std::unique_ptr<Tensor> t;
  std::vector<E> target;
  std::vector<write> pending;
  std::size_t pending_elements = 0;
  diff::rotation<B> applies;  // caller_fenced: the slot rotation
  diff::region_order<B> order;
  std::size_t max_writes = 0, max_elements = 0;  // growth::fixed: the reserved capacity

  // Mostly narrow rows; a quarter of the tensors have rows wide enough for writes of several
  // chunks.
  explicit tensor_under_test(bench<B>& b)
      : rows(0), cols(b.chance(3) ? 0 : 1 + b.below(b.chance(25) ? 9000 : 80)), slots(1 + b.below(3)) {
    rows = 1 + b.below(cols > 80 ? 8 : 48);
    target.resize(rows * cols);
    if (!target.empty()) std::memset(static_cast<void*>(target.data()), 0, target.size() * sizeof(E));
    if (b.chance(50)) {
      t = std::make_unique<Tensor>(rows, cols, slots);
    } else {
      const std::size_t l = b.any_lane();
      t = std::make_unique<Tensor>(rows, cols, b.lane[l], slots);
      order.write(b.lane, l);
    }
    if (fixed || b.chance(30)) {
      max_writes = 4 + b.below(60);
      max_elements = 16 + b.below(1024);
      t->reserve(max_writes, max_elements);
    }
  }

  void check_pending(bench<B>& b) {
    if (t->pending() != pending.size() || t->pending_elements() != pending_elements)
      b.mismatch("pending() " + std::to_string(t->pending()) + " / " + std::to_string(t->pending_elements()) +
                 ", model " + std::to_string(pending.size()) + " / " + std::to_string(pending_elements));
  }
  void slot_rule(bench<B>& b, std::size_t outstanding) {
    if constexpr (caller_fenced) applies.keep(b, outstanding);
  }
  bool within_reserve(std::size_t writes, std::size_t elements) const {
    return writes <= max_writes && elements <= max_elements;
  }

  void stage(bench<B>& b) {
    slot_rule(b, slots - 1);
    const unsigned kind = static_cast<unsigned>(b.rng() % 100);
    if (kind < 5) {  // out of bounds: out_of_range, nothing recorded
      std::size_t row = b.below(rows), start = b.below(cols + 1), len = b.below(cols - start + 1);
      switch (b.below(3)) {
        case 0: row = rows + b.below(3); break;
        case 1: start = cols + 1 + b.below(3); len = 0; break;
        default: len = cols - start + 1 + b.below(3); break;
      }
      const auto vals = b.template fresh<E>(len);
      b.template expect_throw<std::out_of_range>([&] { t->stage_write(row, start, vals); }, "stage_write out of bounds");
      check_pending(b);
      return;
    }
    // Mostly a few hot rows and overlapping spans, so that later writes must win.
    const std::size_t row = b.chance(50) ? b.below(std::min<std::size_t>(rows, 3)) : b.below(rows);
    std::size_t start = b.below(cols + 1);
    std::size_t len = b.size_upto(cols - start);
    if (kind < 12) {  // one element at [row][0]
      start = 0;
      len = cols == 0 ? 0 : 1;
    } else if (kind < 18 && cols - start >= 3) {
      len = 3;
    }
    std::vector<E> vals = b.template fresh<E>(len);
    const bool beyond = max_writes != 0 && len != 0 && !within_reserve(pending.size() + 1, pending_elements + len);
    try {
      if (kind < 12 && len == 1) {
        t->stage_write_elem(row, vals[0]);
      } else if (kind < 18 && len == 3) {
        t->stage_write(row, start, {vals[0], vals[1], vals[2]});
      } else if (kind < 40) {
        std::list<E> src(vals.begin(), vals.end());
        t->stage_write(row, start, src);
        scrub(src);
      } else if (kind < 50) {
        std::vector<E> backing = vals;
        t->stage_write(row, start, backing | std::views::transform([](const E& x) { return x; }));
        scrub(backing);
      } else {
        std::vector<E> src = vals;
        t->stage_write(row, start, src);
        scrub(src);
      }
    } catch (const ferry::capacity_error&) {
      if (!(fixed && beyond)) b.mismatch("stage_write threw capacity_error within the reserved capacity");
      check_pending(b);
      return;
    }
    if (fixed && beyond) b.mismatch("stage_write past the reserved capacity (growth::fixed) did not throw");
    if (len != 0) {
      pending_elements += len;
      pending.push_back({row, start, std::move(vals)});
    }
    check_pending(b);
  }

  /// The staged writes were applied on stream l (one launch enqueued).
  void applied(bench<B>& b, std::size_t l) {
    for (const auto& w : pending)
      std::copy(w.vals.begin(), w.vals.end(), target.begin() + static_cast<std::ptrdiff_t>(w.row * cols + w.start));
    if (!pending.empty() && caller_fenced) applies.applied(b.lane, l);
    pending.clear();
    pending_elements = 0;
    check_pending(b);
  }

  void apply(bench<B>& b) {
    const std::size_t l = b.any_lane();
    order.write(b.lane, l);
    try {
      t->apply_write(b.lane[l]);
    } catch (const ferry::capacity_error&) {
      if (!fixed || within_reserve(pending.size(), pending_elements))
        b.mismatch("apply_write threw capacity_error within the reserved capacity");
      check_pending(b);  // the staged writes are kept
      return;
    }
    applied(b, l);
    if (b.chance(70)) check(b);
  }

  void check(bench<B>& b) {
    const std::size_t m = b.any_lane();
    order.read(b.lane, m);
    b.expect(m, ferry::device_span<const E>(t->span()), target, "staged target");
  }

  void clear(bench<B>& b) {
    t->clear();
    pending.clear();
    pending_elements = 0;
    check_pending(b);
  }

  void reserve(bench<B>& b) {
    if constexpr (caller_fenced) slot_rule(b, 0);
    if (b.overflow_ops && b.chance(5)) {
      b.template expect_throw<std::exception>([&] {
        t->reserve(std::numeric_limits<std::size_t>::max() / 2, std::numeric_limits<std::size_t>::max() / 3);
      }, "reserve of sizes that overflow");
      check_pending(b);
      return;
    }
    // Under fixed, reserve only grows (a smaller capacity than what is staged is not asked for);
    // otherwise any size, smaller than what is staged included.
    std::size_t w = b.below(64), e = b.below(1024);
    if (fixed) {
      w = std::max(w, max_writes);
      e = std::max(e, max_elements);
    }
    t->reserve(w, e);
    if (fixed) {
      max_writes = w;
      max_elements = e;
    }
    check_pending(b);
  }

  void move(bench<B>& b) {
    const auto* data = t->span().data();
    if (b.chance(50)) {
      auto moved = std::make_unique<Tensor>(std::move(*t));
      if (t->pending() != 0 || t->size() != 0) b.mismatch("a moved-from tensor is not empty");
      b.template expect_throw<ferry::error>([&] { t->stage_write(0, 0, std::span<const E>()); }, "stage_write on a moved-from tensor");
      t = std::move(moved);
    } else {  // over a tensor whose own apply is queued behind a held stream
      auto other = std::make_unique<Tensor>(1 + b.below(8), 1 + b.below(8), 1 + b.below(2));
      if (fixed) other->reserve(1, 1);
      other->stage_write(0, 0, b.template fresh<E>(1));
      const std::size_t l = b.any_lane();
      b.lane.hold(l);
      other->apply_write(b.lane[l]);
      b.lane.racing_open([&] {  // the old target is freed: that waits for every stream, as cudaFree
        *other = std::move(*t);
        t = std::move(other);
      });
    }
    if (t->span().data() != data || t->rows() != rows || t->cols() != cols) b.mismatch("a moved tensor changed its target");
    check_pending(b);
  }

  /// A tensor of this type with an apply queued behind a held stream, destroyed.
  void destroy_queued(bench<B>& b) {
    auto tmp = std::make_unique<Tensor>(1 + b.below(16), 1 + b.below(64), 1 + b.below(2));
    if (fixed) tmp->reserve(8, 512);
    for (std::size_t k = 0; k < 4; ++k) tmp->stage_write(b.below(tmp->rows()), 0, b.template fresh<E>(1 + b.below(tmp->cols())));
    const std::size_t l = b.any_lane();
    b.lane.hold(l);
    tmp->apply_write(b.lane[l]);
    b.lane.racing_open([&] { tmp.reset(); });
  }
};

template <class B, class C>
void staged_episode(bench<B>& b, std::uint64_t ops) {
  tensor_under_test<B, typename C::template tensor_on<B>> x(b);
  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    if (r < 50) x.stage(b);
    else if (r < 68) x.apply(b);
    else if (r < 71) x.clear(b);
    else if (r < 75) x.reserve(b);
    else if (r < 78) x.move(b);
    else if (r < 80) x.destroy_queued(b);
    else if (r < 85) x.check(b);
    else b.lane_op();
  });
  x.check(b);
}

TEMPLATE_TEST_CASE("differential: staged_write_tensor", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using namespace ferry;
  diff::run_component<TestType>("staged_write_tensor", [](auto& b, std::uint64_t ops) {
    diff::dispatch<staged_combo<std::int32_t, target::device, staging::by_target, growth::pow2, reuse::event_fenced>,
                   staged_combo<float, target::uva, staging::by_target, growth::pow2, reuse::caller_fenced>,
                   staged_combo<std::int64_t, target::device, staging::uva_direct, growth::fixed, reuse::event_fenced>,
                   staged_combo<std::uint16_t, target::uva, staging::h2d_copy, growth::pow2, reuse::event_fenced>,
                   staged_combo<std::int32_t, target::device, staging::threshold<256>, growth::pow2, reuse::caller_fenced>,
                   staged_combo<float, target::device, staging::h2d_copy, growth::fixed, reuse::caller_fenced>,
                   staged_combo<std::int8_t, target::uva, staging::threshold<64>, growth::fixed, reuse::caller_fenced>,
                   staged_combo<std::int64_t, target::uva, staging::uva_direct, growth::pow2, reuse::event_fenced>>(
        b.rng(), [&]<class C>() { staged_episode<TestType, C>(b, ops); });
  });
}

// fused_staged_writer: two tensors (a device and a UVA target, their own policies) applied
// together, alone, in either order, or on their own; the same tensor twice is rejected with
// nothing cleared. The writer's own slots follow the same caller_fenced rule.
template <class E, class Staging, class Growth, class Reuse, class TensorA, class TensorB>
struct fused_combo {
  using elem = E;
  using staging = Staging;
  using growth = Growth;
  using reuse = Reuse;
  using a = TensorA;
  using b = TensorB;
};

template <class B, class C>
void fused_episode(bench<B>& b, std::uint64_t ops) {
  using E = typename C::elem;
  using writer_t = ferry::fused_staged_writer<E, typename C::staging, typename C::growth, typename C::reuse, B>;
  constexpr bool fixed = std::is_same_v<typename C::growth, ferry::growth::fixed>;
  constexpr bool caller_fenced = std::is_same_v<typename C::reuse, ferry::reuse::caller_fenced>;
  tensor_under_test<B, typename C::a::template tensor_on<B>> x(b);
  tensor_under_test<B, typename C::b::template tensor_on<B>> y(b);
  const std::size_t slots = 1 + b.below(3);
  writer_t writer(2 + b.below(2), slots);
  std::size_t max_writes = 0, max_elements = 0;
  if (fixed || b.chance(30)) {
    max_writes = 8 + b.below(64);
    max_elements = 64 + b.below(2048);
    writer.reserve(max_writes, max_elements);
  }
  diff::rotation<B> applies;  // caller_fenced writer: the slot rotation

  auto fused = [&](std::size_t l, auto&... ts) {
    if constexpr (caller_fenced) applies.keep(b, slots - 1);
    const std::size_t writes = (ts.pending.size() + ...);
    const std::size_t elements = (ts.pending_elements + ...);
    (ts.order.write(b.lane, l), ...);
    try {
      writer.apply(b.lane[l], *ts.t...);
    } catch (const ferry::capacity_error&) {
      if (!fixed || (writes <= max_writes && elements <= max_elements))
        b.mismatch("fused apply threw capacity_error within the reserved capacity");
      (ts.check_pending(b), ...);
      return;
    }
    if (writes != 0 && caller_fenced) applies.applied(b.lane, l);
    (ts.applied(b, l), ...);
    if (b.chance(70)) (ts.check(b), ...);
  };

  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    const bool first = b.chance(50);
    const std::size_t l = b.any_lane();
    if (r < 50) {
      first ? x.stage(b) : y.stage(b);
    } else if (r < 70) {
      switch (b.below(4)) {
        case 0: fused(l, x, y); break;
        case 1: fused(l, y, x); break;
        case 2: fused(l, x); break;
        default: fused(l, y); break;
      }
    } else if (r < 72) {  // the same tensor twice: invalid_argument, nothing cleared
      b.template expect_throw<std::invalid_argument>([&] { writer.apply(b.lane[l], *x.t, *y.t, *x.t); }, "the same tensor twice");
      x.check_pending(b);
      y.check_pending(b);
    } else if (r < 80) {
      first ? x.apply(b) : y.apply(b);
    } else if (r < 82) {
      first ? x.clear(b) : y.clear(b);
    } else if (r < 84) {
      first ? x.reserve(b) : y.reserve(b);
    } else if (r < 86) {
      first ? x.move(b) : y.move(b);
    } else if (r < 90) {
      first ? x.check(b) : y.check(b);
    } else {
      b.lane_op();
    }
  });
  x.check(b);
  y.check(b);
}

TEMPLATE_TEST_CASE("differential: fused_staged_writer", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using namespace ferry;
  diff::run_component<TestType>("fused_staged_writer", [](auto& b, std::uint64_t ops) {
    diff::dispatch<
        fused_combo<std::int32_t, staging::by_target, growth::pow2, reuse::event_fenced,
                    staged_combo<std::int32_t, target::device, staging::by_target, growth::pow2, reuse::event_fenced>,
                    staged_combo<std::int32_t, target::uva, staging::by_target, growth::pow2, reuse::caller_fenced>>,
        fused_combo<float, staging::h2d_copy, growth::fixed, reuse::caller_fenced,
                    staged_combo<float, target::uva, staging::by_target, growth::pow2, reuse::event_fenced>,
                    staged_combo<float, target::device, staging::h2d_copy, growth::fixed, reuse::caller_fenced>>,
        fused_combo<std::int64_t, staging::threshold<512>, growth::pow2, reuse::event_fenced,
                    staged_combo<std::int64_t, target::device, staging::uva_direct, growth::fixed, reuse::event_fenced>,
                    staged_combo<std::int64_t, target::uva, staging::h2d_copy, growth::pow2, reuse::caller_fenced>>>(
        b.rng(), [&]<class C>() { fused_episode<TestType, C>(b, ops); });
  });
}


// ---------------------------------------------------------------------------------------------
// step_batch: a random plan (two uploads, two publishes, two write targets of different element
// types, a fill from a publish's element and one from a device value, a gather from a device
// array rewritten in stream order before some submits, with rows from the host, and an epilogue
// that derives from the gathered rows and the upload's size and advances the gather's source,
// which the step's gather read before it ran), then random steps on
// random streams against a host model: random sizes (span() called twice at times: the second
// wins), overlapping writes (the later wins), sizes beyond growth::fixed's maxima (capacity_error,
// nothing recorded), a fill index the publish does not hold (submit throws out_of_range), steps
// cancelled, the batch moved and assigned over (its handles stay valid; the old plan's end).
// Under the user GrowthPolicies the steps that hold more than 64 KiB are refused at submit
// (the policy throws, or answers 2^63 bytes): capacity_error with nothing enqueued, again on a
// retry, the step open with its data; it is then made smaller (the upload's first elements, as
// written) and submitted, or cancelled. A gather index outside its source, or ferry::from_host
// without host values, is refused by submit (out_of_range, nothing enqueued) and then fixed.
// Readers of the publishes on other streams call record_use before the next submit
// (event_fenced), or are waited for by the caller (caller_fenced: a slot comes back `slots`
// submits later). The destinations are one region across streams (each submit writes all of
// them).

}  // namespace

// User GrowthPolicies, outside the anonymous namespace: a batch's submit carries a visibility
// attribute, which a type of internal linkage would void (nvcc warns).
namespace diff_policies {

inline constexpr std::size_t step_refuse_above = std::size_t{64} << 10;  // a power of two

/// A legal GrowthPolicy that throws ferry::capacity_error for more than 64 KiB.
struct step_throwing_policy {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    if (needed > step_refuse_above)
      throw ferry::capacity_error("ferry: the differential policy refuses " + std::to_string(needed));
    return ferry::growth::pow2::capacity_for(needed, current);
  }
};
/// A legal GrowthPolicy whose answer above 64 KiB is 2^63 bytes (no pinned block holds it).
struct step_huge_policy {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    return needed > step_refuse_above ? std::max(needed, std::size_t{1} << 63)
                                      : ferry::growth::pow2::capacity_for(needed, current);
  }
};

/// The differential step's epilogue: for each gathered row i, echo[i] = 3 * row + the upload's
/// elements this step, and source[i] (the gather's source: what the step's gather read, as an
/// engine's epilogue advances the per-request state it gathered) += 1 for i < min(rows,
/// source_n); meta = {step number, gathered rows, upload elements}. A batch made without
/// set_epilogue (the one assigned over) has no echo and does nothing.
struct step_digest {
  ferry::step_ref<std::int32_t> gathered, uploaded;
  std::int64_t* echo = nullptr;
  std::int64_t* meta = nullptr;
  std::int32_t* source = nullptr;
  std::size_t source_n = 0;
  FERRY_HOST_DEVICE void operator()(const ferry::step_context& ctx) const {
    if (echo == nullptr) return;
    const auto g = ctx.view(gathered);
    const auto up = static_cast<std::int64_t>(ctx.size(uploaded));
    for (std::size_t i = ctx.rank(); i < g.size(); i += ctx.threads()) echo[i] = std::int64_t{g[i]} * 3 + up;
    for (std::size_t i = ctx.rank(); i < g.size() && i < source_n; i += ctx.threads()) source[i] += 1;
    if (ctx.rank() == 0) {
      meta[0] = static_cast<std::int64_t>(ctx.step());
      meta[1] = static_cast<std::int64_t>(g.size());
      meta[2] = up;
    }
  }
};

}  // namespace diff_policies

namespace {

using diff_policies::step_digest;
using diff_policies::step_huge_policy;
using diff_policies::step_refuse_above;
using diff_policies::step_throwing_policy;

template <class Growth, class Reuse, class Launch>
struct step_combo {
  using growth = Growth;
  using reuse = Reuse;
  using launch = Launch;
};

template <class B, class C>
void step_episode(bench<B>& b, std::uint64_t ops) {
  using batch_t = ferry::step_batch<typename C::growth, typename C::reuse, typename C::launch, B,
                                    ferry::epilogue::functor<step_digest>>;
  using i32 = std::int32_t;
  using i64 = std::int64_t;
  using u8 = std::uint8_t;
  constexpr bool fixed = std::is_same_v<typename C::growth, ferry::growth::fixed>;
  constexpr bool refuses = std::is_same_v<typename C::growth, step_throwing_policy> ||
                           std::is_same_v<typename C::growth, step_huge_policy>;
  constexpr bool fenced = C::reuse::ferry_fences;
  // Limits of a normal step (their contents stay under 32 KiB; the growth::fixed maxima), and of
  // the upload's destination, which a big step fills beyond 64 KiB.
  constexpr std::size_t n32 = 2000, n64 = 1000, np32 = 1000, npd = 200, big32 = 20000;
  constexpr std::size_t fill_index = 3;
  const std::size_t rows32 = 1 + b.below(12), cols32 = 1 + b.below(64);
  const std::size_t rows8 = 1 + b.below(6), cols8 = 1 + b.below(200);
  const std::size_t max_w = 1 + b.below(12), max_e32 = 1 + b.below(rows32 * cols32),
                    max_e8 = 1 + b.below(rows8 * cols8);
  const std::size_t fill_n1 = b.below(40), fill_n2 = b.below(3000);
  const std::size_t ng = 1 + b.below(1500), nsrc = 1 + b.below(300);  // gather rows, source rows
  const std::size_t slots = (fenced ? 2 : 1) + b.below(3);
  const std::size_t max_slots = slots + (fixed && b.chance(30) ? 0 : b.below(6));
  ferry::pinned_arena<B> arena;

  // destinations and their models (random at first)
  auto filled = [&](auto& buf, std::size_t lane_i) {
    using E = typename std::remove_reference_t<decltype(buf)>::value_type;
    auto v = b.template fresh<E>(buf.size());
    if (!v.empty()) ferry::async_h2d(v, buf.span(), b.lane[lane_i]);
    return v;
  };
  ferry::device_buffer<i32, B> d32(big32);
  ferry::device_buffer<i64, B> d64(n64 + b.below(50));
  ferry::device_buffer<i32, B> t32(rows32 * cols32);
  ferry::device_buffer<u8, B> t8(rows8 * cols8);
  ferry::device_buffer<i32, B> f1(fill_n1);
  ferry::device_buffer<i64, B> f2(fill_n2), value(1);
  ferry::device_buffer<i32, B> gd(ng), gsrc(nsrc);
  ferry::device_buffer<i64, B> echo(ng), meta(3);
  diff::region_order<B> order;  // every destination (and the fill's device value)
  const std::size_t l0 = b.any_lane();
  order.write(b.lane, l0);
  auto m32 = filled(d32, l0);
  auto m64 = filled(d64, l0);
  auto mt32 = filled(t32, l0);
  auto mt8 = filled(t8, l0);
  auto mf1 = filled(f1, l0);
  auto mf2 = filled(f2, l0);
  auto mgd = filled(gd, l0);
  auto msrc = filled(gsrc, l0);
  auto mecho = filled(echo, l0);
  auto mmeta = filled(meta, l0);

  auto batch = std::make_unique<batch_t>(slots, max_slots, arena);
  auto hint = [&](std::size_t n) { return fixed || b.chance(30) ? n : b.below(4); };
  auto u32 = batch->add_upload(d32.span(), fixed ? n32 : hint(n32));
  auto u64 = batch->add_upload(d64.span(), hint(n64));
  auto p32 = batch->template add_publish<i32>(hint(np32));
  auto pd = batch->template add_publish<double>(hint(npd));
  auto w32 = batch->add_writes(ferry::staged_view<i32>(t32.span().data(), rows32, cols32), fixed ? max_w : hint(max_w),
                               fixed ? max_e32 : hint(max_e32));
  auto w8 = batch->add_writes(ferry::staged_view<u8>(t8.span().data(), rows8, cols8), fixed ? max_w : hint(max_w),
                              fixed ? max_e8 : hint(max_e8));
  batch->add_fill(f1.span(), p32, fill_index);
  batch->add_fill(f2.span(), value.span().data());
  auto g32 = batch->add_gather(gd.span(), ferry::device_span<const i32>(gsrc.span()),
                               std::min(hint(ng), ng));  // max_n within the destination
  batch->set_epilogue(step_digest{g32.ref(), u32.ref(), echo.span().data(), meta.span().data(), gsrc.span().data(), nsrc});
  b.template expect_throw<std::invalid_argument>([&] { (void)batch->add_upload(gsrc.span().first(1), 1); },
                                                 "an upload over a gather's source");
  // Destinations that overlap the plan's are rejected, and nothing is added (the steps show it).
  b.template expect_throw<std::invalid_argument>([&] { (void)batch->add_upload(d32.span().subspan(b.below(big32), 1), 1); },
                                                 "an upload over an upload");
  b.template expect_throw<std::invalid_argument>(
      [&] { (void)batch->add_writes(ferry::staged_view<i32>(t32.span().data() + b.below(rows32 * cols32), 1, 1)); },
      "a write target over a write target");
  if (fill_n2 != 0)
    b.template expect_throw<std::invalid_argument>([&] { batch->add_fill(f2.span().subspan(b.below(fill_n2), 1), value.span().data()); },
                                                   "a fill over a fill");
  b.template expect_throw<std::invalid_argument>([&] { batch->add_fill(d64.span().first(1), value.span().data()); },
                                                 "a fill over an upload");
  if (fill_n1 != 0)
    b.template expect_throw<std::invalid_argument>([&] { batch->add_fill(f1.span().first(1), d32.span().data()); },
                                                   "a fill from an upload's destination");

  std::set<std::size_t> pending;  // event_fenced: streams reading the last step's publishes
  std::deque<std::vector<std::pair<std::size_t, std::uint64_t>>> in_flight;  // caller_fenced: per submit
  std::uint64_t steps = 0, refused = 0, cancelled = 0, retried = 0, gather_refused = 0, gathered = 0;

  auto caller_duty = [&] {  // caller_fenced: a slot's step and readers are done `slots` submits later
    if constexpr (!fenced) {
      while (in_flight.size() > slots - 1) {
        for (auto [x, e] : in_flight.front())
          if (!b.lane.done(x, e)) b.sync(x);
        in_flight.pop_front();
      }
    }
  };
  auto begin = [&] {
    caller_duty();
    try {
      batch->begin();
    } catch (const ferry::capacity_error& e) {  // legitimate only while slots are still read
      if (!fenced) throw;
      b.sync_all();
      pending.clear();
      batch->begin();  // every stream idle: it must succeed
    }
  };
  auto expect_counts = [&](std::size_t writes32, std::size_t elems32) {
    if (w32.pending() != writes32 || w32.pending_elements() != elems32)
      b.mismatch("writes pending " + std::to_string(w32.pending()) + " / " + std::to_string(w32.pending_elements()) +
                 ", model " + std::to_string(writes32) + " / " + std::to_string(elems32));
  };

  struct write8 {
    std::size_t row, start;
    std::vector<u8> v;
  };
  struct write32 {
    std::size_t row, start;
    std::vector<i32> v;
  };

  // One step: begin, random data, submit (refused and fixed where the policy says so); or cancel.
  auto step = [&](bool cancel_it) {
    begin();
    std::optional<std::vector<i32>> s32;
    std::optional<std::vector<i64>> s64;
    std::vector<i32> sp32;
    std::vector<double> spd;
    bool p32_set = false, pd_set = false;
    std::vector<write32> ws32;
    std::vector<write8> ws8;
    std::size_t e32 = 0;
    bool big = false;
    // the uploads (a big one at times; twice at times: the second call wins)
    for (int k = 0, calls = 1 + (b.chance(15) ? 1 : 0); k < calls; ++k) {
      if (!b.chance(80)) continue;
      big = k == 0 && b.chance(8);
      const std::size_t n = big ? step_refuse_above / sizeof(i32) + 1 + b.below(big32 - step_refuse_above / sizeof(i32))
                                : b.size_upto(n32);
      auto v = b.template fresh<i32>(n);
      try {
        auto out = u32.span(n);
        std::copy(v.begin(), v.end(), out.begin());
        s32 = std::move(v);
      } catch (const ferry::capacity_error&) {
        if (!(fixed && n > n32)) b.mismatch("upload::span threw capacity_error within the plan");
        big = false;
      }
      if (fixed && n > n32 && s32 && s32->size() == n) b.mismatch("upload::span beyond max_n under growth::fixed");
    }
    if (b.chance(80)) {
      auto v = b.template fresh<i64>(b.size_upto(n64));
      std::copy(v.begin(), v.end(), u64.span(v.size()).begin());
      s64 = std::move(v);
    }
    if (b.overflow_ops && b.chance(3))  // beyond the destination: out_of_range, nothing recorded
      b.template expect_throw<std::out_of_range>([&] { (void)u64.span(d64.size() + 1 + b.below(3)); }, "upload beyond its destination");
    // the publishes (the fill reads element fill_index of p32: sometimes it does not hold it)
    for (int k = 0, calls = 1 + (b.chance(15) ? 1 : 0); k < calls; ++k) {
      const std::size_t n = b.chance(90) ? fill_index + 1 + b.below(np32 - fill_index) : b.below(fill_index + 1);
      auto v = b.template fresh<i32>(n);
      std::copy(v.begin(), v.end(), p32.span(n).begin());
      sp32 = std::move(v);
      p32_set = true;
    }
    if (b.chance(70)) {
      const std::size_t n = b.size_upto(npd);
      spd = b.template fresh<double>(n);
      std::copy(spd.begin(), spd.end(), pd.span(n).begin());
      pd_set = true;
    }
    if (fixed && b.chance(5))
      b.template expect_throw<ferry::capacity_error>([&] { (void)pd.span(npd + 1); }, "publish::span beyond max_n");
    // the gather: random rows of the source, some from the host; a bad index at times (submit
    // refuses it, and it is fixed below)
    std::vector<i32> gidx, ghost;  // this step's indices and host values (empty: no gather this step)
    bool gather_bad = false;
    if (b.chance(75)) {
      const std::size_t n = b.size_upto(ng);
      auto idx = g32.indices(n);
      const bool with_host = b.chance(60);
      for (std::size_t i = 0; i < n; ++i)
        idx[i] = with_host && b.chance(20) ? ferry::from_host : static_cast<i32>(b.below(nsrc));
      if (with_host) {
        ghost = b.template fresh<i32>(n);
        std::copy(ghost.begin(), ghost.end(), g32.host_values().begin());
      }
      if (n != 0 && b.chance(6)) {  // outside the source, or from the host without host values
        const std::size_t at = b.below(n);
        idx[at] = with_host ? static_cast<i32>(nsrc + b.below(3)) : (b.chance(50) ? ferry::from_host : -2);
        gather_bad = true;
      }
      gidx.assign(idx.begin(), idx.end());
    }
    // the writes: a few hot rows, overlapping (the later wins)
    const std::size_t writes = b.below(max_w + 3);
    for (std::size_t k = 0; k < writes; ++k) {
      const bool into32 = b.chance(60);
      const std::size_t rows = into32 ? rows32 : rows8, cols = into32 ? cols32 : cols8;
      const std::size_t row = b.chance(50) ? 0 : b.below(rows), start = b.below(cols + 1);
      const std::size_t len = b.size_upto(cols - start);
      if (into32) {
        auto v = b.template fresh<i32>(len);
        const bool over = fixed && len != 0 && (ws32.size() + 1 > max_w || e32 + len > max_e32);
        try {
          if (len == 1 && start == 0 && b.chance(30)) w32.stage_write_elem(row, v[0]);
          else w32.stage_write(row, start, v);
          if (over) b.mismatch("a write beyond growth::fixed's maxima did not throw");
          if (len != 0) {
            e32 += len;
            ws32.push_back({row, start, std::move(v)});
          }
        } catch (const ferry::capacity_error&) {
          if (!over) b.mismatch("stage_write threw capacity_error within the plan");
        }
        expect_counts(ws32.size(), e32);
      } else {
        auto v = b.template fresh<u8>(len);
        std::size_t e8 = 0;
        for (const auto& w : ws8) e8 += w.v.size();
        const bool over = fixed && len != 0 && (ws8.size() + 1 > max_w || e8 + len > max_e8);
        try {
          std::list<u8> src(v.begin(), v.end());  // a range that is not contiguous
          w8.stage_write(row, start, src);
          if (over) b.mismatch("a write beyond growth::fixed's maxima did not throw");
          if (len != 0) ws8.push_back({row, start, std::move(v)});
        } catch (const ferry::capacity_error&) {
          if (!over) b.mismatch("stage_write threw capacity_error within the plan");
        }
      }
    }
    if (b.chance(4))
      b.template expect_throw<std::out_of_range>([&] { w32.stage_write(rows32, 0, std::vector<i32>{}); }, "stage_write past the rows");
    expect_counts(ws32.size(), e32);
    if (cancel_it) {
      ++cancelled;
      batch->cancel();
      expect_counts(0, 0);
      if (!p32.view().empty()) b.mismatch("a publish's view after cancel() is not empty");
      if (batch->in_step()) b.mismatch("in_step() after cancel()");
      return;
    }

    const std::size_t l = b.any_lane();
    order.write(b.lane, l);
    const auto val = b.template fresh<i64>(1);
    ferry::async_h2d(val, value.span(), b.lane[l]);
    if (b.chance(50)) {  // the gather's source rewritten by work before the submit (stream order)
      msrc = b.template fresh<i32>(nsrc);
      ferry::async_h2d(msrc, gsrc.span(), b.lane[l]);
    }
    if constexpr (fenced) {  // readers of the last step's publishes on other streams
      for (std::size_t x : pending)
        if (x != l) batch->record_use(b.lane[x]);
    }
    auto submit = [&] {
      const auto tasks = ferry_test::enqueued<B>(b.lane[l]);
      try {
        batch->submit(b.lane[l]);
        return true;
      } catch (const std::exception& e) {
        if (ferry_test::enqueued<B>(b.lane[l]) != tasks) b.mismatch("a submit that threw enqueued work");
        if (!batch->in_step()) b.mismatch("a submit that threw closed the step");
        const bool index = !p32_set || sp32.size() <= fill_index || gather_bad;
        if (dynamic_cast<const std::out_of_range*>(&e) != nullptr && index) return false;
        if (dynamic_cast<const ferry::capacity_error*>(&e) != nullptr && refuses && big) return false;
        throw;
      }
    };
    for (int attempt = 0; !submit(); ++attempt) {
      if (attempt == 3) {
        b.mismatch("a submit refused after its step was fixed");
        batch->cancel();
        return;
      }
      if (gather_bad) {  // the gather's bad rows made good (the indices written before stay)
        ++gather_refused;
        auto idx = g32.indices(gidx.size());
        if (!std::equal(idx.begin(), idx.end(), gidx.begin())) b.mismatch("a refused step lost the gather's indices");
        for (std::size_t i = 0; i < gidx.size(); ++i)
          if (gidx[i] < (ghost.empty() ? 0 : ferry::from_host) || gidx[i] >= static_cast<i32>(nsrc))
            idx[i] = gidx[i] = static_cast<i32>(b.below(nsrc));
        if (!ghost.empty()) std::copy(ghost.begin(), ghost.end(), g32.host_values().begin());
        gather_bad = false;
        continue;
      }
      if (!p32_set || sp32.size() <= fill_index) {  // the fill's element: the publish made longer
        sp32 = b.template fresh<i32>(fill_index + 1 + b.below(8));
        std::copy(sp32.begin(), sp32.end(), p32.span(sp32.size()).begin());
        p32_set = true;
        continue;
      }
      ++refused;
      if (attempt == 0 && b.chance(50)) {  // a retry as it is: refused again
        ++retried;
        continue;
      }
      if (b.chance(30)) {  // dropped: nothing of it happens
        ++cancelled;
        batch->cancel();
        expect_counts(0, 0);
        return;
      }
      // made smaller: the upload's first elements, as written before the refusal
      const std::size_t n = b.below(n32 + 1);
      auto kept = u32.span(n);
      if (!std::equal(kept.begin(), kept.end(), s32->begin())) b.mismatch("a refused step lost the upload's data");
      s32->resize(n);
      big = false;
    }
    if (refuses && big) b.mismatch("a step of more than 64 KiB was not refused by the policy");
    ++steps;
    if (batch->steps() != steps) b.mismatch("steps() " + std::to_string(batch->steps()) + ", model " + std::to_string(steps));
    if (batch->in_step()) b.mismatch("in_step() after submit");
    // the model
    if (s32) std::copy(s32->begin(), s32->end(), m32.begin());
    if (s64) std::copy(s64->begin(), s64->end(), m64.begin());
    for (const auto& w : ws32) std::copy(w.v.begin(), w.v.end(), mt32.begin() + static_cast<std::ptrdiff_t>(w.row * cols32 + w.start));
    for (const auto& w : ws8) std::copy(w.v.begin(), w.v.end(), mt8.begin() + static_cast<std::ptrdiff_t>(w.row * cols8 + w.start));
    std::fill(mf1.begin(), mf1.end(), sp32[fill_index]);
    std::fill(mf2.begin(), mf2.end(), val[0]);
    const auto up_n = static_cast<i64>(s32 ? s32->size() : 0);
    for (std::size_t i = 0; i < gidx.size(); ++i) {
      mgd[i] = gidx[i] == ferry::from_host ? ghost[i] : msrc[static_cast<std::size_t>(gidx[i])];
      mecho[i] = i64{mgd[i]} * 3 + up_n;
    }
    for (std::size_t i = 0; i < gidx.size() && i < nsrc; ++i) ++msrc[i];  // the epilogue, after the gather read
    mmeta = {static_cast<i64>(steps - 1), static_cast<i64>(gidx.size()), up_n};
    gathered += gidx.size();
    // readers
    std::vector<std::pair<std::size_t, std::uint64_t>> readers{{l, b.lane.epoch[l]}};
    if constexpr (fenced) pending.clear();
    const auto v32 = p32.view();
    if (v32.size() != sp32.size()) b.mismatch("a publish's view of " + std::to_string(v32.size()) + " elements for " + std::to_string(sp32.size()));
    for (std::size_t k = b.below(3); k > 0; --k) {
      const std::size_t m = b.any_lane();
      if (b.chance(50)) b.expect(m, v32, sp32, "publish view (int32) in stream order");
      else b.expect(m, pd.view(), pd_set ? spd : std::vector<double>{}, "publish view (double) in stream order");
      if constexpr (fenced) pending.insert(m);
      readers.emplace_back(m, b.lane.epoch[m]);
    }
    if constexpr (!fenced) in_flight.push_back(std::move(readers));
    if (b.chance(40)) {
      const std::size_t m = b.any_lane();
      order.read(b.lane, m);
      b.expect(m, ferry::device_span<const i32>(d32.span()), m32, "upload destination (int32)");
      b.expect(m, ferry::device_span<const i64>(d64.span()), m64, "upload destination (int64)");
      b.expect(m, ferry::device_span<const i32>(t32.span()), mt32, "write target (int32)");
      b.expect(m, ferry::device_span<const u8>(t8.span()), mt8, "write target (uint8)");
      b.expect(m, ferry::device_span<const i32>(f1.span()), mf1, "fill from a publish");
      b.expect(m, ferry::device_span<const i64>(f2.span()), mf2, "fill from a device value");
      b.expect(m, ferry::device_span<const i32>(gd.span()), mgd, "gather destination");
      b.expect(m, ferry::device_span<const i64>(echo.span()), mecho, "epilogue's rows");
      b.expect(m, ferry::device_span<const i64>(meta.span()), mmeta, "epilogue's step, rows and upload size");
      b.expect(m, ferry::device_span<const i32>(gsrc.span()), msrc, "gather source advanced by the epilogue");
    }
  };

  b.run(ops, [&] {
    const unsigned r = static_cast<unsigned>(b.rng() % 100);
    if (r < 55) {
      step(false);
    } else if (r < 60) {
      step(true);
    } else if (r < 62) {  // moved: the handles stay valid
      batch = std::make_unique<batch_t>(std::move(*batch));
    } else if (r < 64) {  // assigned over a batch with a step of its own, behind a held stream
      auto other = std::make_unique<batch_t>(2, 4, arena);
      ferry::device_buffer<i32, B> od(4);
      auto ou = other->add_upload(od.span(), 4);
      auto op = other->template add_publish<i32>(4);
      const std::size_t x = b.any_lane();
      b.lane.hold(x);
      other->begin();
      std::copy_n(b.template fresh<i32>(4).begin(), 4, ou.span(4).begin());
      std::copy_n(b.template fresh<i32>(4).begin(), 4, op.span(4).begin());
      other->submit(b.lane[x]);
      b.lane.racing_open([&] { *other = std::move(*batch); });  // other's plan ends: it waits for its step
      b.template expect_throw<ferry::error>([&] { (void)ou.span(1); }, "a handle of a batch assigned over");
      b.template expect_throw<ferry::error>([&] { (void)op.view(); }, "a view of a batch assigned over");
      batch = std::move(other);
    } else if (r < 65) {
      typename batch_t::template publish<i32> empty_p;
      typename batch_t::template upload<i64> empty_u;
      b.template expect_throw<ferry::error>([&] { (void)empty_p.view(); }, "view() of an empty handle");
      b.template expect_throw<ferry::error>([&] { (void)empty_u.destination(); }, "destination() of an empty handle");
    } else {
      b.lane_op();
    }
  });
  const std::size_t m = b.any_lane();
  order.read(b.lane, m);
  b.expect(m, ferry::device_span<const i32>(d32.span()), m32, "upload destination (int32) at the end");
  b.expect(m, ferry::device_span<const i32>(t32.span()), mt32, "write target (int32) at the end");
  b.expect(m, ferry::device_span<const u8>(t8.span()), mt8, "write target (uint8) at the end");
  b.expect(m, ferry::device_span<const i32>(gd.span()), mgd, "gather destination at the end");
  b.expect(m, ferry::device_span<const i64>(echo.span()), mecho, "epilogue's rows at the end");
  b.expect(m, ferry::device_span<const i32>(gsrc.span()), msrc, "gather source at the end");
  b.sync_all();
  const std::string name = std::string("step_batch [") + diff::backend_name<B>() + "]: ";
  diff::counts().add(name + "steps submitted", steps);
  diff::counts().add(name + "submits refused by the growth policy or a fill index", refused);
  diff::counts().add(name + "refused submits retried unchanged", retried);
  diff::counts().add(name + "steps cancelled", cancelled);
  diff::counts().add(name + "rows gathered (the epilogue's echo checked)", gathered);
  diff::counts().add(name + "submits refused for a gather index, then fixed", gather_refused);
}

TEMPLATE_TEST_CASE("differential: step_batch", "[differential]", DIFF_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using namespace ferry;
  diff::run_component<TestType>("step_batch", [](auto& b, std::uint64_t ops) {
    diff::dispatch<step_combo<growth::pow2, reuse::throw_when_full, launch::kernel>,
                   step_combo<growth::fixed, reuse::throw_when_full, launch::kernel>,
                   step_combo<growth::fixed, reuse::throw_when_full, launch::graph>,
                   step_combo<growth::pow2, reuse::caller_fenced, launch::kernel>,
                   step_combo<step_throwing_policy, reuse::throw_when_full, launch::kernel>,
                   step_combo<step_huge_policy, reuse::throw_when_full, launch::kernel>,
                   step_combo<step_throwing_policy, reuse::caller_fenced, launch::kernel>>(
        b.rng(), [&]<class C>() { step_episode<TestType, C>(b, ops); });
  });
}

}  // namespace
