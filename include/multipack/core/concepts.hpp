#pragma once
// The concepts that connect the rooms. A user plugs in their own storage by satisfying
// token_dataset; nothing else in multipack needs to know how tokens are stored.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace multipack {

/// A dataset of token sequences ("samples"), indexed 0 .. size()-1.
///  - size(): number of samples;
///  - length(i): tokens in sample i;
///  - read_tokens(i, first, out): writes tokens [first, first + out.size()) of sample i into
///    `out`, converted to the output's integer type; throws multipack::error when the range
///    is outside the sample or the read fails.
/// Every member must be safe to call from several threads at once on a const dataset.
template <class D>
concept token_dataset = requires(const D& d, std::size_t i, std::uint64_t first,
                                 std::span<std::int32_t> out32, std::span<std::int64_t> out64) {
  { d.size() } -> std::convertible_to<std::size_t>;
  { d.length(i) } -> std::convertible_to<std::uint64_t>;
  d.read_tokens(i, first, out32);
  d.read_tokens(i, first, out64);
};

/// A dataset that can be asked to bring tokens into the cache ahead of a read:
/// prefetch_tokens(i, first, count), a hint that never throws.
template <class D>
concept prefetching_dataset = requires(const D& d, std::size_t i, std::uint64_t first, std::uint64_t count) {
  { d.prefetch_tokens(i, first, count) } noexcept;
};

}  // namespace multipack
