// ferry_vllm.VllmStepPrep's core: the preparation of one step of vLLM's model runner v2
// (prepare_inputs + prepare_attn, and the block-table writes before them) as one ferry step: one
// Python call, one step_batch submit, one kernel launch (on the host backend one host task). The
// host keeps what vLLM's model runner keeps on the host (each request's prefill tokens and how
// many are computed, the block counts of its block table rows); the device state (computed-token
// counts, the last sampled token, the draft tokens) is read by the epilogue (prep_epilogue.hpp)
// and never reaches the host. Every check comes before the step begins, and an error inside the
// step cancels it: a call that throws changes nothing, host or device.
//
// prepare() = fill() + submit(): fill() begins a step and writes it into its slot; the submit
// is the one part that a capture mode of step_batch (SPEC §12.4) would change (commit() = fill()
// with no CUDA call, the launch recorded once into the engine's graph).
#include "torch_glue.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
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

/// What the host knows of one request slot (vLLM: RequestState's host arrays and BlockTables'
/// num_blocks).
struct request_state {
  bool active = false;
  std::vector<std::int32_t> prefill;  ///< its prefill tokens (vLLM's prefill_token_ids)
  std::int64_t computed = 0;          ///< of them computed (vLLM's num_computed_prefill_tokens)
};

/// One staged block-table write: group, row, start, and its ids [at, at + n) of a flat list.
struct block_write {
  std::uint32_t group;
  std::int32_t row;
  std::int64_t start, at, n;
};

/// The scheduler's block ids for one request, one sequence per group, expanded to kernel blocks
/// and appended to `ids` (a KV-cache block of bpk kernel blocks b becomes b*bpk, ..., b*bpk+bpk-1,
/// as vLLM's append_block_ids). Returns each group's count.
std::array<std::int64_t, max_kv_groups> read_block_ids(const prep_config& c, py::handle per_group, const char* api,
                                                       std::vector<std::int32_t>& ids) {
  const py::object seq = py::reinterpret_steal<py::object>(
      PySequence_Fast(per_group.ptr(), "ferry: block ids must be a sequence with one sequence of ids per KV-cache group"));
  if (!seq) throw py::error_already_set();
  const auto groups = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(seq.ptr()));
  if (groups != c.groups)
    throw std::invalid_argument(prefix(api) + "block ids for " + str(static_cast<std::int64_t>(groups)) +
                                " KV-cache groups, the object has " + str(static_cast<std::int64_t>(c.groups)));
  std::array<std::int64_t, max_kv_groups> count{};
  for (std::size_t g = 0; g < groups; ++g) {
    const host_values<std::int32_t> v(PySequence_Fast_GET_ITEM(seq.ptr(), g), api);
    const std::int64_t bpk = c.blocks_per_kv_block[g];
    for (const std::int32_t b : v.span()) {
      if (b < 0) throw std::invalid_argument(prefix(api) + "negative block id " + str(b) + " in group " + str(g));
      for (std::int64_t k = 0; k < bpk; ++k) ids.push_back(static_cast<std::int32_t>(b * bpk + k));
    }
    count[g] = static_cast<std::int64_t>(v.size()) * bpk;
  }
  return count;
}

/// The host half: requests, their pending block-table writes, and a step's validation and
/// encoding into the slot's spans. Backend independent.
class prep_host {
 public:
  explicit prep_host(prep_config c)
      : cfg(c),
        reqs(static_cast<std::size_t>(c.max_reqs)),
        num_blocks(c.groups * static_cast<std::size_t>(c.max_reqs), 0),
        seen(static_cast<std::size_t>(c.max_reqs), 0),
        step_blocks(c.groups * static_cast<std::size_t>(c.max_reqs), 0),
        step_blocks_seen(c.groups * static_cast<std::size_t>(c.max_reqs), 0) {}

