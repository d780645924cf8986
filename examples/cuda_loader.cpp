// A CUDA trainer's data loop: each batch built by worker threads straight into pinned
// memory, copied to the GPU on a side stream, and handed over as device pointers that the
// trainer's stream waits for (the host never blocks on a copy).
//
//   cuda_loader [PREFIX]
//
// Exits with 77 (ctest: skipped) where there is no GPU.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "multipack/cuda/device_loader.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/schedule/distributed_env.hpp"
#include "multipack/schedule/plan.hpp"

int main(int argc, char** argv) try {
  if (!multipack::cuda::device_available()) {
    std::printf("cuda_loader: skipped, %s\n", multipack::cuda::no_device_reason().c_str());
    return 77;
  }
  const std::string prefix = argc > 1 ? argv[1] : "data/alpaca/alpaca_llama";
  const auto env = multipack::distributed_env::from_environment();
  MULTIPACK_CUDA_CHECK(cudaSetDevice(static_cast<int>(env.local_rank) % multipack::cuda::device_count()));
  const auto dataset = std::make_shared<const multipack::indexed_dataset>(prefix);
  std::vector<std::uint32_t> lengths(dataset->size());
  for (std::size_t i = 0; i < lengths.size(); ++i) lengths[i] = static_cast<std::uint32_t>(dataset->length(i));
  const auto plan = std::make_shared<const multipack::epoch_plan>(
      multipack::plan_epoch(lengths, {.capacity = 4096}, {.world_size = env.world_size, .micro_batch = 8}));

  multipack::cuda::stream trainer;  // the model's stream
  multipack::cuda::device_loader<multipack::indexed_dataset> loader(dataset, plan, env.rank, {}, {.threads = 2, .depth = 4},
                                                                    {.batches_in_flight = 3, .time_copies = true});
  std::uint64_t tokens = 0;
  std::int32_t first_token = 0;
  while (auto batch = loader.next()) {
    batch->wait(trainer.get());  // the stream waits for the copy; the host goes on
    const multipack::cuda::device_batch_view<>& b = batch->view();  // device arrays: get() for kernels
    // model.forward(b.input_ids.get(), b.position_ids.get(), b.cu_seqlens.get(), b.max_seqlen, trainer) ...
    if (batch->step() == 0)
      MULTIPACK_CUDA_CHECK(cudaMemcpyAsync(&first_token, b.input_ids.get(), sizeof first_token, cudaMemcpyDeviceToHost,
                                           trainer.get()));
    tokens += b.real_tokens;
    batch->release(trainer.get());  // the buffer is reused once the work queued so far has run
  }
  trainer.synchronize();
  const multipack::cuda::device_statistics s = loader.statistics();
  std::printf("cuda_loader: %llu batches, %llu tokens copied to the device (%.2f GB/s a copy); first token %d\n",
              static_cast<unsigned long long>(s.copies), static_cast<unsigned long long>(tokens),
              s.copy_seconds > 0 ? static_cast<double>(s.timed_bytes) / s.copy_seconds * 1e-9 : 0.0, first_token);
  return s.copies == plan->schedule.steps() ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cuda_loader: %s\n", e.what());
  return 1;
}
