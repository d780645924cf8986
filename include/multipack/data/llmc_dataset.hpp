#pragma once
// llm.c's token shards (the .bin files its dev/data scripts write), memory-mapped and
// validated once, at open, split into samples at the end-of-text token the caller names.
//
// One file, little-endian:
//
//   byte 0       header int32[256]: [0] magic, [1] version, [2] token count n, the rest 0
//                  magic 20240520, version 1: tokens are uint16 (GPT-2's vocabulary)
//                  magic 20240801, version 7: tokens are uint32 (Llama 3's vocabulary)
//   byte 1024    tokens[n], back to back
//
// llm.c writes each document as the end-of-text token followed by its text's tokens, so a
// sample begins at every end-of-text token and keeps it; tokens before the first one (a shard
// cut mid-document) form sample 0.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"  // path_like
#include "multipack/core/error.hpp"
#include "multipack/core/sample.hpp"
#include "multipack/data/detail/mapped_file.hpp"
#include "multipack/data/dtype.hpp"

namespace multipack {

namespace detail {
inline constexpr std::int32_t llmc_magic_uint16 = 20240520;  // version 1
inline constexpr std::int32_t llmc_magic_uint32 = 20240801;  // version 7
inline constexpr std::uint64_t llmc_header_bytes = 256 * 4;
}  // namespace detail

/// An llm.c token shard as a dataset of documents. Satisfies multipack::token_dataset.
/// Every const member may be called from any number of threads at once. The file must not be
/// modified or truncated while open (it is mapped).
class llmc_dataset {
 public:
  /// Opens and validates `path`, then finds the samples: one pass over the tokens
  /// (O(n), 8 bytes a sample kept). Throws io_error (naming the path) when the file cannot
  /// be opened or mapped; format_error "<file>: byte <offset>: ..." for a file shorter than
  /// the header, an unknown magic, a version that does not go with the magic, a negative
  /// token count, or a size other than 1024 + n x token width (truncated or trailing bytes);
  /// option_error when end_of_text does not fit the file's token type (a negative one, or
  /// one above 4294967295, before the file is opened).
  ///
  /// end_of_text is any integer type but bool and the character types (plain_integral):
  /// llmc_dataset(path, true) or llmc_dataset(path, 50256.5) does not compile, and -1 is
  /// reported as -1 rather than read as 4294967295 (a token no uint32 file holds, hence one
  /// sample of the whole file).
  template <path_like Path, plain_integral Id>
  llmc_dataset(const Path& path, Id end_of_text)
      : file_((check_end_of_text(path, end_of_text), std::filesystem::path(path))),
        end_of_text_(static_cast<std::uint32_t>(end_of_text)) {
    validate();
    find_samples();
  }

  llmc_dataset(const llmc_dataset&) = delete;
  llmc_dataset& operator=(const llmc_dataset&) = delete;
  llmc_dataset(llmc_dataset&&) noexcept = default;
  llmc_dataset& operator=(llmc_dataset&&) noexcept = default;

  /// Samples (documents). O(1), never throws, thread-safe.
  [[nodiscard]] std::size_t size() const noexcept { return starts_.empty() ? 0 : starts_.size() - 1; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }

  /// The samples in order, as a random-access range of dataset_sample (a pointer and an
  /// index each): `dataset | std::views::filter(f)`, `dataset | multipack::views::pack(o)`.
  /// O(1), never throws; valid as long as the dataset is.
  [[nodiscard]] dataset_iterator<llmc_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<llmc_dataset> end() const noexcept { return {this, size()}; }

  /// Tokens in sample i. Throws option_error when i >= size(). O(1), thread-safe.
  [[nodiscard]] std::uint64_t length(std::size_t i) const {
    check_index(i, "length");
    return starts_[i + 1] - starts_[i];
  }

  /// Bytes a token: 2 (uint16, version 1) or 4 (uint32, version 7). O(1), never throws.
  [[nodiscard]] std::size_t token_bytes() const noexcept { return width_; }
  /// Tokens in the file. O(1), never throws, thread-safe.
  [[nodiscard]] std::uint64_t token_count() const noexcept { return tokens_; }
  [[nodiscard]] std::uint32_t end_of_text() const noexcept { return end_of_text_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return file_.path(); }

  /// Throws io_error when the file has changed size or been written since it was opened
  /// (see indexed_dataset::check_unchanged). One fstat, thread-safe.
  void check_unchanged() const { file_.check_unchanged(); }

  /// Writes tokens [first, first + out.size()) of sample i into `out`, converted to Out.
  /// Throws option_error when i >= size() or the range is not inside the sample, and
  /// sample_error (naming the file, sample, position and value) when a token has no exact
  /// Out value (a uint32 token above INT32_MAX read into int32). O(out.size()), thread-safe.
  template <plain_integral Out, std::size_t Extent>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<Out, Extent> out) const {
    const std::uint64_t n = length(i);
    if (first > n || out.size() > n - first)
      throw option_error(path().string() + ": read_tokens: tokens [" + std::to_string(first) + ", +" +
                         std::to_string(out.size()) + ") are outside sample " + std::to_string(i) + " of length " +
                         std::to_string(n));
    const std::uint64_t at = starts_[i] + first;
    if (width_ == 2)
      convert(reinterpret_cast<const std::uint16_t*>(token_bytes_at(at)), out, i, first);
    else
      convert(reinterpret_cast<const std::uint32_t*>(token_bytes_at(at)), out, i, first);
  }

