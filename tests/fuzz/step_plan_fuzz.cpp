// Fuzz target: step_batch's plan geometry and what its steps read (host backend). Every upload,
// write target, gather (destination and source) and fill (destination and device value) of the
// plan is carved out of ONE region of memory at fuzzed offsets and sizes, so that the setup checks
// meet overlaps in every kind and order: the model accepts an entry exactly when the documented
// rules do (destinations disjoint, and nothing the plan writes covers what a gather or fill reads,
// whichever is declared first). Steps then fill the handles (spans, staged writes, gather indices
// with rows from the host and bad rows, host values), cancel, submit and synchronize, against a
// byte model of the region; the epilogue (a functor of a fuzzed size whose state is checked at
// every call) logs each step's view sizes and contents, advances the first byte of every gather's
// source (what the step's gathers read: the epilogue runs after them), and throws at a chosen
// step, which the next synchronization reports once. The arena's cap is fuzzed too, down to a few
// KiB: any call that takes room may then be refused (ferry::capacity_error) and must lose
// nothing: the step submitted after it carries the data written before the refusal.
#include "step_model.hpp"

#include <array>
#include <deque>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <type_traits>

namespace ferry_fuzz {

/// The region every entry of the plan lies in (bytes; the offsets are multiples of the element).
inline constexpr std::size_t region_bytes = 2048;
/// Views the epilogue logs (the plan's uploads, publishes and gathers beyond these are not logged).
inline constexpr std::size_t logged_views = 12;
/// Steps whose epilogue runs are logged.
inline constexpr std::size_t logged_steps = 128;
inline constexpr std::uint64_t unlogged = ~std::uint64_t{0};

/// What the epilogue saw of one step.
struct step_log {
  std::uint64_t step = unlogged;
  std::uint64_t state_ok = 0;  // the functor's state arrived intact
  std::array<std::uint64_t, logged_views> size{}, sum{};
};

inline std::uint64_t fnv(const std::byte* p, std::size_t bytes, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ std::to_integer<std::uint64_t>(p[i])) * 0x100000001b3ull;
  return h;
}

/// A reference to one view of any of the element types (kind 0: none).
struct any_ref {
  std::uint8_t kind = 0;  // 1..3: a device view of uint8/uint32/uint64; 4..6: a publish's
  ferry::step_ref<std::uint8_t> d8;
  ferry::step_ref<std::uint32_t> d32;
  ferry::step_ref<std::uint64_t> d64;
  ferry::step_ref<const std::uint8_t> p8;
  ferry::step_ref<const std::uint32_t> p32;
  ferry::step_ref<const std::uint64_t> p64;
};

/// The epilogue: `Pad` bytes of state beside its references (a pattern it checks), so that the
/// functor's own size varies from a few words to several KiB of the step's table.
template <std::size_t Pad>
struct plan_epilogue {
  std::array<any_ref, logged_views> refs{};
  step_log* log = nullptr;  // logged_steps entries
  std::uint64_t fails = unlogged;  // the step at which it throws
  std::array<std::byte*, logged_views> bumps{};  // the first byte of each gather's source
  std::array<std::uint8_t, Pad> pad{};

  static constexpr std::uint8_t pattern(std::size_t i) { return static_cast<std::uint8_t>(i * 7 + 1); }
  void set_pattern() {
    for (std::size_t i = 0; i < Pad; ++i) pad[i] = pattern(i);
  }

  void operator()(const ferry::step_context& ctx) const {
    if (log == nullptr) return;
    if (ctx.step() == fails) throw std::runtime_error("the fuzz epilogue fails at step " + std::to_string(fails));
    if (ctx.rank() != 0 || ctx.threads() != 1) finding("the host backend's epilogue is not one call of rank 0");
    if (ctx.step() < logged_steps) {
      step_log& l = log[ctx.step()];
      l.step = ctx.step();
      l.state_ok = 1;
      for (std::size_t i = 0; i < Pad; ++i) l.state_ok &= pad[i] == pattern(i) ? 1u : 0u;
      for (std::size_t v = 0; v < logged_views; ++v) {
        auto one = [&](auto r) {
          const auto view = ctx.view(r);
          l.size[v] = view.size();
          l.sum[v] = fnv(reinterpret_cast<const std::byte*>(view.data()), view.size_bytes());
        };
        switch (refs[v].kind) {
          case 1: one(refs[v].d8); break;
          case 2: one(refs[v].d32); break;
          case 3: one(refs[v].d64); break;
          case 4: one(refs[v].p8); break;
          case 5: one(refs[v].p32); break;
          case 6: one(refs[v].p64); break;
          default: break;
        }
      }
    }
    for (std::byte* b : bumps)
      if (b != nullptr) *b = static_cast<std::byte>(std::to_integer<unsigned>(*b) + 1);
  }
};

