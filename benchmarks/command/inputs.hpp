#pragma once
// The inputs of the subcommands: datasets opened from --data, the benchmark's own dataset
// wrappers (which forward every capability of the dataset they wrap), and lengths as the
// packer takes them.

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "command/common.hpp"
#include "command/options.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/random.hpp"
#include "multipack/core/sample.hpp"
#include "multipack/data/blended_dataset.hpp"
#include "multipack/data/concatenated_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"

namespace multipack::bench {

/// One entry of --data: its weight (Megatron-LM's `W PREFIX` form; none when the entries
/// have no weights), what the user wrote, and the prefixes it names (a directory or a shell
/// pattern names several; they form one corpus).
struct data_entry {
  std::optional<double> weight;
  std::string where;
  std::vector<std::filesystem::path> prefixes;
};

namespace detail {

/// The value of `text` when all of it is a number (from_chars: no sign games, no suffix).
inline std::optional<double> parse_weight(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, value);
  if (text.empty() || parsed.ec != std::errc{} || parsed.ptr != end) return std::nullopt;
  return value;
}

}  // namespace detail

/// The entries of --data: prefixes only, or weights and prefixes interleaved (when the first
/// value is a number), each expanded by indexed_prefixes. Throws option_error for an odd
/// interleaving, a weight that is not a number or not above 0, a prefix that names nothing.
[[nodiscard]] inline std::vector<data_entry> parse_data_entries(const std::vector<std::string>& values) {
  if (values.empty()) throw option_error("--data: no input given");
  const bool weighted = detail::parse_weight(values.front()).has_value();
  if (weighted && values.size() % 2 != 0)
    throw option_error(fmt::format("--data: weights and prefixes must alternate (--data 0.7 corpusA 0.3 corpusB); got "
                                   "{} values, so '{}' has no prefix or no weight",
                                   values.size(), values.back()));
  std::vector<data_entry> entries;
  for (std::size_t i = 0; i < values.size(); i += weighted ? 2 : 1) {
    data_entry entry;
    if (weighted) {
      entry.weight = detail::parse_weight(values[i]);
      if (!entry.weight)
        throw option_error(fmt::format("--data: '{}' stands where a weight was expected (weights and prefixes "
                                       "alternate: --data 0.7 corpusA 0.3 corpusB)",
                                       values[i]));
      if (!std::isfinite(*entry.weight) || *entry.weight <= 0)
        throw option_error(fmt::format("--data: the weight of {} is {}; weights must be finite and above 0",
                                       values[i + 1], values[i]));
    }
    entry.where = values[i + (weighted ? 1 : 0)];
    entry.prefixes = indexed_prefixes(entry.where);
    entries.push_back(std::move(entry));
  }
  return entries;
}

/// What one corpus of the input gives: its samples and tokens in the dataset (for a blend,
/// what the epoch takes from it, and the blend's account of how).
struct corpus_summary {
  std::vector<std::string> prefixes;
  std::optional<double> weight;  // as given; none when the input has no weights
  std::uint64_t samples = 0;
  std::uint64_t tokens = 0;
  std::optional<blend_corpus_report> blend;
};

/// The dataset of --data: every prefix concatenated in order (no weights), or a blend of the
/// entries (weights; each entry's prefixes concatenated into one corpus). A token_dataset and a
/// random-access range of its samples, with every optional capability of indexed_dataset.
class input_dataset {
 public:
  using shards_type = concatenated_dataset<indexed_dataset>;
  using blend_type = blended_dataset<shards_type>;

