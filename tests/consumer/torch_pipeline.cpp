// A downstream project of multipack::torch (find_package(multipack COMPONENTS torch)): the
// pipeline's batches as int64 tensors, every token of the dataset in them once.

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>

#include <multipack/data/indexed_dataset.hpp>
#include <multipack/torch/views.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dataset prefix>\n", argv[0]);
    return 2;
  }
  const multipack::indexed_dataset dataset(argv[1]);
  std::int64_t expected = 0;
  for (std::size_t i = 0; i < dataset.size(); ++i) expected += static_cast<std::int64_t>(dataset.length(i));
  std::int64_t tokens = 0;
  for (const multipack::torch::batch_tensors& b :
       dataset | multipack::views::pack({.capacity = 2048}) | multipack::views::shard({.micro_batch = 8}, 0) |
           multipack::views::prefetch_as<std::int64_t>() | multipack::torch::views::to_tensors())
    tokens += b.sequence_ids.ne(0).sum().item<std::int64_t>();
  std::printf("multipack::torch consumer: %lld of %lld tokens\n", static_cast<long long>(tokens),
              static_cast<long long>(expected));
  return tokens == expected ? 0 : 1;
}
