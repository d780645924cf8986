// The CUDA room and the range adaptors compiled by nvcc (-std=c++20), as a user's .cu file
// includes them, with a kernel beside them. Run: with a device, the kernel reads a batch's
// tokens in device memory and their sum is checked against the host's; without one, the
// same loop runs on the host fallback.

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "multipack/cuda/device_loader.hpp"
#include "multipack/cuda/error.hpp"
#include "multipack/cuda/resources.hpp"
#include "multipack/cuda/views.hpp"
#include "multipack/data/indexed_dataset.hpp"

namespace {

__global__ void sum_tokens(const std::int32_t* tokens, std::size_t n, unsigned long long* sum) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    local += static_cast<unsigned long long>(tokens[i]);
  atomicAdd(sum, local);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dataset prefix>\n", argv[0]);
    return 2;
  }
  const multipack::indexed_dataset dataset(argv[1]);
  std::uint64_t expected = 0;
  std::vector<std::int32_t> tokens;
  for (std::size_t i = 0; i < dataset.size(); ++i) {
    tokens.resize(dataset.length(i));
    dataset.read_tokens(i, 0, std::span<std::int32_t>(tokens));
    for (const std::int32_t t : tokens) expected += static_cast<std::uint64_t>(t);
  }
  const bool device = multipack::cuda::device_available();
  std::optional<multipack::cuda::stream> stream;
  unsigned long long* sum = nullptr;
  if (device) {
    stream.emplace();
    MULTIPACK_CUDA_CHECK(cudaMalloc(&sum, sizeof *sum));
    MULTIPACK_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof *sum, stream->get()));
  }
  std::uint64_t host_sum = 0;
  auto batches = dataset | multipack::views::pack({.capacity = 2048}) |
                 multipack::views::shard({.world_size = 1, .micro_batch = 4}, 0) | multipack::views::prefetch({}) |
                 multipack::views::to_device(device ? multipack::cuda::stream_ref(*stream) : multipack::cuda::stream_ref::default_stream(), {.host_fallback = true});
  for (const multipack::cuda::device_batch_view<>& batch : batches) {
    if (device) {
      sum_tokens<<<64, 256, 0, stream->get()>>>(batch.input_ids.get(), batch.flat_length(), sum);
      MULTIPACK_CUDA_CHECK(cudaGetLastError());
    } else {
      for (const std::int32_t t : batch.host().used_input_ids()) host_sum += static_cast<std::uint64_t>(t);
    }
  }
  if (device) {
    unsigned long long result = 0;
    MULTIPACK_CUDA_CHECK(cudaMemcpyAsync(&result, sum, sizeof result, cudaMemcpyDeviceToHost, stream->get()));
    stream->synchronize();
    MULTIPACK_CUDA_CHECK(cudaFree(sum));
    host_sum = result;
  }
  // Padding tokens are 0 (the default pad_token_id), so they add nothing.
  std::printf("nvcc translation unit: %s, token sum %llu, expected %llu\n",
              device ? "on the device" : "no device: host fallback", static_cast<unsigned long long>(host_sum),
              static_cast<unsigned long long>(expected));
  return host_sum == expected ? 0 : 1;
}
