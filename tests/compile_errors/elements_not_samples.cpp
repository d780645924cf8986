// expect: sample_range
// A range whose elements are not samples (doubles: no length, no tokens) handed to pack.
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<double> weights{0.5, 0.25};
  auto rows = weights | multipack::views::pack({.capacity = 8});
}
