// expect: plain_integral
// A floating-point rank (a rank computed as a fraction of the world): as a uint32 parameter
// it compiled, truncated to 0, with no warning under -Wall -Wextra.
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  const double rank = 0.5;
  auto steps = samples | multipack::views::pack({.capacity = 8}) | multipack::views::shard({.world_size = 2}, rank);
}
