// expect: no match for .*operator\[\].*device_array
// Reading a device batch's tokens on the host: with std::span over device memory,
// b.input_ids[0] compiled and read garbage or faulted. A device_array has no host access;
// get() is the pointer for kernels and copies.
#include <multipack/cuda/views.hpp>

int misuse(const multipack::cuda::device_batch_view<>& b) { return b.input_ids[0]; }
