// expect: begin
// Iterating a device array on the host (a range-for over the tokens): refused, as indexing is.
#include <multipack/cuda/views.hpp>

long misuse(const multipack::cuda::device_batch_view<>& b) {
  long sum = 0;
  for (const int t : b.used_input_ids()) sum += t;
  return sum;
}
