#pragma once
// Any range of samples as a dataset indexed by position: what views::pack keeps, so that the
// pieces of its rows name samples by their position in the range the user gave (a filter, a
// take, a vector of vectors) and the collator can read sample i of that range again.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/sample.hpp"

namespace multipack {

namespace detail {
template <class S>
struct dataset_of_sample {
  using type = void;
};
template <class D>
struct dataset_of_sample<dataset_sample<D>> {
  using type = D;
};
}  // namespace detail

/// The samples of a view V (a sample_range), indexed 0 .. size()-1 in the view's order;
/// models token_dataset. Three ways to reach sample i, chosen by V's type:
///  - V sized and random-access (a dataset, a vector of vectors, `| std::views::take(n)`): the
///    view's own iterator, begin()[i]; nothing stored.
///  - otherwise, when V's elements are the samples of a multipack dataset (dataset | filter):
///    their indices in that dataset, recorded in one pass: 8 bytes a sample.
///  - otherwise (a filter over a user's vector): the view's iterators, recorded in one pass:
///    sizeof(iterator) bytes a sample.
/// When V's elements are samples of a multipack dataset D, the dataset is `source()` and
/// source_index(i) is sample i's index in it: loss masks, which describe D's samples, are
/// applied by that index, and the capabilities of D (the changed-file check, by parts too,
/// prefetch hints) are forwarded.
///
/// Not copyable or movable: its recorded iterators point into its own copy of the view (share
/// it through a std::shared_ptr, as views::pack does). Every const member may be called from
/// several threads at once when V's iterators and samples allow it (multipack's datasets and
/// the standard views over them do).
template <std::ranges::view V>
  requires sample_range<V>
class indexed_samples {
 public:
  /// What the view yields for one sample (dataset_sample<D>, std::vector<int>&, ...).
  using reference = std::ranges::range_reference_t<V>;
  /// The multipack dataset whose samples V yields, or void.
  using source_type = typename detail::dataset_of_sample<std::remove_cvref_t<reference>>::type;

  /// Takes the view; walks it once unless it is sized and random-access. Throws option_error
  /// for 2^32 - 1 samples or more (pieces number samples with 32 bits) or for samples of two
  /// datasets, and what the view's iteration throws. Cost: one pass over the view for the
  /// recorded forms, and for a random-access view of multipack samples other than a dataset's
  /// own (its samples' datasets are compared).
  explicit indexed_samples(V base) : base_(std::move(base)) {
    if constexpr (random_access) {
      first_ = std::ranges::begin(base_);
      size_ = static_cast<std::size_t>(std::ranges::size(base_));
      if constexpr (has_source) {
        if (size_ > 0) source_ = &first_[0].dataset();
        // A random-access view of samples of several datasets (a vector of them, a concat):
        // refused as the recorded forms refuse it, or masks would be applied by the first
        // dataset's indices. Nothing to check in the dataset's own view.
        if constexpr (!views_whole_dataset)
          for (std::size_t i = 1; i < size_; ++i)
            if (&first_[static_cast<std::ranges::range_difference_t<V>>(i)].dataset() != source_) throw two_datasets();
      }
    } else {
      for (auto it = std::ranges::begin(base_); it != std::ranges::end(base_); ++it) {
        if constexpr (has_source) {
          const auto sample = *it;
          if (source_ == nullptr) source_ = &sample.dataset();
          if (&sample.dataset() != source_) throw two_datasets();
          positions_.push_back(sample.index());
        } else {
          positions_.push_back(it);
        }
      }
      size_ = positions_.size();
    }
    if (size_ >= UINT32_MAX)
      throw option_error("indexed_samples: " + std::to_string(size_) + " samples; at most 2^32 - 2 are supported");
  }
  indexed_samples(const indexed_samples&) = delete;
  indexed_samples& operator=(const indexed_samples&) = delete;

