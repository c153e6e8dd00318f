// ferry_vllm.VllmStepPrep's core: the preparation of one step of vLLM's model runner v2
// (prepare_inputs + prepare_attn, and the block-table writes before them) as one ferry step: one
// Python call, one step_batch submit, one kernel launch (on the host backend one host task). The
// host keeps what vLLM's model runner keeps on the host (each request's prefill tokens and how
// many are computed, the block counts of its block table rows); the device state (computed-token
// counts, the last sampled token, the draft tokens) is read by the epilogue (prep_epilogue.hpp)
// and never reaches the host.
//
// A step is checked as it is written into its slot, in one pass over the scheduler's arrays:
// whatever throws cancels the step (step_batch::cancel: nothing enqueued, the slot taken again by
// the next begin) before the host state changes, so a call that throws changes nothing.
// prepare() = fill() + submit: fill() begins the step and writes it (no stream touched). With
// graph=True the batch is a capture_batch (launch::capture) and only the submit changes:
// commit() = fill() + step_batch::commit (no CUDA call), the launch recorded once into the
// engine's graph by record(), run by each of its replays.
#include "torch_glue.hpp"

#ifdef __GLIBCXX__
#include <cxxabi.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry_vllm {
namespace {

std::string prefix(const char* api) { return std::string("ferry: ") + api + ": "; }
std::string str(std::int64_t v) { return std::to_string(v); }

/// The sizes the object was made for and its groups (backend independent).
struct prep_config {
  std::int64_t max_reqs = 0, max_tokens = 0, draft_cols = 0;
  std::size_t groups = 0;
  std::array<std::int64_t, max_kv_groups> cols{}, kernel_block_size{}, blocks_per_kv_block{};
};

/// Block ids from Python (a sequence of ints, a NumPy array, ...), expanded to kernel blocks (a
/// KV-cache block b of bpk kernel blocks becomes b*bpk, ..., b*bpk+bpk-1, as vLLM's
/// append_block_ids) and appended to `out`; returns their count. A list or tuple of Python ints
/// is read directly; anything else by values.hpp's rule.
std::int64_t read_ids(py::handle src, std::int64_t bpk, const char* api, std::size_t group,
                      std::vector<std::int32_t>& out) {
  const std::size_t before = out.size();
  const std::int64_t most = (INT32_MAX - (bpk - 1)) / bpk;  // its last kernel block still an int32
  auto put = [&](std::int64_t b) {
    if (b < 0 || b > most)
      throw std::invalid_argument(prefix(api) + "block id " + str(b) + " of group " + str(static_cast<std::int64_t>(group)) +
                                  " is outside [0, " + str(most) + "]");
    for (std::int64_t k = 0; k < bpk; ++k) out.push_back(static_cast<std::int32_t>(b * bpk + k));
  };
  if (PyList_Check(src.ptr()) || PyTuple_Check(src.ptr())) {
    PyObject* const* items = PySequence_Fast_ITEMS(src.ptr());
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(src.ptr());
    Py_ssize_t k = 0;
    for (int overflow = 0; k < m && PyLong_CheckExact(items[k]); ++k) {
      const long long v = PyLong_AsLongLongAndOverflow(items[k], &overflow);
      if (overflow != 0) break;
      put(v);
    }
    if (k == m) return static_cast<std::int64_t>(out.size() - before);
    out.resize(before);  // not all plain ints: read by the package's rule below
  }
  const host_values<std::int32_t> v(src, api);
  for (const std::int32_t b : v.span()) put(b);
  return static_cast<std::int64_t>(out.size() - before);
}

/// The block ids of one request, one sequence per KV-cache group, into `out`; each group's count.
std::array<std::int64_t, max_kv_groups> read_block_ids(const prep_config& c, py::handle per_group, const char* api,
                                                       std::vector<std::int32_t>& out) {
  const py::object seq = py::reinterpret_steal<py::object>(
      PySequence_Fast(per_group.ptr(), "ferry: block ids must be a sequence with one sequence of ids per KV-cache group"));
  if (!seq) throw py::error_already_set();
  const auto groups = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(seq.ptr()));
  if (groups != c.groups)
    throw std::invalid_argument(prefix(api) + "block ids for " + str(static_cast<std::int64_t>(groups)) +
                                " KV-cache groups, the object has " + str(static_cast<std::int64_t>(c.groups)));
  std::array<std::int64_t, max_kv_groups> count{};
  for (std::size_t g = 0; g < groups; ++g)
    count[g] = read_ids(PySequence_Fast_GET_ITEM(seq.ptr(), g), c.blocks_per_kv_block[g], api, g, out);
  return count;
}

/// One staged block-table write: group, row, start, and its ids [at, at + n) of a flat list.
struct block_write {
  std::uint32_t group;
  std::int32_t row;
  std::int64_t start, at, n;
};

/// Prefetches the Python objects of a nested structure level by level. new_block_ids (a list of
/// (req_index, (ids, ...)) tuples, made by the scheduler before the call) is read per entry as a
/// chain of dependent loads: the entry, its tuple of groups, each group's list, the list's item
/// array, the ids; each may miss the caches, and entry after entry the misses add up (most of
/// the time of a step's appends). Here every object of one level, for all entries, is prefetched
/// before the next level is read from it, so that the misses of a level overlap. It follows
/// exact tuples and lists only, reads an object only after prefetching it, and changes nothing;
/// its scratch holds at most `most` objects a level (reserved: it allocates nothing), the rest
/// is read as before.
class object_prefetch {
 public:
  explicit object_prefetch(std::size_t most) {
    level_.reserve(most);
    next_.reserve(most);
  }
  /// The objects `roots`[0, n) and up to `levels` - 1 levels below them.
  void run(PyObject* const* roots, std::size_t n, int levels) noexcept {
    next_.clear();
    for (std::size_t i = 0; i < n; ++i) add(roots[i], -1);
    for (int l = 1; l < levels && !next_.empty(); ++l) {
      level_.swap(next_);
      next_.clear();
      for (const node& x : level_) {
        if (x.n >= 0) {  // a list's item array: its items
          PyObject* const* items = static_cast<PyObject* const*>(x.at);
          for (Py_ssize_t i = 0; i < x.n; ++i) add(items[i], -1);
          continue;
        }
        PyObject* const o = static_cast<PyObject*>(const_cast<void*>(x.at));
        if (PyTuple_CheckExact(o)) {
          for (Py_ssize_t i = 0, m = PyTuple_GET_SIZE(o); i < m; ++i) add(PyTuple_GET_ITEM(o, i), -1);
        } else if (PyList_CheckExact(o) && PyList_GET_SIZE(o) > 0) {
          add(reinterpret_cast<PyListObject*>(o)->ob_item, PyList_GET_SIZE(o));  // a level of its own
        }
      }
    }
  }