  // vLLM: RequestState.add_request + BlockTables.append_block_ids(overwrite=True).
  void add_request(py::handle req_arg, py::handle tokens_arg, py::handle blocks_arg, py::handle computed_arg) {
    const char* api = "VllmStepPrep.add_request";
    const std::int64_t r = request_index(int_argument(req_arg, api, "req_index"), api);
    if (reqs[r].active)
      throw std::invalid_argument(prefix(api) + "request " + str(r) +
                                  " is active: remove_request it first (vLLM gives a new request a free index)");
    const host_values<std::int32_t> tokens(tokens_arg, api);
    const std::int64_t computed = int_argument(computed_arg, api, "num_computed_tokens");
    if (computed < 0 || computed > static_cast<std::int64_t>(tokens.size()))
      throw std::invalid_argument(prefix(api) + "num_computed_tokens " + str(computed) + " outside [0, " +
                                  str(static_cast<std::int64_t>(tokens.size())) + "] (its prefill tokens)");
    std::vector<std::int32_t> ids;
    const auto count = read_block_ids(cfg, blocks_arg, api, ids);
    for (std::size_t g = 0; g < cfg.groups; ++g)
      if (count[g] > cfg.cols[g])
        throw ferry::capacity_error(prefix(api) + "request " + str(r) + ": " + str(count[g]) +
                                    " blocks of group " + str(g) + " exceed its block table row of " + str(cfg.cols[g]));
    // Checked: now change. The writes land with the next step.
    std::int64_t at = static_cast<std::int64_t>(pending_ids.size());
    pending_ids.insert(pending_ids.end(), ids.begin(), ids.end());
    for (std::size_t g = 0; g < cfg.groups; ++g) {
      if (count[g] > 0) pending.push_back({static_cast<std::uint32_t>(g), static_cast<std::int32_t>(r), 0, at, count[g]});
      at += count[g];
      blocks(g, r) = count[g];
    }
    reqs[r].active = true;
    reqs[r].prefill.assign(tokens.span().begin(), tokens.span().end());
    reqs[r].computed = computed;
  }

  // vLLM: RequestState.remove_request (the slot's table row stays as it is, as vLLM's does).
  void remove_request(py::handle req_arg) {
    const char* api = "VllmStepPrep.remove_request";
    const std::int64_t r = request_index(int_argument(req_arg, api, "req_index"), api);
    if (!reqs[r].active) throw std::invalid_argument(prefix(api) + "request " + str(r) + " is not active");
    reqs[r] = request_state{};
  }

  /// A step's sizes.
  struct sizes {
    std::int64_t n = 0, tokens = 0, logits = 0, prefill_tokens = 0, reqs_padded = 0, tokens_padded = 0;
  };
  /// A step's checked scheduler data, ready to be written into a slot.
  struct plan : sizes {
    std::vector<block_write> writes;  ///< this call's appends (after the pending ones)
    std::vector<std::int32_t> ids;    ///< their ids
  };

