#pragma once
// An epoch's schedule: which row of the packing every rank trains on in every step, computed
// identically on every rank with no communication, before the first step.
//
// The rows of the packing are put in the epoch's order, a seeded shuffle that depends on
// (seed, epoch) only: the epoch's sequence. Global step s takes the world_size x micro_batch
// rows that follow in that sequence, and spreads them over the ranks, micro_batch rows each,
// so that the costliest rank costs as little as practical. Because the sequence does not
// depend on the world size or micro-batch, a job restarted with other ones continues from the
// number of rows already consumed (schedule_options::consumed_rows).

#include <algorithm>
#include <concepts>
#include <ranges>
#include <type_traits>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/packed_rows.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/core/random.hpp"
#include "multipack/schedule/detail/balance.hpp"
#include "multipack/schedule/options.hpp"
#include "multipack/schedule/report.hpp"

namespace multipack {

/// What a row costs to train on: its tokens (the layers that see each token once) plus the
/// sum of its pieces' squared lengths (attention, which each piece pays within itself).
/// O(pieces), never throws.
[[nodiscard]] inline std::uint64_t row_cost(std::span<const piece> row) noexcept {
  std::uint64_t cost = 0;
  for (const piece& p : row) {
    const std::uint64_t length = p.length();
    cost += length + length * length;
  }
  return cost;
}

class epoch_schedule {
 public:
  /// The row index that marks a padding row: no pieces, no loss.
  static constexpr std::uint32_t padding_row = UINT32_MAX;

  /// No steps. Never throws.
  epoch_schedule() = default;

  /// Builds the schedule of `rows` (the packing of this epoch) for every rank. Keeps no
  /// reference to `rows`.
  ///
  /// A resume (consumed_rows > 0) with no row left, or under remainder drop fewer than a
  /// step's rows left, has no step: the epoch is done (consumed_rows_after(steps()) of the
  /// run that saved it is every row). A resume with fewer rows left than ranks (at the last step,
  /// or on more ranks) has one step in which the ranks past the rows take only padding, as in
  /// the last step of a whole epoch (report().padding_only_ranks counts them).
  ///
  /// Throws option_error when the options are invalid (see validate), when there are no rows
  /// or a whole epoch (consumed_rows 0) has fewer rows than ranks (a rank would train on
  /// nothing in the epoch), when consumed_rows exceeds the rows, or when remainder drop leaves
  /// no complete step of a whole epoch.
  /// Cost: O(pieces + rows log(world x micro_batch)) time; 4 bytes a row kept (plus 4 a slot
  /// of the schedule), 8 more a row while building. Thread-safe: shares nothing.
  epoch_schedule(const packed_rows& rows, const schedule_options& options) : options_(options) {
    build(rows.size(), [&rows](std::uint64_t r) { return rows[r]; });
  }

  /// The same for any sized random-access range of rows (views::pack's rows, `|
  /// std::views::take(n)`, a user's own rows): row r is std::ranges::begin(rows)[r]. Same
  /// cost, failure modes and thread safety; keeps no reference to `rows`.
  template <row_range Rows>
    requires(!std::same_as<std::remove_cvref_t<Rows>, packed_rows>)
  epoch_schedule(const Rows& rows, const schedule_options& options) : options_(options) {
    const auto first = std::ranges::begin(rows);
    build(static_cast<std::uint64_t>(std::ranges::size(rows)), [first](std::uint64_t r) {
      return std::span<const piece>(first[static_cast<std::ranges::range_difference_t<const Rows>>(r)]);
    });
  }

  /// Global steps: the same on every rank. O(1).
  [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }
  [[nodiscard]] std::uint32_t world_size() const noexcept { return options_.world_size; }
  [[nodiscard]] std::uint32_t micro_batch() const noexcept { return options_.micro_batch; }
  [[nodiscard]] const schedule_options& options() const noexcept { return options_; }
  [[nodiscard]] const schedule_report& report() const noexcept { return report_; }

