// Benchmark support: libtorch in the benchmark's own process (see libtorch_peer.hpp). Compiled by
// the host compiler against libtorch (benchmarks/CMakeLists.txt: ferry_bench_libtorch, built only
// where CMake finds Torch's config); the benchmark drives it, interleaved with ferry's rows.
// The step, written with libtorch (the PyTorch C++ API) as a careful C++ engineer writes it (SPEC
// §11: batch 256, block table int32[1024 x 512], block size 16; the values follow the decode_step
// example's scheduler and change every step):
//  1. block table: requests r = s%16, r+16, ... append a block id at (r, seq_len[r]/16 % 512); 8
//     admitted requests (rows (8s+k) % 1024) write 64 ids from column 0. Flat indices (int64,
//     row*512+col) and values (int32), computed on the host (528 stores, well under 1 us: on the
//     device they would take three more ATen ops), go into the step's pinned slot; index_put_
//     scatters them into the flattened table. An append that an admission of the same step covers
//     writes 0 to a spare element past the table instead (the later write wins; index_put_ with
//     duplicate indices is unspecified): 528 writes every step, one index list, fixed sizes.
//  2. positions int64[256], seq_lens int32[256]: host increments.
//  3. token ids, temperature, top-p, top-k, seed (x256), packed.
//  4. logprob-request matrix int64[256 x 6] (rows 0..31 carry 5 token ids; the sampled column 0
//     and the other rows hold -1).
//  5. logits_indices[255] = seq_lens_gpu[255]: a device-to-device slice copy, no .item().
// The slot is one contiguous region: ONE non-blocking copy_ moves all of it into a device buffer
// viewed as the step's tensors, then index_put_ and the slice copy: 3 ops, eager, or captured once
// per slot as a CUDA graph and replayed (support/libtorch_slots.hpp). Care taken: c10::InferenceMode
// and the stream guard held for an engine's lifetime; tensors, views and index lists made once; one
// pool stream; a ring of pinned slots fenced by events, queried as ferry queries them, so the host
// never rewrites bytes a pending copy still reads. Overheads the libtorch API leaves no way around (eager): the dispatcher on every
// op; per host-to-device copy_ a TensorIterator, a stream capture-status query and a pinned-allocator
// lookup (mutex + hash map); per index_put_ an AdvancedIndex and a TensorIterator.
#include <support/libtorch_peer.hpp>
#include <support/libtorch_slots.hpp>

#include <torch/torch.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

#define CK(call) ferry_bench::check_cuda((call), #call)

constexpr int kBatch = 256, kRows = 1024, kCols = 512, kBlock = 16, kAppendStride = 16;
constexpr int kAdmitted = 8, kAdmittedBlocks = 64, kLogprobRows = 32, kLogprobCols = 6;
constexpr int kVocab = 32000;
constexpr int kWrites = kBatch / kAppendStride + kAdmitted * kAdmittedBlocks;  // 528
constexpr int64_t kPad = int64_t{kRows} * kCols;  // the spare element past the table

// Byte layout of a pinned slot and of the device buffer (every offset a multiple of 8).
constexpr int64_t kOffIdx = 0;                              // int64[528] flat table indices
constexpr int64_t kOffVal = kOffIdx + 8 * kWrites;          // int32[528] block ids
constexpr int64_t kBtBytes = kOffVal + 4 * kWrites;         // the block-table upload, 6336 B
constexpr int64_t kOffPos = kBtBytes;                       // int64[256]
constexpr int64_t kOffLens = kOffPos + 8 * kBatch;          // int32[256]
constexpr int64_t kOffSamp = kOffLens + 4 * kBatch;         // packed: tokens temp top_p top_k seed
constexpr int64_t kPart[5] = {0, 4 * kBatch, 8 * kBatch, 12 * kBatch, 16 * kBatch};
constexpr int64_t kSampBytes = kBatch * (4 + 4 + 4 + 4 + 8);  // 6144 B
constexpr int64_t kOffLp = kOffSamp + kSampBytes;           // int64[256 x 6]
constexpr int64_t kSlotBytes = (kOffLp + 8 * kBatch * kLogprobCols + 255) / 256 * 256;
static_assert(kOffPos % 8 == 0 && kOffSamp % 8 == 0 && kOffLp % 8 == 0, "aligned parts");

