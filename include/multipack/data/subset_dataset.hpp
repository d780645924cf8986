#pragma once
// Some samples of a dataset, by an index list or a predicate, as a dataset of their own that
// remembers each sample's index in the original: loss masks of the original apply by it.
// (`dataset | std::views::filter(f) | views::pack(o)` does the same for a predicate without
// owning the dataset.)

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/sample.hpp"

namespace multipack {

/// The samples of a dataset D (a token_dataset) at the given indices, in the order given
/// (repeats allowed); models token_dataset and has_source_dataset, and is a random-access range
/// of dataset_sample. Memory: 8 bytes a sample (the dataset may have more than 2^32 samples:
/// a subset of a large corpus). Every const member may be called from several threads at once.
template <token_dataset D>
class subset_dataset {
 public:
  /// Takes the dataset and the indices. Throws option_error naming the first index that is
  /// not a sample of the dataset, and for 2^32 - 1 indices or more (pieces number samples with
  /// 32 bits). O(indices).
  subset_dataset(D dataset, std::span<const std::size_t> indices) : dataset_(std::move(dataset)) {
    check_size(indices.size());
    indices_.reserve(indices.size());
    for (std::size_t k = 0; k < indices.size(); ++k) {
      if (indices[k] >= dataset_.size())
        throw option_error("subset_dataset: index " + std::to_string(k) + " is sample " + std::to_string(indices[k]) +
                           ", but the dataset has " + std::to_string(dataset_.size()) + " samples");
      indices_.push_back(indices[k]);
    }
  }

  /// The samples for which keep(sample) is true (sample: a dataset_sample<D>), in order.
  /// Throws what keep throws, and option_error when 2^32 - 1 samples or more are kept.
  /// O(samples of the dataset).
  template <class Keep>
    requires std::predicate<const Keep&, dataset_sample<D>>
  subset_dataset(D dataset, const Keep& keep) : dataset_(std::move(dataset)) {
    for (std::size_t i = 0; i < dataset_.size(); ++i)
      if (keep(dataset_sample<D>(&dataset_, i))) indices_.push_back(i);
    check_size(indices_.size());
  }

  [[nodiscard]] std::size_t size() const noexcept { return indices_.size(); }
  [[nodiscard]] bool empty() const noexcept { return indices_.empty(); }
  [[nodiscard]] dataset_iterator<subset_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<subset_dataset> end() const noexcept { return {this, size()}; }

  /// Tokens in sample i. Throws option_error when i >= size(). O(1).
  [[nodiscard]] std::uint64_t length(std::size_t i) const {
    return static_cast<std::uint64_t>(dataset_.length(source_index_checked(i, "length")));
  }
  template <batch_token T>
    requires dataset_reads_as<D, T>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<T> out) const {
    dataset_.read_tokens(source_index_checked(i, "read_tokens"), first, out);
  }
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept
    requires prefetching_dataset<D>
  {
    if (i < size()) dataset_.prefetch_tokens(indices_[i], first, count);
  }
  /// The dataset's changed-file check (see change_checked_dataset): all its files.
  void check_unchanged() const
    requires change_checked_dataset<D>
  {
    dataset_.check_unchanged();
  }
  /// The dataset's file parts (see part_checked_dataset), sample i being its sample
  /// source_index(i) (i < size(), the caller's duty). O(1) plus the dataset's.
  [[nodiscard]] std::size_t file_parts() const
    requires part_checked_dataset<D>
  {
    return dataset_.file_parts();
  }
  [[nodiscard]] std::size_t file_part_of(std::size_t i) const
    requires part_checked_dataset<D>
  {
    return dataset_.file_part_of(indices_[i]);
  }
  void check_part_unchanged(std::size_t k) const
    requires part_checked_dataset<D>
  {
    dataset_.check_part_unchanged(k);
  }

  /// The original dataset, and sample i's index in it (i < size(), the caller's duty). O(1).
  [[nodiscard]] const D* source() const noexcept { return &dataset_; }
  [[nodiscard]] std::size_t source_index(std::size_t i) const noexcept { return indices_[i]; }

 private:
  static void check_size(std::size_t samples) {
    if (samples >= UINT32_MAX)
      throw option_error("subset_dataset: " + std::to_string(samples) + " samples; at most 2^32 - 2 are supported");
  }

  std::size_t source_index_checked(std::size_t i, const char* what) const {
    if (i >= size())
      throw option_error(std::string("subset_dataset: ") + what + ": sample " + std::to_string(i) +
                         " out of range (the subset has " + std::to_string(size()) + " samples)");
    return indices_[i];
  }

  D dataset_;
  std::vector<std::size_t> indices_;
};

}  // namespace multipack
