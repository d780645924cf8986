#pragma once
// An epoch ready to train on: the packing of the epoch and its schedule, built from the
// sample lengths in one call that every rank makes identically.

#include <cstdint>
#include <memory>
#include <mutex>
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

namespace detail {

/// The plans that later plans are packed into (plan_epoch_recycling): a plan comes back here
/// when its last holder lets it go (in an epoch loader: once the plan's last step is built),
/// and the next planning takes the one that came back first. Keeps two plans at most: an
/// epoch loader holds two, and when its planning thread is slow to wake both can come back
/// before the next call (keeping one, the second was freed and the fourth epoch allocated
/// anew). Thread-safe.
class plan_recycler {
 public:
  /// Keeps `plan` for a later call, or frees it when two are kept already. O(1), or the
  /// plan's freeing.
  void give_back(std::unique_ptr<epoch_plan> plan) noexcept {
    {
      const std::lock_guard lock(mutex_);
      for (std::unique_ptr<epoch_plan>& kept : kept_)
        if (!kept) {
          kept = std::move(plan);
          break;
        }
    }
    // A plan not kept is freed here, outside the lock.
  }

  /// The plan kept longest, or null. O(1).
  [[nodiscard]] std::unique_ptr<epoch_plan> take() noexcept {
    const std::lock_guard lock(mutex_);
    std::unique_ptr<epoch_plan> first = std::move(kept_[0]);
    kept_[0] = std::move(kept_[1]);
    if (first) ++reused_;
    return first;
  }

  /// The plans take() handed out so far: the plans packed into an earlier plan's memory. O(1).
  [[nodiscard]] std::uint64_t reused() const noexcept {
    const std::lock_guard lock(mutex_);
    return reused_;
  }

 private:
  mutable std::mutex mutex_;
  std::uint64_t reused_ = 0;
  std::unique_ptr<epoch_plan> kept_[2];  // the first back first; kept_[1] only with kept_[0]
};

/// The deleter of plan_epoch_recycling's plans: to the recycler while it lives.
struct give_back_to_recycler {
  std::weak_ptr<plan_recycler> recycler;
  void operator()(epoch_plan* plan) const noexcept {
    std::unique_ptr<epoch_plan> owned(plan);
    if (const std::shared_ptr<plan_recycler> r = recycler.lock()) r->give_back(std::move(owned));
  }
};

/// plan_epoch(lengths, packing, options) packed into a plan `recycler` kept (or fresh memory),
/// shared with a deleter that gives it back to `recycler` once its last holder lets it go,
/// while the recycler lives (plan_each_epoch; Python's plans). Throws what plan_epoch throws
/// (the plan it took is then freed, not given back). Cost: plan_epoch's, less the first touch
/// of what it reuses.
template <class Lengths>
[[nodiscard]] std::shared_ptr<const epoch_plan> plan_epoch_recycling(const std::shared_ptr<plan_recycler>& recycler,
                                                                     Lengths&& lengths, const pack_options& packing,
                                                                     const schedule_options& options) {
  std::unique_ptr<epoch_plan> plan = recycler->take();
  if (!plan) plan = std::make_unique<epoch_plan>();
  *plan = plan_epoch(std::forward<Lengths>(lengths), packing, options, std::move(*plan));
  // On a throw (the control block), the deleter runs: the plan goes back to the recycler.
  return std::shared_ptr<epoch_plan>(plan.release(), give_back_to_recycler{recycler});
}

}  // namespace detail

}  // namespace multipack
