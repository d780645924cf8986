#pragma once
// Many datasets as one: pretraining corpora ship as tens to thousands of shards (Megatron
// .bin/.idx prefixes, llm.c shards). Sample i of the concatenation is sample i - first(k) of
// shard k; opening the shards reads their indexes (memory-mapped), never their tokens.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fnmatch.h>

#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/sample.hpp"
#include "multipack/data/detail/member_file_parts.hpp"
#include "multipack/data/detail/part_starts.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/loss_mask.hpp"

namespace multipack {

/// Shards of type D (a token_dataset) as one dataset, in the order given; models
/// token_dataset and is a random-access range of dataset_sample. Every const member may be
/// called from several threads at once (the shards' are).
template <token_dataset D>
class concatenated_dataset {
 public:
  /// No shards, no samples. Never throws.
  concatenated_dataset() = default;

  /// Takes the shards. Cost: O(shards). Throws option_error when the samples number 2^32 - 1
  /// or more (pieces number samples with 32 bits).
  explicit concatenated_dataset(std::vector<D> shards) : shards_(std::move(shards)) {
    starts_.reserve(shards_.size());
    for (const D& shard : shards_) starts_.add(static_cast<std::uint64_t>(shard.size()));
    if (starts_.total() >= UINT32_MAX)
      throw option_error("concatenated_dataset: " + std::to_string(starts_.total()) +
                         " samples in all; at most 2^32 - 2 are supported");
    file_parts_ = detail::member_file_parts<D>(shards_);
  }

  /// Samples of all shards. O(1), never throws.
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(starts_.total()); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] dataset_iterator<concatenated_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<concatenated_dataset> end() const noexcept { return {this, size()}; }

  /// Tokens in sample i. Throws option_error when i >= size(). O(log shards).
  [[nodiscard]] std::uint64_t length(std::size_t i) const {
    const auto [shard, local] = locate(i, "length");
    return static_cast<std::uint64_t>(shards_[shard].length(local));
  }

  /// The shard's read_tokens of sample i. Throws option_error when i >= size(), and what the
  /// shard throws. O(log shards + out.size()).
  template <batch_token T>
    requires dataset_reads_as<D, T>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<T> out) const {
    const auto [shard, local] = locate(i, "read_tokens");
    shards_[shard].read_tokens(local, first, out);
  }

  /// The shard's cache hint. Never throws.
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept
    requires prefetching_dataset<D>
  {
    if (i >= size()) return;
    const std::size_t shard = shard_of(i);
    shards_[shard].prefetch_tokens(i - static_cast<std::size_t>(starts_.first(shard)), first, count);
  }

  /// Every shard's changed-file check (see change_checked_dataset). O(shards): two fstat
  /// calls a shard for indexed datasets. The loader checks only the shards a batch reads,
  /// through the members below.
  void check_unchanged() const
    requires change_checked_dataset<D>
  {
    for (const D& shard : shards_) shard.check_unchanged();
  }

  /// The file parts (see part_checked_dataset): one a shard, or, for shards that have parts
  /// of their own, theirs, shard by shard. O(1), never throws.
  [[nodiscard]] std::size_t file_parts() const noexcept
    requires change_checked_dataset<D>
  {
    return file_parts_.count(shards_);
  }
  /// The part that holds sample i (< size(), the caller's duty). O(log shards), plus the
  /// shard's file_part_of when it has parts.
  [[nodiscard]] std::size_t file_part_of(std::size_t i) const
    requires change_checked_dataset<D>
  {
    const std::size_t shard = shard_of(i);
    return file_parts_.part_of(shards_, shard, i - static_cast<std::size_t>(starts_.first(shard)));
  }
  /// The changed-file check of part k (< file_parts(), the caller's duty) alone: throws
  /// io_error naming the file. Two fstat calls for a shard that is an indexed dataset.
  void check_part_unchanged(std::size_t k) const
    requires change_checked_dataset<D>
  {
    file_parts_.check(shards_, k);
  }

  /// The shards, and where each one's samples start. O(1).
  [[nodiscard]] std::span<const D> shards() const noexcept { return shards_; }
  /// The first sample of shard k, for k <= shards().size() (the last: size()); option_error
  /// past that. O(1).
  [[nodiscard]] std::uint64_t first_sample(std::size_t k) const {
    if (k > shards_.size())
      throw option_error("concatenated_dataset: first_sample: shard " + std::to_string(k) + " of " +
                         std::to_string(shards_.size()));
    return starts_.first(k);
  }
  /// The shard that holds sample i (< size(), the caller's duty). O(log shards).
  [[nodiscard]] std::size_t shard_of(std::size_t i) const noexcept {
    return starts_.part_of(i);
  }

 private:
  std::pair<std::size_t, std::size_t> locate(std::size_t i, const char* what) const {
    if (i >= size())
      throw option_error(std::string("concatenated_dataset: ") + what + ": sample " + std::to_string(i) +
                         " out of range (the dataset has " + std::to_string(size()) + " samples)");
    const std::size_t shard = shard_of(i);
    return {shard, i - static_cast<std::size_t>(starts_.first(shard))};
  }

  std::vector<D> shards_;
  detail::part_starts starts_;
  detail::member_file_parts<D> file_parts_;
};

