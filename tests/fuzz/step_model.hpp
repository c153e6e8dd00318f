// step_batch plans and steps decoded from the fuzz input, checked against a host model. Shared by
// the step target (growth::pow2, growth::fixed) and the growth target (input_growth).
//
// The plan: uploads, publishes, writes targets and fills of uint8/uint32/uint64 elements, each
// into its own host buffer (destinations of one step are disjoint, as the rules require), with
// declared maxima that are sometimes wrong (std::invalid_argument) or huge (ferry::capacity_error).
// The steps: begin, span (uploads, publishes), stage_write / stage_write_elem, submit on a host
// stream, synchronize, reserve, a late add_* (ferry::error once the plan is fixed). The model
// applies a submitted step's uploads, writes (in staging order: the later wins) and fills; every
// synchronization compares every destination, and the last step's publish views, with it. A
// refused call must change nothing: a refused submit leaves the step open and has enqueued
// nothing (the destinations stay as the model has them).
#pragma once

#include "staged_model.hpp"

#include <deque>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>

namespace ferry_fuzz {

/// The calls that fill a step, shared by the step targets (step_run, and step_plan_fuzz.cpp's
/// plan_run): each decodes its arguments from `in` after the entry was chosen, makes the call and
/// checks the outcome against the documented rules, and records what was written in the entry's
/// `step` (a span's values; the staged writes and their elements). `room(o)` says whether `o` may
/// be a refusal for want of room beyond the documented limits (a fuzzed growth policy, the arena's
/// cap): such a call must change nothing, so the entry keeps what the step gave it before.
template <bool Fixed>
struct step_calls {
  input& in;
  std::uint64_t& counter;
  const std::string& at;
  bool open;

  // An upload entry: `h`, `max_n`, `step`; `limit` elements in its destination.
  template <class Upload, class Room>
  void span_upload(Upload& u, std::size_t limit, Room&& room) {
    using T = typename std::remove_reference_t<decltype(*u.step)>::value_type;
    const std::size_t n = in.below(8) == 0 ? in.size(limit + 2) : in.below(limit + 1);
    const std::string what = at + ": upload::span(" + std::to_string(n) + ") of " + std::to_string(limit);
    std::span<T> got;
    const outcome o = attempt(what, [&] { got = u.h.span(n); });
    if (!open) return expect(o == outcome::ferry_error, what + ": outside a step, threw " + described(o));
    if (n > limit) return expect(o == outcome::out_of_range, what + ": threw " + described(o));
    if (Fixed && n > u.max_n) return expect(o == outcome::capacity, what + ": beyond max_n, threw " + described(o));
    if (room(o)) return;  // the upload keeps this step's earlier span
    expect(o == outcome::ok, what + ": threw " + described(o));
    expect(got.size() == n, what + ": span of the wrong size");
    u.step = values_of<T>(n, counter);
    std::copy(u.step->begin(), u.step->end(), got.begin());
  }
  // A publish entry: `h`, `max_n`, `step`.
  template <class Publish, class Room>
  void span_publish(Publish& p, Room&& room) {
    using T = typename std::remove_reference_t<decltype(*p.step)>::value_type;
    std::size_t n = in.below(8) == 0 ? in.size(p.max_n + 2) : in.below(std::min<std::size_t>(p.max_n, 64) + 2);
    if (n > (1u << 16) && n < (std::uint64_t{1} << 62)) n %= 1u << 16;
    const std::string what = at + ": publish::span(" + std::to_string(n) + ") of max_n " + std::to_string(p.max_n);
    std::span<T> got;
    const outcome o = attempt(what, [&] { got = p.h.span(n); });
    if (!open) return expect(o == outcome::ferry_error, what + ": outside a step, threw " + described(o));
    if (Fixed && n > p.max_n) return expect(o == outcome::capacity, what + ": beyond max_n, threw " + described(o));
    if (room(o) || (o == outcome::capacity && n >= (std::uint64_t{1} << 62))) return;  // room, or overflow
    expect(o == outcome::ok, what + ": threw " + described(o));
    expect(got.size() == n, what + ": span of the wrong size");
    p.step = values_of<T>(n, counter);
    std::copy(p.step->begin(), p.step->end(), got.begin());
  }
  // A writes entry: `h`, `rows`, `cols`, `max_writes`, `max_elements`, `step`, `elements`.
  template <class Writes, class Room>
  void stage(Writes& w, Room&& room) {
    using T = typename decltype(w.step)::value_type::value_type;
    const bool elem = in.below(4) == 0;
    write_args a = decode_write(in, w.rows, w.cols);
    if (elem) a.start = 0, a.len = 1;
    const std::vector<T> v = values_for<T>(a, counter);
    const std::string what = at + (elem ? ": writes::stage_write_elem " : ": writes::stage_write ") + a.str() +
                             " into " + std::to_string(w.rows) + " x " + std::to_string(w.cols);
    const outcome o = attempt(what, [&] {
      if (elem)
        w.h.stage_write_elem(a.row, v[0]);
      else
        with_range(a, v, [&](auto&& r) { w.h.stage_write(a.row, a.start, r); });
    });
    const auto check_pending = [&] {
      expect(w.h.pending() == w.step.size() && w.h.pending_elements() == w.elements,
             what + ": pending() / pending_elements() disagree with the model");
    };
    if (!a.in_bounds(w.rows, w.cols)) {
      expect(o == outcome::out_of_range || (!open && o == outcome::ferry_error), what + ": out of bounds, threw " + described(o));
      if (open) check_pending();
      return;
    }
    if (!open) return expect(o == outcome::ferry_error, what + ": outside a step, threw " + described(o));
    if (a.len != 0 && Fixed && (w.step.size() + 1 > w.max_writes || w.elements + a.len > w.max_elements)) {
      expect(o == outcome::capacity, what + ": beyond the declared maxima, threw " + described(o));
      return check_pending();
    }
    if (room(o)) return check_pending();
    expect(o == outcome::ok, what + ": threw " + described(o));
    if (a.len != 0) {
      w.step.push_back({a.row, a.start, v});
      w.elements += a.len;
    }
    check_pending();
  }
};

/// Calls `f` with the list of one element type of `lists` (a tuple of the uint8, uint32 and
/// uint64 lists), chosen by `in`; each_type calls it with each.
template <class Lists, class F>
void with_type(input& in, Lists& lists, F&& f) {
  switch (in.below(3)) {
    case 0: f(std::get<0>(lists)); break;
    case 1: f(std::get<1>(lists)); break;
    default: f(std::get<2>(lists)); break;
  }
}
template <class Lists, class F>
void each_type(Lists& lists, F&& f) {
  f(std::get<0>(lists));
  f(std::get<1>(lists));
  f(std::get<2>(lists));
}

template <class Batch>
class step_run {
  static constexpr bool fixed = std::is_same_v<typename Batch::growth_policy, ferry::growth::fixed>;
  static constexpr bool fuzzed_growth = std::is_same_v<typename Batch::growth_policy, input_growth>;