 private:
  struct node {
    const void* at;  ///< an object (n < 0), or a list's item array of n items
    Py_ssize_t n;
  };
  void add(const void* at, Py_ssize_t n) noexcept {
    if (next_.size() == next_.capacity()) return;
    __builtin_prefetch(at);
    next_.push_back({at, n});
  }
  std::vector<node> level_, next_;
};

/// What the host knows of the requests (vLLM: RequestState's host arrays and BlockTables'
/// num_blocks), and the last step's sizes. Backend independent.
struct prep_state {
  explicit prep_state(const prep_config& c)
      : cfg(c),
        active(static_cast<std::size_t>(c.max_reqs), 0),
        left(static_cast<std::size_t>(c.max_reqs), 0),
        prefill(static_cast<std::size_t>(c.max_reqs)),
        num_blocks(c.groups * static_cast<std::size_t>(c.max_reqs), 0),
        seen(static_cast<std::size_t>(c.max_reqs), 0),
        step_blocks(num_blocks.size(), 0),
        step_blocks_seen(num_blocks.size(), 0),
        prefetch(std::min<std::size_t>(4 * static_cast<std::size_t>(c.max_reqs) * (c.groups + 1), 1 << 16)) {
    // the step's scratch at its most: no allocation in a step
    touched.reserve(num_blocks.size());
    std::size_t row = 0;
    for (std::size_t g = 0; g < c.groups; ++g) row += static_cast<std::size_t>(c.cols[g]);
    ids.reserve(row);
  }

  std::int64_t request_index(std::int64_t r, const char* api) const {
    if (r < 0 || r >= cfg.max_reqs)
      throw std::out_of_range(prefix(api) + "request index " + str(r) + " is past the state's " + str(cfg.max_reqs) +
                              " request slots");
    return r;
  }
  [[nodiscard]] std::size_t key(std::size_t g, std::int64_t r) const {
    return g * static_cast<std::size_t>(cfg.max_reqs) + static_cast<std::size_t>(r);
  }
  /// The blocks of request r's row of group g with the open step's appends.
  [[nodiscard]] std::int64_t step_count(std::size_t g, std::int64_t r) const {
    const std::size_t k = key(g, r);
    return step_blocks_seen[k] == stamp ? step_blocks[k] : num_blocks[k];
  }
  /// The prefill tokens of request r left after the ones computed (0: it decodes).
  [[nodiscard]] std::int64_t prefill_left(std::int64_t r) const { return left[static_cast<std::size_t>(r)]; }

  // vLLM: RequestState.add_request + BlockTables.append_block_ids(overwrite=True).
  void add_request(py::handle req_arg, py::handle tokens_arg, py::handle blocks_arg, py::handle computed_arg) {
    const char* api = "VllmStepPrep.add_request";
    const std::int64_t r = request_index(int_argument(req_arg, api, "req_index"), api);
    const auto slot = static_cast<std::size_t>(r);
    if (active[slot])
      throw std::invalid_argument(prefix(api) + "request " + str(r) +
                                  " is active: remove_request it first (vLLM gives a new request a free index)");
    const host_values<std::int32_t> tokens(tokens_arg, api);
    const std::int64_t computed = int_argument(computed_arg, api, "num_computed_tokens");
    const auto size = static_cast<std::int64_t>(tokens.size());
    if (computed < 0 || computed > size)
      throw std::invalid_argument(prefix(api) + "num_computed_tokens " + str(computed) + " outside [0, " + str(size) +
                                  "] (its prefill tokens)");
    std::vector<std::int32_t> ids;
    const auto count = read_block_ids(cfg, blocks_arg, api, ids);
    for (std::size_t g = 0; g < cfg.groups; ++g)
      if (count[g] > cfg.cols[g])
        throw ferry::capacity_error(prefix(api) + "request " + str(r) + ": " + str(count[g]) + " blocks of group " +
                                    str(static_cast<std::int64_t>(g)) + " exceed its block table row of " + str(cfg.cols[g]));
    // Checked: now change. The writes land with the next step.
    std::int64_t at = static_cast<std::int64_t>(pending_ids.size());
    pending_ids.insert(pending_ids.end(), ids.begin(), ids.end());
    for (std::size_t g = 0; g < cfg.groups; ++g) {
      if (count[g] > 0) pending.push_back({static_cast<std::uint32_t>(g), static_cast<std::int32_t>(r), 0, at, count[g]});
      at += count[g];
      num_blocks[key(g, r)] = count[g];
    }
    active[slot] = 1;
    prefill[slot].assign(tokens.span().begin(), tokens.span().end());
    left[slot] = size - computed;
  }

  // vLLM: RequestState.remove_request (the slot's table row stays as it is, as vLLM's does).
  void remove_request(py::handle req_arg) {
    const char* api = "VllmStepPrep.remove_request";
    const auto slot = static_cast<std::size_t>(request_index(int_argument(req_arg, api, "req_index"), api));
    if (!active[slot]) throw std::invalid_argument(prefix(api) + "request " + str(static_cast<std::int64_t>(slot)) + " is not active");
    active[slot] = 0;
    left[slot] = 0;
    prefill[slot] = {};
  }

  /// A step's sizes.
  struct sizes {
    std::int64_t n = 0, tokens = 0, logits = 0, prefill_tokens = 0, reqs_padded = 0, tokens_padded = 0;
  };

  prep_config cfg;
  std::vector<std::uint8_t> active;               ///< per request slot
  std::vector<std::int64_t> left;                 ///< prefill tokens left
  std::vector<std::vector<std::int32_t>> prefill; ///< its prefill tokens (vLLM's prefill_token_ids)
  std::vector<std::int64_t> num_blocks;           ///< [groups x max_reqs], as vLLM's BlockTables.num_blocks
  std::vector<block_write> pending;               ///< add_request's writes, landing with the next step
  std::vector<std::int32_t> pending_ids;
  /// slot_mappings past this hold PAD_SLOT_ID already: the most tokens of any step so far (a
  /// buffer ferry filled with PAD_SLOT_ID), or all of them (one given by the caller).
  std::int64_t slot_high = 0;
  sizes last;  ///< the last step's