  /// Opens the entries' prefixes (reads their indexes, maps their .bin files). `blend` is used
  /// when the entries have weights. Throws what opening and blending throw.
  input_dataset(const std::vector<data_entry>& entries, const blend_options& blend) {
    if (entries.front().weight) {
      std::vector<shards_type> corpora;
      std::vector<double> weights;
      for (const data_entry& entry : entries) {
        corpora.push_back(open_indexed_datasets(entry.prefixes));
        weights.push_back(*entry.weight);
      }
      blend_.emplace(std::move(corpora), std::move(weights), blend);
      for (std::size_t k = 0; k < entries.size(); ++k) {
        const blend_corpus_report& r = blend_->report()[k];
        corpora_.push_back({names_of(entries[k]), entries[k].weight, r.taken, r.tokens, r});
      }
      return;
    }
    std::vector<std::filesystem::path> all;
    for (const data_entry& entry : entries) all.insert(all.end(), entry.prefixes.begin(), entry.prefixes.end());
    whole_ = open_indexed_datasets(all);
    std::size_t shard = 0;
    for (const data_entry& entry : entries) {
      corpus_summary c{names_of(entry), std::nullopt, 0, 0, std::nullopt};
      const std::uint64_t first = whole_.first_sample(shard);
      shard += entry.prefixes.size();
      c.samples = whole_.first_sample(shard) - first;
      for (std::uint64_t i = first; i < first + c.samples; ++i) c.tokens += whole_.length(static_cast<std::size_t>(i));
      corpora_.push_back(std::move(c));
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return blend_ ? blend_->size() : whole_.size(); }
  [[nodiscard]] dataset_iterator<input_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<input_dataset> end() const noexcept { return {this, size()}; }
  [[nodiscard]] std::uint64_t length(std::size_t i) const { return blend_ ? blend_->length(i) : whole_.length(i); }
  template <batch_token T>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<T> out) const {
    if (blend_)
      blend_->read_tokens(i, first, out);
    else
      whole_.read_tokens(i, first, out);
  }
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept {
    if (blend_)
      blend_->prefetch_tokens(i, first, count);
    else
      whole_.prefetch_tokens(i, first, count);
  }
  void check_unchanged() const {
    if (blend_)
      blend_->check_unchanged();
    else
      whole_.check_unchanged();
  }
  // The shards' file parts (part_checked_dataset): the loader checks only those a batch reads.
  [[nodiscard]] std::size_t file_parts() const noexcept { return blend_ ? blend_->file_parts() : whole_.file_parts(); }
  [[nodiscard]] std::size_t file_part_of(std::size_t i) const {
    return blend_ ? blend_->file_part_of(i) : whole_.file_part_of(i);
  }
  void check_part_unchanged(std::size_t k) const {
    if (blend_)
      blend_->check_part_unchanged(k);
    else
      whole_.check_part_unchanged(k);
  }

  /// The corpora, in the order of --data. O(1).
  [[nodiscard]] const std::vector<corpus_summary>& corpora() const noexcept { return corpora_; }
  [[nodiscard]] bool blended() const noexcept { return blend_.has_value(); }
  /// The prefixes opened, in order: the shards of the concatenation (no weights).
  [[nodiscard]] std::size_t shards() const noexcept { return whole_.shards().size(); }
  /// The first sample of shard k of the concatenation (no weights), k <= shards().
  [[nodiscard]] std::uint64_t first_sample(std::size_t k) const { return whole_.first_sample(k); }

 private:
  static std::vector<std::string> names_of(const data_entry& entry) {
    std::vector<std::string> names;
    for (const auto& prefix : entry.prefixes) names.push_back(prefix.string());
    return names;
  }

  shards_type whole_;
  std::optional<blend_type> blend_;
  std::vector<corpus_summary> corpora_;
};

/// An input opened from --data (dataset) or --lengths (no dataset), with what opening cost:
/// the seconds and the resident memory right after it.
struct opened_input {
  std::shared_ptr<const input_dataset> dataset;
  std::vector<std::uint32_t> lengths;
  double open_seconds = 0;
  std::uint64_t open_rss_bytes = 0;
};