  /// Checks the step and returns its plan; changes nothing.
  plan check(std::span<const std::int32_t> idx, std::span<const std::int32_t> q, const std::int32_t* drafts,
             py::handle new_blocks, py::handle reqs_padded, py::handle tokens_padded) {
    const char* api = "VllmStepPrep.prepare";
    plan p;
    p.n = static_cast<std::int64_t>(idx.size());
    if (p.n == 0) throw std::invalid_argument(prefix(api) + "a step of no requests (vLLM asserts num_tokens > 0)");
    if (p.n > cfg.max_reqs)
      throw std::invalid_argument(prefix(api) + "a batch of " + str(p.n) + " requests, more than max_num_reqs " +
                                  str(cfg.max_reqs));
    if (static_cast<std::int64_t>(q.size()) != p.n)
      throw std::invalid_argument(prefix(api) + "num_scheduled_tokens has " + str(static_cast<std::int64_t>(q.size())) +
                                  " entries for " + str(p.n) + " requests");
    ++stamp;
    for (std::int64_t i = 0; i < p.n; ++i) {
      const std::int64_t r = idx[i];
      if (r < 0 || r >= cfg.max_reqs)
        throw std::out_of_range(prefix(api) + "idx_mapping[" + str(i) + "] = " + str(r) + " is past the state's " +
                                str(cfg.max_reqs) + " request slots");
      const request_state& s = reqs[r];
      if (!s.active)
        throw std::invalid_argument(prefix(api) + "idx_mapping[" + str(i) + "] = " + str(r) +
                                    " is not an active request (add_request it first)");
      if (seen[r] == stamp)
        throw std::invalid_argument(prefix(api) + "request " + str(r) + " appears twice in idx_mapping");
      seen[r] = stamp;
      const std::int64_t qi = q[i], d = drafts != nullptr ? drafts[i] : 0;
      if (qi < 1) throw std::invalid_argument(prefix(api) + "num_scheduled_tokens[" + str(i) + "] = " + str(qi));
      if (d < 0 || d > cfg.draft_cols)
        throw std::invalid_argument(prefix(api) + "num_draft_tokens[" + str(i) + "] = " + str(d) + " is outside [0, " +
                                    str(cfg.draft_cols) + "] (the draft_tokens tensor's columns)");
      const std::int64_t left = static_cast<std::int64_t>(s.prefill.size()) - s.computed;
      if (left > 0) {
        if (d != 0)
          throw std::invalid_argument(prefix(api) + "row " + str(i) + " (request " + str(r) + ") is prefilling (" +
                                      str(left) + " prefill tokens left) and has " + str(d) + " draft tokens");
        if (qi > left)
          throw std::invalid_argument(prefix(api) + "row " + str(i) + " (request " + str(r) + ") schedules " + str(qi) +
                                      " tokens, and only " + str(left) + " of its prefill tokens are left");
        p.prefill_tokens += qi;
      } else if (qi < 1 + d) {
        throw std::invalid_argument(prefix(api) + "row " + str(i) + " (request " + str(r) + ") schedules " + str(qi) +
                                    " tokens for its sampled token and " + str(d) + " draft tokens");
      }
      p.tokens += qi;
      p.logits += 1 + d;
    }
    if (p.tokens > cfg.max_tokens)
      throw std::invalid_argument(prefix(api) + "a step of " + str(p.tokens) + " tokens, more than max_num_tokens " +
                                  str(cfg.max_tokens));
    p.reqs_padded = reqs_padded.is_none() ? p.n : int_argument(reqs_padded, api, "num_reqs_padded");
    if (p.reqs_padded < p.n || p.reqs_padded > cfg.max_reqs)
      throw std::invalid_argument(prefix(api) + "num_reqs_padded " + str(p.reqs_padded) + " is outside [" + str(p.n) +
                                  ", " + str(cfg.max_reqs) + "] (the batch's requests, max_num_reqs)");
    p.tokens_padded = tokens_padded.is_none() ? p.tokens : int_argument(tokens_padded, api, "num_tokens_padded");
    if (p.tokens_padded < p.tokens || p.tokens_padded > cfg.max_tokens)
      throw std::invalid_argument(prefix(api) + "num_tokens_padded " + str(p.tokens_padded) + " is outside [" +
                                  str(p.tokens) + ", " + str(cfg.max_tokens) + "] (the step's tokens, max_num_tokens)");
    if (!new_blocks.is_none()) read_appends(new_blocks, p);
    return p;
  }