/// A range of the region, in bytes.
struct range {
  std::size_t at = 0, bytes = 0;
  [[nodiscard]] bool overlaps(const range& o) const {
    return bytes != 0 && o.bytes != 0 && at < o.at + o.bytes && o.at < at + bytes;
  }
  [[nodiscard]] std::string str() const { return "[" + std::to_string(at) + ", +" + std::to_string(bytes) + ")"; }
};

template <class Batch, std::size_t Pad>
class plan_run {
  static constexpr bool fixed = std::is_same_v<typename Batch::growth_policy, ferry::growth::fixed>;
  using epilogue = plan_epilogue<Pad>;

  template <class T>
  struct lists {
    using value_type = T;
    struct upload {
      typename Batch::template upload<T> h;
      range dst;
      std::size_t limit, max_n;
      std::optional<std::vector<T>> step;  // this step's span() contents
    };
    struct publish {
      typename Batch::template publish<T> h;
      std::size_t max_n;
      std::optional<std::vector<T>> step, last;  // this step's; the last submitted step's
    };
    struct writes {
      typename Batch::template writes<T> h;
      std::size_t at, rows, cols, max_writes, max_elements;
      std::vector<model_write<T>> step;
      std::size_t elements = 0;
    };
    struct gather {
      typename Batch::template gather<T> h;
      range dst, src;
      std::size_t limit, src_n, max_n;
      std::optional<std::vector<std::int32_t>> idx;  // this step's indices
      std::optional<std::vector<T>> values;          // this step's host values
    };
    struct fill {
      range dst;
      std::optional<std::size_t> value_at;  // a device value in the region, else a publish's element
      std::size_t publish = 0, index = 0;
    };
    std::deque<upload> uploads;
    std::deque<publish> publishes;
    std::deque<writes> writes_;
    std::deque<gather> gathers;
    std::deque<fill> fills;
  };
  using all = std::tuple<lists<std::uint8_t>, lists<std::uint32_t>, lists<std::uint64_t>>;

 public:
  plan_run(input& in, ferry::pinned_arena<host>& arena, bool tight) : in_(in), arena_(arena), tight_(tight) {}

  void run() {
    counter_ = in_.raw(2);
    const std::size_t slots = 2 + in_.below(3);
    std::size_t max_slots = slots + in_.below(4);
    switch (in_.below(8)) {  // ceilings that only bound the ring's growth
      case 0: max_slots = std::numeric_limits<std::size_t>::max(); break;
      case 1: max_slots = std::size_t{1} << (24 + in_.below(24)); break;
      default: break;
    }
    name_ = "step_batch(" + std::to_string(slots) + ", " + std::to_string(max_slots) + ") epilogue of " +
            std::to_string(sizeof(epilogue)) + " bytes" + (tight_ ? ", a tight arena" : "");
    for (auto& w : mem_) w = next_value<std::uint64_t>(counter_);
    std::memcpy(model_.data(), mem_.data(), region_bytes);
    Batch b(slots, max_slots, arena_);
    batch_ = &b;
    plan();
    for (int op = 0; op < 120 && !in_.empty(); ++op) {
      at_ = name_ + " op " + std::to_string(op);
      switch (in_.below(16)) {
        case 0: begin(); break;
        case 1:
        case 2: with_type([&](auto& l) { span_upload(l); }); break;
        case 3: with_type([&](auto& l) { span_publish(l); }); break;
        case 4:
        case 5: with_type([&](auto& l) { stage(l); }); break;
        case 6:
        case 7: with_type([&](auto& l) { gather_indices(l); }); break;
        case 8: with_type([&](auto& l) { host_values(l); }); break;
        case 9:
        case 10: submit(); break;
        case 11: synchronize(); break;
        case 12: reserve(); break;
        case 13: cancel(); break;
        case 14: poke(); break;
        default:
          begin();  // a whole step
          with_type([&](auto& l) { span_upload(l); });
          with_type([&](auto& l) { span_publish(l); });
          with_type([&](auto& l) { gather_indices(l); });
          with_type([&](auto& l) { stage(l); });
          submit();
      }
    }
    at_ = name_ + " end";
    if (open_) submit();
    if (open_) cancel();
    synchronize();
    batch_ = nullptr;
  }

