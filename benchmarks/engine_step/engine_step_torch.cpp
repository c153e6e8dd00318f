// benchmarks/engine_step/engine_step_torch.cpp: engine_workload.hpp's step written with libtorch (the
// PyTorch C++ API) in bench.engine_step's process (see engine_step_torch.hpp). vLLM's model runner v2
// (vllm/v1/worker/gpu/) fuses its per-row work into Triton kernels; libtorch C++ has no Triton, so
// each of those kernels becomes the ATen ops that compute it, into persistent device tensors (out=
// variants where ATen has them), as a careful engineer writes it:
//  - the step's host arrays (idx_mapping, accepted counts, the prefill rows' num_computed and tokens,
//    the sampling parameters and the extra arrays, the block-table writes): ONE non-blocking copy_ of
//    the step's pinned slot, its parts viewed as typed tensors;
//  - BlockTables.apply_staged_writes: per group, one index_put_ of flat indices (int64) and values
//    into the flattened table, padded to a fixed count with writes of 0 to one spare element past
//    the table (one index list for every step, as vLLM pads for CUDA graphs);
//  - prepare_pos_seq_lens: pos = num_computed[idx_mapping] (index_select), the prefill rows'
//    num_computed from the host, positions (int64), seq_lens = pos + 1;
//  - combine_sampled_and_draft_tokens / prepare_prefill_inputs: input_ids of the decode rows =
//    sampled[idx_mapping] (index_select), of the prefill rows the host's tokens;
//  - compute_slot_mappings, per group: table[req * width + pos // 16] * 16 + pos % 16;
//  - post_update (num_computed): num_computed[idx_mapping] = pos + accepted (index_copy_).
// 19 ATen ops at one group (7 more per group). Eager, those ops are dispatched every step; with
// `graphs`, each pinned slot's copy and ops are captured once and a step is the host's writes plus
// one cudaGraphLaunch of that slot's executable (support/libtorch_slots.hpp): static buffers, fixed
// sizes (the padded writes). Care taken: c10::InferenceMode and the stream guard for the engine's
// lifetime, tensors and views made once, one pool stream, slots fenced by events queried as ferry
// queries them.
#include <engine_step/engine_step_torch.hpp>
#include <support/libtorch_slots.hpp>

#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace {

using namespace engine_step;
using ferry_bench::check_cuda;

at::Tensor sub(const at::Tensor& bytes, int64_t off, int64_t n, at::ScalarType t) {
  return bytes.narrow(0, off, n * static_cast<int64_t>(c10::elementSize(t))).view(t);
}

// Byte offsets of a slot (and of the device buffer it is copied into): every part 8-aligned.
struct layout {
  int64_t idx, seed, vals, req, acc, tok, top_k, temp, top_p, extra, prefill, bytes;
  explicit layout(const shape& sh) {
    int64_t at = 0;
    auto part = [&](std::size_t n, int64_t size) { const int64_t o = at; at = (at + static_cast<int64_t>(n) * size + 7) / 8 * 8; return o; };
    const std::size_t B = sh.batch, w = sh.max_write_elements();
    idx = part(w, 8), seed = part(B, 8), vals = part(sh.groups * w, 4), req = part(B, 4), acc = part(B, 4);
    tok = part(B, 4), top_k = part(B, 4), temp = part(B, 4), top_p = part(B, 4), extra = part(sh.extra * B, 4);
    prefill = part(sh.admitted(), 4), bytes = at;
  }
};