  /// Writes the checked step into the slot's spans: idx, qsl (n + 1), cu (n + 1), aux (its
  /// prep_layout), prefill.
  void encode(const plan& p, std::span<const std::int32_t> idx, std::span<const std::int32_t> q,
              const std::int32_t* drafts, std::span<std::int32_t> idx_out, std::span<std::int32_t> qsl,
              std::span<std::int32_t> cu, std::span<std::int32_t> aux, std::span<std::int32_t> prefill) const {
    const prep_layout at{p.n, p.reqs_padded};
    std::ranges::copy(idx, idx_out.begin());
    aux[meta_reqs_padded] = static_cast<std::int32_t>(p.reqs_padded);
    aux[meta_slot_pad_end] = static_cast<std::int32_t>(std::max(slot_high, p.tokens));
    std::int32_t* const row_info = aux.data() + at.row_info();
    std::int32_t* const has_next = aux.data() + at.has_next();
    std::int32_t* const next = aux.data() + at.next();
    std::int64_t tok = 0, lg = 0, packed = 0;
    qsl[0] = cu[0] = 0;
    for (std::int64_t i = 0; i < p.n; ++i) {
      const request_state& s = reqs[idx[i]];
      const std::int64_t left = static_cast<std::int64_t>(s.prefill.size()) - s.computed;
      has_next[i] = next[i] = 0;
      row_info[i] = -1;
      if (left > 0) {
        std::copy_n(s.prefill.data() + s.computed, q[i], prefill.data() + packed);
        row_info[i] = static_cast<std::int32_t>(packed);
        packed += q[i];
        if (q[i] < left) {
          has_next[i] = 1;
          next[i] = s.prefill[static_cast<std::size_t>(s.computed + q[i])];
        }
      }
      tok += q[i];
      lg += 1 + (drafts != nullptr ? drafts[i] : 0);
      qsl[i + 1] = static_cast<std::int32_t>(tok);
      cu[i + 1] = static_cast<std::int32_t>(lg);
    }
    // each group's rows: their blocks, and the chunks of the gathered table to copy (rows < n) or
    // zero (rows [n, reqs_padded))
    for (std::size_t g = 0; g < cfg.groups; ++g) {
      std::int32_t* const blocks = aux.data() + at.group_at(static_cast<std::int64_t>(g));
      std::int32_t* const chunk_start = blocks + p.n;
      std::int64_t chunks = 0;
      for (std::int64_t i = 0; i < p.reqs_padded; ++i) {
        chunk_start[i] = static_cast<std::int32_t>(chunks);
        const std::int64_t count = i < p.n ? step_count(g, idx[i]) : cfg.cols[g];
        if (i < p.n) blocks[i] = static_cast<std::int32_t>(count);
        chunks += (count + table_chunk - 1) / table_chunk;
      }
      chunk_start[p.reqs_padded] = static_cast<std::int32_t>(chunks);
    }
  }

  /// After the step was submitted: the host state advances.
  void commit(const plan& p, std::span<const std::int32_t> idx, std::span<const std::int32_t> q) {
    for (std::int64_t i = 0; i < p.n; ++i) {
      request_state& s = reqs[idx[i]];
      if (s.computed < static_cast<std::int64_t>(s.prefill.size())) s.computed += q[i];
    }
    for (const block_write& w : p.writes) blocks(w.group, w.row) = w.start + w.n;
    pending.clear();
    pending_ids.clear();
    slot_high = std::max(slot_high, p.tokens);
    last = p;
  }

  prep_config cfg;
  std::vector<request_state> reqs;
  std::vector<std::int64_t> num_blocks;  ///< [groups x max_reqs], as vLLM's BlockTables.num_blocks
  std::vector<block_write> pending;      ///< add_request's writes, landing with the next step
  std::vector<std::int32_t> pending_ids;
  /// slot_mappings past this hold PAD_SLOT_ID already: the most tokens of any step so far (a
  /// buffer ferry filled with PAD_SLOT_ID), or all of them (one given by the caller).
  std::int64_t slot_high = 0;
  sizes last;  ///< the last step's

 private:
  std::int64_t request_index(std::int64_t r, const char* api) const {
    if (r < 0 || r >= cfg.max_reqs)
      throw std::out_of_range(prefix(api) + "request index " + str(r) + " is past the state's " + str(cfg.max_reqs) +
                              " request slots");
    return r;
  }
  std::int64_t& blocks(std::size_t g, std::int64_t r) { return num_blocks[g * static_cast<std::size_t>(cfg.max_reqs) + r]; }
  /// The blocks of request r's row of group g with this step's appends.
  std::int64_t step_count(std::size_t g, std::int64_t r) const {
    const std::size_t k = g * static_cast<std::size_t>(cfg.max_reqs) + static_cast<std::size_t>(r);
    return step_blocks_seen[k] == stamp ? step_blocks[k] : num_blocks[k];
  }

