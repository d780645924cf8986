// expect: compiles
// The control of the cases in this folder: each misuse's correct form compiles with the same
// command.
#include <multipack/cuda/views.hpp>

void correct(multipack::cuda::device_batch<>& batch, cudaStream_t trainer, const multipack::cuda::stream& own) {
  batch.wait(trainer);
  batch.wait(own);
  batch.wait(multipack::cuda::stream_ref::default_stream());
  auto a = multipack::views::to_device(trainer);
  auto b = multipack::views::to_device(own);
  auto c = multipack::views::to_device(multipack::cuda::stream_ref::default_stream());
  multipack::cuda::event timed(true), untimed;
  (void)a; (void)b; (void)c;
  const multipack::cuda::device_batch_view<>& view = batch.view();
  const int* device_tokens = view.input_ids.get();                           // for a kernel
  const int* same = static_cast<int*>(view.used_input_ids());                // said explicitly
  (void)device_tokens; (void)same;
}