  // the open step's scratch: which requests it met, its appends' new counts, the keys touched
  std::vector<std::uint64_t> seen;
  std::vector<std::int64_t> step_blocks;
  std::vector<std::uint64_t> step_blocks_seen;
  std::vector<std::size_t> touched;
  std::vector<std::int32_t> ids;
  object_prefetch prefetch;  ///< new_block_ids' objects
  std::uint64_t stamp = 0;
};

struct Prep {
  virtual ~Prep() = default;
  virtual void add_request(py::handle req, py::handle tokens, py::handle blocks, py::handle computed) = 0;
  virtual void remove_request(py::handle req) = 0;
  virtual void prepare(py::handle idx, py::handle q, py::handle drafts, py::handle new_blocks, py::handle reqs_padded,
                       py::handle tokens_padded) = 0;
  // graph=True (launch::capture): the step recorded into the graph's capture, committed each step
  virtual void commit(py::handle idx, py::handle q, py::handle drafts, py::handle new_blocks, py::handle reqs_padded,
                      py::handle tokens_padded) = 0;
  virtual void record() = 0;
  virtual void replay_recorded() = 0;
  virtual void check_replayed() const = 0;
  virtual std::uint64_t replayed() const = 0;
  virtual const prep_state& state() const = 0;
  virtual std::uint64_t steps() const = 0;
};

/// The tensors of a VllmStepPrep, from Python: the device state it reads and its outputs.
struct prep_tensors {
  at::Tensor num_computed, last_sampled, draft_tokens;
  at::Tensor next_prefill_tokens, input_ids, positions, seq_lens, query_start_loc, idx_mapping, cu_num_logits,
      logits_indices, expanded_idx_mapping, expanded_local_pos, slot_mappings, aux, prefill;
  std::vector<at::Tensor> block_tables, input_block_tables;
};

/// A VllmStepPrep of backend B on a step_batch of type Batch: step_batch<B> (prepare(): one
/// launch per step) or capture_batch<B> (graph=True: record() once into the graph's capture,
/// commit() each step with no CUDA call, the graph's replay runs it).
template <class B, class Batch>
class PrepT final : public Prep {
 public:
  using batch_type = Batch;
  static constexpr bool captures = std::is_same_v<typename Batch::launch_policy, ferry::launch::capture>;
  template <class T>
  using upload = typename batch_type::template upload<T>;
  using writes = typename batch_type::template writes<std::int32_t>;

  PrepT(const prep_config& c, prep_tensors t, std::size_t slots, bool slots_padded)
      : tensors(std::move(t)), st(c), batch(make_batch(slots)) {
    if (!slots_padded) st.slot_high = tensors.slot_mappings.size(1);
    auto up = [&](const at::Tensor& dst) {
      return batch->template add_upload<std::int32_t>(span_of<std::int32_t, B>(dst), static_cast<std::size_t>(dst.numel()));
    };
    idx = up(tensors.idx_mapping);
    qsl = up(tensors.query_start_loc);
    cu = up(tensors.cu_num_logits);
    aux = up(tensors.aux);
    prefill = up(tensors.prefill);
    step_epilogue e;
    e.which = step_epilogue::kind::prep;
    prep_epilogue& p = e.prep;
    p.idx = idx.ref();
    p.qsl = qsl.ref();
    p.cu = cu.ref();
    p.aux = aux.ref();
    p.prefill = prefill.ref();
    p.query_start_loc = data<std::int32_t>(tensors.query_start_loc);
    p.max_num_reqs = c.max_reqs;
    p.num_computed = data<std::int32_t>(tensors.num_computed);
    p.last_sampled = data<std::int64_t>(tensors.last_sampled);
    p.draft_tokens = c.draft_cols > 0 ? data<std::int64_t>(tensors.draft_tokens) : nullptr;
    p.draft_cols = c.draft_cols;
    p.next_prefill_tokens = data<std::int32_t>(tensors.next_prefill_tokens);
    p.input_ids = data<std::int32_t>(tensors.input_ids);
    p.positions = data<std::int64_t>(tensors.positions);
    p.seq_lens = data<std::int32_t>(tensors.seq_lens);
    p.logits_indices = data<std::int64_t>(tensors.logits_indices);
    p.expanded_idx_mapping = data<std::int32_t>(tensors.expanded_idx_mapping);
    p.expanded_local_pos = data<std::int32_t>(tensors.expanded_local_pos);
    p.slot_mappings = data<std::int64_t>(tensors.slot_mappings);
    p.slot_cols = tensors.slot_mappings.size(1);
    p.groups = static_cast<std::uint32_t>(c.groups);
    for (std::size_t g = 0; g < c.groups; ++g) {
      std::int32_t* const table = data<std::int32_t>(tensors.block_tables[g]);
      std::int32_t* const gathered = data<std::int32_t>(tensors.input_block_tables[g]);
      const bool vector = c.cols[g] % table_chunk == 0 && reinterpret_cast<std::uintptr_t>(table) % 16 == 0 &&
                          reinterpret_cast<std::uintptr_t>(gathered) % 16 == 0;
      p.group[g] = {table, gathered, c.cols[g], c.kernel_block_size[g], vector};
      // pow2: the sizes slots start at. Fixed (graph=True): the capacity, each row written whole
      // by an add_request and appended to once in a step.
      const auto rows = static_cast<std::size_t>(c.max_reqs), cols = static_cast<std::size_t>(c.cols[g]);
      tables[g] = batch->template add_writes<std::int32_t>(ferry::staged_view<std::int32_t>(table, rows, cols),
                                                           captures ? 2 * rows : rows, captures ? rows * cols : rows);
    }
    batch->set_epilogue(e);
    batch->reserve();
  }

  void add_request(py::handle req, py::handle tokens, py::handle blocks, py::handle computed) override {
    st.add_request(req, tokens, blocks, computed);
  }
  void remove_request(py::handle req) override { st.remove_request(req); }

  void prepare(py::handle idx_arg, py::handle q_arg, py::handle drafts_arg, py::handle new_blocks,
               py::handle reqs_padded, py::handle tokens_padded) override {
    const char* api = "VllmStepPrep.prepare";
    if constexpr (captures) {
      throw ferry::error(prefix(api) + "a graph=True object's steps run in the graph's replays: commit() each step, "
                                       "then replay the graph recorded with record()");
    } else {
      step(api, idx_arg, q_arg, drafts_arg, new_blocks, reqs_padded, tokens_padded, [&] {
        const auto stream = on<B>::stream();
        submit_step<B>(*batch, stream);
        on<B>::finish(stream);
      });
    }
  }

