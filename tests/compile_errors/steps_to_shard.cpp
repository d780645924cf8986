// expect: row_range
// Steps handed to shard: a step is a range of rows, not a row of pieces.
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  auto steps = samples | multipack::views::pack({.capacity = 8}) | multipack::views::shard({}, 0);
  auto again = steps | multipack::views::shard({}, 0);
}