  /// A hint: starts loading tokens [first, first + count) of sample i into the cache.
  /// Out-of-range arguments are ignored. O(count / 64), never throws, thread-safe.
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept {
    if (i >= size()) return;
    const std::uint64_t n = starts_[i + 1] - starts_[i];
    if (first >= n) return;
    const std::uint64_t bytes = std::min(count, n - first) * width_;
    const std::byte* begin = token_bytes_at(starts_[i] + first);
    for (std::uint64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(begin + offset);
  }

 private:
  // The mapping is page-aligned and the tokens start at byte 1024: aligned for both widths.
  const std::byte* token_bytes_at(std::uint64_t token) const noexcept {
    return file_.data() + detail::llmc_header_bytes + token * width_;
  }

  template <class S, class Out, std::size_t Extent>
  void convert(const S* src, std::span<Out, Extent> out, std::size_t i, std::uint64_t first) const {
    const std::size_t bad = detail::convert_exactly(src, out.data(), out.size());
    if (bad != out.size())
      throw sample_error(path().string() + ": sample " + std::to_string(i) + ", token " + std::to_string(first + bad) +
                         ": value " + detail::value_text(src[bad]) + " (uint" + std::to_string(8 * sizeof(S)) +
                         ") has no exact " + std::string(detail::type_name<Out>()) + " value");
  }

  template <class Path, class Id>
  static void check_end_of_text(const Path& path, Id end_of_text) {
    if (!std::in_range<std::uint32_t>(end_of_text))
      throw option_error(std::filesystem::path(path).string() + ": end-of-text token " + std::to_string(end_of_text) +
                         " is not a token id (llm.c's tokens are 0 to 4294967295)");
  }

  [[noreturn]] void fail(std::uint64_t offset, const std::string& what) const {
    throw format_error(path().string() + ": byte " + std::to_string(offset) + ": " + what);
  }

  std::int32_t header(std::size_t k) const noexcept {
    std::int32_t v;
    std::memcpy(&v, file_.data() + 4 * k, 4);
    return v;
  }

  void validate() {
    const std::uint64_t size = file_.size();
    if (size < detail::llmc_header_bytes)
      fail(size, "truncated header: llm.c shards start with 1024 bytes (256 int32), the file has " +
                     std::to_string(size));
    const std::int32_t magic = header(0);
    const std::int32_t version = header(1);
    if (magic == detail::llmc_magic_uint16) {
      if (version != 1) fail(4, "version " + std::to_string(version) + ", expected 1 with magic 20240520");
      width_ = 2;
    } else if (magic == detail::llmc_magic_uint32) {
      if (version != 7) fail(4, "version " + std::to_string(version) + ", expected 7 with magic 20240801");
      width_ = 4;
    } else {
      fail(0, "bad magic " + std::to_string(magic) +
                  ": expected 20240520 (llm.c, uint16 tokens) or 20240801 (llm.c, uint32 tokens)");
    }
    const std::int32_t count = header(2);
    if (count < 0) fail(8, "token count " + std::to_string(count) + " is negative");
    tokens_ = static_cast<std::uint64_t>(count);
    const std::uint64_t expected = detail::llmc_header_bytes + tokens_ * width_;
    if (size != expected)
      fail(std::min(size, expected), "the header's " + std::to_string(tokens_) + " uint" + std::to_string(8 * width_) +
                                         " tokens need a file of " + std::to_string(expected) +
                                         " bytes, the file has " + std::to_string(size) +
                                         (size < expected ? " (truncated)" : " (trailing bytes)"));
    if (width_ == 2 && end_of_text_ > std::numeric_limits<std::uint16_t>::max())
      throw option_error(path().string() + ": end-of-text token " + std::to_string(end_of_text_) +
                         " does not fit the file's uint16 tokens");
  }

  template <class S>
  void find_starts() {
    const S* tokens = reinterpret_cast<const S*>(file_.data() + detail::llmc_header_bytes);
    const auto eot = static_cast<S>(end_of_text_);
    if (tokens_ > 0 && tokens[0] != eot) starts_.push_back(0);
    for (std::uint64_t k = 0; k < tokens_; ++k)
      if (tokens[k] == eot) starts_.push_back(k);
    starts_.push_back(tokens_);
  }

  void find_samples() {
    if (width_ == 2)
      find_starts<std::uint16_t>();
    else
      find_starts<std::uint32_t>();
  }

  void check_index(std::size_t i, const char* what) const {
    if (i >= size())
      throw option_error(path().string() + ": " + what + ": sample " + std::to_string(i) +
                         " out of range (the shard has " + std::to_string(size()) + " samples)");
  }

  detail::mapped_file file_;
  std::uint32_t end_of_text_;
  std::size_t width_ = 2;
  std::uint64_t tokens_ = 0;
  std::vector<std::uint64_t> starts_;  // sample i is tokens [starts_[i], starts_[i + 1])
};

}  // namespace multipack