 private:
  template <class F>
  void with_type(F&& f) {
    ferry_fuzz::with_type(in_, lists_, f);
  }
  template <class F>
  void each_type(F&& f) {
    ferry_fuzz::each_type(lists_, f);
  }
  template <class T>
  std::vector<T> values(std::size_t n) {
    return values_of<T>(n, counter_);
  }
  std::byte* region() { return reinterpret_cast<std::byte*>(mem_.data()); }
  template <class T>
  T* region_at(std::size_t at) {
    return reinterpret_cast<T*>(region() + at);
  }
  template <class T>
  T model_load(std::size_t at) const {
    T v;
    std::memcpy(&v, model_.data() + at, sizeof(T));
    return v;
  }
  void model_copy(std::size_t at, const void* from, std::size_t bytes) {
    if (bytes != 0) std::memcpy(model_.data() + at, from, bytes);
  }
  // A place in the region: an offset aligned for T, and a count of at most `max` elements of T
  // from there.
  template <class T>
  std::size_t offset() {
    return in_.below(region_bytes / sizeof(T)) * sizeof(T);
  }
  template <class T>
  std::size_t count(std::size_t at, std::size_t max) {
    return in_.below(std::min((region_bytes - at) / sizeof(T), max) + 1);
  }
  // A declared maximum: small, or an edge of the size arithmetic (those from 2^12 to 2^62 folded
  // below 2^12, so that a plan of small maxima always fits the 64 MiB arena, however many slots
  // the ring inserts behind the stream: an edge of 2^62 or more is what a slot cannot hold).
  std::size_t amount(std::uint64_t small) {
    const std::uint64_t v = in_.size(small);
    const std::size_t a = v <= (1u << 12) || v >= (std::uint64_t{1} << 62) ? v : v % (1u << 12);
    huge_ |= a > (1u << 12);
    return a;
  }
  // The room calls may be refused by the arena (a tight cap, or maxima that no slot holds).
  [[nodiscard]] bool may_refuse() const { return tight_ || huge_; }
  // What an add_* call must do: ferry::error once the plan is fixed, else `expected`.
  void expect_add(outcome o, outcome expected, const std::string& what) {
    if (frozen_) return expect(o == outcome::ferry_error, what + ": after the plan was fixed, threw " + described(o));
    expect(o == expected, what + ": threw " + described(o) + ", the rules say " + name(expected));
  }
  // Whether `r` (memory the step writes) overlaps what the plan declared: a destination, or a range
  // a gather or fill reads.
  [[nodiscard]] bool clashes_written(const range& r) const {
    for (const auto& d : dests_)
      if (r.overlaps(d)) return true;
    for (const auto& d : reads_)
      if (r.overlaps(d)) return true;
    return false;
  }
  [[nodiscard]] bool clashes_read(const range& r) const {
    for (const auto& d : dests_)
      if (r.overlaps(d)) return true;
    return false;
  }

  void plan() {
    const std::size_t entries = in_.below(11);
    for (std::size_t e = 0; e < entries; ++e) {
      at_ = name_ + " plan entry " + std::to_string(e);
      switch (in_.below(5)) {
        case 0: with_type([&](auto& l) { add_upload(l); }); break;
        case 1: with_type([&](auto& l) { add_publish(l); }); break;
        case 2: with_type([&](auto& l) { add_writes(l); }); break;
        case 3: with_type([&](auto& l) { add_gather(l); }); break;
        default: with_type([&](auto& l) { add_fill(l); }); break;
      }
    }
    at_ = name_ + " set_epilogue";
    if (in_.below(8) == 0) return;  // none: the functor's value-initialized state does nothing
    epilogue f{};
    f.log = log_.data();
    f.set_pattern();
    if (in_.below(4) == 0) fails_ = f.fails = in_.below(6);
    for (std::size_t v = 0; v < views_.size() && v < logged_views; ++v) f.refs[v] = views_[v].ref;
    std::size_t b = 0;
    each_type([&](auto& l) {
      for (auto& g : l.gathers)
        if (g.src.bytes != 0 && b < logged_views) {
          f.bumps[b++] = region() + g.src.at;
          bumped_.push_back(g.src.at);
        }
    });
    const outcome o = attempt(at_, [&] { batch_->set_epilogue(f); });
    expect(o == outcome::ok, at_ + ": threw " + described(o));
    logging_ = true;
  }

