#pragma once
// Draws a uniformly random unplaced item from the histogram of item lengths: a Fenwick tree
// over the counts, descended in O(log capacity). The randomized packer fills rows with such
// items before closing each row's gap exactly.

#include <bit>
#include <cstdint>
#include <vector>

namespace multipack::detail {

class length_sampler {
 public:
  explicit length_sampler(const std::vector<std::uint32_t>& count)
      : tree_(std::bit_ceil(count.size()) + 1, 0), top_(std::bit_ceil(count.size())) {
    // O(n) build: each node passes its sum to its parent.
    for (std::size_t l = 1; l < count.size(); ++l) tree_[l] += count[l];
    for (std::size_t i = 1; i < tree_.size(); ++i) {
      const std::size_t parent = i + (i & (~i + 1));
      if (parent < tree_.size()) tree_[parent] += tree_[i];
    }
  }

  /// One item of `length` is gone.
  void remove(std::uint32_t length) noexcept {
    for (std::size_t i = length; i < tree_.size(); i += i & (~i + 1)) --tree_[i];
  }

  /// The length of the k-th unplaced item (0-based, k < items left), lengths ascending.
  [[nodiscard]] std::uint32_t find(std::uint64_t k) const noexcept {
    std::size_t position = 0;
    for (std::size_t step = top_; step != 0; step >>= 1U) {
      const std::size_t next = position + step;
      if (next < tree_.size() && tree_[next] <= k) {
        position = next;
        k -= tree_[next];
      }
    }
    return static_cast<std::uint32_t>(position + 1);
  }

 private:
  std::vector<std::uint32_t> tree_;
  std::size_t top_;
};

}  // namespace multipack::detail
