#pragma once
// The inputs of the subcommands: datasets opened from --data, the benchmark's own dataset
// wrappers (which forward every capability of the dataset they wrap), and lengths as the
// packer takes them.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "command/common.hpp"
#include "command/options.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/random.hpp"
#include "multipack/core/sample.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"

namespace multipack::bench {

/// A dataset seen `copies` times over, sample i being sample i % size() of the original: for
/// benchmarks that need longer epochs than the embedded data gives. Satisfies token_dataset and
/// is a random-access range of its samples; forwards the inner dataset's optional capabilities
/// (cache hints, the changed-file check), so that wrapping changes nothing but the length.
template <class D>
class repeated_dataset {
 public:
  repeated_dataset(std::shared_ptr<const D> inner, std::uint64_t copies)
      : inner_(std::move(inner)), samples_(inner_->size()), copies_(copies) {
    if (copies_ == 0) throw option_error("--repeat-data: the data must be seen at least once");
  }
  [[nodiscard]] std::size_t size() const noexcept { return samples_ * copies_; }
  [[nodiscard]] dataset_iterator<repeated_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<repeated_dataset> end() const noexcept { return {this, size()}; }
  [[nodiscard]] std::uint64_t length(std::size_t i) const { return inner_->length(i % samples_); }
  template <batch_token Out>
    requires dataset_reads_as<D, Out>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<Out> out) const {
    inner_->read_tokens(i % samples_, first, out);
  }
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept
    requires prefetching_dataset<D>
  {
    inner_->prefetch_tokens(i % samples_, first, count);
  }
  void check_unchanged() const
    requires change_checked_dataset<D>
  {
    inner_->check_unchanged();
  }
  [[nodiscard]] const D& original() const noexcept { return *inner_; }

 private:
  std::shared_ptr<const D> inner_;
  std::size_t samples_;
  std::uint64_t copies_;
};

/// The lengths of a dataset's samples, as the packer takes them; `name` is what errors call it.
/// Throws format_error naming the sample for one of 2^32 tokens or more.
template <class D>
std::vector<std::uint32_t> lengths_of(const D& dataset, const std::string& name) {
  std::vector<std::uint32_t> lengths(dataset.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::uint64_t length = dataset.length(i);
    if (length > UINT32_MAX)
      throw format_error(fmt::format("{}: sample {} has {} tokens; at most 2^32 - 1 are supported", name, i, length));
    lengths[i] = static_cast<std::uint32_t>(length);
  }
  return lengths;
}

/// The input's lengths (--data or --lengths), resampled when --resample asks.
[[nodiscard]] inline std::vector<std::uint32_t> load_lengths(const input_flags& source) {
  std::vector<std::uint32_t> lengths;
  {
    progress p("reading " + (source.lengths_file.empty() ? source.data : source.lengths_file));
    if (!source.lengths_file.empty()) {
      lengths = read_length_list(source.lengths_file);
    } else {
      lengths = lengths_of(indexed_dataset(source.data), source.data);
    }
  }
  if (source.resample == 0) return lengths;
  if (lengths.empty()) throw option_error("--resample: the input has no samples to draw from");
  progress p(fmt::format("drawing {} lengths", source.resample));
  std::vector<std::uint32_t> drawn(source.resample);
  splitmix64 rng(source.resample_seed);
  for (auto& length : drawn) length = lengths[rng.below(lengths.size())];
  return drawn;
}

}  // namespace multipack::bench