  // A view of the plan, in declaration order (the epilogue's view entries): its type's list and
  // index, and what kind of entry it is.
  struct view_info {
    any_ref ref;
    int type;          // 0, 1, 2: uint8, uint32, uint64
    char kind;         // 'u', 'p', 'g'
    std::size_t index;
  };
  template <class T>
  static constexpr int type_of() {
    return sizeof(T) == 1 ? 0 : sizeof(T) == 4 ? 1 : 2;
  }
  template <class T, class R>
  void add_view(char kind, std::size_t index, R ref) {
    view_info v{{}, type_of<T>(), kind, index};
    const auto k = static_cast<std::uint8_t>(type_of<T>() + (kind == 'p' ? 4 : 1));
    v.ref.kind = k;
    if constexpr (std::is_same_v<R, ferry::step_ref<std::uint8_t>>) v.ref.d8 = ref;
    if constexpr (std::is_same_v<R, ferry::step_ref<std::uint32_t>>) v.ref.d32 = ref;
    if constexpr (std::is_same_v<R, ferry::step_ref<std::uint64_t>>) v.ref.d64 = ref;
    if constexpr (std::is_same_v<R, ferry::step_ref<const std::uint8_t>>) v.ref.p8 = ref;
    if constexpr (std::is_same_v<R, ferry::step_ref<const std::uint32_t>>) v.ref.p32 = ref;
    if constexpr (std::is_same_v<R, ferry::step_ref<const std::uint64_t>>) v.ref.p64 = ref;
    views_.push_back(v);
  }

  template <class T>
  void add_upload(lists<T>& l) {
    typename lists<T>::upload u;
    const std::size_t at = offset<T>(), n = count<T>(at, 64);
    u.dst = {at, n * sizeof(T)};
    u.limit = n;
    u.max_n = in_.below(8) == 0 ? n + 1 + in_.below(4) : in_.below(n + 1);
    const std::string what = at_ + ": add_upload(" + u.dst.str() + " of " + std::to_string(sizeof(T)) + "-byte elements, max_n " +
                             std::to_string(u.max_n) + ")";
    const outcome o = attempt(what, [&] { u.h = batch_->add_upload(ferry::device_span<T>(region_at<T>(at), n), u.max_n); });
    const outcome want = u.max_n > n ? outcome::invalid_argument
                         : clashes_written(u.dst) ? outcome::invalid_argument
                                                  : outcome::ok;
    expect_add(o, want, what);
    if (o != outcome::ok) return;
    dests_.push_back(u.dst);
    add_view<T>('u', l.uploads.size(), u.h.ref());
    l.uploads.push_back(std::move(u));
  }
  template <class T>
  void add_publish(lists<T>& l) {
    typename lists<T>::publish p;
    p.max_n = amount(40);
    const std::string what = at_ + ": add_publish(max_n " + std::to_string(p.max_n) + ")";
    const outcome o = attempt(what, [&] { p.h = batch_->template add_publish<T>(p.max_n); });
    const bool overflows = p.max_n > std::numeric_limits<std::size_t>::max() / sizeof(T);
    expect_add(o, overflows ? outcome::capacity : outcome::ok, what);
    if (o != outcome::ok) return;
    add_view<T>('p', l.publishes.size(), p.h.ref());
    l.publishes.push_back(std::move(p));
  }
  template <class T>
  void add_writes(lists<T>& l) {
    typename lists<T>::writes w;
    const std::size_t at = offset<T>(), n = count<T>(at, 256);
    w.at = at;
    w.cols = 1 + in_.below(std::max<std::size_t>(n, 1));
    w.rows = n / w.cols;
    w.max_writes = amount(9);
    w.max_elements = amount(65);
    const range target{at, w.rows * w.cols * sizeof(T)};
    const std::string what = at_ + ": add_writes(" + target.str() + ": " + std::to_string(w.rows) + " x " +
                             std::to_string(w.cols) + ", max_writes " + std::to_string(w.max_writes) +
                             ", max_elements " + std::to_string(w.max_elements) + ")";
    const outcome o = attempt(what, [&] {
      w.h = batch_->add_writes(ferry::staged_view<T>(region_at<T>(at), w.rows, w.cols), w.max_writes, w.max_elements);
    });
    const bool overflows = w.max_elements > std::numeric_limits<std::size_t>::max() / sizeof(T);
    expect_add(o, overflows ? outcome::capacity : clashes_written(target) ? outcome::invalid_argument : outcome::ok, what);
    if (o != outcome::ok) return;
    dests_.push_back(target);
    l.writes_.push_back(std::move(w));
  }
  template <class T>
  void add_gather(lists<T>& l) {
    typename lists<T>::gather g;
    const std::size_t at = offset<T>(), n = count<T>(at, 64);
    const std::size_t from = offset<T>(), src_n = count<T>(from, 64);
    g.dst = {at, n * sizeof(T)};
    g.src = {from, src_n * sizeof(T)};
    g.limit = n;
    g.src_n = src_n;
    g.max_n = in_.below(8) == 0 ? n + 1 + in_.below(4) : in_.below(n + 1);
    const std::string what = at_ + ": add_gather(" + g.dst.str() + " from " + g.src.str() + " of " +
                             std::to_string(sizeof(T)) + "-byte elements, max_n " + std::to_string(g.max_n) + ")";
    const outcome o = attempt(what, [&] {
      g.h = batch_->add_gather(ferry::device_span<T>(region_at<T>(at), n),
                               ferry::device_span<const T>(region_at<T>(from), src_n), g.max_n);
    });
    const bool clash = clashes_written(g.dst) || clashes_read(g.src) || g.dst.overlaps(g.src);
    expect_add(o, g.max_n > n || clash ? outcome::invalid_argument : outcome::ok, what);
    if (o != outcome::ok) return;
    dests_.push_back(g.dst);
    reads_.push_back(g.src);
    add_view<T>('g', l.gathers.size(), g.h.ref());
    l.gathers.push_back(std::move(g));
  }
  template <class T>
  void add_fill(lists<T>& l) {
    typename lists<T>::fill f;
    const std::size_t at = offset<T>(), n = count<T>(at, 64);
    f.dst = {at, n * sizeof(T)};
    const bool from_publish = !l.publishes.empty() && in_.flag();
    if (from_publish) {
      f.publish = in_.below(l.publishes.size());
      f.index = in_.below(std::min<std::size_t>(l.publishes[f.publish].max_n, 64) + 2);
    } else {
      f.value_at = offset<T>();
    }
    const range value{f.value_at.value_or(0), f.value_at ? sizeof(T) : 0};
    const std::string what = at_ + ": add_fill(" + f.dst.str() + " of " + std::to_string(sizeof(T)) + "-byte elements, " +
                             (from_publish ? "publish " + std::to_string(f.publish) + "[" + std::to_string(f.index) + "]"
                                           : "the device value at " + value.str()) + ")";
    const ferry::device_span<T> dst(region_at<T>(at), n);
    const outcome o = attempt(what, [&] {
      if (from_publish)
        batch_->add_fill(dst, l.publishes[f.publish].h, f.index);
      else
        batch_->add_fill(dst, static_cast<const T*>(region_at<T>(value.at)));
    });
    const bool clash = clashes_written(f.dst) || clashes_read(value) || f.dst.overlaps(value);
    expect_add(o, clash ? outcome::invalid_argument : outcome::ok, what);
    if (o != outcome::ok) return;
    dests_.push_back(f.dst);
    if (value.bytes != 0) reads_.push_back(value);
    l.fills.push_back(std::move(f));
  }

