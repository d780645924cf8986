// expect: sample_range
// Rows (ranges of pieces) handed to pack again: a piece is not a token.
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  auto rows = samples | multipack::views::pack({.capacity = 8});
  auto again = multipack::views::pack(rows, {.capacity = 8});
}
