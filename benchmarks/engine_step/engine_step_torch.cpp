// benchmarks/engine_step/engine_step_torch.cpp: engine_workload.hpp's step written with libtorch (the
// PyTorch C++ API) the way vLLM's model runner v2 (vllm/v1/worker/gpu/) writes it, in
// bench.engine_step's process (see engine_step_torch.hpp). vLLM fuses its per-row work into Triton
// kernels; libtorch C++ has no Triton, so each of those kernels becomes the ATen ops that compute it,
// into persistent device tensors (out= variants where ATen has them), as a careful engineer writes it:
//  - GPUModelRunner.prepare_inputs: idx_mapping = async_copy_to_gpu(idx_mapping_np), and the step's
//    other host arrays (accepted counts, prefill rows' num_computed and tokens, the sampling
//    parameters, the block-table writes): here ONE packed non-blocking copy_ of the step's pinned
//    slot (fewer copies than vLLM makes: the stronger baseline), its parts viewed as typed tensors;
//  - BlockTables.append_block_ids + apply_staged_writes (StagedWriteTensor.apply_write): the 8
//    admissions' 64 ids and the appends, as flat indices (int64) and values into the flattened
//    table with index_put_, padded to a fixed count with writes of 0 to one spare element past the
//    table (one index list for every step, no per-step view, as vLLM pads for CUDA graphs);
//  - prepare_pos_seq_lens: pos = num_computed_tokens[idx_mapping] (index_select), the prefill rows'
//    num_computed from the host (req_states' staged write), positions (int64), seq_lens = pos + 1;
//  - combine_sampled_and_draft_tokens / prepare_prefill_inputs: input_ids of the decode rows =
//    last_sampled_tokens[idx_mapping] (index_select), of the prefill rows (0..7) the host's tokens;
//  - BlockTables.compute_slot_mappings: block_table[req * 512 + pos // 16] * 16 + pos % 16;
//  - post_update (num_computed part): num_computed_tokens[idx_mapping] = pos + accepted
//    (index_copy_ with an int64 index).
// Care taken, as support/libtorch_peer.cpp: c10::InferenceMode and the stream guard for the engine's
// lifetime, tensors and views made once, one pool stream, a ring of pinned slots each fenced by a
// CUDA event (recorded after its step, synchronized before reuse).
#include <engine_step/engine_step_torch.hpp>
#include <engine_step/engine_workload.hpp>

#include <torch/torch.h>
#include <torch/cuda.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace engine_step;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#define CK(call) ck((call), #call)

constexpr int64_t kRows = requests, kCols = max_blocks, kBatch = batch, kAdmitted = admitted;
constexpr int64_t kWrites = admitted * admitted_blocks + max_appends;  // per step, padded
constexpr int64_t kPad = kRows * kCols;                                // the spare element

// Byte layout of a pinned slot and of the device buffer (the first kCopied bytes are copied).
constexpr int64_t kOffIdx = 0;                        // int64[kWrites] flat table indices
constexpr int64_t kOffSeed = kOffIdx + 8 * kWrites;   // int64[256]
constexpr int64_t kOffVal = kOffSeed + 8 * kBatch;    // int32[kWrites] block ids
constexpr int64_t kOffReq = kOffVal + 4 * kWrites;    // int32[256] idx_mapping
constexpr int64_t kOffAcc = kOffReq + 4 * kBatch;     // int32[256] accepted tokens
constexpr int64_t kOffTok = kOffAcc + 4 * kBatch;     // int32[256] host tokens (prefill rows)
constexpr int64_t kOffTopK = kOffTok + 4 * kBatch;    // int32[256]
constexpr int64_t kOffTemp = kOffTopK + 4 * kBatch;   // float[256]
constexpr int64_t kOffTopP = kOffTemp + 4 * kBatch;   // float[256]
constexpr int64_t kOffPre = kOffTopP + 4 * kBatch;    // int32[8] prefill rows' num_computed
constexpr int64_t kCopied = kOffPre + 4 * kAdmitted;  // the copy ends here
constexpr int64_t kOffGather = kCopied;               // int32[256] the scheduler's gather indices (host only)
constexpr int64_t kSlotBytes = (kOffGather + 4 * kBatch + 255) / 256 * 256;
static_assert(kOffSeed % 8 == 0, "int64 parts aligned");

