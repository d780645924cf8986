#pragma once
// What an epoch's schedule is asked for: how many ranks, how many rows each takes per step,
// which epoch of which seed, and what happens to the rows that do not fill a last step.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "multipack/core/concepts.hpp"
#include "multipack/core/detail/enum_names.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/random.hpp"

namespace multipack {

/// What happens to the rows that do not fill a last global step of world_size x micro_batch.
enum class remainder_policy : std::uint8_t {
  /// The default: the last step is completed with padding rows (no pieces, no loss), so no
  /// sample of the epoch is lost.
  pad,
  /// The rows of the incomplete last step are left out of the epoch and counted in the report.
  /// Which rows those are changes with the epoch, since the order of rows does.
  drop,
};

inline constexpr std::array<std::pair<remainder_policy, std::string_view>, 2> remainder_policy_names{{
    {remainder_policy::pad, "pad"},
    {remainder_policy::drop, "drop"},
}};

/// "pad" or "drop". O(1), never throws.
[[nodiscard]] constexpr std::string_view to_string(remainder_policy p) noexcept {
  return detail::name_of(remainder_policy_names, p);
}
/// The inverse of to_string; throws option_error listing the known names.
[[nodiscard]] inline remainder_policy parse_remainder_policy(std::string_view text) {
  return detail::parse_name(remainder_policy_names, text, "remainder policy");
}

struct schedule_options {
  std::uint32_t world_size = 1;   ///< ranks (data-parallel processes)
  std::uint32_t micro_batch = 1;  ///< rows each rank takes per step
  std::uint64_t seed = 0;         ///< with epoch, fixes the packing (randomized algorithm) and the order of rows
  std::uint64_t epoch = 0;
  remainder_policy remainder = remainder_policy::pad;
  /// Rows go to ranks within a step largest cost first (see row_cost); off: rank r takes the
  /// r-th consecutive micro_batch rows of the step, and in a last step that is not full, the
  /// rows r, r + world_size, ... of it (each rank a real row while there are enough). A last
  /// step with fewer real rows than ranks leaves some ranks only padding rows, either way.
  bool balance = true;
  /// Rows of this epoch's sequence already trained on, by a run that may have had another
  /// world size or micro-batch: the schedule starts after them. 0 for a fresh epoch.
  std::uint64_t consumed_rows = 0;
};

namespace detail {

/// Throws option_error "<who>: rank R is outside the world of W ranks", R as the caller gave
/// it (-1, not 4294967295): the one message for a rank outside the world. O(1).
[[noreturn]] inline void throw_rank_outside_world(std::string_view who, const std::string& rank, std::uint32_t world_size) {
  throw option_error(std::string(who) + ": rank " + rank + " is outside the world of " + std::to_string(world_size) +
                     " ranks");
}

/// Throws that option_error when rank >= world_size. O(1).
inline void check_rank_in_world(std::uint32_t rank, std::uint32_t world_size, std::string_view who) {
  if (rank >= world_size) throw_rank_outside_world(who, std::to_string(rank), world_size);
}

/// A rank given as any integer type but bool and the character types (plain_integral: a bool
/// such as is_main would otherwise pass as rank 1), as the schedule keeps it. Throws
/// option_error naming `who` and the rank as given (-1, not 4294967295) when no uint32 holds
/// it; whether it is inside the world is the caller's check. O(1).
template <plain_integral Rank>
[[nodiscard]] std::uint32_t rank_argument(Rank rank, std::uint32_t world_size, const char* who) {
  if (!std::in_range<std::uint32_t>(rank)) throw_rank_outside_world(who, std::to_string(rank), world_size);
  return static_cast<std::uint32_t>(rank);
}

}  // namespace detail

/// The most rows one global step may take (world_size x micro_batch): 2^24, 16 M rows, a
/// thousand times any real job's, so that a mistyped option fails here rather than
/// allocating gigabytes of padding.
inline constexpr std::uint64_t max_rows_a_step = std::uint64_t{1} << 24;

/// Throws option_error for a world size or micro-batch of 0, a step of more than
/// max_rows_a_step rows, or a remainder policy that is none of the enum's values. O(1).
inline void validate(const schedule_options& options) {
  detail::require_named(remainder_policy_names, options.remainder, "schedule_options", "remainder policy");
  if (options.world_size == 0) throw option_error("schedule_options: world_size must be at least 1 rank");
  if (options.micro_batch == 0) throw option_error("schedule_options: micro_batch must be at least 1 row");
  const std::uint64_t step_rows = std::uint64_t{options.world_size} * options.micro_batch;
  if (step_rows > max_rows_a_step)
    throw option_error("schedule_options: world_size x micro_batch = " + std::to_string(step_rows) +
                       " rows a step; at most " + std::to_string(max_rows_a_step) + " are supported");
}

}  // namespace multipack
