#pragma once
// The epoch loader: one rank's batches of several epochs from one loader, as one stream.
//
//   multipack::epoch_loader loader(dataset, multipack::plan_each_epoch(lengths, packing, schedule), rank,
//                                  batch, {.threads = 2}, {.first = checkpoint.epoch, .count = 3,
//                                  .start_step = checkpoint.step});
//   while (auto b = loader.next()) train((*b)->view);   // (*b)->epoch, (*b)->step: where it belongs
//
// (The lease's own step(), the prefetcher's, is the batch's position in the loader's stream
// of batches, counted from 0 across the epochs: (*b)->step is the epoch's step.)
//
// What an epoch boundary costs is what any other step costs:
// - The worker threads and the buffers are made once, by the constructor: no thread starts, and
//   no buffer is allocated or zeroed, between epochs. The workers build the first steps of the
//   next epoch while the trainer takes the last ones of the current epoch.
// - One planning thread, started by the constructor, plans epoch e + 1 while epoch e trains,
//   from the time half of epoch e's steps are built: half an epoch of training is far longer
//   than a planning, and a loader closed in the first half of an epoch (a `break`, a restart)
//   or at the end of training (past its last epoch) waits for no planning. At most two plans
//   are kept: the one being built from and the next. A plan goes as soon as its last step is
//   built; plan_each_epoch's go back to the planner, which packs the epoch after next into
//   their memory.
// - The buffers have one layout for every epoch: the capacity of the first plan (or
//   batch_options::capacity), and room in cu_seqlens for the most pieces any row of that
//   capacity can hold of this dataset's samples, split at the first plan's packing capacity
//   where it is smaller (found once, O(samples + capacity)).
//
// Epoch e + 1's plan is checked on the planning thread (rank, world size, micro-batch,
// capacity, pieces in the dataset); a plan that fails the checks, or a planner that throws,
// fails the batch at that epoch's first step, after every batch before it has been delivered.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "multipack/core/detail/thread_name.hpp"
#include "multipack/core/error.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/detail/consumer_figure.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack {

/// Which epochs an epoch_loader runs, and where it starts (a checkpoint's epoch and step).
struct epoch_range {
  std::uint64_t first = 0;       ///< the first epoch
  std::uint64_t count = 1;       ///< epochs to run, from `first` on; at least 1
  std::uint64_t start_step = 0;  ///< the first epoch's first step; every later epoch starts at 0
};

/// Plans one epoch. Called once an epoch, in order: the first epoch's on the thread that makes
/// the loader, every later one's on the loader's planning thread. Every rank must get the same
/// plan for the same epoch (a pure function of the epoch, as plan_epoch is), and every epoch
/// the same world size and micro-batch (checked).
using epoch_planner = std::function<std::shared_ptr<const epoch_plan>(std::uint64_t epoch)>;

/// The planner of plan_epoch(lengths, packing, schedule with epoch e) for every epoch e:
/// `schedule.consumed_rows` (a restart with another world size) applies to epoch
/// `schedule.epoch` only, every other epoch starts fresh. The lengths are copied once and
/// shared by the calls (and by the planner's copies). A plan it made comes back to it when its
/// last holder lets it go, and the next call packs into that plan's memory (plan_epoch's
/// storage): an epoch loader's third epoch is packed into the first one's blocks, the fourth
/// into the second's, so no epoch after the second faults its packing's pages in. The planner
/// keeps two such plans at most, until it is destroyed. Cost: a copy of the lengths.
/// Thread-safe: calls may run at once (each packs into a plan of its own).
template <std::ranges::input_range Lengths>
[[nodiscard]] epoch_planner plan_each_epoch(const Lengths& lengths, const pack_options& packing,
                                            const schedule_options& schedule) {
  auto shared = std::make_shared<const std::vector<std::uint32_t>>(std::ranges::begin(lengths), std::ranges::end(lengths));
  auto recycler = std::make_shared<detail::plan_recycler>();
  return [shared = std::move(shared), recycler = std::move(recycler), packing,
          schedule](std::uint64_t epoch) -> std::shared_ptr<const epoch_plan> {
    schedule_options options = schedule;
    options.epoch = epoch;
    if (epoch != schedule.epoch) options.consumed_rows = 0;
    return detail::plan_epoch_recycling(recycler, *shared, packing, options);
  };
}

