#pragma once
// A simulated training step on the GPU: a kernel that busy-waits on the device's clock.
// Defined in busy_wait.cu (nvcc); only the runtime API is needed to call it.

#include <cuda_runtime_api.h>

namespace multipack::bench {

/// Queues on `stream` one kernel (one thread) that spins until `milliseconds` of the
/// device's global timer have passed. Throws multipack::cuda_error if the launch fails.
void launch_busy_wait(cudaStream_t stream, double milliseconds);

}  // namespace multipack::bench
