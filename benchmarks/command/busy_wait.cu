// The simulated training step (see busy_wait.hpp): %globaltimer is the device's nanosecond
// clock, so the kernel lasts the same wall time whatever the SM clock does.

#include <cstdint>

#include "command/busy_wait.hpp"
#include "multipack/cuda/error.hpp"

namespace {

__device__ std::uint64_t global_timer_ns() {
  std::uint64_t now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void busy_wait_kernel(std::uint64_t nanoseconds) {
  const std::uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < nanoseconds) {
  }
}

}  // namespace

namespace multipack::bench {

void launch_busy_wait(cudaStream_t stream, double milliseconds) {
  busy_wait_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint64_t>(milliseconds * 1e6));
  MULTIPACK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace multipack::bench