/// What an epoch_loader measured so far. The wait of the first batch of the run (the cold
/// start) is in none of the figures.
struct epoch_loader_statistics {
  prefetch_statistics prefetch;            ///< over every epoch
  std::uint64_t boundaries = 0;            ///< epochs whose first batch was handed out, after the first epoch
  double boundary_wait_seconds = 0;        ///< the trainer's wait for those first batches, summed
  double max_boundary_wait_seconds = 0;    ///< and the longest of them
  double max_step_wait_seconds = 0;        ///< the longest wait for any other batch
  double planning_seconds = 0;             ///< planning the later epochs, on the planning thread
  double plan_wait_seconds = 0;            ///< workers' time waiting for a plan not yet made (summed)
};

namespace detail {

/// The most pieces a row of `capacity` tokens can hold of the dataset's samples, whatever the
/// packing: the largest k whose k shortest pieces fit, where a sample of length L gives a
/// piece of L tokens when L <= capacity, else (split) one of L mod capacity beside its full
/// rows. At least 1. O(samples + capacity) time, capacity + 1 counters.
template <token_dataset D>
[[nodiscard]] std::uint32_t most_pieces_in_a_row(const D& dataset, std::uint32_t capacity) {
  std::vector<std::uint64_t> count(std::size_t{capacity} + 1, 0);
  for (std::size_t i = 0; i < dataset.size(); ++i) {
    const std::uint64_t length = dataset.length(i);
    ++count[static_cast<std::size_t>(length <= capacity ? length : length % capacity)];
  }
  std::uint64_t pieces = 0;
  std::uint64_t room = capacity;
  for (std::uint32_t length = 1; length <= capacity && room >= length; ++length) {
    const std::uint64_t fit = std::min(count[length], room / length);
    pieces += fit;
    room -= fit * length;
  }
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(pieces, 1, capacity));
}

}  // namespace detail

template <token_dataset D, batch_token T = std::int32_t>
  requires dataset_reads_as<D, T>
class epoch_loader {
 public:
  using batch = loaded_batch<T>;
  using lease = typename prefetcher<batch>::lease;

  /// Plans epochs.first (on this thread), checks it, makes the buffers, and starts the
  /// worker threads on its step epochs.start_step and the planning thread on the next epoch.
  /// The dataset is shared (kept alive) and read by the workers concurrently.
  ///
  /// Throws option_error for a count of 0, a start step past the first epoch's end, a rank
  /// outside the plan's world, bad options, no planner; format_error when the mask does not
  /// describe the dataset; sample_error when the plan refers to samples the dataset does not
  /// have; what the planner throws. Cost: one plan, O(samples + capacity) to size cu_seqlens,
  /// depth buffers, threads + 1 threads. `rank` as batch_loader takes it.
  template <plain_integral Rank>
  epoch_loader(std::shared_ptr<const D> dataset, epoch_planner planner, Rank rank, batch_options options,
               const prefetch_options& prefetch, const epoch_range& epochs = {})
      : dataset_(std::move(dataset)),
        planner_(std::move(planner)),
        epochs_(checked(epochs)),
        options_(std::move(options)),
        first_plan_(first_plan()),
        world_size_(first_plan_->schedule.world_size()),
        rank_(detail::rank_argument(rank, world_size_, "epoch_loader")),
        layout_(checked_layout(prefetch)),
        planning_thread_(*this),
        prefetcher_(prefetch, 0, [this] { return batch(layout_, options_.memory); },
                    [this](std::uint64_t position, batch& b) { return build(position, b); }) {}

  epoch_loader(const epoch_loader&) = delete;
  epoch_loader& operator=(const epoch_loader&) = delete;

  /// Stops the workers (each finishes the batch it builds) and the planning thread (it
  /// finishes the plan it makes: up to one planning's time, only once half of an epoch is
  /// built). Leases still held keep their buffers. Never throws.
  ~epoch_loader() { close(); }

  /// The next batch, in order: the first epoch's steps from start_step, then every later
  /// epoch's from step 0; std::nullopt after the last epoch's last step. Blocks until built.
  /// Rethrows a worker's or the planner's exception at the step it belongs to. Release the
  /// lease to give the buffer back; at most depth - 1 may be held at once. Consumer thread
  /// only. Cost: the prefetcher's next(), two clock reads.
  [[nodiscard]] std::optional<lease> next() {
    const auto asked = clock::now();
    std::optional<lease> b = prefetcher_.next();
    const double waited = std::chrono::duration<double>(clock::now() - asked).count();
    if (b) {
      const bool boundary = delivered_ > 0 && (*b)->epoch != last_epoch_;
      if (boundary) {
        boundaries_.add(1);
        boundary_wait_.add(waited);
        max_boundary_wait_.raise_to(waited);
      } else if (delivered_ > 0) {
        max_step_wait_.raise_to(waited);
      }
      last_epoch_ = (*b)->epoch;
      ++delivered_;
    }
    return b;
  }