  void reserve() {
    const std::string what = at_ + ": reserve";
    const outcome o = attempt(what, [&] { batch_->reserve(); });
    if (o == outcome::ok) frozen_ = true;
    else expect(o == outcome::capacity && may_refuse(), what + ": threw " + described(o));
  }

  void begin() {
    const std::string what = at_ + ": begin";
    const outcome o = attempt(what, [&] { batch_->begin(); });
    if (open_) {
      expect(o == outcome::ferry_error, what + ": with a step open, threw " + described(o));
    } else if (o == outcome::ok) {
      frozen_ = open_ = true;
      drop_step();
    } else {
      expect(o == outcome::capacity && may_refuse(), what + ": threw " + described(o));
    }
    expect(batch_->in_step() == open_, what + ": in_step() disagrees with the model");
  }
  void drop_step() {
    each_type([](auto& l) {
      for (auto& u : l.uploads) u.step.reset();
      for (auto& p : l.publishes) p.step.reset();
      for (auto& w : l.writes_) w.step.clear(), w.elements = 0;
      for (auto& g : l.gathers) g.idx.reset(), g.values.reset();
    });
  }
  void cancel() {
    const std::string what = at_ + ": cancel";
    const outcome o = attempt(what, [&] { batch_->cancel(); });
    expect(o == outcome::ok, what + ": threw " + described(o));
    if (open_) {
      drop_step();
      each_type([](auto& l) {
        for (auto& p : l.publishes) p.last.reset();  // a cancelled step's publish views are empty
      });
    }
    open_ = false;
    expect(!batch_->in_step(), what + ": in_step() after cancel");
  }

  // A refusal of a call that takes room in the slot: the arena's cap when the arena is tight (or
  // maxima no slot holds); under growth::fixed beyond the declared maximum.
  [[nodiscard]] bool room_refused(outcome o) const { return o == outcome::capacity && may_refuse(); }