  /// The micro_batch rows (indices into the packing) that `rank` trains on in `step`, in the
  /// order of the epoch's sequence, padding rows (padding_row) last. O(1). Throws
  /// option_error for a step past the end or a rank outside the world, naming the rank as given
  /// (any integer type but bool and the character types: a bool such as is_main does not
  /// compile). Thread-safe (const).
  template <plain_integral Rank>
  [[nodiscard]] std::span<const std::uint32_t> rows(std::uint64_t step, Rank given_rank) const {
    if (step >= steps_)
      throw option_error("epoch_schedule: step " + std::to_string(step) + " is past the end of the epoch (" +
                         std::to_string(steps_) + " steps, numbered from 0)");
    const std::uint32_t rank = detail::rank_argument(given_rank, options_.world_size, "epoch_schedule");
    detail::check_rank_in_world(rank, options_.world_size, "epoch_schedule");
    const std::uint64_t batch = options_.micro_batch;
    return std::span<const std::uint32_t>(slots_).subspan((step * options_.world_size + rank) * batch, batch);
  }

  /// The epoch's order of all rows of the packing, the same for any world size and
  /// micro-batch: step s of a schedule takes positions [consumed_rows + s G, consumed_rows +
  /// (s+1) G) of it, for G = world x micro_batch. O(1).
  [[nodiscard]] std::span<const std::uint32_t> sequence() const noexcept { return sequence_; }

  /// Rows of the sequence trained on once `steps` steps of this schedule are done: the
  /// consumed_rows to give a run that resumes there with another world size or micro-batch.
  /// After the last step it is every row: under remainder drop the rows dropped go with the
  /// epoch, so a run with a smaller step does not train them on resuming. O(1). Throws
  /// option_error for steps > steps().
  [[nodiscard]] std::uint64_t consumed_rows_after(std::uint64_t steps) const {
    if (steps > steps_)
      throw option_error("epoch_schedule: " + std::to_string(steps) + " steps done, but the epoch has " +
                         std::to_string(steps_));
    if (steps == steps_) return sequence_.size();
    const std::uint64_t step_rows = std::uint64_t{options_.world_size} * options_.micro_batch;
    return std::min<std::uint64_t>(sequence_.size(), options_.consumed_rows + steps * step_rows);
  }