  void commit(py::handle idx_arg, py::handle q_arg, py::handle drafts_arg, py::handle new_blocks,
              py::handle reqs_padded, py::handle tokens_padded) override {
    const char* api = "VllmStepPrep.commit";
    if constexpr (!captures) {
      throw ferry::error(prefix(api) + "the object was made without graph=True: prepare() each step");
    } else {
      if (!is_host<B> && !recorded)
        throw ferry::error(prefix(api) + "no step recorded yet: call record() inside torch.cuda.graph(g) first, "
                                         "then commit() before each g.replay()");
      step(api, idx_arg, q_arg, drafts_arg, new_blocks, reqs_padded, tokens_padded, [&] { batch->commit(); });
    }
  }

  void record() override {
    const char* api = "VllmStepPrep.record";
    if constexpr (!captures) {
      throw ferry::error(prefix(api) + "the object was made without graph=True (its steps are launched by prepare())");
    } else if constexpr (is_host<B>) {
      throw ferry::error(prefix(api) + "device='cpu' has no CUDA graph to record into: its stand-in for the "
                                       "graph's replay is replay_recorded(), after each commit()");
    } else {
#if FERRY_HAS_CUDA
      record_step(*batch, on<B>::stream());
      recorded = true;
#endif
    }
  }

  void replay_recorded() override {
    if constexpr (captures && is_host<B>) {
      const auto stream = on<B>::stream();
      replay_step(*batch, stream);
      on<B>::finish(stream);
    } else {
      throw ferry::error(prefix("VllmStepPrep.replay_recorded") +
                         (captures ? "the stand-in replay is device='cpu''s: on CUDA, g.replay() runs the recorded step"
                                   : "the object was made without graph=True"));
    }
  }

  void check_replayed() const override {
    if constexpr (captures) batch->check_replayed();
    else throw ferry::error(prefix("VllmStepPrep.check_replayed") + "the object was made without graph=True");
  }

  std::uint64_t replayed() const override {
    if constexpr (captures) return batch->replayed();
    else throw ferry::error(prefix("VllmStepPrep.replayed") + "the object was made without graph=True");
  }

  const prep_state& state() const override { return st; }
  std::uint64_t steps() const override { return batch->steps(); }

 private:
  static std::unique_ptr<Batch> make_batch(std::size_t slots) {
    if constexpr (captures) return make_capture_batch<B>(slots);
    else return make_step_batch<B>(slots);
  }

  /// One step: the scheduler's arrays read, checked and written into the step (fill), then
  /// `run` (the submit, or the commit); whatever throws cancels the step, the host state as it
  /// was, else the host state advances.
  template <class Run>
  void step(const char* api, py::handle idx_arg, py::handle q_arg, py::handle drafts_arg, py::handle new_blocks,
            py::handle reqs_padded, py::handle tokens_padded, Run&& run) {
    const host_values<std::int32_t> rows(idx_arg, api), q(q_arg, api);
    std::optional<host_values<std::int32_t>> d;  // in place: nothing allocated
    if (!drafts_arg.is_none()) d.emplace(drafts_arg, api);
    const prep_state::sizes s = fill(api, rows.span(), q.span(), d ? d->span() : std::span<const std::int32_t>(),
                                     d.has_value(), new_blocks, reqs_padded, tokens_padded);
    try {
      run();
    } catch (...) {
      batch->cancel();
      throw;
    }
    advance(s, rows.span(), q.span());
  }

  template <class T>
  static T* data(const at::Tensor& t) {
    return t.defined() && t.numel() > 0 ? span_of<T, B>(t).data() : nullptr;
  }