  /// Statistics so far. Thread-safe, as the prefetcher's: any thread may ask while the
  /// consumer waits in next() (a trainer's monitoring thread; Python's close() from another
  /// thread). O(1).
  [[nodiscard]] epoch_loader_statistics statistics() const {
    epoch_loader_statistics s;
    s.prefetch = prefetcher_.statistics();
    s.boundaries = boundaries_.get();
    s.boundary_wait_seconds = boundary_wait_.get();
    s.max_boundary_wait_seconds = max_boundary_wait_.get();
    s.max_step_wait_seconds = max_step_wait_.get();
    const std::lock_guard lock(mutex_);
    s.planning_seconds = planning_seconds_;
    s.plan_wait_seconds = plan_wait_seconds_;
    return s;
  }

  /// Whether the planning thread plans `epoch` now or is about to, with nothing more built or
  /// taken: it is the epoch after the last one planned, and half of that one is built with
  /// fewer than two plans kept. A caller that needs `epoch`'s plan may then wait for the
  /// planner's (it comes, or the planner's error does, unless the loader closes) instead of
  /// making its own. Thread-safe. O(epochs kept).
  [[nodiscard]] bool plans_next(std::uint64_t epoch) const {
    const std::lock_guard lock(mutex_);
    if (closing_ || all_planned_ || planner_error_) return false;
    const planned_epoch& last = epochs_planned_.back();
    return last.epoch < std::numeric_limits<std::uint64_t>::max() && epoch == last.epoch + 1 &&
           epoch - epochs_.first < epochs_.count && may_plan_next();
  }

  /// The one layout of every epoch's batches. O(1).
  [[nodiscard]] const batch_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
  [[nodiscard]] const epoch_range& epochs() const noexcept { return epochs_; }

 private:
  using clock = std::chrono::steady_clock;

  /// An epoch's steps in the loader's sequence: positions [first_position, first_position +
  /// steps) are its steps [first_step, first_step + steps).
  struct planned_epoch {
    std::uint64_t epoch = 0;
    std::uint64_t first_position = 0;
    std::uint64_t first_step = 0;
    std::uint64_t steps = 0;
    std::uint64_t built = 0;
    std::shared_ptr<const epoch_plan> plan;  // null once every step is built
    /// Steps built before the next epoch is planned: half, rounded up.
    [[nodiscard]] std::uint64_t half() const noexcept { return steps - steps / 2; }
  };

  static const epoch_range& checked(const epoch_range& epochs) {
    if (epochs.count == 0) throw option_error("epoch_loader: the epoch range has no epoch (count 0)");
    if (epochs.count - 1 > std::numeric_limits<std::uint64_t>::max() - epochs.first)
      throw option_error("epoch_loader: epochs " + std::to_string(epochs.first) + " + " + std::to_string(epochs.count) +
                         " run past epoch 2^64 - 1");
    return epochs;
  }

  std::shared_ptr<const epoch_plan> first_plan() const {
    if (!dataset_) throw option_error("epoch_loader: no dataset");
    if (!planner_) throw option_error("epoch_loader: no planner");
    check_mask_matches(options_.mask, *dataset_);
    auto plan = planner_(epochs_.first);
    if (!plan) throw option_error("epoch_loader: the planner gave no plan for epoch " + std::to_string(epochs_.first));
    if (epochs_.start_step > plan->schedule.steps())
      throw option_error("epoch_loader: start step " + std::to_string(epochs_.start_step) +
                         " is past the end of epoch " + std::to_string(epochs_.first) + " (" +
                         std::to_string(plan->schedule.steps()) + " steps)");
    return plan;
  }

  batch_layout checked_layout(const prefetch_options& prefetch) {
    validate(prefetch);  // here, before the planning thread starts
    detail::check_plan(*dataset_, *first_plan_, rank_, "epoch_loader");
    batch_layout layout = layout_of(*first_plan_, options_);
    layout.max_pieces_per_row =
        std::max(layout.max_pieces_per_row, detail::most_pieces_in_a_row(*dataset_, layout.capacity));
    // Buffers larger than the packing (batch_options::capacity): samples longer than the
    // packing capacity split at it, into shorter pieces than the buffers' capacity gives.
    if (const std::uint32_t packed_at = first_plan_->packed.report.capacity; packed_at < layout.capacity)
      layout.max_pieces_per_row =
          std::max(layout.max_pieces_per_row, detail::most_pieces_in_a_row(*dataset_, packed_at));
    validate(layout);
    const std::uint64_t steps = first_plan_->schedule.steps() - epochs_.start_step;
    epochs_planned_.push_back({epochs_.first, 0, epochs_.start_step, steps, 0, steps == 0 ? nullptr : first_plan_});
    first_plan_.reset();  // the entry holds it while it is needed
    return layout;
  }

