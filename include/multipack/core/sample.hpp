#pragma once
// Reading a sample whatever its form (core/concepts.hpp, token_sample), and the samples of a
// dataset indexed by position (dataset_sample), which is what multipack's datasets' begin()
// and end() yield.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "multipack/core/concepts.hpp"
#include "multipack/core/detail/position_iterator.hpp"
#include "multipack/core/error.hpp"

namespace multipack {

/// Tokens in sample `s`: s.length(), or the size of a plain integer range. O(1) for the
/// plain form; what s.length() costs otherwise (and what it throws).
template <class S>
  requires token_sample<S>
[[nodiscard]] std::uint64_t sample_length(const S& s) {
  if constexpr (detail::member_token_sample<std::remove_cvref_t<S>>)
    return static_cast<std::uint64_t>(s.length());
  else
    return static_cast<std::uint64_t>(std::ranges::size(s));
}

/// Writes tokens [first, first + out.size()) of sample `s` into `out`, converted to T. The
/// member form calls s.read_tokens(first, out) (and throws what it throws). The plain form
/// throws option_error when the range is outside the sample and sample_error naming the
/// token when a value has no T value (a uint64 token above INT32_MAX read into int32).
/// O(out.size()). Thread-safe when the sample's own reads are.
template <batch_token T, class S>
  requires sample_reads_as<S, T>
void read_sample_tokens(const S& s, std::uint64_t first, std::span<T> out) {
  using U = std::remove_cvref_t<S>;
  if constexpr (detail::sample_member_reads_as<U, T>) {
    s.read_tokens(first, out);
  } else {
    const auto length = static_cast<std::uint64_t>(std::ranges::size(s));
    if (first > length || out.size() > length - first)
      throw option_error("read_sample_tokens: tokens [" + std::to_string(first) + ", " + std::to_string(first) +
                         " + " + std::to_string(out.size()) + ") are outside a sample of " + std::to_string(length) +
                         " tokens");
    using V = std::ranges::range_value_t<const U>;
    const V* source = std::ranges::data(s) + first;
    if constexpr (std::in_range<T>(std::numeric_limits<V>::min()) && std::in_range<T>(std::numeric_limits<V>::max())) {
      for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<T>(source[k]);
    } else {
      for (std::size_t k = 0; k < out.size(); ++k) {
        if (!std::in_range<T>(source[k]))
          throw sample_error("read_sample_tokens: token " + std::to_string(first + k) + " has value " +
                             std::to_string(source[k]) + ", which an int" + std::to_string(8 * sizeof(T)) +
                             " batch cannot hold");
        out[k] = static_cast<T>(source[k]);
      }
    }
  }
}

/// Asks sample `s` to bring tokens [first, first + count) into the cache, where it can
/// (prefetching_sample); otherwise does nothing. Never throws.
template <class S>
void prefetch_sample_tokens(const S& s, std::uint64_t first, std::uint64_t count) noexcept {
  if constexpr (prefetching_sample<S>) s.prefetch_tokens(first, count);
}

/// Sample `index()` of a dataset D (a token_dataset), as an element of the dataset's range: a
/// pointer and an index (16 bytes), valid as long as the dataset is. Every call goes to the
/// dataset's own member, so it costs, throws and is as thread-safe as that member.
template <class D>
class dataset_sample {
 public:
  dataset_sample() = default;
  dataset_sample(const D* dataset, std::size_t index) noexcept : dataset_(dataset), index_(index) {}

  /// Tokens in the sample: dataset().length(index()).
  [[nodiscard]] std::uint64_t length() const { return static_cast<std::uint64_t>(dataset_->length(index_)); }

  /// dataset().read_tokens(index(), first, out), for the token types the dataset reads.
  template <batch_token T>
    requires dataset_reads_as<D, T>
  void read_tokens(std::uint64_t first, std::span<T> out) const {
    dataset_->read_tokens(index_, first, out);
  }

  /// dataset().prefetch_tokens(index(), first, count), where the dataset has it.
  void prefetch_tokens(std::uint64_t first, std::uint64_t count) const noexcept
    requires prefetching_dataset<D>
  {
    dataset_->prefetch_tokens(index_, first, count);
  }

  /// The stored tokens, no copy, where the dataset gives them (dataset().tokens<T>(index())
  /// for a file's own type, dataset().tokens(index()) for an in-memory one).
  template <class T>
  [[nodiscard]] auto tokens() const
    requires requires(const D& d, std::size_t i) { d.template tokens<T>(i); }
  {
    return dataset_->template tokens<T>(index_);
  }
  [[nodiscard]] auto tokens() const
    requires requires(const D& d, std::size_t i) { d.tokens(i); }
  {
    return dataset_->tokens(index_);
  }

  /// The sample's index in its dataset: its identity, whatever view it was reached through.
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  [[nodiscard]] const D& dataset() const noexcept { return *dataset_; }

 private:
  const D* dataset_ = nullptr;
  std::size_t index_ = 0;
};

namespace detail {
struct sample_at {
  template <class D>
  dataset_sample<D> operator()(const D& dataset, std::size_t i) const noexcept {
    return {&dataset, i};
  }
};
}  // namespace detail

/// The iterator of a dataset's samples: random access, dataset_sample<D> by value.
template <class D>
using dataset_iterator = detail::position_iterator<D, detail::sample_at>;

}  // namespace multipack