  // new_block_ids: a sequence of (req_index, block ids per group) (vLLM: update_requests's
  // append_block_ids(req_index, new_block_ids, overwrite=False) for each).
  void read_appends(py::handle new_blocks, plan& p) {
    const char* api = "VllmStepPrep.prepare";
    const py::object seq = py::reinterpret_steal<py::object>(
        PySequence_Fast(new_blocks.ptr(), "ferry: VllmStepPrep.prepare: new_block_ids must be a sequence of "
                                          "(req_index, block ids per KV-cache group)"));
    if (!seq) throw py::error_already_set();
    for (Py_ssize_t k = 0, m = PySequence_Fast_GET_SIZE(seq.ptr()); k < m; ++k) {
      const py::object item = py::reinterpret_steal<py::object>(
          PySequence_Fast(PySequence_Fast_GET_ITEM(seq.ptr(), k), "ferry: VllmStepPrep.prepare: an entry of "
                                                                  "new_block_ids must be (req_index, block ids)"));
      if (!item) throw py::error_already_set();
      if (PySequence_Fast_GET_SIZE(item.ptr()) != 2)
        throw std::invalid_argument(prefix(api) + "new_block_ids[" + str(k) + "] must be (req_index, block ids)");
      const std::int64_t r = request_index(int_argument(PySequence_Fast_GET_ITEM(item.ptr(), 0), api, "req_index"), api);
      if (!reqs[r].active)
        throw std::invalid_argument(prefix(api) + "new_block_ids[" + str(k) + "]: request " + str(r) + " is not active");
      std::int64_t at = static_cast<std::int64_t>(p.ids.size());
      const auto count = read_block_ids(cfg, PySequence_Fast_GET_ITEM(item.ptr(), 1), api, p.ids);
      for (std::size_t g = 0; g < cfg.groups; ++g) {
        const std::size_t key = g * static_cast<std::size_t>(cfg.max_reqs) + static_cast<std::size_t>(r);
        const std::int64_t start = step_count(g, r);
        if (start + count[g] > cfg.cols[g])
          throw ferry::capacity_error(prefix(api) + "the block table is full: request " + str(r) + " has " +
                                      str(start) + " blocks of group " + str(g) + ", " + str(count[g]) +
                                      " more exceed its row of " + str(cfg.cols[g]));
        if (count[g] > 0) p.writes.push_back({static_cast<std::uint32_t>(g), static_cast<std::int32_t>(r), start, at, count[g]});
        step_blocks[key] = start + count[g];
        step_blocks_seen[key] = stamp;
        at += count[g];
      }
    }
  }

  std::vector<std::uint64_t> seen;  ///< the stamp of the last check() that met each request
  std::vector<std::int64_t> step_blocks;
  std::vector<std::uint64_t> step_blocks_seen;
  std::uint64_t stamp = 0;
};

struct Prep {
  virtual ~Prep() = default;
  virtual void add_request(py::handle req, py::handle tokens, py::handle blocks, py::handle computed) = 0;
  virtual void remove_request(py::handle req) = 0;
  virtual void prepare(py::handle idx, py::handle q, py::handle drafts, py::handle new_blocks, py::handle reqs_padded,
                       py::handle tokens_padded) = 0;
  virtual const prep_host& host() const = 0;
  virtual std::uint64_t steps() const = 0;
};

/// The tensors of a VllmStepPrep, from Python: the device state it reads and its outputs.
struct prep_tensors {
  at::Tensor num_computed, last_sampled, draft_tokens;
  at::Tensor next_prefill_tokens, input_ids, positions, seq_lens, query_start_loc, idx_mapping, cu_num_logits, logits_indices,
      expanded_idx_mapping, expanded_local_pos, slot_mappings, aux, prefill;
  std::vector<at::Tensor> block_tables, input_block_tables;
};

template <class B>
class PrepT final : public Prep {
 public:
  using batch_type = step_batch<B>;
  template <class T>
  using upload = typename batch_type::template upload<T>;
  using writes = typename batch_type::template writes<std::int32_t>;