  // The checks of a later epoch's plan against the one layout (the first epoch's are the
  // constructor's). Planning thread.
  void check_later_plan(const std::shared_ptr<const epoch_plan>& plan, std::uint64_t epoch) const {
    const std::string who = "epoch_loader: epoch " + std::to_string(epoch);
    if (!plan) throw option_error(who + ": the planner gave no plan");
    // check_plan reads the length of every piece's sample, of every rank: the files of shards
    // that this rank's batches never read (and so never check) are checked first, or a shard
    // cut while training would raise SIGBUS here. Two fstat calls a shard, once an epoch.
    if constexpr (change_checked_dataset<D>) dataset_->check_unchanged();
    detail::check_plan(*dataset_, *plan, rank_, who);
    // Another world shards the rows otherwise: with this rank still in it, the ranks would
    // train on overlapping rows and leave others out, with no error.
    if (plan->schedule.world_size() != world_size_)
      throw option_error(who + " is scheduled for " + std::to_string(plan->schedule.world_size()) +
                         " ranks, the first epoch for " + std::to_string(world_size_) +
                         ": every epoch of a loader needs the same world");
    if (plan->packed.report.capacity > layout_.capacity)  // before layout_of, which would refuse it unnamed
      throw option_error(who + " is packed at capacity " + std::to_string(plan->packed.report.capacity) +
                         ", more than the loader's buffers hold (" + std::to_string(layout_.capacity) + ")");
    const batch_layout layout = layout_of(*plan, options_);
    if (layout.micro_batch != layout_.micro_batch)
      throw option_error(who + " has a micro-batch of " + std::to_string(layout.micro_batch) + " rows, the first epoch " +
                         std::to_string(layout_.micro_batch) + ": every epoch of a loader needs the same");
    if (layout.pieces_per_row() > layout_.pieces_per_row())
      throw option_error(who + " has a row of " + std::to_string(layout.pieces_per_row()) +
                         " pieces, more than the loader's buffers hold (" + std::to_string(layout_.pieces_per_row()) +
                         ")");
  }

