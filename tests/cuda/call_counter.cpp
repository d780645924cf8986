// Counts the allocations and copies made through the real CUDA runtime: the test links with
// -Wl,--wrap=<name> for each, so every reference to <name> in the test's objects (the
// library's headers included) lands here, and __real_<name> is the runtime's.

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>

#include "cuda_calls.hpp"

namespace {
std::atomic<std::int64_t> host_allocations{0}, host_frees{0}, device_allocations{0}, device_frees{0},
    synchronous_copies{0}, async_copies{0};

bool pinned(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}
}  // namespace

extern "C" {
cudaError_t __real_cudaHostAlloc(void**, std::size_t, unsigned);
cudaError_t __real_cudaMallocHost(void**, std::size_t);
cudaError_t __real_cudaFreeHost(void*);
cudaError_t __real_cudaMalloc(void**, std::size_t);
cudaError_t __real_cudaFree(void*);
cudaError_t __real_cudaMemcpy(void*, const void*, std::size_t, cudaMemcpyKind);
cudaError_t __real_cudaMemcpyAsync(void*, const void*, std::size_t, cudaMemcpyKind, cudaStream_t);

cudaError_t __wrap_cudaHostAlloc(void** p, std::size_t bytes, unsigned flags) {
  ++host_allocations;
  return __real_cudaHostAlloc(p, bytes, flags);
}
cudaError_t __wrap_cudaMallocHost(void** p, std::size_t bytes) {
  ++host_allocations;
  return __real_cudaMallocHost(p, bytes);
}
cudaError_t __wrap_cudaFreeHost(void* p) {
  ++host_frees;
  return __real_cudaFreeHost(p);
}
cudaError_t __wrap_cudaMalloc(void** p, std::size_t bytes) {
  ++device_allocations;
  return __real_cudaMalloc(p, bytes);
}
cudaError_t __wrap_cudaFree(void* p) {
  ++device_frees;
  return __real_cudaFree(p);
}
cudaError_t __wrap_cudaMemcpy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
  ++synchronous_copies;
  return __real_cudaMemcpy(to, from, bytes, kind);
}
cudaError_t __wrap_cudaMemcpyAsync(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t stream) {
  if (kind == cudaMemcpyHostToDevice) ++(pinned(from) ? async_copies : synchronous_copies);
  return __real_cudaMemcpyAsync(to, from, bytes, kind, stream);
}
}

namespace multipack::test {
cuda_call_counts cuda_calls() {
  return {host_allocations.load(), host_frees.load(), device_allocations.load(),
          device_frees.load(),     synchronous_copies.load(), async_copies.load()};
}
std::int64_t cuda_violations() { return 0; }
}  // namespace multipack::test
