// What every downstream project runs: the whole host pipeline on the embedded data, checked
// (every token of every sample reaches exactly one batch), with the umbrella header.

#include <cstdint>
#include <cstdio>

#include <multipack/multipack.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dataset prefix>\n", argv[0]);
    return 2;
  }
  const multipack::indexed_dataset dataset(argv[1]);
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < dataset.size(); ++i) expected += dataset.length(i);
  std::uint64_t tokens = 0;
  std::uint64_t batches = 0;
  for (const multipack::batch_view<>& batch : dataset | multipack::views::pack({.capacity = 2048}) |
                                                  multipack::views::shard({.world_size = 1, .micro_batch = 8}, 0) |
                                                  multipack::views::prefetch({.threads = 2, .depth = 4})) {
    tokens += batch.real_tokens;
    ++batches;
  }
  std::printf("multipack %s consumer: %llu batches, %llu of %llu tokens\n", multipack::version,
              static_cast<unsigned long long>(batches), static_cast<unsigned long long>(tokens),
              static_cast<unsigned long long>(expected));
  return tokens == expected && batches > 0 ? 0 : 1;
}