  /// Reads and checks the step's scheduler data and writes it into a step it begins (no stream
  /// touched); an error cancels the step, the host state as it was.
  prep_state::sizes fill(const char* api, std::span<const std::int32_t> r_of, std::span<const std::int32_t> q_of,
                         std::span<const std::int32_t> d, bool has_drafts, py::handle new_blocks,
                         py::handle reqs_padded, py::handle tokens_padded) {
    const prep_config& c = st.cfg;
    prep_state::sizes s;
    s.n = static_cast<std::int64_t>(r_of.size());
    if (s.n == 0) throw std::invalid_argument(prefix(api) + "a step of no requests (vLLM asserts num_tokens > 0)");
    if (s.n > c.max_reqs)
      throw std::invalid_argument(prefix(api) + "a batch of " + str(s.n) + " requests, more than max_num_reqs " +
                                  str(c.max_reqs));
    if (static_cast<std::int64_t>(q_of.size()) != s.n || (has_drafts && static_cast<std::int64_t>(d.size()) != s.n))
      throw std::invalid_argument(prefix(api) + "num_scheduled_tokens has " + str(static_cast<std::int64_t>(q_of.size())) +
                                  " entries and num_draft_tokens " +
                                  (has_drafts ? str(static_cast<std::int64_t>(d.size())) : std::string("none")) + " for " +
                                  str(s.n) + " requests");
    s.reqs_padded = reqs_padded.is_none() ? s.n : int_argument(reqs_padded, api, "num_reqs_padded");
    if (s.reqs_padded < s.n || s.reqs_padded > c.max_reqs)
      throw std::invalid_argument(prefix(api) + "num_reqs_padded " + str(s.reqs_padded) + " is outside [" + str(s.n) +
                                  ", " + str(c.max_reqs) + "] (the batch's requests, max_num_reqs)");
    const std::int64_t padded_tokens = tokens_padded.is_none() ? -1 : int_argument(tokens_padded, api, "num_tokens_padded");
    const std::int32_t* drafts = has_drafts ? d.data() : nullptr;
    const prep_layout at{s.n, s.reqs_padded};
    const auto n = static_cast<std::size_t>(s.n);

    batch->begin();
    try {
      ++st.stamp;
      st.touched.clear();
      st.ids.clear();
      const std::span<std::int32_t> idx_out = idx.span(n), starts = qsl.span(n + 1), logits = cu.span(n + 1),
                                    a = aux.span(static_cast<std::size_t>(at.size(static_cast<std::int64_t>(c.groups))));
      std::int32_t* const row_info = a.data() + at.row_info();
      std::int32_t* const has_next = a.data() + at.has_next();
      std::int32_t* const next = a.data() + at.next();
      starts[0] = logits[0] = 0;
      // the rows: checked, and written
      for (std::int64_t i = 0; i < s.n; ++i) {
        const std::int64_t r = r_of[i];
        if (r < 0 || r >= c.max_reqs)
          throw std::out_of_range(prefix(api) + "idx_mapping[" + str(i) + "] = " + str(r) + " is past the state's " +
                                  str(c.max_reqs) + " request slots");
        const auto slot = static_cast<std::size_t>(r);
        if (!st.active[slot])
          throw std::invalid_argument(prefix(api) + "idx_mapping[" + str(i) + "] = " + str(r) +
                                      " is not an active request (add_request it first)");
        if (st.seen[slot] == st.stamp)
          throw std::invalid_argument(prefix(api) + "request " + str(r) + " appears twice in idx_mapping");
        st.seen[slot] = st.stamp;
        const std::int64_t qi = q_of[i], di = drafts != nullptr ? drafts[i] : 0, left = st.left[slot];
        if (qi < 1) throw std::invalid_argument(prefix(api) + "num_scheduled_tokens[" + str(i) + "] = " + str(qi));
        if (di < 0 || di > c.draft_cols)
          throw std::invalid_argument(prefix(api) + "num_draft_tokens[" + str(i) + "] = " + str(di) +
                                      " is outside [0, " + str(c.draft_cols) + "] (the draft_tokens tensor's columns)");
        has_next[i] = next[i] = 0;
        row_info[i] = -1;
        if (left > 0) {
          if (di != 0)
            throw std::invalid_argument(prefix(api) + "row " + str(i) + " (request " + str(r) + ") is prefilling (" +
                                        str(left) + " prefill tokens left) and has " + str(di) + " draft tokens");
          if (qi > left)
            throw std::invalid_argument(prefix(api) + "row " + str(i) + " (request " + str(r) + ") schedules " +
                                        str(qi) + " tokens, and only " + str(left) + " of its prefill tokens are left");
          row_info[i] = static_cast<std::int32_t>(s.prefill_tokens);
          s.prefill_tokens += qi;
          if (qi < left) {
            has_next[i] = 1;
            const auto& tokens = st.prefill[slot];
            next[i] = tokens[tokens.size() - static_cast<std::size_t>(left - qi)];
          }
        } else if (qi < 1 + di) {
          throw std::invalid_argument(prefix(api) + "row " + str(i) + " (request " + str(r) + ") schedules " + str(qi) +
                                      " tokens for its sampled token and " + str(di) + " draft tokens");
        }
        s.tokens += qi;
        s.logits += 1 + di;
        if (s.tokens > c.max_tokens)
          throw std::invalid_argument(prefix(api) + "a step of more than max_num_tokens " + str(c.max_tokens) +
                                      " tokens (" + str(s.tokens) + " by row " + str(i) + ")");
        idx_out[i] = static_cast<std::int32_t>(r);
        starts[i + 1] = static_cast<std::int32_t>(s.tokens);
        logits[i + 1] = static_cast<std::int32_t>(s.logits);
      }
      s.tokens_padded = padded_tokens < 0 ? s.tokens : padded_tokens;
      if (s.tokens_padded < s.tokens || s.tokens_padded > c.max_tokens)
        throw std::invalid_argument(prefix(api) + "num_tokens_padded " + str(s.tokens_padded) + " is outside [" +
                                    str(s.tokens) + ", " + str(c.max_tokens) + "] (the step's tokens, max_num_tokens)");
      // the prefill rows' tokens, packed
      if (s.prefill_tokens > 0) {
        std::int32_t* const out = prefill.span(static_cast<std::size_t>(s.prefill_tokens)).data();
        for (std::int64_t i = 0; i < s.n; ++i)
          if (row_info[i] >= 0) {
            const auto& tokens = st.prefill[static_cast<std::size_t>(r_of[i])];
            std::copy_n(tokens.end() - st.left[static_cast<std::size_t>(r_of[i])], q_of[i], out + row_info[i]);
          }
      }
      // the block tables: add_request's writes, then this step's appends
      for (const block_write& w : st.pending) stage(w.group, w.row, w.start, st.pending_ids.data() + w.at, w.n);
      if (!new_blocks.is_none()) append(api, new_blocks);
      for (std::size_t g = 0; g < c.groups; ++g) {
        std::int32_t* const blocks = a.data() + at.group_at(static_cast<std::int64_t>(g));
        std::int32_t* const chunk_start = blocks + s.n;
        std::int64_t chunks = 0;
        for (std::int64_t i = 0; i < s.reqs_padded; ++i) {
          chunk_start[i] = static_cast<std::int32_t>(chunks);
          const std::int64_t count = i < s.n ? st.step_count(g, r_of[i]) : c.cols[g];
          if (i < s.n) blocks[i] = static_cast<std::int32_t>(count);
          chunks += (count + table_chunk - 1) / table_chunk;
        }
        chunk_start[s.reqs_padded] = static_cast<std::int32_t>(chunks);
      }
      a[meta_reqs_padded] = static_cast<std::int32_t>(s.reqs_padded);
      a[meta_slot_pad_end] = static_cast<std::int32_t>(std::max(st.slot_high, s.tokens));
    } catch (...) {
      batch->cancel();
      throw;
    }
    return s;
  }

  void stage(std::size_t g, std::int64_t row, std::int64_t start, const std::int32_t* ids, std::int64_t n) {
    tables[g].stage_write(static_cast<std::size_t>(row), static_cast<std::size_t>(start),
                          std::span<const std::int32_t>(ids, static_cast<std::size_t>(n)));
  }

