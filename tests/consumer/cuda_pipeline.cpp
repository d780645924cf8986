// A downstream project of multipack::cuda (find_package(multipack COMPONENTS cuda)): the
// device pipeline, falling back to host batches where there is no GPU, checked as the host
// one is.

#include <cstdint>
#include <cstdio>

#include <multipack/cuda/views.hpp>
#include <multipack/data/indexed_dataset.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dataset prefix>\n", argv[0]);
    return 2;
  }
  const multipack::indexed_dataset dataset(argv[1]);
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < dataset.size(); ++i) expected += dataset.length(i);
  std::optional<multipack::cuda::stream> stream;
  if (multipack::cuda::device_available()) stream.emplace();
  std::uint64_t tokens = 0;
  for (const multipack::cuda::device_batch_view<>& batch :
       dataset | multipack::views::pack({.capacity = 2048}) |
           multipack::views::shard({.world_size = 1, .micro_batch = 8}, 0) | multipack::views::prefetch({}) |
           multipack::views::to_device(stream ? multipack::cuda::stream_ref(*stream) : multipack::cuda::stream_ref::default_stream(),
                                       {.host_fallback = true}))
    tokens += batch.real_tokens;
  if (stream) stream->synchronize();
  std::printf("multipack::cuda consumer (%s): %llu of %llu tokens\n",
              stream ? "on the device" : "no device: host fallback", static_cast<unsigned long long>(tokens),
              static_cast<unsigned long long>(expected));
  return tokens == expected ? 0 : 1;
}
