#pragma once
// A weighted blend of corpora, as Megatron-LM's blended datasets and Hugging Face's
// interleave_datasets give: an epoch of N samples takes w_i x N of them from corpus i
// (weights normalised to sum 1; rounded so that they add up to N): whole passes over the
// corpus, then a subset chosen by (seed, epoch) for the rest. What each corpus gave is reported.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/random.hpp"
#include "multipack/core/sample.hpp"
#include "multipack/data/detail/member_file_parts.hpp"
#include "multipack/data/detail/part_starts.hpp"

namespace multipack {

/// What one corpus of a blend gives to an epoch.
struct blend_corpus_report {
  double weight = 0;               ///< its weight, normalised (the weights sum to 1)
  std::uint64_t available = 0;     ///< samples in the corpus
  std::uint64_t taken = 0;         ///< samples of the epoch drawn from it: weight x N, rounded
  std::uint64_t whole_passes = 0;  ///< taken / available: every sample this many times ...
  std::uint64_t subset = 0;        ///< ... and this many more, chosen by (seed, epoch)
  std::uint64_t tokens = 0;        ///< tokens of the samples taken
};

struct blend_options {
  std::uint64_t samples = 0;  ///< N, the epoch's samples; 0: the corpora's samples in all
  std::uint64_t seed = 0;     ///< with epoch, chooses the subsets
  std::uint64_t epoch = 0;
};

/// The blend of corpora of type D (a token_dataset) for one epoch; models token_dataset and
/// is a random-access range of dataset_sample. Samples are laid out corpus by corpus (the
/// packer and the schedule order them anyway). Memory: 8 bytes a sample of the subsets (a
/// corpus may have more than 2^32 samples), 8 a corpus. Every const member may be called from
/// several threads at once. A loss mask given with a blend (batch_options::mask) describes the
/// blend's samples in the blend's order, not the corpora's: a blend has no single source
/// dataset, so the corpora's own masks do not apply, and their concatenation is accepted
/// wherever its count and prompt lengths fit, masking the wrong tokens.
template <token_dataset D>
class blended_dataset {
 public:
  /// Blends `corpora` with `weights` (one each, finite and > 0; normalised): corpus k takes
  /// w_k x N samples, rounded so that they add up to N (options.samples, or all the
  /// corpora's samples when 0). Throws
  /// option_error for no corpus, a count mismatch, a bad weight, an empty corpus with a
  /// weight, or 2^32 - 1 samples or more (options.samples is checked first: a huge one, a -1
  /// that became 2^64 - 1, would overflow the rounding and the sums into a small count).
  /// Cost: O(N) to measure the tokens taken.
  blended_dataset(std::vector<D> corpora, std::vector<double> weights, const blend_options& options = {})
      : corpora_(std::move(corpora)) {
    if (corpora_.empty()) throw option_error("blended_dataset: no corpus to blend");
    if (options.samples >= UINT32_MAX)
      throw option_error("blended_dataset: blend_options::samples is " + std::to_string(options.samples) +
                         "; at most 2^32 - 2 are supported");
    if (weights.size() != corpora_.size())
      throw option_error("blended_dataset: " + std::to_string(weights.size()) + " weights for " +
                         std::to_string(corpora_.size()) + " corpora");
    double largest = 0;
    std::uint64_t available = 0;
    for (std::size_t k = 0; k < weights.size(); ++k) {
      if (!std::isfinite(weights[k]) || weights[k] <= 0)
        throw option_error("blended_dataset: the weight of corpus " + std::to_string(k) + " is " +
                           std::to_string(weights[k]) + "; weights must be finite and above 0");
      if (corpora_[k].size() == 0)
        throw option_error("blended_dataset: corpus " + std::to_string(k) + " has no samples to draw from");
      largest = std::max(largest, weights[k]);
      available += corpora_[k].size();
    }
    // Scaled by a power of two near the largest before summing: finite weights can sum to
    // infinity (1e308 twice), which made every normalised weight 0 and gave the last corpus
    // all N. A power of two keeps every ratio, and so every count, exactly as before.
    double sum = 0;
    for (double& w : weights) sum += (w = std::ldexp(w, -std::ilogb(largest)));
    const std::uint64_t total = options.samples != 0 ? options.samples : available;
    // Before the subsets: without options.samples, corpora of 2^32 samples or more would be
    // permuted into O(N) memory first (8 GB for 10^9 samples) only to be refused after.
    if (total >= UINT32_MAX)
      throw option_error("blended_dataset: " + std::to_string(total) + " samples; at most 2^32 - 2 are supported");
    report_.resize(corpora_.size());
    // Corpus k takes its share of N rounded so that the shares add up to N exactly: the
    // rounded cumulative share up to k, less the one up to k - 1 (each within one sample of
    // w x N; rounding each share alone could give N +- half the corpora).
    double share_before = 0;
    std::uint64_t taken_before = 0;
    for (std::size_t k = 0; k < corpora_.size(); ++k) {
      blend_corpus_report& r = report_[k];
      r.weight = weights[k] / sum;
      r.available = corpora_[k].size();
      share_before += r.weight;
      const std::uint64_t taken_through =
          k + 1 == corpora_.size() ? total
                                   : std::min(total, static_cast<std::uint64_t>(std::llround(share_before * static_cast<double>(total))));
      r.taken = taken_through - taken_before;
      taken_before = taken_through;
      r.whole_passes = r.taken / r.available;
      r.subset = r.taken % r.available;
      // The subset: the first `subset` of a (seed, epoch, corpus)-seeded permutation, in index
      // order (reads go forward through the files).
      const feistel_permutation order(r.available, epoch_seed(options.seed ^ (0x9e3779b97f4a7c15ULL * (k + 1)), options.epoch));
      std::vector<std::uint64_t> chosen(r.subset);
      for (std::uint64_t j = 0; j < r.subset; ++j) chosen[j] = order(j);
      std::sort(chosen.begin(), chosen.end());
      subsets_.push_back(std::move(chosen));
      starts_.add(r.taken);
    }
    for (std::size_t i = 0; i < size(); ++i) {
      const auto [k, local] = locate(i, "blended_dataset");
      report_[k].tokens += static_cast<std::uint64_t>(corpora_[k].length(local));
    }
    file_parts_ = detail::member_file_parts<D>(corpora_);
  }