namespace detail {

/// Natural order of file names: runs of digits compare as numbers (shard_2 before shard_10,
/// as `ls -v` lists them), the rest byte by byte; names equal so ("shard_01", "shard_1") in
/// plain string order. O(length).
[[nodiscard]] inline bool natural_less(std::string_view a, std::string_view b) noexcept {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t a_end = i;
      std::size_t b_end = j;
      while (a_end < a.size() && digit(a[a_end])) ++a_end;
      while (b_end < b.size() && digit(b[b_end])) ++b_end;
      std::string_view x = a.substr(i, a_end - i);
      std::string_view y = b.substr(j, b_end - j);
      x.remove_prefix(std::min(x.find_first_not_of('0'), x.size()));
      y.remove_prefix(std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = a_end;
      j = b_end;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  if (i < a.size() || j < b.size()) return j < b.size() && i == a.size();
  return a < b;
}

}  // namespace detail

/// The prefixes of the Megatron indexed datasets that `where` names, in natural order
/// (shard_2 before shard_10; detail::natural_less): where is a directory (every PREFIX there
/// with both PREFIX.idx and PREFIX.bin), or a path whose last part is a shell pattern
/// (`corpus/shard_*`: the prefixes it matches), or a prefix itself (also one whose name has
/// `*`, `?` or `[`, when that prefix exists).
/// A directory's or a pattern's PREFIX.loss_mask whose PREFIX is found too is that dataset's
/// token mask (token_mask_suffix), not a shard: left out (its 0/1 values would be trained on
/// as tokens). Throws option_error when it names nothing, or a PREFIX.idx or PREFIX.bin
/// without the other (a shard half copied: skipping it would train on less data, silently);
/// io_error when the directory cannot be read. O(entries of the directory).
template <path_like Path>
[[nodiscard]] std::vector<std::filesystem::path> indexed_prefixes(const Path& where_value) {
  namespace fs = std::filesystem;
  const fs::path where(where_value);
  auto complete = [](const fs::path& prefix) {
    return fs::is_regular_file(detail::with_suffix(prefix, ".idx")) &&
           fs::is_regular_file(detail::with_suffix(prefix, ".bin"));
  };
  auto missing_partner = [](const fs::path& named, const fs::path& prefix, const char* have, const char* lack,
                            const char* hint = "") {
    throw option_error(named.string() + ": " + detail::with_suffix(prefix, lack).string() + " is missing beside its " +
                       have + " (a Megatron indexed dataset is both files)" + hint);
  };
  std::error_code error;
  const bool directory = fs::is_directory(where, error);
  const std::string pattern = directory ? "*" : where.filename().string();
  const fs::path folder = directory ? where : (where.has_parent_path() ? where.parent_path() : fs::path("."));
  if (!directory && complete(where)) return {where};
  if (!directory && pattern.find_first_of("*?[") == std::string::npos) {
    fs::path meant = where;
    meant.replace_extension();
    if ((where.extension() == ".bin" || where.extension() == ".idx") && complete(meant))
      throw option_error(where.string() + ": a dataset is named by its prefix, without .bin or .idx: " + meant.string());
    for (const auto& [have, lack] : {std::pair{".idx", ".bin"}, std::pair{".bin", ".idx"}})
      if (fs::is_regular_file(detail::with_suffix(where, have))) missing_partner(where, where, have, lack);
    throw option_error(where.string() + ": no Megatron indexed dataset there (expected " + where.string() +
                       ".idx and .bin, a directory of them, or a pattern such as shard_*)");
  }
  std::vector<fs::path> found;
  fs::directory_iterator it(folder, error);
  if (error) throw io_error(folder.string() + ": cannot list: " + error.message());
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) throw io_error(folder.string() + ": cannot list: " + error.message());
    const fs::path entry = it->path();
    const bool idx = entry.extension() == ".idx";
    if (!idx && entry.extension() != ".bin") continue;
    fs::path prefix = entry;
    prefix.replace_extension();
    if (fnmatch(pattern.c_str(), prefix.filename().c_str(), 0) != 0 || !fs::is_regular_file(entry)) continue;
    if (complete(prefix)) {
      if (idx) found.push_back(prefix);
    } else {
      missing_partner(where, prefix, idx ? ".idx" : ".bin", idx ? ".bin" : ".idx",
                      "; a pattern such as shard_* names the shards alone, leaving other files out");
    }
  }
  if (found.empty())
    throw option_error(where.string() + ": names no Megatron indexed dataset (no PREFIX.idx with its PREFIX.bin)");
  // One folder: the file names decide the order.
  std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) {
    return detail::natural_less(a.filename().native(), b.filename().native());
  });
  const auto mask_of_found = [&found](const fs::path& prefix) {
    const std::string name = prefix.filename().string();
    if (!name.ends_with(token_mask_suffix) || name.size() == token_mask_suffix.size()) return false;
    const fs::path dataset = prefix.parent_path() / name.substr(0, name.size() - token_mask_suffix.size());
    return std::find(found.begin(), found.end(), dataset) != found.end();
  };
  std::vector<fs::path> shards;
  for (const fs::path& prefix : found)
    if (!mask_of_found(prefix)) shards.push_back(prefix);
  return shards;
}

/// Opens every prefix as an indexed_dataset and concatenates them in the order given. Reads
/// each .idx and maps each .bin (no token is read). Throws what indexed_dataset throws,
/// naming the shard. Cost: O(shards + samples) (the indexes are checked).
[[nodiscard]] inline concatenated_dataset<indexed_dataset> open_indexed_datasets(
    std::span<const std::filesystem::path> prefixes) {
  std::vector<indexed_dataset> shards;
  shards.reserve(prefixes.size());
  for (const auto& prefix : prefixes) shards.emplace_back(prefix);
  return concatenated_dataset<indexed_dataset>(std::move(shards));
}

}  // namespace multipack
