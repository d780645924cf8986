// expect: use of deleted function
// CUDA's event flags given to cuda::event, whose parameter is "timing": cudaEventDisableTiming
// (2) converted to true and turned timing on, the opposite of what was asked.
#include <multipack/cuda/resources.hpp>

void misuse() { multipack::cuda::event e(cudaEventDisableTiming); }