  step_calls<fixed> calls() { return {in_, counter_, at_, open_}; }
  template <class T>
  void span_upload(lists<T>& l) {
    if (l.uploads.empty()) return;
    auto& u = l.uploads[in_.below(l.uploads.size())];
    calls().span_upload(u, u.limit, [&](outcome o) { return room_refused(o); });
  }
  template <class T>
  void span_publish(lists<T>& l) {
    if (l.publishes.empty()) return;
    calls().span_publish(l.publishes[in_.below(l.publishes.size())], [&](outcome o) { return room_refused(o); });
  }
  template <class T>
  void gather_indices(lists<T>& l) {
    if (l.gathers.empty()) return;
    auto& g = l.gathers[in_.below(l.gathers.size())];
    const std::size_t n = in_.below(8) == 0 ? in_.size(g.limit + 2) : in_.below(g.limit + 1);
    const std::string what = at_ + ": gather::indices(" + std::to_string(n) + ") of " + std::to_string(g.limit) +
                             " from " + std::to_string(g.src_n);
    std::span<std::int32_t> got;
    const outcome o = attempt(what, [&] { got = g.h.indices(n); });
    if (!open_) return expect(o == outcome::ferry_error, what + ": outside a step, threw " + described(o));
    if (n > g.limit) return expect(o == outcome::out_of_range, what + ": threw " + described(o));
    if (fixed && n > g.max_n) return expect(o == outcome::capacity, what + ": beyond max_n, threw " + described(o));
    if (room_refused(o)) return;  // the gather keeps this step's earlier indices and values
    expect(o == outcome::ok, what + ": threw " + described(o));
    expect(got.size() == n, what + ": a span of the wrong size");
    std::vector<std::int32_t> idx(n);
    const bool from_host_rows = in_.flag();
    for (auto& j : idx)
      j = g.src_n != 0 && !(from_host_rows && in_.below(4) == 0) ? static_cast<std::int32_t>(in_.below(g.src_n))
                                                                 : ferry::from_host;
    if (n != 0 && in_.below(8) == 0) {  // a bad row: past the source, or below from_host
      const auto bad = static_cast<std::int32_t>(in_.flag() ? g.src_n + in_.below(3) : -2 - static_cast<std::int64_t>(in_.below(3)));
      idx[in_.below(n)] = bad;
    }
    std::copy(idx.begin(), idx.end(), got.begin());
    g.idx = std::move(idx);
    g.values.reset();
    if (in_.flag()) host_values_of(g);
  }
  template <class T>
  void host_values(lists<T>& l) {
    if (l.gathers.empty()) return;
    host_values_of(l.gathers[in_.below(l.gathers.size())]);
  }
  template <class G>
  void host_values_of(G& g) {
    using T = typename std::remove_reference_t<decltype(*g.values)>::value_type;
    const std::string what = at_ + ": gather::host_values()";
    std::span<T> got;
    const outcome o = attempt(what, [&] { got = g.h.host_values(); });
    if (!open_) return expect(o == outcome::ferry_error, what + ": outside a step, threw " + described(o));
    if (!g.idx) return expect(o == outcome::ferry_error, what + ": before indices(), threw " + described(o));
    if (room_refused(o)) return;  // the values as they were
    expect(o == outcome::ok, what + ": threw " + described(o));
    expect(got.size() == g.idx->size(), what + ": a span of the wrong size");
    g.values = values<T>(got.size());
    std::copy(g.values->begin(), g.values->end(), got.begin());
  }
  template <class T>
  void stage(lists<T>& l) {
    if (l.writes_.empty()) return;
    calls().stage(l.writes_[in_.below(l.writes_.size())], [&](outcome o) { return room_refused(o); });
  }

  // A host write into the region while no step is in flight: new gather sources and fill values.
  void poke() {
    if (!synced_) return;
    const std::size_t at = in_.below(region_bytes), n = std::min<std::size_t>(1 + in_.below(64), region_bytes - at);
    for (std::size_t i = 0; i < n; ++i) model_[at + i] = region()[at + i] = static_cast<std::byte>(in_.byte() | 1);
  }

  void submit() {
    const std::string what = at_ + ": submit";
    const auto steps = batch_->steps();
    const outcome o = attempt(what, [&] { batch_->submit(stream_); });
    if (!open_) return expect(o == outcome::ferry_error, what + ": outside a step, threw " + described(o));
    bool bad_row = false;  // a fill past its publish's elements, or a gather row outside its source
    each_type([&](auto& l) {
      for (const auto& f : l.fills)
        if (!f.value_at) {
          const auto& p = l.publishes[f.publish];
          bad_row |= f.index >= (p.step ? p.step->size() : 0);
        }
      for (const auto& g : l.gathers)
        if (g.idx) {
          const std::int64_t lowest = g.values ? ferry::from_host : 0;
          for (const std::int32_t j : *g.idx) bad_row |= j < lowest || j >= static_cast<std::int64_t>(g.src_n);
        }
    });
    if (o != outcome::ok) {
      expect(bad_row ? o == outcome::out_of_range : room_refused(o), what + ": threw " + described(o));
      expect(batch_->in_step() && batch_->steps() == steps, what + ": a refused submit did not leave the step open");
      synchronize();  // nothing was enqueued: the region is as the model has it
      return;
    }
    expect(!bad_row, what + ": a fill past its publish's elements or a gather row outside its source was accepted");
    expect(!batch_->in_step() && batch_->steps() == steps + 1, what + ": the step is still open after submit");
    open_ = false;
    synced_ = false;
    apply_step(steps);
  }

