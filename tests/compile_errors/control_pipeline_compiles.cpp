// expect: compiles
// The control: the same includes and pipeline as the cases beside it, used correctly, so that a
// case failing for a reason of its own (a missing header, a wrong flag) cannot pass.
#include <vector>

#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  auto rows = samples | multipack::views::pack({.capacity = 8});
  auto steps = rows | multipack::views::shard({.world_size = 1, .micro_batch = 1}, 0);
  auto batches = steps | multipack::views::prefetch();
  multipack::in_memory_dataset<std::int32_t> store{{1, 2}, {3}};
  auto wide = store | multipack::views::pack({.capacity = 8}) | multipack::views::shard({}, 0) |
              multipack::views::prefetch_as<std::int64_t>();
  (void)batches;
  (void)wide;
}
