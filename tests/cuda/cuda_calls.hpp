#pragma once
// What the code under test asked of the CUDA runtime, counted outside the library: by the
// simulated runtime (simulated_runtime.cpp), or by link-time wrappers around the real one
// (call_counter.cpp, linked with -Wl,--wrap=...), so that a call the library makes behind
// its own back is counted all the same.

#include <cstdint>

namespace multipack::test {

struct cuda_call_counts {
  std::int64_t host_allocations = 0;    ///< cudaHostAlloc, cudaMallocHost
  std::int64_t host_frees = 0;          ///< cudaFreeHost
  std::int64_t device_allocations = 0;  ///< cudaMalloc
  std::int64_t device_frees = 0;        ///< cudaFree
  std::int64_t synchronous_copies = 0;  ///< cudaMemcpy, and cudaMemcpyAsync host-to-device from pageable memory
  std::int64_t async_copies = 0;        ///< cudaMemcpyAsync host-to-device from pinned memory
};

/// The counts so far. Thread-safe.
cuda_call_counts cuda_calls();

/// What a simulated run found wrong: copies outside an allocation, host-to-device copies
/// not from pinned memory. Always 0 with the real runtime (which would fault instead).
std::int64_t cuda_violations();

/// The simulated runtime only: makes the next cudaStreamDestroy, cudaEventDestroy or cudaFree
/// fail (after it has freed), as a lost context would.
void fail_next_release();

/// The runtime calls whose failure the simulated runtime can inject.
enum class cuda_call : int { memcpy_async, event_record, malloc, host_alloc };

/// The simulated runtime only: the n-th next call of `call` fails (n = 1: the next), as on a
/// device that runs out of memory or loses a handle; n = 0 cancels.
void fail_call(cuda_call call, int n);

}  // namespace multipack::test
