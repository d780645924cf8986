// expect: step_range
// An input-only (here bidirectional) range of steps: the workers build step i by index, so
// prefetch refuses it, naming the concept (take or drop the steps instead: they keep random access).
#include <ranges>
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  auto steps = samples | multipack::views::pack({.capacity = 8}) | multipack::views::shard({}, 0);
  auto some = steps | std::views::filter([](const auto& step) { return step.step() % 2 == 0; });
  auto batches = some | multipack::views::prefetch();
}