template <class T>
T* ptr(uint8_t* base, int64_t off) {
  return reinterpret_cast<T*>(base + off);
}

at::Tensor sub(const at::Tensor& bytes, int64_t off, int64_t n, at::ScalarType t) {
  return bytes.narrow(0, off, n * static_cast<int64_t>(c10::elementSize(t))).view(t);
}

// The step's tensors on `device` and its host and device work, apart from the stream, the slots and
// their fences (Engine, below, runs it on CUDA; every op is device-agnostic).
class Step {
 public:
  explicit Step(torch::Device device) {
    const auto u8 = torch::TensorOptions().dtype(torch::kUInt8).device(device);
    const auto i32 = torch::TensorOptions().dtype(torch::kInt32).device(device);
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
    dev_ = torch::zeros({kCopied}, u8);
    idx_.push_back(std::optional<at::Tensor>(sub(dev_, kOffIdx, kWrites, torch::kInt64)));
    vals_ = sub(dev_, kOffVal, kWrites, torch::kInt32);
    req_ = sub(dev_, kOffReq, kBatch, torch::kInt32);
    req_decode_ = req_.narrow(0, kAdmitted, kBatch - kAdmitted);
    accepted_ = sub(dev_, kOffAcc, kBatch, torch::kInt32);
    tokens_prefill_ = sub(dev_, kOffTok, kAdmitted, torch::kInt32);
    prefill_ = sub(dev_, kOffPre, kAdmitted, torch::kInt32);
    top_k_ = sub(dev_, kOffTopK, kBatch, torch::kInt32);
    temperature_ = sub(dev_, kOffTemp, kBatch, torch::kFloat32);
    top_p_ = sub(dev_, kOffTopP, kBatch, torch::kFloat32);
    seed_ = sub(dev_, kOffSeed, kBatch, torch::kInt64);

    // The GPU-resident state: engine_workload.hpp's initial state.
    std::vector<int32_t> nc(requests), tab(requests * max_blocks), smp(requests);
    scheduler::initial_state(nc.data(), tab.data(), smp.data());
    const auto cpu32 = torch::TensorOptions().dtype(torch::kInt32);
    flat_table_ = torch::zeros({kPad + 1}, i32);
    flat_table_.narrow(0, 0, kPad).copy_(torch::from_blob(tab.data(), {kPad}, cpu32));
    table_ = flat_table_.narrow(0, 0, kPad);
    num_computed_ = torch::from_blob(nc.data(), {kRows}, cpu32).clone().to(device);  // owns its data on any device
    sampled_ = torch::from_blob(smp.data(), {kRows}, cpu32).clone().to(device);
    iota_ = torch::arange(kRows, i32);

    // The step's device inputs and scratch, made once.
    input_ids_ = torch::zeros({kBatch}, i32);
    ids_prefill_ = input_ids_.narrow(0, 0, kAdmitted);
    ids_decode_ = input_ids_.narrow(0, kAdmitted, kBatch - kAdmitted);
    pos32_ = torch::zeros({kBatch}, i32);
    pos_prefill_ = pos32_.narrow(0, 0, kAdmitted);
    positions_ = torch::zeros({kBatch}, i64);
    seq_lens_ = torch::zeros({kBatch}, i32);
    flat_ = torch::zeros({kBatch}, i32);
    blk_ = torch::zeros({kBatch}, i32);
    off_ = torch::zeros({kBatch}, i32);
    bn_ = torch::zeros({kBatch}, i32);
    slot_mapping_ = torch::zeros({kBatch}, i64);
    new_nc_ = torch::zeros({kBatch}, i32);
    req_long_ = torch::zeros({kBatch}, i64);
    one_ = torch::ones({1}, i32);
    cols_ = torch::full({1}, kCols, i32);
    block_ = torch::full({1}, static_cast<int64_t>(block_size), i32);
  }