  template <class T>
  struct lists {
    struct upload {
      typename Batch::template upload<T> h;
      std::vector<T> dst, model;
      std::size_t max_n;
      std::optional<std::vector<T>> step;  // this step's span() contents
    };
    struct publish {
      typename Batch::template publish<T> h;
      std::size_t max_n;
      std::optional<std::vector<T>> step;  // this step's span() contents
      std::optional<std::vector<T>> last;  // the last submitted step's (view() shows them)
    };
    struct writes {
      typename Batch::template writes<T> h;
      std::size_t rows, cols, max_writes, max_elements;
      std::vector<T> dst, model;
      std::vector<model_write<T>> step;
      std::size_t elements = 0;
    };
    struct fill {
      std::vector<T> dst, model;
      std::unique_ptr<T> cell;  // the device value (host memory on the host backend)
      std::optional<std::size_t> publish;
      std::size_t index = 0;
    };
    std::deque<upload> uploads;
    std::deque<publish> publishes;
    std::deque<writes> writes_;
    std::deque<fill> fills;
  };
  using all = std::tuple<lists<std::uint8_t>, lists<std::uint32_t>, lists<std::uint64_t>>;

 public:
  step_run(input& in, ferry::pinned_arena<host>& arena) : in_(in), arena_(arena) {}