  PrepT(prep_config c, prep_tensors t, std::size_t slots, bool slots_padded)
      : tensors(std::move(t)), state(c), batch(make_step_batch<B>(slots)) {
    if (!slots_padded) state.slot_high = tensors.slot_mappings.size(1);
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
      tables[g] = batch->template add_writes<std::int32_t>(
          ferry::staged_view<std::int32_t>(table, static_cast<std::size_t>(c.max_reqs), static_cast<std::size_t>(c.cols[g])),
          static_cast<std::size_t>(c.max_reqs), static_cast<std::size_t>(c.max_reqs));
    }
    batch->set_epilogue(e);
    batch->reserve();
  }

  void add_request(py::handle req, py::handle tokens, py::handle blocks, py::handle computed) override {
    state.add_request(req, tokens, blocks, computed);
  }
  void remove_request(py::handle req) override { state.remove_request(req); }

  void prepare(py::handle idx_arg, py::handle q_arg, py::handle drafts_arg, py::handle new_blocks,
               py::handle reqs_padded, py::handle tokens_padded) override {
    const char* api = "VllmStepPrep.prepare";
    const host_values<std::int32_t> rows(idx_arg, api), q(q_arg, api);
    std::unique_ptr<host_values<std::int32_t>> d;
    if (!drafts_arg.is_none()) {
      d = std::make_unique<host_values<std::int32_t>>(drafts_arg, api);
      if (d->size() != rows.size())
        throw std::invalid_argument(prefix(api) + "num_draft_tokens has " + str(static_cast<std::int64_t>(d->size())) +
                                    " entries for " + str(static_cast<std::int64_t>(rows.size())) + " requests");
    }
    const std::int32_t* drafts = d ? d->span().data() : nullptr;
    const prep_host::plan p = state.check(rows.span(), q.span(), drafts, new_blocks, reqs_padded, tokens_padded);
    fill(p, rows.span(), q.span(), drafts);
    try {
      const auto s = on<B>::stream();
      submit_step<B>(*batch, s);
      on<B>::finish(s);
    } catch (...) {
      batch->cancel();
      throw;
    }
    state.commit(p, rows.span(), q.span());
  }

  const prep_host& host() const override { return state; }
  std::uint64_t steps() const override { return batch->steps(); }

 private:
  template <class T>
  static T* data(const at::Tensor& t) {
    return t.defined() && t.numel() > 0 ? span_of<T, B>(t).data() : nullptr;
  }

  /// Begins a step and writes the checked plan into its slot (no stream touched); an error
  /// cancels it.
  void fill(const prep_host::plan& p, std::span<const std::int32_t> rows, std::span<const std::int32_t> q,
            const std::int32_t* drafts) {
    batch->begin();
    try {
      const auto n = static_cast<std::size_t>(p.n);
      const auto aux_size = prep_layout{p.n, p.reqs_padded}.size(static_cast<std::int64_t>(state.cfg.groups));
      state.encode(p, rows, q, drafts, idx.span(n), qsl.span(n + 1), cu.span(n + 1),
                   aux.span(static_cast<std::size_t>(aux_size)), prefill.span(static_cast<std::size_t>(p.prefill_tokens)));
      auto stage = [&](const std::vector<block_write>& ws, const std::vector<std::int32_t>& ids) {
        for (const block_write& w : ws)
          tables[w.group].stage_write(static_cast<std::size_t>(w.row), static_cast<std::size_t>(w.start),
                                      std::span<const std::int32_t>(ids.data() + w.at, static_cast<std::size_t>(w.n)));
      };
      stage(state.pending, state.pending_ids);
      stage(p.writes, p.ids);
    } catch (...) {
      batch->cancel();
      throw;
    }
  }

  prep_tensors tensors;  // the plan's memory, destroyed after `batch`
  prep_host state;
  std::unique_ptr<batch_type> batch;
  upload<std::int32_t> idx, qsl, cu, aux, prefill;
  std::array<writes, max_kv_groups> tables;
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