  // The model of a submitted step: uploads, writes, gathers, fills (disjoint destinations, and no
  // source among them), then the epilogue.
  void apply_step(std::uint64_t number) {
    std::vector<std::pair<std::size_t, std::vector<std::byte>>> gathered;  // read before any write lands
    each_type([&](auto& l) {
      using T = typename std::remove_reference_t<decltype(l)>::value_type;
      for (const auto& g : l.gathers) {
        if (!g.idx) continue;
        std::vector<std::byte> out(g.idx->size() * sizeof(T));
        for (std::size_t i = 0; i < g.idx->size(); ++i) {
          const std::int32_t j = (*g.idx)[i];
          const T v = j == ferry::from_host ? (*g.values)[i] : model_load<T>(g.src.at + static_cast<std::size_t>(j) * sizeof(T));
          std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
        }
        gathered.emplace_back(g.dst.at, std::move(out));
      }
    });
    std::vector<std::pair<range, std::vector<std::byte>>> filled;  // the values, read before writes land
    each_type([&](auto& l) {
      using T = typename std::remove_reference_t<decltype(l)>::value_type;
      for (const auto& f : l.fills) {
        const T v = f.value_at ? model_load<T>(*f.value_at) : (*l.publishes[f.publish].step)[f.index];
        std::vector<std::byte> out(f.dst.bytes);
        for (std::size_t i = 0; i < out.size(); i += sizeof(T)) std::memcpy(out.data() + i, &v, sizeof(T));
        filled.emplace_back(f.dst, std::move(out));
      }
    });
    each_type([&](auto& l) {
      using T = typename std::remove_reference_t<decltype(l)>::value_type;
      for (const auto& u : l.uploads)
        if (u.step) model_copy(u.dst.at, u.step->data(), u.step->size() * sizeof(T));
      for (const auto& w : l.writes_)
        for (const auto& m : w.step)
          model_copy(w.at + (m.row * w.cols + m.start) * sizeof(T), m.values.data(), m.values.size() * sizeof(T));
      for (auto& p : l.publishes) p.last = p.step ? *p.step : std::vector<T>{};
    });
    for (const auto& [at, bytes] : gathered) model_copy(at, bytes.data(), bytes.size());
    for (const auto& [r, bytes] : filled) model_copy(r.at, bytes.data(), bytes.size());
    // The epilogue.
    if (!logging_) return;
    if (number == fails_) {
      error_pending_ = true;
      return;
    }
    if (number < logged_steps) {
      step_log want;
      want.step = number;
      want.state_ok = 1;
      for (std::size_t v = 0; v < views_.size() && v < logged_views; ++v) {
        const auto [bytes, count] = view_bytes(views_[v]);
        want.size[v] = count;
        want.sum[v] = fnv(bytes.data(), bytes.size());
      }
      want_log_[number] = want;
    }
    for (const std::size_t at : bumped_) model_[at] = static_cast<std::byte>(std::to_integer<unsigned>(model_[at]) + 1);
  }
  // The bytes and element count of a view this step, from the model.
  std::pair<std::vector<std::byte>, std::size_t> view_bytes(const view_info& v) {
    std::pair<std::vector<std::byte>, std::size_t> out;
    auto from = [&](auto& l) {
      using T = typename std::remove_reference_t<decltype(l)>::value_type;
      auto region_view = [&](std::size_t at, std::size_t n) {
        const auto first = model_.begin() + static_cast<std::ptrdiff_t>(at);
        out = {std::vector<std::byte>(first, first + static_cast<std::ptrdiff_t>(n * sizeof(T))), n};
      };
      if (v.kind == 'u') {
        const auto& u = l.uploads[v.index];
        region_view(u.dst.at, u.step ? u.step->size() : 0);
      } else if (v.kind == 'g') {
        const auto& g = l.gathers[v.index];
        region_view(g.dst.at, g.idx ? g.idx->size() : 0);
      } else {
        const auto& p = l.publishes[v.index];
        const std::size_t n = p.step ? p.step->size() : 0;
        const auto* b = reinterpret_cast<const std::byte*>(n ? p.step->data() : nullptr);
        out = {std::vector<std::byte>(b, b + n * sizeof(T)), n};
      }
    };
    switch (v.type) {
      case 0: from(std::get<0>(lists_)); break;
      case 1: from(std::get<1>(lists_)); break;
      default: from(std::get<2>(lists_)); break;
    }
    return out;
  }

