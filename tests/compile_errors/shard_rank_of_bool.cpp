// expect: plain_integral
// A bool as the rank (is_main, say): as a uint32 parameter it compiled as rank 1. The rank is
// any integer type but bool and the character types; a double is refused the same way, and a
// negative integer is an option_error naming it (tests/views/test_pipeline.cpp).
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  const bool is_main = true;
  auto steps = samples | multipack::views::pack({.capacity = 8}) | multipack::views::shard({.world_size = 2}, is_main);
}