std::shared_ptr<Prep> make_prep(const py::dict& a, bool cuda, std::int64_t slots) {
  const char* api = "VllmStepPrep";
  prep_config c;
  c.max_reqs = int_argument(item(a, "max_num_reqs"), api, "max_num_reqs");
  c.max_tokens = int_argument(item(a, "max_num_tokens"), api, "max_num_tokens");
  if (c.max_reqs < 1 || c.max_tokens < 1)
    throw std::invalid_argument(prefix(api) + "max_num_reqs and max_num_tokens must be at least 1");
  if (c.max_reqs > (std::int64_t{1} << 30) || c.max_tokens > (std::int64_t{1} << 30))
    throw std::invalid_argument(prefix(api) + "max_num_reqs and max_num_tokens must be at most 2^30");
  if (slots < 2) throw std::invalid_argument(prefix(api) + "max_concurrency must be at least 2, got " + str(slots));
  const py::list block_sizes = item(a, "block_sizes"), kernel_sizes = item(a, "kernel_block_sizes"), max_blocks = item(a, "max_num_blocks");
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
      throw std::invalid_argument(prefix(api) + "group " + str(g) + ": block size " + str(bs) +
                                  " must be a positive multiple of the kernel block size " + str(ks));
    if (mb < 1) throw std::invalid_argument(prefix(api) + "group " + str(g) + ": max_num_blocks must be at least 1");
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
          throw std::invalid_argument(prefix(api) + what + "[" + str(g) + "] must be [max_num_reqs, " + str(c.cols[g]) +
                                      "], got [" + str(x.size(0)) + ", " + str(x.size(1)) + "]");
        into->push_back(std::move(x));
      }
    }
    const bool padded = py::cast<bool>(item(a, "slot_mappings_padded"));
    return std::make_shared<PrepT<B>>(c, std::move(t), static_cast<std::size_t>(slots), padded);
  });
}

}  // namespace

void register_prep(py::module_& m) {
  using held = const std::shared_ptr<Prep>&;
  py::class_<Prep, std::shared_ptr<Prep>>(m, "Prep")
      .def(py::init(&make_prep), py::arg("tensors"), py::arg("cuda"), py::arg("slots"))
      .def(
          "add_request",
          [](held p, py::handle req, py::handle tokens, py::handle blocks, py::handle computed) {
            p->add_request(req, tokens, blocks, computed);
          },
          py::arg("req_index"), py::arg("prefill_token_ids"), py::arg("block_ids"), py::arg("num_computed_tokens") = 0)
      .def(
          "remove_request", [](held p, py::handle req) { p->remove_request(req); }, py::arg("req_index"))
      .def(
          "prepare",
          [](held p, py::handle idx, py::handle q, py::handle drafts, py::handle blocks, py::handle reqs_padded,
             py::handle tokens_padded) { p->prepare(idx, q, drafts, blocks, reqs_padded, tokens_padded); },
          py::arg("idx_mapping"), py::arg("num_scheduled_tokens"), py::arg("num_draft_tokens") = py::none(),
          py::kw_only(), py::arg("new_block_ids") = py::none(), py::arg("num_reqs_padded") = py::none(),
          py::arg("num_tokens_padded") = py::none())
      .def_property_readonly("num_reqs", [](held p) { return p->host().last.n; })
      .def_property_readonly("num_tokens", [](held p) { return p->host().last.tokens; })
      .def_property_readonly("num_logits", [](held p) { return p->host().last.logits; })
      .def_property_readonly("num_reqs_padded", [](held p) { return p->host().last.reqs_padded; })
      .def_property_readonly("num_tokens_padded", [](held p) { return p->host().last.tokens_padded; })
      .def_property_readonly("steps", [](held p) { return p->steps(); })
      .def(
          "num_blocks",
          [](held p, std::int64_t group, std::int64_t req) {
            const prep_host& h = p->host();
            if (group < 0 || group >= static_cast<std::int64_t>(h.cfg.groups) || req < 0 || req >= h.cfg.max_reqs)
              throw std::out_of_range("ferry: VllmStepPrep.num_blocks: group " + str(group) + ", request " + str(req) +
                                      " out of range");
            return h.num_blocks[static_cast<std::size_t>(group * h.cfg.max_reqs + req)];
          },
          py::arg("group"), py::arg("req_index"))
      .def(
          "is_prefilling",
          [](held p, std::int64_t req) {
            const prep_host& h = p->host();
            if (req < 0 || req >= h.cfg.max_reqs)
              throw std::out_of_range("ferry: VllmStepPrep.is_prefilling: request " + str(req) + " out of range");
            const request_state& s = h.reqs[static_cast<std::size_t>(req)];
            return s.active && s.computed < static_cast<std::int64_t>(s.prefill.size());
          },
          py::arg("req_index"));
}

}  // namespace ferry_vllm