  // new_block_ids: a sequence of (req_index, block ids per group) (vLLM: update_requests's
  // append_block_ids(req_index, new_block_ids, overwrite=False) for each): checked and staged.
  void append(const char* api, py::handle new_blocks) {
    const prep_config& c = st.cfg;
    const py::object seq = py::reinterpret_steal<py::object>(PySequence_Fast(
        new_blocks.ptr(), "ferry: VllmStepPrep: new_block_ids must be a sequence of (req_index, block ids per "
                          "KV-cache group)"));
    if (!seq) throw py::error_already_set();
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(seq.ptr());
    // entry, (req_index, groups), each group's ids, a list's item array, the ids: 5 levels (7 for lists)
    if (m > 1) st.prefetch.run(PySequence_Fast_ITEMS(seq.ptr()), static_cast<std::size_t>(m), 7);
    for (Py_ssize_t k = 0; k < m; ++k) {
      PyObject* entry = PySequence_Fast_GET_ITEM(seq.ptr(), k);
      if (!PyTuple_Check(entry) && !PyList_Check(entry))
        throw py::type_error(prefix(api) + "new_block_ids[" + str(k) + "] must be a tuple (req_index, block ids), got " +
                             Py_TYPE(entry)->tp_name);
      if (PySequence_Fast_GET_SIZE(entry) != 2)
        throw std::invalid_argument(prefix(api) + "new_block_ids[" + str(k) + "] must be (req_index, block ids)");
      const std::int64_t r = st.request_index(int_argument(PySequence_Fast_GET_ITEM(entry, 0), api, "req_index"), api);
      if (!st.active[static_cast<std::size_t>(r)])
        throw std::invalid_argument(prefix(api) + "new_block_ids[" + str(k) + "]: request " + str(r) + " is not active");
      st.ids.clear();
      const auto count = read_block_ids(c, PySequence_Fast_GET_ITEM(entry, 1), api, st.ids);
      std::int64_t at = 0;
      for (std::size_t g = 0; g < c.groups; ++g) {
        const std::int64_t start = st.step_count(g, r);
        if (start + count[g] > c.cols[g])
          throw ferry::capacity_error(prefix(api) + "the block table is full: request " + str(r) + " has " + str(start) +
                                      " blocks of group " + str(static_cast<std::int64_t>(g)) + ", " + str(count[g]) +
                                      " more exceed its row of " + str(c.cols[g]));
        if (count[g] > 0) stage(g, r, start, st.ids.data() + at, count[g]);
        const std::size_t key = st.key(g, r);
        if (st.step_blocks_seen[key] != st.stamp) st.touched.push_back(key);
        st.step_blocks[key] = start + count[g];
        st.step_blocks_seen[key] = st.stamp;
        at += count[g];
      }
    }
  }

  /// After the step was submitted (or committed): the host state advances.
  void advance(const prep_state::sizes& s, std::span<const std::int32_t> rows, std::span<const std::int32_t> q) {
    if (s.prefill_tokens > 0)  // else no row was prefilling (fill() counts their tokens): nothing left to count down
      for (std::int64_t i = 0; i < s.n; ++i) {
        auto& left = st.left[static_cast<std::size_t>(rows[i])];
        if (left > 0) left -= q[i];
      }
    for (const std::size_t key : st.touched) st.num_blocks[key] = st.step_blocks[key];
    st.pending.clear();
    st.pending_ids.clear();
    st.slot_high = std::max(st.slot_high, s.tokens);
    st.last = s;
  }

  prep_tensors tensors;  // the plan's memory, destroyed after `batch`
  prep_state st;
  std::unique_ptr<batch_type> batch;
  upload<std::int32_t> idx, qsl, cu, aux, prefill;
  std::array<writes, max_kv_groups> tables;
  bool recorded = false;  ///< record() has recorded the step into a capture (graph=True, CUDA)
};

// ---- construction from Python --------------------------------------------------------------------

/// A contiguous tensor on `device` of `dtype` with `dims` dimensions (-1: any) and at least
/// `least` elements.
at::Tensor checked_tensor(py::handle h, const at::Device& device, at::ScalarType dtype, std::int64_t dims,
                          std::int64_t least, const char* what) {
  const char* api = "VllmStepPrep";
  const at::Tensor t = tensor_argument(h, api, what);
  if (t.device() != device)
    throw std::invalid_argument(prefix(api) + what + " is on " + t.device().str() + ", the object's device is " +
                                device.str());
  if (t.scalar_type() != dtype)
    throw std::invalid_argument(prefix(api) + what + " must be " + c10::toString(dtype) + ", got " +
                                c10::toString(t.scalar_type()));
  if (dims >= 0 && t.dim() != dims)
    throw std::invalid_argument(prefix(api) + what + " must have " + str(dims) + " dimensions, got " + str(t.dim()));
  if (!t.is_contiguous()) throw std::invalid_argument(prefix(api) + what + " must be contiguous");
  if (t.numel() < least)
    throw std::invalid_argument(prefix(api) + what + " must hold at least " + str(least) + " elements, got " +
                                str(t.numel()));
  return t;
}

py::object item(const py::dict& a, const char* key) { return a[key]; }