  /// Samples. O(1), never throws.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// Sample i, as the view yields it; i < size() is the caller's duty. O(1).
  [[nodiscard]] decltype(auto) operator[](std::size_t i) const {
    if constexpr (random_access)
      return first_[static_cast<std::ranges::range_difference_t<V>>(i)];
    else if constexpr (has_source)
      return dataset_sample<source_type>(source_, positions_[i]);
    else
      return *positions_[i];
  }

  /// Tokens in sample i. Throws option_error when i >= size(), and what the sample throws.
  [[nodiscard]] std::uint64_t length(std::size_t i) const {
    check_index(i, "length");
    return sample_length((*this)[i]);
  }

  /// Writes tokens [first, first + out.size()) of sample i into `out` (read_sample_tokens).
  /// Throws option_error when i >= size(), and what the read throws.
  template <batch_token T>
    requires sample_reads_as<reference, T>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<T> out) const {
    check_index(i, "read_tokens");
    read_sample_tokens((*this)[i], first, out);
  }

  /// A cache hint for tokens of sample i (see prefetching_dataset). Never throws.
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept
    requires prefetching_sample<reference>
  {
    if (i < size_) prefetch_sample_tokens((*this)[i], first, count);
  }

  /// The source dataset's changed-file check (see change_checked_dataset).
  void check_unchanged() const
    requires(!std::is_void_v<source_type>) && change_checked_dataset<source_type>
  {
    if (source_ != nullptr) source_->check_unchanged();
  }
  /// The source dataset's file parts (see part_checked_dataset), sample i being its sample
  /// source_index(i) (i < size(), the caller's duty); none when empty. O(1) plus the source's.
  [[nodiscard]] std::size_t file_parts() const
    requires(!std::is_void_v<source_type>) && part_checked_dataset<source_type>
  {
    return source_ != nullptr ? static_cast<std::size_t>(source_->file_parts()) : 0;
  }
  [[nodiscard]] std::size_t file_part_of(std::size_t i) const
    requires(!std::is_void_v<source_type>) && part_checked_dataset<source_type>
  {
    return source_->file_part_of(source_index(i));
  }
  void check_part_unchanged(std::size_t k) const
    requires(!std::is_void_v<source_type>) && part_checked_dataset<source_type>
  {
    if (source_ != nullptr) source_->check_part_unchanged(k);
  }

  /// The dataset whose samples these are (none when empty). O(1).
  [[nodiscard]] const source_type* source() const noexcept
    requires(!std::is_void_v<source_type>)
  {
    return source_;
  }
  /// Sample i's index in source(); i < size() is the caller's duty. O(1).
  [[nodiscard]] std::size_t source_index(std::size_t i) const
    requires(!std::is_void_v<source_type>)
  {
    return (*this)[i].index();
  }

  /// The view. O(1).
  [[nodiscard]] const V& base() const noexcept { return base_; }

 private:
  static constexpr bool random_access = std::ranges::random_access_range<V> && std::ranges::sized_range<V>;
  static constexpr bool has_source = !std::is_void_v<source_type>;
  using position = std::conditional_t<has_source, std::size_t, std::ranges::iterator_t<V>>;
  // V is a view of the source dataset itself (std::views::all of it: a ref_view or owning_view).
  static constexpr bool views_whole_dataset = [] {
    if constexpr (has_source && requires(const V& v) { v.base(); })
      return std::is_same_v<std::remove_cvref_t<decltype(std::declval<const V&>().base())>, source_type>;
    else
      return false;
  }();

  static option_error two_datasets() {
    return option_error("indexed_samples: the view yields samples of two datasets; concatenate them first");
  }

  void check_index(std::size_t i, const char* what) const {
    if (i >= size_)
      throw option_error(std::string("indexed_samples: ") + what + ": sample " + std::to_string(i) +
                         " out of range (the range has " + std::to_string(size_) + " samples)");
  }

  V base_;
  std::ranges::iterator_t<V> first_{};
  std::vector<position> positions_;
  std::size_t size_ = 0;
  const std::conditional_t<has_source, source_type, int>* source_ = nullptr;
};

}  // namespace multipack