/// Opens --data (expanding directories and patterns) and measures it. `seed` and `epoch`
/// choose a blend's subsets.
[[nodiscard]] inline opened_input open_data(const input_flags& source, std::uint64_t seed, std::uint64_t epoch) {
  if (source.blend_samples != 0 && (source.data.empty() || !detail::parse_weight(source.data.front())))
    throw option_error("--blend-samples: only a blend has it (--data W1 PREFIX1 W2 PREFIX2 ...)");
  opened_input in;
  const auto start = clock::now();
  in.dataset = std::make_shared<const input_dataset>(parse_data_entries(source.data),
                                                     blend_options{source.blend_samples, seed, epoch});
  in.open_seconds = seconds_since(start);
  in.open_rss_bytes = rss_bytes();
  return in;
}

/// A dataset seen `copies` times over, sample i being sample i % size() of the original: for
/// benchmarks that need longer epochs than the embedded data gives. Satisfies token_dataset and
/// is a random-access range of its samples; forwards the inner dataset's optional capabilities
/// (cache hints, the changed-file check, by parts too), so that wrapping changes nothing but
/// the length.
template <class D>
class repeated_dataset {
 public:
  repeated_dataset(std::shared_ptr<const D> inner, std::uint64_t copies)
      : inner_(std::move(inner)), samples_(inner_->size()), copies_(copies) {
    if (copies_ == 0) throw option_error("--repeat-data: the data must be seen at least once");
    // Checked before anything is sized by it: the product wrapped (a silently smaller dataset)
    // or allocated gigabytes of lengths before the packer refused.
    if (samples_ != 0 && copies_ > (UINT32_MAX - 1) / samples_)
      throw option_error(fmt::format("--repeat-data {}: {} samples seen {} times is past 2^32 - 2 samples, "
                                     "the most a packing takes",
                                     copies_, samples_, copies_));
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
  [[nodiscard]] std::size_t file_parts() const
    requires part_checked_dataset<D>
  {
    return inner_->file_parts();
  }
  [[nodiscard]] std::size_t file_part_of(std::size_t i) const
    requires part_checked_dataset<D>
  {
    return inner_->file_part_of(i % samples_);
  }
  void check_part_unchanged(std::size_t k) const
    requires part_checked_dataset<D>
  {
    inner_->check_part_unchanged(k);
  }
  [[nodiscard]] const D& original() const noexcept { return *inner_; }
  /// Sample i is sample i % size of the original: loss masks of the original apply by that
  /// index (has_source_dataset), whatever their form.
  [[nodiscard]] const D* source() const noexcept { return inner_.get(); }
  [[nodiscard]] std::size_t source_index(std::size_t i) const noexcept { return i % samples_; }

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

/// The input (--data or --lengths) and its lengths, resampled when --resample asks.
[[nodiscard]] inline opened_input load_lengths(const input_flags& source, std::uint64_t seed, std::uint64_t epoch) {
  opened_input in;
  {
    progress p("reading " + source.describe_input());
    if (!source.lengths_file.empty()) {
      if (source.blend_samples != 0)
        throw option_error("--blend-samples: only a blend has it (--data W1 PREFIX1 W2 PREFIX2 ...), not --lengths");
      const auto start = clock::now();
      in.lengths = read_length_list(source.lengths_file);
      in.open_seconds = seconds_since(start);
      in.open_rss_bytes = rss_bytes();
    } else {
      in = open_data(source, seed, epoch);
      in.lengths = lengths_of(*in.dataset, source.describe_input());
    }
  }
  if (source.resample == 0) return in;
  if (in.lengths.empty()) throw option_error("--resample: the input has no samples to draw from");
  if (source.resample > UINT32_MAX - 1)
    throw option_error(fmt::format("--resample {}: at most 2^32 - 2 samples, the most a packing takes",
                                   source.resample));
  progress p(fmt::format("drawing {} lengths", source.resample));
  std::vector<std::uint32_t> drawn(source.resample);
  splitmix64 rng(source.resample_seed);
  for (auto& length : drawn) length = in.lengths[rng.below(in.lengths.size())];
  in.lengths = std::move(drawn);
  return in;
}

}  // namespace multipack::bench