 private:
  /// The constructors' work: row_at(r) is row r's pieces (a std::span<const piece>).
  template <class RowAt>
  void build(const std::uint64_t total, RowAt row_at) {
    const schedule_options& options = options_;
    validate(options);
    const std::uint64_t world = options.world_size;
    const std::uint64_t batch = options.micro_batch;
    const std::uint64_t step_rows = world * batch;
    if (total == 0)
      throw option_error("epoch_schedule: the packing has no rows (an empty dataset, or every sample dropped)");
    if (total >= padding_row)
      throw option_error("epoch_schedule: " + std::to_string(total) + " rows; at most 2^32 - 2 are supported");
    if (options.consumed_rows > total)
      throw option_error("epoch_schedule: consumed_rows " + std::to_string(options.consumed_rows) +
                         " exceeds the " + std::to_string(total) + " rows of the epoch");
    const std::uint64_t left = total - options.consumed_rows;
    const bool pad = options.remainder == remainder_policy::pad;
    const bool done = options.consumed_rows > 0 && (left == 0 || (!pad && left < step_rows));
    if (left < world && options.consumed_rows == 0)
      throw option_error("epoch_schedule: " + std::to_string(left) + (left == 1 ? " row" : " rows") + " to schedule for " +
                         std::to_string(world) + " ranks: every rank needs at least one row " +
                         "(use fewer ranks, or a smaller capacity for more rows)");
    steps_ = pad ? (left + step_rows - 1) / step_rows : left / step_rows;
    if (steps_ == 0 && !done)
      throw option_error("epoch_schedule: remainder drop leaves no step: " + std::to_string(left) +
                         " rows are fewer than one step of " + std::to_string(world) + " ranks x " +
                         std::to_string(batch) + " rows (use remainder pad, or a smaller micro-batch)");

    sequence_.resize(total);
    std::iota(sequence_.begin(), sequence_.end(), std::uint32_t{0});
    splitmix64 rng(epoch_seed(options.seed, options.epoch) ^ 0x5eed0f0e0c4a11edULL);
    shuffle(std::span<std::uint32_t>(sequence_), rng);

    report_.world_size = options.world_size;
    report_.micro_batch = options.micro_batch;
    report_.steps = steps_;
    report_.rows = total;
    report_.consumed_rows = options.consumed_rows;
    report_.scheduled_rows = std::min(left, steps_ * step_rows);
    report_.padded_rows = steps_ * step_rows - report_.scheduled_rows;
    report_.dropped_rows = left - report_.scheduled_rows;

    // Every row's cost, in the packing's order: one sequential pass over the pieces (reading
    // them in the shuffled order instead costs a cache miss a row, 25 times the time).
    std::vector<std::uint64_t> row_costs(total);
    for (std::uint64_t row = 0; row < total; ++row) row_costs[row] = row_cost(row_at(row));

    slots_.resize(steps_ * step_rows);
    std::vector<std::uint64_t> costs(step_rows);
    std::vector<std::uint32_t> rank_of(step_rows);
    std::vector<std::uint64_t> rank_costs(world);
    std::vector<std::uint64_t> plain_costs(world);
    std::vector<std::uint32_t> filled(world);
    detail::step_balancer balancer;
    double balance_sum = 0;
    double plain_sum = 0;
    for (std::uint64_t step = 0; step < steps_; ++step) {
      const std::uint64_t first = options.consumed_rows + step * step_rows;
      const std::uint64_t real = std::min(step_rows, total - first);
      for (std::uint64_t i = 0; i < step_rows; ++i) costs[i] = i < real ? row_costs[sequence_[first + i]] : 0;
      // Without balancing, rank r takes the r-th consecutive micro_batch rows of the step; in
      // a last step that is not full, its rows r, r + world, ...: each rank a real row while
      // there are rows for all (consecutive, the first ranks would take them all and the
      // others only padding: a loss over no token). Padding fills what is left.
      const auto plain_rank = [&](std::uint64_t i) {
        return static_cast<std::uint32_t>(real == step_rows ? i / batch : i % world);
      };
      std::fill(plain_costs.begin(), plain_costs.end(), 0);
      for (std::uint64_t i = 0; i < real; ++i) plain_costs[plain_rank(i)] += costs[i];
      if (options.balance) {
        balancer.assign(costs, options.micro_batch, rank_of, rank_costs);
      } else {
        std::fill(filled.begin(), filled.end(), 0);
        for (std::uint64_t i = 0; i < real; ++i) ++filled[rank_of[i] = plain_rank(i)];
        std::uint32_t rank = 0;
        for (std::uint64_t i = real; i < step_rows; ++i) {
          while (filled[rank] == batch) ++rank;
          ++filled[rank_of[i] = rank];
        }
        rank_costs = plain_costs;
      }
      // Each rank's rows in the order of the sequence, padding last.
      std::fill(filled.begin(), filled.end(), 0);
      std::uint32_t* out = slots_.data() + step * step_rows;
      for (std::uint64_t i = 0; i < step_rows; ++i) {
        const std::uint32_t rank = rank_of[i];
        out[rank * batch + filled[rank]++] = i < real ? sequence_[first + i] : padding_row;
      }
      const double balance = detail::step_balance(rank_costs);
      const double plain = detail::step_balance(plain_costs);
      balance_sum += balance;
      plain_sum += plain;
      report_.balance_worst = std::max(report_.balance_worst, balance);
      report_.balance_worst_unbalanced = std::max(report_.balance_worst_unbalanced, plain);
    }
    if (steps_ > 0) {
      report_.balance_mean = balance_sum / static_cast<double>(steps_);
      report_.balance_mean_unbalanced = plain_sum / static_cast<double>(steps_);
      // A rank's rows come real first, so its first slot says whether it has any.
      const std::uint32_t* last = slots_.data() + (steps_ - 1) * step_rows;
      for (std::uint64_t rank = 0; rank < world; ++rank)
        report_.padding_only_ranks += last[rank * batch] == padding_row ? 1 : 0;
    }

    // The rows of an incomplete last step under remainder drop: counted, sample by sample.
    std::vector<std::uint32_t> dropped_samples;
    for (std::uint64_t i = options.consumed_rows + report_.scheduled_rows; i < total; ++i)
      for (const piece& p : row_at(sequence_[i])) {
        dropped_samples.push_back(p.sample);
        report_.dropped_tokens += p.length();
      }
    std::sort(dropped_samples.begin(), dropped_samples.end());
    report_.dropped_samples = static_cast<std::uint64_t>(
        std::unique(dropped_samples.begin(), dropped_samples.end()) - dropped_samples.begin());
  }

  schedule_options options_;
  schedule_report report_;
  std::uint64_t steps_ = 0;
  std::vector<std::uint32_t> sequence_;
  std::vector<std::uint32_t> slots_;  // [step][rank][slot] -> row or padding_row
};

}  // namespace multipack