class Engine {
 public:
  Engine(const shape& sh, cudaStream_t stream, int slots, bool graphs)
      : sh_(sh), L_(sh), stream_(stream), slots_(slots, L_.bytes) {
    const int64_t B = static_cast<int64_t>(sh.batch), A = static_cast<int64_t>(sh.admitted()), R = static_cast<int64_t>(sh.requests());
    const int64_t W = static_cast<int64_t>(sh.width), w = static_cast<int64_t>(sh.max_write_elements());
    const auto cuda = torch::TensorOptions().device(torch::kCUDA);
    const auto i32 = cuda.dtype(torch::kInt32), i64 = cuda.dtype(torch::kInt64);
    dev_ = torch::zeros({L_.bytes}, cuda.dtype(torch::kUInt8));
    idx_.push_back(std::optional<at::Tensor>(sub(dev_, L_.idx, w, torch::kInt64)));
    req_ = sub(dev_, L_.req, B, torch::kInt32);
    req_decode_ = req_.narrow(0, A, B - A);
    accepted_ = sub(dev_, L_.acc, B, torch::kInt32);
    tokens_prefill_ = sub(dev_, L_.tok, A, torch::kInt32);
    prefill_ = sub(dev_, L_.prefill, A, torch::kInt32);
    const int64_t R_W = R * W;
    for (std::size_t g = 0; g < sh.groups; ++g) {
      flat_table_.push_back(torch::zeros({R_W + 1}, i32));  // + the spare element the padding writes
      vals_.push_back(sub(dev_, L_.vals + static_cast<int64_t>(g) * w * 4, w, torch::kInt32));
      slot_mapping_.push_back(torch::zeros({B}, i64));
    }
    num_computed_ = torch::zeros({R}, i32);
    sampled_ = torch::zeros({R}, i32);
    input_ids_ = torch::zeros({B}, i32);
    ids_prefill_ = input_ids_.narrow(0, 0, A);
    ids_decode_ = input_ids_.narrow(0, A, B - A);
    pos32_ = torch::zeros({B}, i32);
    pos_prefill_ = pos32_.narrow(0, 0, A);
    positions_ = torch::zeros({B}, i64);
    seq_lens_ = torch::zeros({B}, i32);
    flat_ = torch::zeros({B}, i32);
    blk_ = torch::zeros({B}, i32);
    off_ = torch::zeros({B}, i32);
    bn_ = torch::zeros({B}, i32);
    new_nc_ = torch::zeros({B}, i32);
    req_long_ = torch::zeros({B}, i64);
    one_ = torch::ones({1}, i32);
    cols_ = torch::full({1}, W, i32);
    block_ = torch::full({1}, static_cast<int64_t>(block_size), i32);
    // One eager run first (lazy initializations outside any capture), from a slot whose writes all
    // go to the spare element; then the initial state; then each slot's graph.
    for (int64_t i = 0; i < w; ++i) reinterpret_cast<int64_t*>(slots_.host(0) + L_.idx)[i] = R_W;
    enqueue(slots_.tensor(0));
    std::vector<int32_t> nc(static_cast<std::size_t>(R)), tab(sh.groups * static_cast<std::size_t>(R_W)), smp(static_cast<std::size_t>(R));
    scheduler::initial_state(sh, nc.data(), tab.data(), smp.data());
    const auto cpu32 = torch::TensorOptions().dtype(torch::kInt32);
    for (std::size_t g = 0; g < sh.groups; ++g)
      flat_table_[g].narrow(0, 0, R_W).copy_(torch::from_blob(tab.data() + g * static_cast<std::size_t>(R_W), {R_W}, cpu32));
    num_computed_.copy_(torch::from_blob(nc.data(), {R}, cpu32));
    sampled_.copy_(torch::from_blob(smp.data(), {R}, cpu32));
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (graphs) slots_.capture([&](const at::Tensor& t) { enqueue(t); });
  }
  ~Engine() { cudaStreamSynchronize(stream_); }

  void step(const step_data& d) {
    slots_.step(stream_, [&](uint8_t* p) { write(p, d); }, [&](const at::Tensor& t) { enqueue(t); });
  }
  cudaStream_t stream() const { return stream_; }
  std::size_t slots() const { return slots_.used(); }

  device_arrays arrays() const {
    device_arrays a;
    a.num_computed = num_computed_.data_ptr<int32_t>();
    a.sampled = sampled_.data_ptr<int32_t>();
    a.req = req_.data_ptr<int32_t>();
    a.accepted = accepted_.data_ptr<int32_t>();
    a.input_ids = input_ids_.data_ptr<int32_t>();
    a.seq_lens = seq_lens_.data_ptr<int32_t>();
    a.positions = positions_.data_ptr<int64_t>();
    auto* d = dev_.data_ptr<uint8_t>();
    a.top_k = reinterpret_cast<int32_t*>(d + L_.top_k);
    a.seed = reinterpret_cast<int64_t*>(d + L_.seed);
    a.temperature = reinterpret_cast<float*>(d + L_.temp);
    a.top_p = reinterpret_cast<float*>(d + L_.top_p);
    a.extra = reinterpret_cast<float*>(d + L_.extra);
    for (std::size_t g = 0; g < sh_.groups; ++g) {
      a.table[g] = flat_table_[g].data_ptr<int32_t>();
      a.slot_mapping[g] = slot_mapping_[g].data_ptr<int64_t>();
    }
    return a;
  }

