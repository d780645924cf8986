#pragma once
// An epoch ready to train on: the packing of the epoch and its schedule, built from the
// sample lengths in one call that every rank makes identically.

#include <cstdint>
#include <span>
#include <utility>

#include "multipack/core/concepts.hpp"  // plain_integral
#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/pack/pack.hpp"
#include "multipack/schedule/epoch_schedule.hpp"
#include "multipack/schedule/options.hpp"

namespace multipack {

struct epoch_plan {
  packing packed;           ///< the rows of this epoch and what the packer did with every sample
  epoch_schedule schedule;  ///< which row every (step, rank, slot) takes

  /// The pieces of the row that `rank` trains on in `step`, slot `slot` (< micro_batch); empty
  /// for a padding row. O(1). Throws option_error for a step, rank or slot out of range. The
  /// rank is any integer type but bool and the character types, as epoch_schedule::rows takes it.
  /// Thread-safe (const).
  template <plain_integral Rank>
  [[nodiscard]] std::span<const piece> pieces(std::uint64_t step, Rank rank, std::uint32_t slot) const {
    const std::span<const std::uint32_t> rows = schedule.rows(step, rank);
    if (slot >= rows.size())
      throw option_error("epoch_plan: slot " + std::to_string(slot) + " is outside the micro-batch of " +
                         std::to_string(rows.size()) + " rows");
    if (rows[slot] == epoch_schedule::padding_row) return {};
    return packed.rows[rows[slot]];
  }
};

/// Packs the lengths for this epoch and schedules the rows. The epoch is the schedule's:
/// options.seed and options.epoch are also the packer's (packing_options' own seed and epoch
/// are replaced), so the randomized algorithm repacks every epoch, exactly as
/// views::pack({..., .seed = s, .epoch = e}) does; the others give the same rows, in a new
/// order. A pure function of (lengths, packing_options, options). With `storage` (an earlier
/// plan), the rows are packed into its packing's blocks, as pack(lengths, options, storage)
/// does, which takes them (or refuses the input first): the same plan.
///
/// Throws what pack and epoch_schedule throw. Cost: theirs. Thread-safe: shares nothing.
template <class Lengths>
[[nodiscard]] epoch_plan plan_epoch(Lengths&& lengths, pack_options packing_options, const schedule_options& options,
                                    epoch_plan&& storage = epoch_plan{})
  requires requires { pack(std::forward<Lengths>(lengths), packing_options); }
{
  validate(options);
  packing_options.seed = options.seed;
  packing_options.epoch = options.epoch;
  epoch_plan plan{pack(std::forward<Lengths>(lengths), packing_options, std::move(storage.packed)), {}};
  plan.schedule = epoch_schedule(plan.packed.rows, options);
  return plan;
}

}  // namespace multipack
