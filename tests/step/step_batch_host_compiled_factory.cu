// The nvcc half of step_batch_host_compiled_test.cpp: what docs/step_batch.md asks of a .cu on
// CUDA (constructing a batch, submitting its steps); everything else happens in the .cpp.
#include <ferry/ferry.cuh>

ferry::step_batch<ferry::backend::cuda> make_host_compiled_batch() {
  return ferry::step_batch<ferry::backend::cuda>(2, 16);
}

void submit_host_compiled_batch(ferry::step_batch<ferry::backend::cuda>& batch,
                                ferry::stream_ref<ferry::backend::cuda> s) {
  batch.submit(s);
}