  // The planning thread: plans each later epoch once half of the epoch before is built and
  // fewer than two plans are kept.
  void plan_later_epochs() noexcept {
    for (std::uint64_t i = 1; i < epochs_.count; ++i) {
      const std::uint64_t epoch = epochs_.first + i;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return closing_ || may_plan_next(); });
        if (closing_) return;
      }
      const auto start = clock::now();
      std::shared_ptr<const epoch_plan> plan;
      std::exception_ptr error;
      try {
        plan = planner_(epoch);
        check_later_plan(plan, epoch);
      } catch (...) {
        error = std::current_exception();
      }
      const std::lock_guard lock(mutex_);
      planning_seconds_ += std::chrono::duration<double>(clock::now() - start).count();
      const planned_epoch& last = epochs_planned_.back();
      const std::uint64_t position = last.first_position + last.steps;
      if (error) {
        planner_error_ = error;
        error_position_ = position;
        changed_.notify_all();
        return;
      }
      const std::uint64_t steps = plan->schedule.steps();
      epochs_planned_.push_back({epoch, position, 0, steps, 0, steps == 0 ? nullptr : std::move(plan)});
      changed_.notify_all();
    }
    const std::lock_guard lock(mutex_);
    all_planned_ = true;
    changed_.notify_all();
  }

  // Half of the last epoch planned is built, and fewer than two plans are kept. Under mutex_.
  // Once true, it stays so until the planning thread adds the next plan.
  bool may_plan_next() const {
    const planned_epoch& last = epochs_planned_.back();
    return last.built >= last.half() && plans_kept() + plans_leaving_ < 2;
  }

  std::size_t plans_kept() const {
    return static_cast<std::size_t>(
        std::ranges::count_if(epochs_planned_, [](const planned_epoch& e) { return e.plan != nullptr; }));
  }

  // Builds the batch at `position` of the sequence; false past the last epoch. Worker threads.
  bool build(std::uint64_t position, batch& b) {
    planned_epoch* entry = nullptr;
    std::shared_ptr<const epoch_plan> plan;
    {
      std::unique_lock lock(mutex_);
      for (;;) {
        if (closing_) return false;
        const auto found = std::ranges::find_if(epochs_planned_, [&](const planned_epoch& e) {
          return position >= e.first_position && position - e.first_position < e.steps;
        });
        if (found != epochs_planned_.end()) {
          entry = &*found;
          plan = entry->plan;
          break;
        }
        const planned_epoch& last = epochs_planned_.back();
        const bool after_planned = position >= last.first_position + last.steps;
        if (planner_error_ && position >= error_position_) std::rethrow_exception(planner_error_);
        if (all_planned_ && after_planned) return false;
        const auto start = clock::now();
        changed_.wait(lock);
        plan_wait_seconds_ += std::chrono::duration<double>(clock::now() - start).count();
      }
    }
    detail::take_rows_of_plan(*plan, entry->first_step + (position - entry->first_position), rank_, b);
    b.epoch = entry->epoch;  // the loader's count, whatever the planner's schedule says
    struct retire {  // counts the step built, even when collation throws
      epoch_loader& loader;
      planned_epoch& entry;
      std::shared_ptr<const epoch_plan>& plan;
      ~retire() {
        plan.reset();  // this worker's hold first: the entry's is then the plan's last
        loader.step_built(entry);
      }
    } counted{*this, *entry, plan};
    detail::collate_rows(*dataset_, options_, b);
    return true;
  }

  // One more step of `entry` built: its plan goes after the last, and epochs whose plans are
  // gone leave the front of the list. The plan is let go outside the lock (freeing it unmaps
  // its blocks), and the planning thread waits until it is gone: a planner that recycles plans
  // (plan_each_epoch) then always has it back for the next epoch. Worker threads. Never throws.
  void step_built(planned_epoch& entry) noexcept {
    std::shared_ptr<const epoch_plan> done;
    {
      const std::lock_guard lock(mutex_);
      ++entry.built;
      if (entry.built < entry.steps) {
        if (entry.built == entry.half()) changed_.notify_all();  // the planning thread may go on
        return;
      }
      done = std::move(entry.plan);
      ++plans_leaving_;
      // Keep the last entry: it says where the next epoch starts.
      while (epochs_planned_.size() > 1 && epochs_planned_.front().plan == nullptr) epochs_planned_.pop_front();
    }
    done.reset();
    const std::lock_guard lock(mutex_);
    --plans_leaving_;
    changed_.notify_all();
  }

  void close() noexcept {
    {
      const std::lock_guard lock(mutex_);
      closing_ = true;
    }
    changed_.notify_all();
  }

  std::shared_ptr<const D> dataset_;
  epoch_planner planner_;
  epoch_range epochs_;
  batch_options options_;
  std::shared_ptr<const epoch_plan> first_plan_;  // until the layout is made
  std::uint32_t world_size_;
  std::uint32_t rank_;
  // The planned epochs still needed (and the last, whose end is where the next one starts),
  // guarded by mutex_ with the fields after it.
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<planned_epoch> epochs_planned_;
  std::size_t plans_leaving_ = 0;  // plans no entry holds, being let go (step_built)
  bool closing_ = false;
  bool all_planned_ = false;
  std::exception_ptr planner_error_;
  std::uint64_t error_position_ = 0;
  double planning_seconds_ = 0;
  double plan_wait_seconds_ = 0;
  batch_layout layout_;
  // Consumer thread only.
  std::uint64_t delivered_ = 0;
  std::uint64_t last_epoch_ = 0;
  // The statistics: next() updates them, statistics() may read them from any thread.
  detail::consumer_figure<std::uint64_t> boundaries_;
  detail::consumer_figure<double> boundary_wait_;
  detail::consumer_figure<double> max_boundary_wait_;
  detail::consumer_figure<double> max_step_wait_;
  // The planning thread, closed and joined after the workers (or when a later member's
  // constructor throws).
  class planning_thread {
   public:
    explicit planning_thread(epoch_loader& loader)
        : loader_(loader), thread_([&loader] {
            detail::name_this_thread(detail::plan_thread_name);
            loader.plan_later_epochs();
          }) {}
    planning_thread(const planning_thread&) = delete;
    planning_thread& operator=(const planning_thread&) = delete;
    ~planning_thread() {
      loader_.close();
      thread_.join();
    }

   private:
    epoch_loader& loader_;
    std::thread thread_;
  };
  planning_thread planning_thread_;  // after the state it plans into
  prefetcher<batch> prefetcher_;  // last: its workers use everything above, and stop first
};

/// epoch_loader(dataset, planner, ...): the dataset's type from the shared pointer.
template <class D, plain_integral Rank>
epoch_loader(std::shared_ptr<const D>, epoch_planner, Rank, batch_options, const prefetch_options&, const epoch_range&)
    -> epoch_loader<D>;

}  // namespace multipack
