// expect: step_range
// Rows handed to prefetch, skipping shard: prefetch builds batches of steps.
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  auto rows = samples | multipack::views::pack({.capacity = 8});
  auto batches = rows | multipack::views::prefetch();
}
