// expect: stream_ref::stream_ref\(int\)
// 0 as the trainer's stream: with a cudaStream_t parameter it compiled, and meant the legacy
// default stream, which synchronizes with every blocking stream. cuda::stream_ref refuses it;
// stream_ref::default_stream() says it on purpose (control_api_compiles.cpp).
#include <multipack/cuda/views.hpp>

void misuse(multipack::cuda::device_batch<>& batch) { batch.wait(0); }
