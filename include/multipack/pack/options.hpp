#pragma once
// What the packer is asked to do: row capacity, algorithm, what to do with samples longer
// than a row, an optional cap on samples per row, and the seed of the randomized algorithm.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "multipack/core/detail/enum_names.hpp"
#include "multipack/core/error.hpp"

namespace multipack {

enum class packing_algorithm : std::uint8_t {
  /// The default. Fills one row at a time, largest samples first, and closes each row's last
  /// gap exactly with one or two unplaced samples whose lengths sum to the gap (found in a
  /// histogram of the lengths still unplaced). Reaches the lower bound on rows, or a handful
  /// above it, on real length distributions (Alpaca from 2,048 tokens). With rows of a few
  /// samples its last rows are left with the shortest samples, of nearly one length, that no
  /// gap fits (Alpaca at 512 tokens: 1.003 x the bound). When it ends over 1.0001 x the
  /// bound + 1, it packs again as randomized_exact_fit from a fixed seed (its rows mix lengths
  /// to the end; exact_fit's rows still depend on neither seed nor epoch) and keeps the
  /// packing with fewer rows. Alpaca, 10 M lengths: at 320 tokens 1.0092 to 1.0019 x the
  /// bound, at 384 1.0044 to 1.0005 x, at 448 1.0023 to 1.00016 x, at 512 1.0031 to 1.00001 x,
  /// from 768 at it, for 3-4 x the first packing's time; at 192 and 256 (two samples a row) it
  /// keeps the first packing (1.0018 and 1.004 x), after about 4 x the time.
  /// O(n + rows * distinct lengths) worst case. Rows are grouped by length, the first rows
  /// holding the longest samples, unless the second packing is kept.
  exact_fit,
  /// Classical best-fit decreasing: samples longest first (ties: lowest index first), each into
  /// the open row with the least room that still fits it (ties: the earliest row). O(n log n).
  best_fit_decreasing,
  /// Classical first-fit decreasing: samples longest first, each into the earliest row with
  /// room for it. O(n log rows).
  first_fit_decreasing,
  /// Dataset order kept: a row is closed as soon as the next sample does not fit. O(n).
  /// For curriculum and streaming users; wastes the most.
  next_fit,
  /// Randomized: each row is opened with uniformly random unplaced samples, then closed
  /// exactly as exact_fit closes it; samples of equal length are dealt out in a seeded random
  /// order of blocks of 256 consecutive samples (in index order within a block). Rows are NOT
  /// grouped by length (each row is a random mix, so training does not see length-sorted
  /// batches, which users of other packers found shifted their loss), at the price of slightly
  /// more time than exact_fit and rows within a few per mille of the lower bound. A new seed
  /// (one per epoch) gives a new packing; with few distinct lengths it may pair the same
  /// samples again (one block order serves every length: with lengths 300 and 700 in rows of
  /// 1,000, each row takes the next sample of each, and the pairs repeat in another order).
  randomized_exact_fit,
};

/// What happens to a sample longer than a row.
enum class overlong_policy : std::uint8_t {
  drop,      ///< not packed; counted in the report (default)
  truncate,  ///< its first `capacity` tokens are packed; the rest is counted as truncated
  split,     ///< cut into pieces of `capacity` tokens (each a full row) and a shorter remainder
  error,     ///< packing throws sample_error naming the sample and its length
};

struct pack_options {
  std::uint32_t capacity = 4096;  ///< tokens per row
  packing_algorithm algorithm = packing_algorithm::exact_fit;
  overlong_policy overlong = overlong_policy::drop;
  std::uint32_t max_per_row = 0;  ///< most pieces in one row; 0 = unlimited
  /// randomized_exact_fit only: the packing of epoch `epoch` of `seed` (it draws from
  /// epoch_seed(seed, epoch)). Give views::shard / schedule_options the same two: a schedule
  /// over a randomized packing of another (seed, epoch) is refused.
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  /// Threads for the passes over the samples (classifying, bucketing, the last pass) and, for
  /// exact_fit and randomized_exact_fit on 2^20 pieces or more, two for the row filling, which
  /// then runs in two halves; the rows are the same for any number.
  std::uint32_t threads = 1;
};

/// The largest capacity accepted: the histogram-based packers keep O(capacity) counters.
inline constexpr std::uint32_t max_capacity = std::uint32_t{1} << 26;

inline constexpr std::array<std::pair<packing_algorithm, std::string_view>, 5> packing_algorithm_names{{
    {packing_algorithm::exact_fit, "exact-fit"},
    {packing_algorithm::best_fit_decreasing, "best-fit-decreasing"},
    {packing_algorithm::first_fit_decreasing, "first-fit-decreasing"},
    {packing_algorithm::next_fit, "next-fit"},
    {packing_algorithm::randomized_exact_fit, "randomized-exact-fit"},
}};

inline constexpr std::array<std::pair<overlong_policy, std::string_view>, 4> overlong_policy_names{{
    {overlong_policy::drop, "drop"},
    {overlong_policy::truncate, "truncate"},
    {overlong_policy::split, "split"},
    {overlong_policy::error, "error"},
}};

/// "exact-fit", "best-fit-decreasing", ... O(1), never throws.
[[nodiscard]] constexpr std::string_view to_string(packing_algorithm a) noexcept {
  return detail::name_of(packing_algorithm_names, a);
}
[[nodiscard]] constexpr std::string_view to_string(overlong_policy p) noexcept {
  return detail::name_of(overlong_policy_names, p);
}

/// The inverse of to_string; throws option_error listing the known names.
[[nodiscard]] inline packing_algorithm parse_packing_algorithm(std::string_view text) {
  return detail::parse_name(packing_algorithm_names, text, "packing algorithm");
}
[[nodiscard]] inline overlong_policy parse_overlong_policy(std::string_view text) {
  return detail::parse_name(overlong_policy_names, text, "overlong policy");
}

/// The most threads pack_options::threads accepts.
inline constexpr std::uint32_t max_packing_threads = 256;

/// Throws option_error when the options cannot be packed with (capacity 0 or too large,
/// threads 0 or over max_packing_threads, an algorithm or overlong policy that is none of the
/// enum's values).
inline void validate(const pack_options& options) {
  detail::require_named(packing_algorithm_names, options.algorithm, "pack_options", "algorithm");
  detail::require_named(overlong_policy_names, options.overlong, "pack_options", "overlong policy");
  if (options.capacity == 0) throw option_error("pack_options: capacity must be at least 1 token");
  if (options.threads == 0) throw option_error("pack_options: threads must be at least 1");
  if (options.threads > max_packing_threads)
    throw option_error("pack_options: " + std::to_string(options.threads) + " threads; at most " +
                       std::to_string(max_packing_threads) + " are supported");
  if (options.capacity > max_capacity)
    throw option_error("pack_options: capacity " + std::to_string(options.capacity) +
                       " exceeds the largest supported, " + std::to_string(max_capacity));
}

}  // namespace multipack
