// expect: a backend position was given a type that is not a backend tag
// A policy of another family where a backend goes names that mistake (not a missing CUDA
// toolkit); the twin gives a backend.
#include <ferry/memory/device_buffer.hpp>
#include <ferry/policies/reuse.hpp>

#ifdef FERRY_EXPECT_FAIL
static_assert(sizeof(ferry::device_buffer<int, ferry::reuse::caller_fenced>) > 0);
#else
static_assert(sizeof(ferry::device_buffer<int, ferry::backend::host>) > 0);
#endif
int main() {}