  void run() {
    counter_ = in_.raw(2);
    std::size_t slots = 2 + in_.below(3), max_slots = slots + in_.below(4);
    if (in_.below(16) == 0) {  // bad counts
      slots = in_.below(3), max_slots = in_.below(3);
      const std::string what = "step_batch(" + std::to_string(slots) + ", " + std::to_string(max_slots) + ")";
      const outcome o = attempt(what, [&] { Batch b(slots, max_slots, arena_); });
      const bool bad = slots < 2 || slots > max_slots;
      expect(bad ? o == outcome::invalid_argument : o == outcome::ok, what + ": threw " + name(o));
      return;
    }
    name_ = "step_batch(" + std::to_string(slots) + ", " + std::to_string(max_slots) + ")";
    Batch b(slots, max_slots, arena_);
    batch_ = &b;
    plan();
    for (int op = 0; op < 96 && !in_.empty(); ++op) {
      at_ = name_ + " op " + std::to_string(op);
      switch (in_.below(14)) {
        case 0: begin(); break;
        case 1:
        case 2: with_type([&](auto& l) { span_upload(l); }); break;
        case 3: with_type([&](auto& l) { span_publish(l); }); break;
        case 4:
        case 5:
        case 6: with_type([&](auto& l) { stage(l); }); break;
        case 7:
        case 8: submit(); break;
        case 9: synchronize(); break;
        case 10: reserve(); break;
        case 11: with_type([&](auto& l) { set_cell(l); }); break;
        case 12: late_add(); break;
        default:
          begin();  // a whole small step: begin, a few calls, submit
          for (int i = 0; i < 3; ++i) with_type([&](auto& l) { stage(l); });
          with_type([&](auto& l) { span_upload(l); });
          with_type([&](auto& l) { span_publish(l); });
          submit();
      }
    }
    at_ = name_ + " end";
    if (open_) submit();
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
  // A declared maximum: small, or an edge (those between 2^20 and 2^62 folded below 2^20, so
  // that a legal plan never asks for more memory than the arena's cap by design).
  std::size_t amount(std::uint64_t small) {
    const std::uint64_t v = in_.size(small);
    return v <= (1u << 20) || v >= (std::uint64_t{1} << 62) ? v : v % (1u << 20);
  }
  template <class T>
  std::vector<T> values(std::size_t n) {
    return values_of<T>(n, counter_);
  }

  void plan() {
    const std::size_t entries = in_.below(9);
    for (std::size_t e = 0; e < entries; ++e) {
      at_ = name_ + " plan entry " + std::to_string(e);
      switch (in_.below(4)) {
        case 0: with_type([&](auto& l) { add_upload(l); }); break;
        case 1: with_type([&](auto& l) { add_publish(l); }); break;
        case 2: with_type([&](auto& l) { add_writes(l); }); break;
        default: with_type([&](auto& l) { add_fill(l); }); break;
      }
    }
  }

  template <class T>
  void add_upload(lists<T>& l) {
    typename lists<T>::upload u;
    u.dst = values<T>(in_.below(65));
    u.model = u.dst;
    u.max_n = in_.below(8) == 0 ? u.dst.size() + 1 + in_.below(4) : in_.below(u.dst.size() + 1);
    const std::string what = at_ + ": add_upload(" + std::to_string(u.dst.size()) + " elements, max_n " +
                             std::to_string(u.max_n) + ")";
    const outcome o = attempt(what, [&] { u.h = batch_->add_upload(ferry::device_span<T>(u.dst.data(), u.dst.size()), u.max_n); });
    if (frozen_) return expect(o == outcome::ferry_error, what + ": after the plan was fixed, threw " + name(o));
    if (u.max_n > u.dst.size()) return expect(o == outcome::invalid_argument, what + ": threw " + name(o));
    expect(o == outcome::ok, what + ": threw " + std::string(name(o)));
    l.uploads.push_back(std::move(u));
  }
  template <class T>
  void add_publish(lists<T>& l) {
    typename lists<T>::publish p;
    p.max_n = amount(33);
    const std::string what = at_ + ": add_publish(max_n " + std::to_string(p.max_n) + ")";
    const outcome o = attempt(what, [&] { p.h = batch_->template add_publish<T>(p.max_n); });
    if (frozen_) return expect(o == outcome::ferry_error, what + ": after the plan was fixed, threw " + name(o));
    const bool overflows = p.max_n > std::numeric_limits<std::size_t>::max() / sizeof(T);
    if (overflows) return expect(o == outcome::capacity, what + ": threw " + std::string(name(o)));
    expect(o == outcome::ok, what + ": threw " + std::string(name(o)));
    l.publishes.push_back(std::move(p));
  }
  template <class T>
  void add_writes(lists<T>& l) {
    typename lists<T>::writes w;
    w.rows = in_.below(9);
    w.cols = in_.below(33);
    w.max_writes = amount(9);
    w.max_elements = amount(65);
    w.dst = values<T>(w.rows * w.cols);
    w.model = w.dst;
    const std::string what = at_ + ": add_writes(" + std::to_string(w.rows) + " x " + std::to_string(w.cols) +
                             ", max_writes " + std::to_string(w.max_writes) + ", max_elements " +
                             std::to_string(w.max_elements) + ")";
    const outcome o = attempt(what, [&] {
      w.h = batch_->add_writes(ferry::staged_view<T>(w.dst.data(), w.rows, w.cols), w.max_writes, w.max_elements);
    });
    if (frozen_) return expect(o == outcome::ferry_error, what + ": after the plan was fixed, threw " + name(o));
    const bool overflows = w.max_elements > std::numeric_limits<std::size_t>::max() / sizeof(T);
    if (overflows) return expect(o == outcome::capacity, what + ": threw " + std::string(name(o)));
    expect(o == outcome::ok, what + ": threw " + std::string(name(o)));
    l.writes_.push_back(std::move(w));
  }
  template <class T>
  void add_fill(lists<T>& l) {
    typename lists<T>::fill f;
    f.dst = values<T>(in_.below(33));
    f.model = f.dst;
    f.cell = std::make_unique<T>(next_value<T>(counter_));
    if (!l.publishes.empty() && in_.flag()) {
      f.publish = in_.below(l.publishes.size());
      f.index = in_.below(l.publishes[*f.publish].max_n + 2);
    }
    const std::string what = at_ + ": add_fill(" + std::to_string(f.dst.size()) + " elements, " +
                             (f.publish ? "publish " + std::to_string(*f.publish) + "[" + std::to_string(f.index) + "]"
                                        : std::string("a device value")) + ")";
    const ferry::device_span<T> dst(f.dst.data(), f.dst.size());
    const outcome o = attempt(what, [&] {
      if (f.publish)
        batch_->add_fill(dst, l.publishes[*f.publish].h, f.index);
      else
        batch_->add_fill(dst, static_cast<const T*>(f.cell.get()));
    });
    if (frozen_) return expect(o == outcome::ferry_error, what + ": after the plan was fixed, threw " + name(o));
    expect(o == outcome::ok, what + ": threw " + std::string(name(o)));
    l.fills.push_back(std::move(f));
  }
  void late_add() {
    if (!frozen_) return;  // before the plan is fixed an add is part of the plan, not a late one
    switch (in_.below(4)) {
      case 0: with_type([&](auto& l) { add_upload(l); }); break;
      case 1: with_type([&](auto& l) { add_publish(l); }); break;
      case 2: with_type([&](auto& l) { add_writes(l); }); break;
      default: with_type([&](auto& l) { add_fill(l); }); break;
    }
  }

  void reserve() {
    const std::string what = at_ + ": reserve";
    const outcome o = attempt(what, [&] { batch_->reserve(); });
    if (o == outcome::ok) frozen_ = true;
    else expect(refused(o, fuzzed_growth), what + ": threw " + std::string(name(o)));
  }

  void begin() {
    const std::string what = at_ + ": begin";
    const outcome o = attempt(what, [&] { batch_->begin(); });
    if (open_) {
      expect(o == outcome::ferry_error, what + ": with a step open, threw " + name(o));
    } else if (o == outcome::ok) {
      frozen_ = open_ = true;
      each_type([](auto& l) {
        for (auto& u : l.uploads) u.step.reset();
        for (auto& p : l.publishes) p.step.reset(), p.last.reset();
        for (auto& w : l.writes_) w.step.clear(), w.elements = 0;
      });
    } else {
      // A busy ring at max_slots, the arena's cap, or a growth policy's refusal.
      expect(refused(o, fuzzed_growth), what + ": threw " + std::string(name(o)));
    }
    expect(batch_->in_step() == open_, what + ": in_step() disagrees with the model");
  }

  // A refusal for want of room beyond the documented limits: the fuzzed growth policy's.
  [[nodiscard]] bool room_refused(outcome o) const { return fuzzed_growth && refused(o, true); }
  step_calls<fixed> calls() { return {in_, counter_, at_, open_}; }

  template <class T>
  void span_upload(lists<T>& l) {
    if (l.uploads.empty()) return;
    auto& u = l.uploads[in_.below(l.uploads.size())];
    calls().span_upload(u, u.dst.size(), [&](outcome o) { return room_refused(o); });
  }
  template <class T>
  void span_publish(lists<T>& l) {
    if (l.publishes.empty()) return;
    calls().span_publish(l.publishes[in_.below(l.publishes.size())], [&](outcome o) { return room_refused(o); });
  }
  template <class T>
  void stage(lists<T>& l) {
    if (l.writes_.empty()) return;
    calls().stage(l.writes_[in_.below(l.writes_.size())], [&](outcome o) { return room_refused(o); });
  }
  template <class T>
  void set_cell(lists<T>& l) {
    if (l.fills.empty() || !synced_) return;  // a pending step's kernel may still read the cell
    *l.fills[in_.below(l.fills.size())].cell = next_value<T>(counter_);
  }

  void submit() {
    const std::string what = at_ + ": submit";
    const auto steps = batch_->steps();
    const outcome o = attempt(what, [&] { batch_->submit(stream_); });
    if (!open_) return expect(o == outcome::ferry_error, what + ": outside a step, threw " + name(o));
    bool fill_short = false;  // a fill reads past its publish's elements this step
    each_type([&](auto& l) {
      for (const auto& f : l.fills)
        if (f.publish) {
          const auto& p = l.publishes[*f.publish];
          fill_short |= f.index >= (p.step ? p.step->size() : 0);
        }
    });
    if (o != outcome::ok) {
      expect(fill_short ? o == outcome::out_of_range : (refused(o, true) && fuzzed_growth),
             what + ": threw " + std::string(name(o)));
      expect(batch_->in_step() && batch_->steps() == steps, what + ": a refused submit did not leave the step open");
      // Nothing was enqueued: the destinations are as they were.
      synchronize();
      return;
    }
    expect(!fill_short, what + ": a fill past its publish's elements was accepted");
    expect(!batch_->in_step() && batch_->steps() == steps + 1, what + ": the step is still open after submit");
    open_ = false;
    synced_ = false;
    each_type([&](auto& l) {
      for (auto& u : l.uploads)
        if (u.step) std::copy(u.step->begin(), u.step->end(), u.model.begin());
      for (auto& w : l.writes_) apply_model(w.model, w.cols, w.step), w.step.clear(), w.elements = 0;
      for (auto& f : l.fills) {
        using T = typename decltype(f.model)::value_type;
        const T v = f.publish ? (*l.publishes[*f.publish].step)[f.index] : *f.cell;
        std::fill(f.model.begin(), f.model.end(), v);
      }
      for (auto& p : l.publishes) p.last = p.step ? *p.step : std::vector<typename decltype(p.last)::value_type::value_type>{};
    });
  }

  void synchronize() {
    stream_.synchronize();
    synced_ = true;
    each_type([&](auto& l) {
      for (std::size_t i = 0; i < l.uploads.size(); ++i)
        expect_equal(l.uploads[i].dst.data(), l.uploads[i].model, at_ + ": upload " + std::to_string(i));
      for (std::size_t i = 0; i < l.writes_.size(); ++i)
        expect_equal(l.writes_[i].dst.data(), l.writes_[i].model, at_ + ": writes target " + std::to_string(i));
      for (std::size_t i = 0; i < l.fills.size(); ++i)
        expect_equal(l.fills[i].dst.data(), l.fills[i].model, at_ + ": fill " + std::to_string(i));
      if (open_) return;  // a begun step's publishes show nothing yet
      for (std::size_t i = 0; i < l.publishes.size(); ++i) {
        const auto& p = l.publishes[i];
        if (!p.last) continue;
        const auto view = p.h.view();
        expect(view.size() == p.last->size(), at_ + ": publish " + std::to_string(i) + " view of the wrong size");
        expect_equal(view.data(), *p.last, at_ + ": publish " + std::to_string(i) + " view");
      }
    });
  }

  input& in_;
  ferry::pinned_arena<host>& arena_;
  ferry::stream<host> stream_;
  Batch* batch_ = nullptr;
  all lists_;
  std::uint64_t counter_ = 0;
  bool open_ = false, frozen_ = false, synced_ = true;
  std::string name_, at_;
};

/// A plan and steps of step_batch<Growth, host> from `in`.
template <class Growth>
void run_step(input& in, ferry::pinned_arena<host>& arena) {
  step_run<ferry::step_batch<Growth, host>>(in, arena).run();
}

}  // namespace ferry_fuzz
