// expect: dataset_reads_as
// int64 batches of a store that reads int32 only.
#include <cstdint>
#include <span>
#include <vector>

#include "multipack/core/sample.hpp"
#include "multipack/views.hpp"

struct int32_store {
  std::vector<std::int32_t> tokens{1, 2, 3, 4};
  [[nodiscard]] std::size_t size() const { return 2; }
  [[nodiscard]] std::uint64_t length(std::size_t) const { return 2; }
  void read_tokens(std::size_t i, std::uint64_t first, std::span<std::int32_t> out) const {
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = tokens[2 * i + first + k];
  }
  [[nodiscard]] multipack::dataset_iterator<int32_store> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] multipack::dataset_iterator<int32_store> end() const noexcept { return {this, 2}; }
};

int main() {
  const int32_store store;
  auto steps = store | multipack::views::pack({.capacity = 8}) | multipack::views::shard({}, 0);
  auto batches = steps | multipack::views::prefetch_as<std::int64_t>();
}
