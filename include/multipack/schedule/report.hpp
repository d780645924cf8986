#pragma once
// What a schedule did with every row of the packing, and how evenly it spread the work.

#include <cstdint>

namespace multipack {

struct schedule_report {
  std::uint32_t world_size = 0;
  std::uint32_t micro_batch = 0;
  std::uint64_t steps = 0;            ///< global steps, the same on every rank
  std::uint64_t rows = 0;             ///< rows of the packing
  std::uint64_t consumed_rows = 0;    ///< rows left out because an earlier run trained on them
  std::uint64_t scheduled_rows = 0;   ///< rows of the packing in some (step, rank, slot)
  std::uint64_t padded_rows = 0;      ///< padding rows added to complete the last step (pad)
  /// Ranks whose micro-batch in the last step is padding rows only (pad, when that step has
  /// fewer real rows than ranks): they train on no token there, so a loss averaged over each
  /// rank's own tokens is 0/0 on them. Divide the summed loss by the loss tokens of the whole
  /// step (all-reduced) instead.
  std::uint32_t padding_only_ranks = 0;
  std::uint64_t dropped_rows = 0;     ///< rows of the incomplete last step left out (drop)
  std::uint64_t dropped_samples = 0;  ///< samples with a piece in a dropped row
  std::uint64_t dropped_tokens = 0;   ///< tokens in dropped rows

  /// Over the steps, (cost of the costliest rank / mean cost of a rank) with the rows
  /// assigned as scheduled: 1 is perfect. The mean of the steps and the worst step.
  double balance_mean = 0;
  double balance_worst = 0;
  /// The same when rank r simply takes the r-th consecutive micro_batch rows of each step.
  double balance_mean_unbalanced = 0;
  double balance_worst_unbalanced = 0;
};

}  // namespace multipack