  /// Samples of the epoch. O(1), never throws.
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(starts_.total()); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] dataset_iterator<blended_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<blended_dataset> end() const noexcept { return {this, size()}; }

  /// Tokens in sample i. Throws option_error when i >= size(). O(log corpora).
  [[nodiscard]] std::uint64_t length(std::size_t i) const {
    const auto [k, local] = locate(i, "length");
    return static_cast<std::uint64_t>(corpora_[k].length(local));
  }
  /// The corpus's read_tokens of sample i. Throws option_error when i >= size().
  template <batch_token T>
    requires dataset_reads_as<D, T>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<T> out) const {
    const auto [k, local] = locate(i, "read_tokens");
    corpora_[k].read_tokens(local, first, out);
  }
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept
    requires prefetching_dataset<D>
  {
    if (i >= size()) return;
    const auto [k, local] = where(i);
    corpora_[k].prefetch_tokens(local, first, count);
  }
  /// Every corpus's changed-file check (see change_checked_dataset). O(corpora), plus theirs.
  /// The loader checks only the corpora (or their shards) a batch reads, through the members
  /// below.
  void check_unchanged() const
    requires change_checked_dataset<D>
  {
    for (const D& corpus : corpora_) corpus.check_unchanged();
  }

  /// The file parts (see part_checked_dataset): one a corpus, or, for corpora that have parts
  /// of their own (concatenations of shards), theirs, corpus by corpus. O(1), never throws.
  [[nodiscard]] std::size_t file_parts() const noexcept
    requires change_checked_dataset<D>
  {
    return file_parts_.count(corpora_);
  }
  /// The part that holds sample i (< size(), the caller's duty). O(log corpora), plus the
  /// corpus's file_part_of.
  [[nodiscard]] std::size_t file_part_of(std::size_t i) const
    requires change_checked_dataset<D>
  {
    const auto [k, local] = where(i);
    return file_parts_.part_of(corpora_, k, local);
  }
  /// The changed-file check of part k (< file_parts(), the caller's duty) alone: throws
  /// io_error naming the file. O(log corpora), plus the corpus's check.
  void check_part_unchanged(std::size_t k) const
    requires change_checked_dataset<D>
  {
    file_parts_.check(corpora_, k);
  }

  /// (corpus, index in it) of sample i (< size(), the caller's duty). O(log corpora).
  [[nodiscard]] std::pair<std::size_t, std::size_t> where(std::size_t i) const noexcept {
    const std::size_t k = starts_.part_of(i);
    const std::uint64_t local = i - starts_.first(k);
    const std::uint64_t passes = report_[k].whole_passes * report_[k].available;
    return {k, static_cast<std::size_t>(local < passes ? local % report_[k].available : subsets_[k][local - passes])};
  }
  /// What each corpus gives, in the order of the corpora. O(1).
  [[nodiscard]] std::span<const blend_corpus_report> report() const noexcept { return report_; }
  [[nodiscard]] std::span<const D> corpora() const noexcept { return corpora_; }

 private:
  std::pair<std::size_t, std::size_t> locate(std::size_t i, const char* what) const {
    if (i >= size())
      throw option_error(std::string("blended_dataset: ") + what + ": sample " + std::to_string(i) +
                         " out of range (the epoch has " + std::to_string(size()) + " samples)");
    return where(i);
  }

  std::vector<D> corpora_;
  std::vector<std::vector<std::uint64_t>> subsets_;
  std::vector<blend_corpus_report> report_;
  detail::part_starts starts_;
  detail::member_file_parts<D> file_parts_;
};

}  // namespace multipack