  /// The host's part: the scheduler writes the next step into the slot bytes at `p`.
  void write(uint8_t* p) {
    int64_t* idx = ptr<int64_t>(p, kOffIdx);
    int32_t* val = ptr<int32_t>(p, kOffVal);
    int64_t n = 0;
    const step_arrays a{ptr<int32_t>(p, kOffReq),  ptr<int32_t>(p, kOffGather), ptr<int32_t>(p, kOffTok),
                        ptr<int32_t>(p, kOffAcc),  ptr<int32_t>(p, kOffPre),    ptr<float>(p, kOffTemp),
                        ptr<float>(p, kOffTopP),   ptr<int32_t>(p, kOffTopK),   ptr<int64_t>(p, kOffSeed)};
    sched_.next_step(
        a,
        [&](std::size_t r, std::span<const int32_t> ids) {
          for (std::size_t c = 0; c < ids.size(); ++c) {
            idx[n] = static_cast<int64_t>(r * max_blocks + c);
            val[n++] = ids[c];
          }
        },
        [&](std::size_t r, std::size_t col, int32_t id) {
          idx[n] = static_cast<int64_t>(r * max_blocks + col);
          val[n++] = id;
        });
    for (; n < kWrites; ++n) {  // the padding: writes of 0 to the spare element
      idx[n] = kPad;
      val[n] = 0;
    }
    ++steps_;
  }

  /// The device's part, from the slot's first kCopied bytes (`copied`), in vLLM's order.
  void enqueue(const at::Tensor& copied) {
    // prepare_inputs: the step's host arrays (async_copy_to_gpu), packed into one copy.
    dev_.copy_(copied, /*non_blocking=*/true);
    // BlockTables.apply_staged_writes.
    flat_table_.index_put_(idx_, vals_);
    // prepare_pos_seq_lens.
    at::index_select_out(pos32_, num_computed_, 0, req_);
    pos_prefill_.copy_(prefill_, true);
    positions_.copy_(pos32_, true);
    at::add_out(seq_lens_, pos32_, one_);
    // combine_sampled_and_draft_tokens, prepare_prefill_inputs.
    at::index_select_out(ids_decode_, sampled_, 0, req_decode_);
    ids_prefill_.copy_(tokens_prefill_, true);
    // BlockTables.compute_slot_mappings.
    at::mul_out(flat_, req_, cols_);
    at::floor_divide_out(blk_, pos32_, block_);
    flat_.add_(blk_);
    at::index_select_out(bn_, flat_table_, 0, flat_);
    slot_mapping_.copy_(bn_, true);
    slot_mapping_.mul_(static_cast<int64_t>(block_size));
    at::remainder_out(off_, pos32_, block_);
    slot_mapping_.add_(off_);
    // post_update: num_computed_tokens[idx_mapping] = pos + accepted.
    at::add_out(new_nc_, pos32_, accepted_);
    req_long_.copy_(req_, true);
    num_computed_.index_copy_(0, req_long_, new_nc_);
  }

  void sample(std::uint64_t s) {
    catch_up();
    ref_.sample(s);
    sampled_.mul_(31).add_(iota_).add_(static_cast<int64_t>(s % vocab)).remainder_(static_cast<int64_t>(vocab));
  }

  /// Replays the steps on the host and compares (after the device's work is done): "" when equal.
  std::string check() {
    catch_up();
    std::string bad;
    auto cmp = [&](const char* what, const at::Tensor& dev, const auto& want) {
      if (!bad.empty()) return;
      using T = typename std::decay_t<decltype(want)>::value_type;
      const at::Tensor got = dev.to(torch::kCPU).contiguous();
      if (static_cast<std::size_t>(got.numel()) != want.size()) {
        bad = std::string(what) + ": " + std::to_string(got.numel()) + " elements";
        return;
      }
      bad = first_difference(what, got.data_ptr<T>(), want.data(), want.size());
    };
    cmp("num_computed", num_computed_, ref_.nc_);
    cmp("block_table", table_, ref_.table_);
    cmp("sampled", sampled_, ref_.sampled_);
    cmp("req_idx", req_, ref_.req_);
    cmp("accepted", accepted_, ref_.accepted_);
    cmp("input_ids", input_ids_, ref_.input_ids_);
    cmp("positions", positions_, ref_.positions_);
    cmp("seq_lens", seq_lens_, ref_.seq_lens_);
    cmp("slot_mapping", slot_mapping_, ref_.slot_mapping_);
    cmp("temperature", temperature_, ref_.temperature_);
    cmp("top_p", top_p_, ref_.top_p_);
    cmp("top_k", top_k_, ref_.top_k_);
    cmp("seed", seed_, ref_.seed_);
    return bad.empty() ? bad : bad + " after step " + std::to_string(steps_);
  }

