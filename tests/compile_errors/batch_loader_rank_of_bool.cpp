// expect: plain_integral
// A bool as batch_loader's rank (is_main, say): as a uint32 parameter it compiled as rank 1,
// the other rank's batches. The rank is any integer type but bool and the character types, as
// views::shard takes it; -1 is an option_error naming it (tests/pipeline/test_batch_loader.cpp).
#include <cstdint>
#include <memory>
#include <vector>

#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/pipeline/batch_loader.hpp"

int main() {
  auto dataset = std::make_shared<const multipack::in_memory_dataset<>>(
      std::vector<std::vector<std::int32_t>>{{1, 2, 3}, {4, 5}});
  std::vector<std::uint32_t> lengths{3, 2};
  auto plan = std::make_shared<const multipack::epoch_plan>(
      multipack::plan_epoch(lengths, multipack::pack_options{.capacity = 8}, {.world_size = 2}));
  const bool is_main = true;
  multipack::batch_loader<multipack::in_memory_dataset<>> loader(dataset, plan, is_main, {}, {});
}