template <class T>
T* ptr(uint8_t* base, int64_t off) { return reinterpret_cast<T*>(base + off); }

struct Sched {  // the engine's host-side truth
  int64_t step = 0, next_block = 0;
  int64_t pos[kBatch];
  int32_t lens[kBatch];
  Sched() {
    for (int i = 0; i < kBatch; ++i) { lens[i] = i % 4096 + 1; pos[i] = lens[i] - 1; }
  }
};

int32_t block_id(int64_t n) { return static_cast<int32_t>(n % (int64_t{1} << 30)) + 1; }

void init_slot(uint8_t* s) { std::fill_n(ptr<int64_t>(s, kOffLp), kBatch * kLogprobCols, int64_t{-1}); }

// Writes the next step's host data into `slot` (its kWrites block-table writes, padded).
void fill_step(Sched& st, uint8_t* slot) {
  const int64_t s = st.step++;
  const auto u = static_cast<uint64_t>(s);
  int64_t* pos = ptr<int64_t>(slot, kOffPos);
  int32_t* lens = ptr<int32_t>(slot, kOffLens);
  for (int i = 0; i < kBatch; ++i) { pos[i] = ++st.pos[i]; lens[i] = ++st.lens[i]; }
  int64_t* idx = ptr<int64_t>(slot, kOffIdx);
  int32_t* val = ptr<int32_t>(slot, kOffVal);
  int n = 0;
  const uint64_t first = u * kAdmitted % kRows;  // this step admits rows first .. first+7
  for (uint64_t r = u % kAppendStride; r < uint64_t{kBatch}; r += kAppendStride) {
    const int32_t id = block_id(st.next_block++);
    const uint64_t col = static_cast<uint64_t>(st.lens[r]) / kBlock % kCols;
    const bool covered = col < uint64_t{kAdmittedBlocks} && r - first < uint64_t{kAdmitted};
    idx[n] = covered ? kPad : static_cast<int64_t>(r * kCols + col);
    val[n++] = covered ? 0 : id;
  }
  for (uint64_t k = 0; k < uint64_t{kAdmitted}; ++k)
    for (uint64_t j = 0; j < uint64_t{kAdmittedBlocks}; ++j) {
      idx[n] = static_cast<int64_t>((u * kAdmitted + k) % kRows * kCols + j);
      val[n++] = block_id(st.next_block++);
    }
  uint8_t* sp = slot + kOffSamp;
  for (uint64_t i = 0; i < uint64_t{kBatch}; ++i) {
    ptr<int32_t>(sp, kPart[0])[i] = static_cast<int32_t>((i * 31 + u) % kVocab);
    ptr<float>(sp, kPart[1])[i] = 0.5f + 0.0625f * static_cast<float>((i + u) % 8);
    ptr<float>(sp, kPart[2])[i] = 0.96875f - 0.03125f * static_cast<float>((i + 3 * u) % 4);
    ptr<int32_t>(sp, kPart[3])[i] = static_cast<int32_t>(20 + (i + u) % 61);
    ptr<int64_t>(sp, kPart[4])[i] = s * 1000003 + static_cast<int64_t>(i) + 1;
  }
  int64_t* lp = ptr<int64_t>(slot, kOffLp);
  for (int r = 0; r < kLogprobRows; ++r)
    for (int c = 1; c < kLogprobCols; ++c)
      lp[r * kLogprobCols + c] = (int64_t{r} * (kLogprobCols - 1) + c - 1 + s) % kVocab;
}

at::Tensor sub(const at::Tensor& bytes, int64_t off, int64_t n, at::ScalarType t) {
  return bytes.narrow(0, off, n * static_cast<int64_t>(c10::elementSize(t))).view(t);
}