  void synchronize() {
    const std::string what = at_ + ": synchronize";
    const outcome o = attempt(what, [&] { stream_.synchronize(); });
    expect(o == (error_pending_ ? outcome::ferry_error : outcome::ok),
           what + ": threw " + described(o) + (error_pending_ ? " (the epilogue threw)" : ""));
    if (error_pending_)
      expect(last_message().find("the fuzz epilogue fails at step") != std::string::npos,
             what + ": the epilogue's error lost its message: " + last_message());
    error_pending_ = false;
    synced_ = true;
    for (std::size_t i = 0; i < region_bytes; ++i)
      if (region()[i] != model_[i])
        finding(what + ": region byte " + std::to_string(i) + " differs from the model (got " +
                std::to_string(std::to_integer<unsigned>(region()[i])) + ", want " +
                std::to_string(std::to_integer<unsigned>(model_[i])) + ")");
    for (std::size_t k = 0; k < logged_steps; ++k) {
      const step_log& got = log_[k];
      if (!want_log_[k]) {
        expect(got.step == unlogged, what + ": step " + std::to_string(k) + "'s epilogue ran, the model says not");
        continue;
      }
      const step_log& want = *want_log_[k];
      expect(got.step == want.step, what + ": step " + std::to_string(k) + "'s epilogue did not run");
      expect(got.state_ok == 1, what + ": step " + std::to_string(k) + "'s epilogue state arrived changed");
      for (std::size_t v = 0; v < logged_views; ++v)
        expect(got.size[v] == want.size[v] && got.sum[v] == want.sum[v],
               what + ": step " + std::to_string(k) + "'s epilogue saw view " + std::to_string(v) + " of " +
                   std::to_string(got.size[v]) + " elements, the model " + std::to_string(want.size[v]));
    }
    if (open_) return;  // a begun step's publishes show nothing yet
    each_type([&](auto& l) {
      for (std::size_t i = 0; i < l.publishes.size(); ++i) {
        const auto& p = l.publishes[i];
        if (!p.last) continue;
        const auto view = p.h.view();
        expect(view.size() == p.last->size(), what + ": publish " + std::to_string(i) + " view of the wrong size");
        expect_equal(view.data(), *p.last, what + ": publish " + std::to_string(i) + " view");
      }
    });
  }

  input& in_;
  ferry::pinned_arena<host>& arena_;
  const bool tight_;
  ferry::stream<host> stream_;
  Batch* batch_ = nullptr;
  all lists_;
  std::vector<range> dests_, reads_;
  std::vector<view_info> views_;
  std::vector<std::size_t> bumped_;  // the region bytes the epilogue advances
  std::array<std::uint64_t, region_bytes / 8> mem_{};
  std::vector<std::byte> model_ = std::vector<std::byte>(region_bytes);
  std::vector<step_log> log_ = std::vector<step_log>(logged_steps);
  std::vector<std::optional<step_log>> want_log_ = std::vector<std::optional<step_log>>(logged_steps);
  std::uint64_t counter_ = 0, fails_ = unlogged;
  bool open_ = false, frozen_ = false, synced_ = true, huge_ = false, logging_ = false, error_pending_ = false;
  std::string name_, at_;
};

template <class Growth, std::size_t Pad>
void run_plan(input& in, ferry::pinned_arena<host>& arena, bool tight) {
  using batch = ferry::step_batch<Growth, host, ferry::epilogue::functor<plan_epilogue<Pad>>>;
  plan_run<batch, Pad>(in, arena, tight).run();
}

template <class Growth>
void run_growth(input& in, ferry::pinned_arena<host>& arena, bool tight) {
  switch (in.below(3)) {
    case 0: run_plan<Growth, 0>(in, arena, tight); break;
    case 1: run_plan<Growth, 200>(in, arena, tight); break;
    default: run_plan<Growth, 5000>(in, arena, tight); break;
  }
}

}  // namespace ferry_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ferry_fuzz;
  input in(data, size);
  // The arena's cap: 64 MiB (a refusal needs maxima no slot holds), or a few KiB (a step that
  // outgrows its slot may be refused any time it takes room).
  const std::uint8_t cap = in.byte();
  const bool tight = cap % 4 == 3;
  ferry::pinned_arena<host> arena(tight ? std::size_t{1} << (11 + cap / 4 % 5) : std::size_t{64} << 20);
  if (in.flag())
    run_growth<ferry::growth::fixed>(in, arena, tight);
  else
    run_growth<ferry::growth::pow2>(in, arena, tight);
  return 0;
}
