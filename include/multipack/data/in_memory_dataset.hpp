#pragma once
// Samples held in memory: all tokens in one flat array, samples as offsets into it (one
// allocation each, not one vector per sample). For tests, small sets, and data a caller
// tokenised itself.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/core/error.hpp"
#include "multipack/core/sample.hpp"
#include "multipack/data/dtype.hpp"

namespace multipack {

/// Token samples in memory; satisfies multipack::token_dataset. Every const member may be
/// called from any number of threads at once.
template <plain_integral Token = std::int32_t>  // not bool: std::vector<bool> is not contiguous
class in_memory_dataset {
 public:
  using token_type = Token;

  /// No samples. Never throws.
  in_memory_dataset() = default;

  /// One sample per inner vector, in order. O(total tokens); throws std::bad_alloc only.
  explicit in_memory_dataset(const std::vector<std::vector<Token>>& samples) {
    std::size_t total = 0;
    for (const auto& s : samples) total += s.size();
    tokens_.reserve(total);
    offsets_.reserve(samples.size() + 1);
    for (const auto& s : samples) {
      tokens_.insert(tokens_.end(), s.begin(), s.end());
      offsets_.push_back(tokens_.size());
    }
  }

  /// One sample per inner list: in_memory_dataset<> d{{1, 5, 2}, {1, 2}}. O(total tokens).
  in_memory_dataset(std::initializer_list<std::initializer_list<Token>> samples) {
    for (const auto& s : samples) {
      tokens_.insert(tokens_.end(), s.begin(), s.end());
      offsets_.push_back(tokens_.size());
    }
  }

  /// Takes flat `tokens` and `offsets` (sample i is tokens [offsets[i], offsets[i+1])).
  /// Empty `offsets` means no samples (then `tokens` must be empty too). Throws option_error
  /// naming the offending entry unless the offsets start at 0, never decrease and end at
  /// tokens.size(). O(samples). Call it with parentheses when the vectors are written out:
  /// in_memory_dataset<> d{{1, 2, 3}, {0, 3}} is two samples, {1, 2, 3} and {0, 3}, by the
  /// constructor above (as std::vector<int>{3, 4} is two elements, not three fours).
  explicit in_memory_dataset(std::vector<Token> tokens, std::vector<std::uint64_t> offsets)
      : tokens_(std::move(tokens)), offsets_(std::move(offsets)) {
    if (offsets_.empty()) offsets_.push_back(0);
    if (offsets_.front() != 0)
      throw option_error("in_memory_dataset: offset 0 is " + std::to_string(offsets_.front()) +
                         ", expected 0");
    for (std::size_t k = 1; k < offsets_.size(); ++k)
      if (offsets_[k] < offsets_[k - 1])
        throw option_error("in_memory_dataset: offset " + std::to_string(k) + " (" +
                           std::to_string(offsets_[k]) + ") is less than offset " +
                           std::to_string(k - 1) + " (" + std::to_string(offsets_[k - 1]) +
                           "): offsets must not decrease");
    if (offsets_.back() != tokens_.size())
      throw option_error("in_memory_dataset: last offset (" + std::to_string(offsets_.back()) +
                         ") must equal the token count (" + std::to_string(tokens_.size()) + ")");
  }

  /// Number of samples. O(1), never throws. (A moved-from dataset has no offsets: size 0.)
  [[nodiscard]] std::size_t size() const noexcept {
    return offsets_.empty() ? 0 : offsets_.size() - 1;
  }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }

  /// The samples in order, as a random-access range of dataset_sample (a pointer and an
  /// index each): `dataset | std::views::filter(f)`, `dataset | multipack::views::pack(o)`.
  /// O(1), never throws; valid as long as the dataset is.
  [[nodiscard]] dataset_iterator<in_memory_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<in_memory_dataset> end() const noexcept { return {this, size()}; }

  /// Tokens in sample i. Throws option_error when i >= size(). O(1).
  [[nodiscard]] std::uint64_t length(std::size_t i) const {
    check_index(i, "length");
    return offsets_[i + 1] - offsets_[i];
  }

  /// The tokens of sample i (no copy; valid until the dataset is destroyed or moved from).
  /// Throws option_error when i >= size(). O(1).
  [[nodiscard]] std::span<const Token> tokens(std::size_t i) const {
    check_index(i, "tokens");
    return std::span<const Token>(tokens_).subspan(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }

  /// Writes tokens [first, first + out.size()) of sample i into `out`, converted to Out.
  /// Throws option_error when i >= size() or the range is not inside the sample, and
  /// sample_error when a token has no Out value (e.g. an int64 token above INT32_MAX read
  /// into int32). O(out.size()).
  template <plain_integral Out, std::size_t Extent>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<Out, Extent> out) const {
    check_index(i, "read_tokens");
    const std::uint64_t len = offsets_[i + 1] - offsets_[i];
    if (first > len || out.size() > len - first)
      throw option_error("in_memory_dataset: read_tokens: tokens [" + std::to_string(first) +
                         ", first + " + std::to_string(out.size()) + ") are outside sample " +
                         std::to_string(i) + " of length " + std::to_string(len));
    const Token* src = tokens_.data() + offsets_[i] + first;
    if constexpr (std::in_range<Out>(std::numeric_limits<Token>::min()) &&
                  std::in_range<Out>(std::numeric_limits<Token>::max())) {
      for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<Out>(src[k]);
    } else {
      for (std::size_t k = 0; k < out.size(); ++k)
        if (!detail::exact_convert(src[k], out[k]))
          throw sample_error("in_memory_dataset: sample " + std::to_string(i) + ", token " +
                             std::to_string(first + k) + ": value " +
                             detail::value_text(src[k]) + " has no " +
                             std::string(detail::type_name<Out>()) + " value");
    }
  }

  /// Every token, sample after sample. O(1), never throws.
  [[nodiscard]] std::span<const Token> all_tokens() const noexcept { return tokens_; }
  /// size() + 1 offsets into all_tokens() (none when moved from). O(1), never throws.
  [[nodiscard]] std::span<const std::uint64_t> offsets() const noexcept { return offsets_; }

 private:
  void check_index(std::size_t i, const char* what) const {
    if (i >= size())
      throw option_error(std::string("in_memory_dataset: ") + what + ": sample " +
                         std::to_string(i) + " out of range (the dataset has " +
                         std::to_string(size()) + " samples)");
  }

  std::vector<Token> tokens_;
  std::vector<std::uint64_t> offsets_{0};
};

}  // namespace multipack