 private:
  // The host's part: the step's data into the slot at `p` (flat indices of its writes, padded).
  void write(uint8_t* p, const step_data& d) {
    const std::size_t A = sh_.admitted(), ab = sh_.admitted_blocks(), W = sh_.width, w = sh_.max_write_elements(), D = sh_.decode_rows();
    auto* idx = reinterpret_cast<int64_t*>(p + L_.idx);
    auto* vals = reinterpret_cast<int32_t*>(p + L_.vals);
    std::size_t n = 0;
    for (std::size_t k = 0; k < A; ++k)
      for (std::size_t j = 0; j < ab; ++j) idx[n++] = static_cast<int64_t>(static_cast<std::size_t>(d.admit_req[k]) * W + j);
    for (std::size_t a = 0; a < d.appends; ++a)
      idx[n++] = static_cast<int64_t>(static_cast<std::size_t>(d.append_req[a]) * W + static_cast<std::size_t>(d.append_col[a]));
    const std::size_t used = n;
    for (; n < w; ++n) idx[n] = static_cast<int64_t>(sh_.requests() * W);  // the padding: the spare element
    for (std::size_t g = 0; g < sh_.groups; ++g) {
      int32_t* v = vals + g * w;
      std::memcpy(v, d.admit_ids.data() + g * A * ab, A * ab * 4);
      std::memcpy(v + A * ab, d.append_ids.data() + g * D, d.appends * 4);
      std::memset(v + used, 0, (w - used) * 4);
    }
    auto put = [&](int64_t off, const auto& v) { std::memcpy(p + off, v.data(), v.size() * sizeof(v[0])); };
    put(L_.seed, d.seed), put(L_.req, d.req), put(L_.acc, d.accepted), put(L_.tok, d.host_tokens), put(L_.top_k, d.top_k);
    put(L_.temp, d.temperature), put(L_.top_p, d.top_p), put(L_.extra, d.extra), put(L_.prefill, d.prefill);
  }

  // The device's part, from the slot's bytes (`copied`), in vLLM's order.
  void enqueue(const at::Tensor& copied) {
    dev_.copy_(copied, /*non_blocking=*/true);  // the step's host arrays, one copy
    for (std::size_t g = 0; g < sh_.groups; ++g) flat_table_[g].index_put_(idx_, vals_[g]);  // apply_staged_writes
    at::index_select_out(pos32_, num_computed_, 0, req_);  // prepare_pos_seq_lens
    if (sh_.admitted() > 0) pos_prefill_.copy_(prefill_, true);
    positions_.copy_(pos32_, true);
    at::add_out(seq_lens_, pos32_, one_);
    if (sh_.decode_rows() > 0) at::index_select_out(ids_decode_, sampled_, 0, req_decode_);  // combine_sampled...
    if (sh_.admitted() > 0) ids_prefill_.copy_(tokens_prefill_, true);
    at::floor_divide_out(blk_, pos32_, block_);  // compute_slot_mappings
    at::remainder_out(off_, pos32_, block_);
    at::mul_out(flat_, req_, cols_);
    flat_.add_(blk_);
    for (std::size_t g = 0; g < sh_.groups; ++g) {
      at::index_select_out(bn_, flat_table_[g], 0, flat_);
      slot_mapping_[g].copy_(bn_, true);
      slot_mapping_[g].mul_(static_cast<int64_t>(block_size));
      slot_mapping_[g].add_(off_);
    }
    at::add_out(new_nc_, pos32_, accepted_);  // post_update: num_computed[idx_mapping] = pos + accepted
    req_long_.copy_(req_, true);
    num_computed_.index_copy_(0, req_long_, new_nc_);
  }

  shape sh_;
  layout L_;
  cudaStream_t stream_;
  ferry_bench::libtorch_slots slots_;
  at::Tensor dev_;
  std::vector<at::Tensor> flat_table_, vals_, slot_mapping_;
  c10::List<std::optional<at::Tensor>> idx_;
  at::Tensor req_, req_decode_, accepted_, tokens_prefill_, prefill_, num_computed_, sampled_;
  at::Tensor input_ids_, ids_prefill_, ids_decode_, pos32_, pos_prefill_, positions_, seq_lens_;
  at::Tensor flat_, blk_, off_, bn_, new_nc_, req_long_, one_, cols_, block_;
};

}  // namespace

namespace ferry_bench::libtorch_engine {

struct engine_step_torch::impl {
  c10::InferenceMode inference;
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard guard;
  Engine engine;
  impl(const shape& sh, int slots, bool graphs)
      : stream(c10::cuda::getStreamFromPool()), guard(stream), engine(sh, stream.stream(), slots, graphs) {}
};

engine_step_torch::engine_step_torch(const shape& sh, int slots, bool graphs) : impl_(nullptr) {
  if (!torch::cuda::is_available()) throw std::runtime_error("torch sees no CUDA device");
  impl_ = new impl(sh, slots, graphs);
}

engine_step_torch::~engine_step_torch() { delete impl_; }

// Each step on this engine's stream: torch's current stream is one per thread, and a later
// engine's guard (the eager and the graph rows live side by side) would otherwise take this
// engine's ATen ops onto its own stream, unordered with the sampler writing `sampled` here.
void engine_step_torch::step(const step_data& d) {
  const c10::cuda::CUDAStreamGuard on(impl_->stream);
  impl_->engine.step(d);
}

void* engine_step_torch::stream() const noexcept { return impl_->engine.stream(); }

device_arrays engine_step_torch::arrays() const { return impl_->engine.arrays(); }

std::size_t engine_step_torch::slots() const noexcept { return impl_->engine.slots(); }

}  // namespace ferry_bench::libtorch_engine