 private:
  void catch_up() {
    while (ref_.steps() < steps_) ref_.step();
  }

  scheduler sched_;
  reference ref_;  // the host replay that check() compares with
  std::uint64_t steps_ = 0;
  at::Tensor dev_;
  c10::List<std::optional<at::Tensor>> idx_;
  at::Tensor vals_, req_, req_decode_, accepted_, tokens_prefill_, prefill_, top_k_, temperature_, top_p_, seed_;
  at::Tensor flat_table_, table_, num_computed_, sampled_, iota_;
  at::Tensor input_ids_, ids_prefill_, ids_decode_, pos32_, pos_prefill_, positions_, seq_lens_;
  at::Tensor flat_, blk_, off_, bn_, slot_mapping_, new_nc_, req_long_, one_, cols_, block_;
};

// The step on CUDA: a ring of pinned slots, each fenced by an event, on the engine's stream.
class Engine {
 public:
  Engine(cudaStream_t stream, int slots) : stream_(stream), ring_(static_cast<size_t>(slots)), step_(torch::kCUDA) {
    pinned_ = torch::empty({int64_t{slots} * kSlotBytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    std::memset(pinned_.data_ptr(), 0, pinned_.nbytes());
    for (int64_t k = 0; k < slots; ++k) {
      Slot& s = ring_[static_cast<size_t>(k)];
      s.p = pinned_.data_ptr<uint8_t>() + k * kSlotBytes;
      s.copied = pinned_.narrow(0, k * kSlotBytes, kCopied);
      CK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    }
    sync();
  }
  ~Engine() {
    cudaStreamSynchronize(stream_);
    for (Slot& s : ring_) cudaEventDestroy(s.done);
  }

  void step() {
    Slot& s = ring_[static_cast<size_t>(next_++ % ring_.size())];
    CK(cudaEventSynchronize(s.done));  // the slot's last copy has run
    step_.write(s.p);
    step_.enqueue(s.copied);
    CK(cudaEventRecord(s.done, stream_));
  }
  void sample(std::uint64_t n) { step_.sample(n); }
  void sync() const { CK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream() const { return stream_; }
  std::string check() {
    sync();
    return step_.check();
  }

 private:
  struct Slot {
    uint8_t* p = nullptr;        // the slot's pinned bytes, written by the host
    at::Tensor copied;           // its first kCopied bytes, the copy's source
    cudaEvent_t done = nullptr;  // fence, recorded after the step that used the slot
  };
  cudaStream_t stream_;
  std::vector<Slot> ring_;
  at::Tensor pinned_;
  Step step_;
  std::uint64_t next_ = 0;
};

}  // namespace

namespace ferry_bench::libtorch_engine {

struct engine_step_torch::impl {
  c10::InferenceMode inference;
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard guard;
  Engine engine;
  std::string bad;
  explicit impl(int slots) : stream(c10::cuda::getStreamFromPool()), guard(stream), engine(stream.stream(), slots) {}
};

engine_step_torch::engine_step_torch(int slots) : impl_(nullptr) {
  if (!torch::cuda::is_available()) throw std::runtime_error("torch sees no CUDA device");
  impl_ = new impl(slots);
}

engine_step_torch::~engine_step_torch() { delete impl_; }

void engine_step_torch::step() { impl_->engine.step(); }

void engine_step_torch::sample(std::uint64_t s) { impl_->engine.sample(s); }

void engine_step_torch::synchronize() { impl_->engine.sync(); }

void* engine_step_torch::stream() const noexcept { return impl_->engine.stream(); }

const char* engine_step_torch::check() {
  impl_->bad = impl_->engine.check();
  return impl_->bad.empty() ? nullptr : impl_->bad.c_str();
}

}  // namespace ferry_bench::libtorch_engine