std::shared_ptr<Prep> make_prep(const py::dict& a, bool cuda, std::int64_t slots, bool graph) {
  const char* api = "VllmStepPrep";
  prep_config c;
  c.max_reqs = int_argument(item(a, "max_num_reqs"), api, "max_num_reqs");
  c.max_tokens = int_argument(item(a, "max_num_tokens"), api, "max_num_tokens");
  if (c.max_reqs < 1 || c.max_tokens < 1)
    throw std::invalid_argument(prefix(api) + "max_num_reqs and max_num_tokens must be at least 1");
  if (c.max_reqs > (std::int64_t{1} << 24) || c.max_tokens > (std::int64_t{1} << 24))
    throw std::invalid_argument(prefix(api) + "max_num_reqs and max_num_tokens must be at most 2^24");
  if (slots < 2) throw std::invalid_argument(prefix(api) + "max_concurrency must be at least 2, got " + str(slots));
  const py::list block_sizes = item(a, "block_sizes"), kernel_sizes = item(a, "kernel_block_sizes"),
                 max_blocks = item(a, "max_num_blocks");
  c.groups = block_sizes.size();
  if (c.groups < 1 || c.groups > max_kv_groups)
    throw std::invalid_argument(prefix(api) + "block_sizes names " + str(static_cast<std::int64_t>(c.groups)) +
                                " KV-cache groups; ferry_vllm serves 1 to " + str(max_kv_groups));
  if (kernel_sizes.size() != c.groups || max_blocks.size() != c.groups)
    throw std::invalid_argument(prefix(api) + "block_sizes, kernel_block_sizes and max_num_blocks must have one entry "
                                              "per KV-cache group");
  for (std::size_t g = 0; g < c.groups; ++g) {
    const std::int64_t bs = int_argument(block_sizes[g], api, "block_sizes"),
                       ks = int_argument(kernel_sizes[g], api, "kernel_block_sizes"),
                       mb = int_argument(max_blocks[g], api, "max_num_blocks");
    if (bs < 1 || ks < 1 || bs % ks != 0)
      throw std::invalid_argument(prefix(api) + "group " + str(static_cast<std::int64_t>(g)) + ": block size " + str(bs) +
                                  " must be a positive multiple of the kernel block size " + str(ks));
    if (mb < 1 || mb * (bs / ks) > (std::int64_t{1} << 24))
      throw std::invalid_argument(prefix(api) + "group " + str(static_cast<std::int64_t>(g)) +
                                  ": max_num_blocks must be at least 1 and its kernel blocks at most 2^24, got " + str(mb));
    c.blocks_per_kv_block[g] = bs / ks;
    c.kernel_block_size[g] = ks;
    c.cols[g] = mb * (bs / ks);
  }
  return dispatch_backend(cuda, api, [&]<class B>() -> std::shared_ptr<Prep> {
    const at::Device dev = on<B>::device();
    prep_tensors t;
    t.num_computed = checked_tensor(item(a, "num_computed_tokens"), dev, at::kInt, 1, c.max_reqs, "num_computed_tokens");
    t.last_sampled = checked_tensor(item(a, "last_sampled_tokens"), dev, at::kLong, -1, c.max_reqs, "last_sampled_tokens");
    if (t.last_sampled.dim() > 2 || t.last_sampled.size(0) < c.max_reqs ||
        (t.last_sampled.dim() == 2 && t.last_sampled.size(1) != 1))
      throw std::invalid_argument(prefix(api) + "last_sampled_tokens must be [max_num_reqs] or [max_num_reqs, 1]");
    if (!item(a, "draft_tokens").is_none()) {
      t.draft_tokens = checked_tensor(item(a, "draft_tokens"), dev, at::kLong, 2, 0, "draft_tokens");
      if (t.draft_tokens.size(0) < c.max_reqs)
        throw std::invalid_argument(prefix(api) + "draft_tokens must have max_num_reqs rows, got " +
                                    str(t.draft_tokens.size(0)));
      c.draft_cols = t.draft_tokens.size(1);
    }
    const std::int64_t tokens = c.max_tokens, reqs = c.max_reqs;
    if (!item(a, "next_prefill_tokens").is_none())
      t.next_prefill_tokens = checked_tensor(item(a, "next_prefill_tokens"), dev, at::kInt, 1, reqs, "next_prefill_tokens");
    t.input_ids = checked_tensor(item(a, "input_ids"), dev, at::kInt, 1, tokens, "input_ids");
    t.positions = checked_tensor(item(a, "positions"), dev, at::kLong, 1, tokens, "positions");
    t.seq_lens = checked_tensor(item(a, "seq_lens"), dev, at::kInt, 1, reqs, "seq_lens");
    t.query_start_loc = checked_tensor(item(a, "query_start_loc"), dev, at::kInt, 1, reqs + 1, "query_start_loc");
    t.idx_mapping = checked_tensor(item(a, "idx_mapping"), dev, at::kInt, 1, reqs, "idx_mapping");
    t.cu_num_logits = checked_tensor(item(a, "cu_num_logits"), dev, at::kInt, 1, reqs + 1, "cu_num_logits");
    t.logits_indices = checked_tensor(item(a, "logits_indices"), dev, at::kLong, 1, tokens, "logits_indices");
    t.expanded_idx_mapping = checked_tensor(item(a, "expanded_idx_mapping"), dev, at::kInt, 1, tokens, "expanded_idx_mapping");
    t.expanded_local_pos = checked_tensor(item(a, "expanded_local_pos"), dev, at::kInt, 1, tokens, "expanded_local_pos");
    t.slot_mappings = checked_tensor(item(a, "slot_mappings"), dev, at::kLong, 2, 0, "slot_mappings");
    if (t.slot_mappings.size(0) != static_cast<std::int64_t>(c.groups) || t.slot_mappings.size(1) < tokens)
      throw std::invalid_argument(prefix(api) + "slot_mappings must be [groups, at least max_num_tokens]");
    // the step's uploads that are not outputs: its sizes and rows (prep_layout), its prefill tokens
    const auto int32 = at::TensorOptions().dtype(at::kInt).device(dev);
    t.aux = at::zeros({prep_layout{reqs, reqs}.size(static_cast<std::int64_t>(c.groups))}, int32);
    t.prefill = at::zeros({tokens}, int32);
    const py::list tables = item(a, "block_tables"), inputs = item(a, "input_block_tables");
    if (tables.size() != c.groups || inputs.size() != c.groups)
      throw std::invalid_argument(prefix(api) + "one block table and one input block table per KV-cache group");
    for (std::size_t g = 0; g < c.groups; ++g) {
      for (const auto& [list, what, into] : {std::tuple{&tables, "block_tables", &t.block_tables},
                                             std::tuple{&inputs, "input_block_tables", &t.input_block_tables}}) {
        at::Tensor x = checked_tensor((*list)[g], dev, at::kInt, 2, 0, what);
        if (x.size(0) < c.max_reqs || x.size(1) != c.cols[g])
          throw std::invalid_argument(prefix(api) + what + "[" + str(static_cast<std::int64_t>(g)) + "] must be [max_num_reqs, " +
                                      str(c.cols[g]) + "], got [" + str(x.size(0)) + ", " + str(x.size(1)) + "]");
        into->push_back(std::move(x));
      }
    }
    const bool padded = py::cast<bool>(item(a, "slot_mappings_padded"));
    if (graph) return std::make_shared<PrepT<B, capture_batch<B>>>(c, std::move(t), static_cast<std::size_t>(slots), padded);
    return std::make_shared<PrepT<B, step_batch<B>>>(c, std::move(t), static_cast<std::size_t>(slots), padded);
  });
}

// ---- prepare() and commit(): the per-step calls -------------------------------------------------
// Bound as METH_FASTCALL | METH_KEYWORDS methods rather than through pybind11's dispatcher, which
// for each call has the interpreter build a tuple and a dict of the arguments, copies the dict and
// looks every keyword parameter up by a string made from its name (about 1.3 us a call with the
// three keywords of a step). Here the arguments are read where the interpreter left them, the
// keywords matched by their interned names. The same parameters, defaults and exceptions (C++
// exceptions go through pybind11's translators, as its methods' do); a call that does not match
// the signature is TypeError.

/// The parameters of prepare() and commit(): three positional-or-keyword (the first two required),
/// then three keyword-only, every optional one None by default.
constexpr std::array<const char*, 6> step_params = {"idx_mapping", "num_scheduled_tokens", "num_draft_tokens",
                                                    "new_block_ids", "num_reqs_padded", "num_tokens_padded"};
constexpr Py_ssize_t step_positional = 3, step_required = 2;

/// The parameters' names, interned (the names at call sites are interned too: compared by address).
const std::array<PyObject*, step_params.size()>& step_param_names() {
  static const std::array<PyObject*, step_params.size()> names = [] {
    std::array<PyObject*, step_params.size()> n{};
    for (std::size_t i = 0; i < n.size(); ++i) {
      n[i] = PyUnicode_InternFromString(step_params[i]);  // kept for the process
      if (n[i] == nullptr) throw py::error_already_set();
    }
    return n;
  }();
  return names;
}