template <class T>
std::string diff(const char* what, const T* got, const T* want, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!(got[i] == want[i]))
      return std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(got[i]) +
             ", expected " + std::to_string(want[i]);
  return {};
}

class Engine {
 public:
  Engine(cudaStream_t stream, int slots, bool graphs) : stream_(stream), slots_(slots, kSlotBytes) {
    const auto i32 = torch::TensorOptions().dtype(torch::kInt32).device(torch::kCUDA);
    for (int k = 0; k < slots; ++k) init_slot(slots_.host(static_cast<size_t>(k)));
    dev_ = torch::zeros({kSlotBytes}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA));
    idx_.push_back(std::optional<at::Tensor>(sub(dev_, kOffIdx, kWrites, torch::kInt64)));
    vals_ = sub(dev_, kOffVal, kWrites, torch::kInt32);
    flat_ = torch::zeros({kPad + 1}, i32);  // the table, then the spare element
    table_ = flat_.narrow(0, 0, kPad).view({kRows, kCols});
    logits_ = torch::arange(kBatch, i32);
    logits_last_ = logits_.narrow(0, kBatch - 1, 1);
    lens_last_ = sub(dev_, kOffLens, kBatch, torch::kInt32).narrow(0, kBatch - 1, 1);
    init_slot(ref_slot_.data());
    // Each slot's graph, after one eager run (lazy initializations outside any capture) from slot 0,
    // which writes no table entry (its indices all point to the spare element) and whose other
    // bytes every step rewrites.
    for (int i = 0; i < kWrites; ++i) ptr<int64_t>(slots_.host(0), kOffIdx)[i] = kPad;
    enqueue(slots_.tensor(0));
    sync();
    if (graphs) slots_.capture([&](const at::Tensor& t) { enqueue(t); });
  }
  ~Engine() { cudaStreamSynchronize(stream_); }

  void step() {
    slots_.step(stream_, [&](uint8_t* p) { fill_step(sched_, p); }, [&](const at::Tensor& t) { enqueue(t); });
  }

  void sync() const { CK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream() const { return stream_; }

  // Replays every step so far on the host; returns the first mismatch with the device, or "".
  std::string check() {
    sync();
    while (ref_.step < sched_.step) {
      fill_step(ref_, ref_slot_.data());
      for (int i = 0; i < kWrites; ++i)
        if (const int64_t at = ptr<int64_t>(ref_slot_.data(), kOffIdx)[i]; at != kPad)
          ref_table_[static_cast<size_t>(at)] = ptr<int32_t>(ref_slot_.data(), kOffVal)[i];
    }
    const at::Tensor table = table_.to(torch::kCPU), logits = logits_.to(torch::kCPU);
    const at::Tensor bytes = dev_.to(torch::kCPU);
    uint8_t* d = bytes.data_ptr<uint8_t>();
    uint8_t* r = ref_slot_.data();
    std::vector<int32_t> want_logits(kBatch);
    for (int i = 0; i < kBatch; ++i) want_logits[static_cast<size_t>(i)] = i;
    want_logits.back() = ref_.lens[kBatch - 1];
    std::string bad;
    auto region = [&](const char* what, auto* got, auto* want, int64_t n) {
      if (bad.empty()) bad = diff(what, got, want, n);
    };
    region("block table [row*512+col]", table.data_ptr<int32_t>(), ref_table_.data(), int64_t{kRows} * kCols);
    region("positions", ptr<int64_t>(d, kOffPos), ptr<int64_t>(r, kOffPos), kBatch);
    region("seq_lens", ptr<int32_t>(d, kOffLens), ptr<int32_t>(r, kOffLens), kBatch);
    region("token ids", ptr<int32_t>(d, kOffSamp), ptr<int32_t>(r, kOffSamp), kBatch);
    const int64_t rest = kOffSamp + kPart[1];  // temperature .. seed, then the logprob matrix
    region("bytes of sampling parameters + logprob matrix", d + rest, r + rest, kSlotBytes - rest);
    region("logits indices", logits.data_ptr<int32_t>(), want_logits.data(), kBatch);
    return bad;
  }

 private:
  // The device's part, from the slot's bytes: one copy, the table's writes, the logits fill.
  void enqueue(const at::Tensor& copied) {
    dev_.copy_(copied, /*non_blocking=*/true);
    flat_.index_put_(idx_, vals_);
    logits_last_.copy_(lens_last_, true);  // device to device, no host read-back
  }

  cudaStream_t stream_;
  ferry_bench::libtorch_slots slots_;
  Sched sched_, ref_;  // ref_: the host replay that check() compares with
  at::Tensor dev_, vals_, flat_, table_, logits_, logits_last_, lens_last_;
  c10::List<std::optional<at::Tensor>> idx_;
  std::vector<int32_t> ref_table_ = std::vector<int32_t>(size_t{kRows} * kCols, 0);
  std::vector<uint8_t> ref_slot_ = std::vector<uint8_t>(static_cast<size_t>(kSlotBytes), 0);
};

}  // namespace

