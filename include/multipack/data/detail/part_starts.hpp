#pragma once
// Where each part of a dataset made of parts (shards, corpora) starts: the first sample of
// part k, for every k, and one past the last. The concatenation and the blend find a sample's
// part with it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace multipack::detail {

class part_starts {
 public:
  /// No part yet: one start, 0. Never throws.
  part_starts() = default;

  /// Appends a part of `samples` samples. O(1) amortised.
  void add(std::uint64_t samples) { starts_.push_back(starts_.back() + samples); }
  void reserve(std::size_t parts) { starts_.reserve(parts + 1); }

  /// Samples of all parts. O(1).
  [[nodiscard]] std::uint64_t total() const noexcept { return starts_.back(); }
  /// The first sample of part k (k <= parts, the caller's duty). O(1).
  [[nodiscard]] std::uint64_t first(std::size_t k) const noexcept { return starts_[k]; }
  /// The part that holds sample i (< total(), the caller's duty): the last part starting at
  /// or before i, so that empty parts are skipped. O(log parts).
  [[nodiscard]] std::size_t part_of(std::uint64_t i) const noexcept {
    return static_cast<std::size_t>(std::upper_bound(starts_.begin() + 1, starts_.end(), i) - (starts_.begin() + 1));
  }

 private:
  std::vector<std::uint64_t> starts_{0};
};

}  // namespace multipack::detail
