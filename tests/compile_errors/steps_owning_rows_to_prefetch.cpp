// expect: step_range
// Steps made by a view that owns its rows (each step a temporary vector of rows): the workers
// keep a span of each row after the step is gone, so prefetch refuses them, naming the concept
// (give the rows as std::span<const piece>, which borrow the packing's).
#include <ranges>
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  auto steps = samples | multipack::views::pack({.capacity = 8}) | multipack::views::shard({}, 0);
  auto owning = steps | std::views::transform([](const auto& step) {
                  std::vector<std::vector<multipack::piece>> rows;
                  for (const auto& row : step) rows.emplace_back(row.begin(), row.end());
                  return rows;
                });
  auto batches = owning | multipack::views::prefetch();
}