/// The arguments of a call as one handle per parameter (None where not given).
std::array<py::handle, step_params.size()> step_arguments(const char* api, PyObject* const* args, Py_ssize_t nargs,
                                                          PyObject* kwnames) {
  std::array<py::handle, step_params.size()> a;
  a.fill(Py_None);
  std::array<bool, step_params.size()> given{};
  if (nargs > step_positional)
    throw py::type_error(prefix(api) + "takes at most " + str(step_positional) + " positional arguments (" + str(nargs) +
                         " given)");
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    a[static_cast<std::size_t>(i)] = args[i];
    given[static_cast<std::size_t>(i)] = true;
  }
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  const auto& names = step_param_names();
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* const key = PyTuple_GET_ITEM(kwnames, k);
    std::size_t i = 0;
    while (i < names.size() && key != names[i]) ++i;
    if (i == names.size())  // not the interned name: compared as text
      for (i = 0; i < names.size(); ++i)
        if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, step_params[i]) == 0) break;
    if (i == names.size()) {
      const py::str name = py::reinterpret_borrow<py::object>(key);
      throw py::type_error(prefix(api) + "got an unexpected keyword argument '" + std::string(name) + "'");
    }
    if (given[i]) throw py::type_error(prefix(api) + "got multiple values for argument '" + step_params[i] + "'");
    a[i] = args[nargs + k];
    given[i] = true;
  }
  for (Py_ssize_t i = 0; i < step_required; ++i)
    if (!given[static_cast<std::size_t>(i)])
      throw py::type_error(prefix(api) + "missing required argument '" + step_params[static_cast<std::size_t>(i)] + "'");
  return a;
}

/// prepare() (Commit false) or commit() (true) of the Prep `self`.
template <bool Commit>
PyObject* step_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    // as a pybind11 method's `self` (an object made without __init__ is RuntimeError, not a crash)
    const auto p = py::handle(self).cast<std::shared_ptr<Prep>>();
    const auto a = step_arguments(Commit ? "VllmStepPrep.commit" : "VllmStepPrep.prepare", args, nargs, kwnames);
    if constexpr (Commit) p->commit(a[0], a[1], a[2], a[3], a[4], a[5]);
    else p->prepare(a[0], a[1], a[2], a[3], a[4], a[5]);
    Py_RETURN_NONE;
  } catch (py::error_already_set& e) {  // as pybind11's dispatcher
    e.restore();
    return nullptr;
#ifdef __GLIBCXX__
  } catch (abi::__forced_unwind&) {
    throw;
#endif
  } catch (...) {
    py::detail::try_translate_exceptions();
    return nullptr;
  }
}

#define FERRY_STEP_SIGNATURE                                                                              \
  "($self, idx_mapping, num_scheduled_tokens, num_draft_tokens=None, *, new_block_ids=None, "            \
  "num_reqs_padded=None, num_tokens_padded=None)\n--\n\n"
PyMethodDef prepare_def{"prepare", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&step_call<false>)),
                        METH_FASTCALL | METH_KEYWORDS,
                        "prepare" FERRY_STEP_SIGNATURE "Checks and writes one step, then launches it."};
PyMethodDef commit_def{"commit", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&step_call<true>)),
                       METH_FASTCALL | METH_KEYWORDS,
                       "commit" FERRY_STEP_SIGNATURE
                       "graph=True: checks and writes one step for the graph's next replay (no CUDA call)."};
#undef FERRY_STEP_SIGNATURE

}  // namespace

void register_prep(py::module_& m) {
  using held = const std::shared_ptr<Prep>&;
  py::class_<Prep, std::shared_ptr<Prep>>(m, "Prep")
      .def(py::init(&make_prep), py::arg("tensors"), py::arg("cuda"), py::arg("slots"), py::arg("graph") = false)
      .def(
          "add_request",
          [](held p, py::handle req, py::handle tokens, py::handle blocks, py::handle computed) {
            p->add_request(req, tokens, blocks, computed);
          },
          py::arg("req_index"), py::arg("prefill_token_ids"), py::arg("block_ids"), py::arg("num_computed_tokens") = 0)
      .def(
          "remove_request", [](held p, py::handle req) { p->remove_request(req); }, py::arg("req_index"))
      .def("record", [](held p) { p->record(); })
      .def("replay_recorded", [](held p) { p->replay_recorded(); })
      .def("check_replayed", [](held p) { p->check_replayed(); })
      .def_property_readonly("replayed", [](held p) { return p->replayed(); })
      .def_property_readonly("num_reqs", [](held p) { return p->state().last.n; })
      .def_property_readonly("num_tokens", [](held p) { return p->state().last.tokens; })
      .def_property_readonly("num_logits", [](held p) { return p->state().last.logits; })
      .def_property_readonly("num_reqs_padded", [](held p) { return p->state().last.reqs_padded; })
      .def_property_readonly("num_tokens_padded", [](held p) { return p->state().last.tokens_padded; })
      .def_property_readonly("steps", [](held p) { return p->steps(); })
      .def(
          "num_blocks",
          [](held p, std::int64_t group, std::int64_t req) {
            const prep_state& s = p->state();
            if (group < 0 || group >= static_cast<std::int64_t>(s.cfg.groups) || req < 0 || req >= s.cfg.max_reqs)
              throw std::out_of_range("ferry: VllmStepPrep.num_blocks: group " + str(group) + ", request " + str(req) +
                                      " out of range");
            return s.num_blocks[s.key(static_cast<std::size_t>(group), req)];
          },
          py::arg("group"), py::arg("req_index"))
      .def(
          "is_prefilling",
          [](held p, std::int64_t req) {
            const prep_state& s = p->state();
            return s.prefill_left(s.request_index(req, "VllmStepPrep.is_prefilling")) > 0;
          },
          py::arg("req_index"));
  // prepare() and commit(): METH_FASTCALL methods of the class (step_call)
  const py::object cls = m.attr("Prep");
  for (PyMethodDef* def : {&prepare_def, &commit_def}) {
    PyObject* const d = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def);
    if (d == nullptr) throw py::error_already_set();
    cls.attr(def->ml_name) = py::reinterpret_steal<py::object>(d);
  }
  (void)step_param_names();  // interned now rather than in the first step
}

}  // namespace ferry_vllm