namespace ferry_bench::libtorch_peer {

const char* torch_version() noexcept { return TORCH_VERSION; }

namespace {
void require_cuda() {
  if (!torch::cuda::is_available()) throw std::runtime_error("torch sees no CUDA device");
}
}  // namespace

// ---- the decode step ----------------------------------------------------------------------------

struct decode_step_engine::impl {
  c10::InferenceMode inference;
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard guard;
  Engine engine;
  std::string bad;
  impl(int slots, bool graphs)
      : stream(c10::cuda::getStreamFromPool()), guard(stream), engine(stream.stream(), slots, graphs) {}
};

decode_step_engine::decode_step_engine(int slots, bool graphs) : impl_(nullptr) {
  require_cuda();
  impl_ = new impl(slots, graphs);
}

decode_step_engine::~decode_step_engine() { delete impl_; }

void decode_step_engine::step() { impl_->engine.step(); }

void decode_step_engine::synchronize() { impl_->engine.sync(); }

void* decode_step_engine::stream() const noexcept { return impl_->engine.stream(); }

const char* decode_step_engine::check() {
  impl_->bad = impl_->engine.check();
  return impl_->bad.empty() ? nullptr : impl_->bad.c_str();
}

// ---- out.copy_(pinned, non_blocking=True) ---------------------------------------------------------

struct pinned_copy::impl {
  c10::InferenceMode inference;
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard guard;
  at::Tensor pinned, out;
  std::string bad;
  explicit impl(std::size_t n) : stream(c10::cuda::getStreamFromPool()), guard(stream) {
    const auto n64 = static_cast<int64_t>(n);
    pinned = torch::empty({n64}, torch::TensorOptions().dtype(torch::kInt32).pinned_memory(true));
    int32_t* p = pinned.data_ptr<int32_t>();
    for (int64_t i = 0; i < n64; ++i) p[i] = static_cast<int32_t>(i * 7 + 1);
    out = torch::zeros({n64}, torch::TensorOptions().dtype(torch::kInt32).device(torch::kCUDA));
    CK(cudaStreamSynchronize(stream.stream()));
  }
};

pinned_copy::pinned_copy(std::size_t n) : impl_(nullptr) {
  require_cuda();
  impl_ = new impl(n);
}

pinned_copy::~pinned_copy() {
  cudaStreamSynchronize(impl_->stream.stream());
  delete impl_;
}

void pinned_copy::copy() { impl_->out.copy_(impl_->pinned, /*non_blocking=*/true); }

void pinned_copy::synchronize() { CK(cudaStreamSynchronize(impl_->stream.stream())); }

void* pinned_copy::stream() const noexcept { return impl_->stream.stream(); }

const char* pinned_copy::check() {
  synchronize();
  const at::Tensor got = impl_->out.to(torch::kCPU);
  impl_->bad = diff("out", got.data_ptr<int32_t>(), impl_->pinned.data_ptr<int32_t>(), impl_->pinned.numel());
  return impl_->bad.empty() ? nullptr : impl_->bad.c_str();
}

}  // namespace ferry_bench::libtorch_peer
