#pragma once
// The inputs the packing tests share: the real Alpaca lengths, generated lengths of several
// shapes, and the algorithms and overlong policies every property is checked under.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "multipack/core/random.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/pack/options.hpp"
#include "support/paths.hpp"

namespace multipack::test {

inline std::vector<std::uint32_t> alpaca_lengths() {
  return read_length_list(source_dir() / "data/alpaca/lengths.txt");
}

/// `count` lengths drawn with replacement from the real Alpaca lengths, with `rng` (which the
/// caller may go on drawing from).
inline std::vector<std::uint32_t> resampled_alpaca_lengths(std::size_t count, splitmix64& rng) {
  const std::vector<std::uint32_t> alpaca = alpaca_lengths();
  std::vector<std::uint32_t> lengths(count);
  for (auto& length : lengths) length = alpaca[rng.below(alpaca.size())];
  return lengths;
}

/// Lengths of several shapes: short and uniform, long-tailed with some over `capacity`,
/// with zeros, all equal.
inline std::vector<std::uint32_t> generated_lengths(std::uint64_t seed, std::uint32_t capacity) {
  splitmix64 rng(seed);
  const auto n = static_cast<std::size_t>(rng.below(400));
  std::vector<std::uint32_t> lengths(n);
  const std::uint64_t shape = seed % 4;
  for (auto& length : lengths) {
    if (shape == 0) length = static_cast<std::uint32_t>(1 + rng.below(capacity / 3 + 1));
    if (shape == 1) length = static_cast<std::uint32_t>(rng.below(2) ? rng.below(capacity / 8 + 1) : rng.below(3 * capacity));
    if (shape == 2) length = static_cast<std::uint32_t>(rng.below(capacity + 1));
    if (shape == 3) length = capacity / 3 + 1;
  }
  return lengths;
}

inline constexpr packing_algorithm all_algorithms[] = {
    packing_algorithm::exact_fit, packing_algorithm::best_fit_decreasing, packing_algorithm::first_fit_decreasing,
    packing_algorithm::next_fit, packing_algorithm::randomized_exact_fit};
inline constexpr overlong_policy tolerant_policies[] = {overlong_policy::drop, overlong_policy::truncate,
                                                        overlong_policy::split};

}  // namespace multipack::test
