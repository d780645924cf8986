#pragma once
// The batch loader: one rank's batches of an epoch plan, collated by the prefetcher's worker
// threads into a fixed pool of buffers and handed to the trainer in step order.
//
//   auto loader = multipack::batch_loader(dataset, plan, rank, {.mask = mask}, {.threads = 2});
//   while (auto batch = loader.next()) train((*batch)->view);   // returns the buffer after
//
// It follows the plan exactly: step s of rank r holds plan.pieces(s, r, slot) for every slot,
// so a trainer resuming at step k (start_step) gets exactly the batches a full run has from k.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ranges>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/batch/collate.hpp"
#include "multipack/batch/layout.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack {

/// How batches are made: the row length rule, the collation conventions, the loss mask.
struct batch_options {
  /// 0: every row is the packing's capacity (fixed shapes); N: the batch's longest row
  /// rounded up to a multiple of N (see batch_layout).
  std::uint32_t pad_to_multiple = 0;
  collate_options collate;
  loss_mask mask;  ///< empty: every token carries loss
  /// The most tokens a row holds, which is the row length when pad_to_multiple is 0. 0 (the
  /// default): the packing's capacity (the plan's; for steps, the one views::pack was given,
  /// found through the steps, else their longest row: give it for a user's own rows, whose
  /// shape would otherwise depend on the steps given, such as those left after a resume).
  std::uint32_t capacity = 0;
  /// Where the buffers' memory comes from: one block of layout.bytes<T>() bytes a buffer,
  /// allocated when the loader starts and freed when it stops, never in between. nullptr:
  /// operator new. The `cuda/` layer passes pinned host memory here. Must outlive the loader
  /// and every batch it handed out (a batch may outlive the loader: see prefetcher::lease).
  std::pmr::memory_resource* memory = nullptr;
};

/// One buffer of the pool: one block of memory (all five arrays back to back, so one copy
/// moves a batch), the batch collated into it, and where it belongs.
template <batch_token T>
class loaded_batch {
  static constexpr std::size_t block_alignment = 64;  // a cache line: no false sharing between buffers
  // First: the view is made over the block.
  std::pmr::memory_resource* memory_;
  std::span<std::byte> block_;

 public:
  batch_view<T> view;                        ///< the batch: spans into the block, and its counts
  std::vector<std::span<const piece>> rows;  ///< scratch: the step's rows, sized once
  /// scratch: the dataset's file parts that the rows read (see part_checked_dataset), kept
  /// between batches: reserved at the first batch, so that later batches allocate nothing
  std::vector<std::size_t> parts_read;
  std::uint64_t step = 0;
  std::uint32_t rank = 0;
  std::uint64_t epoch = 0;  ///< the plan's epoch (schedule_options::epoch); 0 for a loader made from steps

  /// Allocates layout.bytes<T>() bytes from `memory` (nullptr: operator new) and zero-fills
  /// them, so that every page is touched before the first batch. Throws option_error for an
  /// invalid layout, what the resource throws.
  loaded_batch(const batch_layout& layout, std::pmr::memory_resource* memory)
      : memory_(memory != nullptr ? memory : std::pmr::new_delete_resource()),
        block_(allocate(memory_, (validate(layout), layout.bytes<T>()))),
        view(batch_view<T>::over_bytes(layout, block_)),
        rows(layout.micro_batch) {}
  loaded_batch(loaded_batch&& other) noexcept
      : memory_(other.memory_),
        block_(std::exchange(other.block_, {})),
        view(other.view),
        rows(std::move(other.rows)),
        parts_read(std::move(other.parts_read)),
        step(other.step),
        rank(other.rank),
        epoch(other.epoch) {}
  loaded_batch(const loaded_batch&) = delete;
  loaded_batch& operator=(const loaded_batch&) = delete;
  loaded_batch& operator=(loaded_batch&&) = delete;
  ~loaded_batch() {
    if (!block_.empty()) memory_->deallocate(block_.data(), block_.size(), block_alignment);
  }

  /// The whole block: view's arrays back to back (see batch_view::over_bytes). O(1).
  [[nodiscard]] std::span<const std::byte> block() const noexcept { return block_; }

 private:
  static std::span<std::byte> allocate(std::pmr::memory_resource* memory, std::size_t bytes) {
    auto* data = static_cast<std::byte*>(memory->allocate(bytes, block_alignment));
    std::memset(data, 0, bytes);
    return {data, bytes};
  }
};

/// The layout of a plan's batches: its micro-batch, its capacity, the most pieces in any of
/// its rows. O(rows).
[[nodiscard]] inline batch_layout layout_of(const epoch_plan& plan, std::uint32_t pad_to_multiple = 0) {
  std::uint64_t most = 1;
  const auto offsets = plan.packed.rows.row_offsets();
  for (std::size_t r = 0; r + 1 < offsets.size(); ++r) most = std::max(most, offsets[r + 1] - offsets[r]);
  batch_layout layout;
  layout.micro_batch = plan.schedule.micro_batch();
  layout.capacity = plan.packed.report.capacity;
  layout.pad_to_multiple = pad_to_multiple;
  layout.max_pieces_per_row = static_cast<std::uint32_t>(std::min<std::uint64_t>(most, layout.capacity));
  return layout;
}

/// The layout of a plan's batches made with `options`: layout_of(plan, pad_to_multiple), with
/// options.capacity where it is not 0. Throws option_error when options.capacity is below the
/// plan's packing capacity (a row of the plan could fail to fit, steps into the epoch). O(rows).
[[nodiscard]] inline batch_layout layout_of(const epoch_plan& plan, const batch_options& options) {
  batch_layout layout = layout_of(plan, options.pad_to_multiple);
  if (options.capacity != 0 && options.capacity < layout.capacity)
    throw option_error("batch_options::capacity is " + std::to_string(options.capacity) +
                       ", below the plan's packing capacity of " + std::to_string(layout.capacity) +
                       ": its rows may not fit (0 takes the plan's)");
  if (options.capacity != 0) layout.capacity = options.capacity;
  return layout;
}

namespace detail {

[[noreturn]] inline void throw_step_error(std::uint64_t step, const std::string& what) {
  throw option_error("batch_loader: step " + std::to_string(step) + what);
}

/// Throws option_error naming `who` when `rank` is outside the plan's world, sample_error when
/// a piece of the plan is outside `dataset`. O(pieces).
template <token_dataset D>
void check_plan(const D& dataset, const epoch_plan& plan, std::uint32_t rank, const std::string& who) {
  check_rank_in_world(rank, plan.schedule.world_size(), who);
  const std::size_t samples = dataset.size();
  for (const piece& p : plan.packed.rows.pieces())
    if (p.sample >= samples || p.end > dataset.length(p.sample))
      throw sample_error(who + ": the plan takes tokens [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                         ") of sample " + std::to_string(p.sample) + ", which the dataset of " +
                         std::to_string(samples) + " samples does not have");
}

/// Points the batch's rows at step `step` of `rank` in `plan`, and records where it belongs.
/// O(micro_batch).
template <batch_token T>
void take_rows_of_plan(const epoch_plan& plan, std::uint64_t step, std::uint32_t rank, loaded_batch<T>& b) {
  for (std::uint32_t slot = 0; slot < b.rows.size(); ++slot) b.rows[slot] = plan.pieces(step, rank, slot);
  b.step = step;
  b.rank = rank;
  b.epoch = plan.schedule.options().epoch;
}

/// Throws the dataset's io_error, naming the file, when a file that `rows` read changed since
/// the dataset opened it (see change_checked_dataset). A part_checked_dataset has each part
/// that the pieces read checked once, in part order, and no other: O(pieces log pieces) plus
/// one part's check (two fstat calls for a shard) a part read, whatever the number of parts.
/// `parts` is scratch, reserved for `most_pieces` (a batch of more grows it). Another
/// change_checked_dataset is checked whole. Thread-safe as the dataset's checks are.
template <token_dataset D>
void check_files_read(const D& dataset, std::span<const std::span<const piece>> rows, std::size_t most_pieces,
                      std::vector<std::size_t>& parts) {
  if constexpr (part_checked_dataset<D>) {
    parts.reserve(most_pieces);
    parts.clear();
    for (const std::span<const piece> row : rows)
      for (const piece& p : row) {
        const auto part = static_cast<std::size_t>(dataset.file_part_of(p.sample));
        if (parts.empty() || parts.back() != part) parts.push_back(part);  // a row's run of one shard: once
      }
    std::sort(parts.begin(), parts.end());
    parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
    for (const std::size_t part : parts) dataset.check_part_unchanged(part);
  } else if constexpr (change_checked_dataset<D>) {
    dataset.check_unchanged();
  }
}

/// Collates the rows the batch points at. A file-backed dataset, and a loss mask read from
/// files, first say whether their files changed under them (a shard or a mask rewritten while
/// training): the batch fails with that error instead of reading a shrunk mapping. Of a
/// dataset of many shards, only those the rows read are checked (check_files_read).
template <token_dataset D, batch_token T>
void collate_rows(const D& dataset, const batch_options& options, loaded_batch<T>& b) {
  check_files_read(dataset, std::span<const std::span<const piece>>(b.rows),
                   static_cast<std::size_t>(b.view.layout.micro_batch) * b.view.layout.pieces_per_row(),
                   b.parts_read);
  options.mask.check_unchanged();
  collate(dataset, std::span<const std::span<const piece>>(b.rows), options.mask, options.collate, b.view);
}

}  // namespace detail

/// The layout of the batches of `steps` (a step_range), after checking every piece of every
/// step against `dataset`: the first step's size is the micro-batch, and every step has it;
/// `capacity` (0: the packing's, found through the steps, else the longest row) is the row
/// length rule's; the most pieces in any row. Throws option_error for no steps, steps of
/// different sizes, an empty piece or a row over the capacity, sample_error for a piece
/// outside the dataset. O(steps x micro_batch + pieces).
template <token_dataset D, step_range Steps>
[[nodiscard]] batch_layout checked_layout_of(const D& dataset, const Steps& steps, std::uint32_t capacity,
                                             std::uint32_t pad_to_multiple) {
  const auto count = static_cast<std::uint64_t>(std::ranges::size(steps));
  if (count == 0) throw option_error("batch_loader: the range of steps is empty");
  if constexpr (detail::packing_options_finder<Steps>::found)
    if (capacity == 0) capacity = detail::packing_options_finder<Steps>::get(steps).capacity;
  const auto first = std::ranges::begin(steps);
  const auto micro_batch = static_cast<std::uint64_t>(std::ranges::size(first[0]));
  if (micro_batch == 0 || micro_batch > UINT32_MAX) detail::throw_step_error(0, " has no rows");
  const std::size_t samples = dataset.size();
  std::uint64_t most_pieces = 1;
  std::uint64_t longest = 1;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto&& step = first[static_cast<std::ranges::range_difference_t<const Steps>>(i)];
    if (static_cast<std::uint64_t>(std::ranges::size(step)) != micro_batch)
      detail::throw_step_error(i, " has " + std::to_string(std::ranges::size(step)) + " rows, the first step " +
                                      std::to_string(micro_batch) + ": every step needs the same micro-batch");
    for (auto&& row_ref : step) {
      const std::span<const piece> row(row_ref);
      std::uint64_t tokens = 0;
      for (const piece& p : row) {
        if (p.begin >= p.end)
          throw option_error("batch_loader: step " + std::to_string(i) + " has an empty piece, tokens [" +
                             std::to_string(p.begin) + ", " + std::to_string(p.end) + ") of sample " +
                             std::to_string(p.sample) + ": a piece holds at least one token");
        if (p.sample >= samples || p.end > dataset.length(p.sample))
          throw sample_error("batch_loader: step " + std::to_string(i) + " takes tokens [" + std::to_string(p.begin) +
                             ", " + std::to_string(p.end) + ") of sample " + std::to_string(p.sample) +
                             ", which the dataset of " + std::to_string(samples) + " samples does not have");
        tokens += p.length();
      }
      most_pieces = std::max<std::uint64_t>(most_pieces, row.size());
      longest = std::max(longest, tokens);
    }
  }
  if (capacity == 0) capacity = static_cast<std::uint32_t>(std::min<std::uint64_t>(longest, UINT32_MAX));
  if (longest > capacity)
    throw option_error("batch_loader: a row holds " + std::to_string(longest) + " tokens, more than the capacity of " +
                       std::to_string(capacity));
  batch_layout layout;
  layout.micro_batch = static_cast<std::uint32_t>(micro_batch);
  layout.capacity = capacity;
  layout.pad_to_multiple = pad_to_multiple;
  layout.max_pieces_per_row = static_cast<std::uint32_t>(std::min<std::uint64_t>(most_pieces, capacity));
  validate(layout);
  return layout;
}

template <token_dataset D, batch_token T = std::int32_t>
  requires dataset_reads_as<D, T>
class batch_loader {
 public:
  using batch = loaded_batch<T>;
  using lease = typename prefetcher<batch>::lease;

  /// Starts loading rank `rank`'s batches of `plan` from `start_step` on. The dataset and plan
  /// are shared (kept alive) by the loader and read by its workers concurrently.
  ///
  /// Throws option_error for a rank outside the plan's world, a start step past the end,
  /// bad options; format_error when the mask does not describe the dataset; sample_error when
  /// the plan refers to samples the dataset does not have. Cost: O(rows) checks, depth
  /// buffers of layout_of(plan).bytes<T>() bytes, threads threads. `rank` is any integer type
  /// but bool and the character types (a bool does not compile; -1 is named as given).
  template <plain_integral Rank>
  batch_loader(std::shared_ptr<const D> dataset, std::shared_ptr<const epoch_plan> plan, Rank rank,
               batch_options options, const prefetch_options& prefetch, std::uint64_t start_step = 0)
      : dataset_(std::move(dataset)),
        plan_(std::move(plan)),
        rank_(detail::rank_argument(rank, plan_ ? plan_->schedule.world_size() : 0, "batch_loader")),
        options_(std::move(options)),
        layout_(checked_plan_layout()),
        build_(plan_build(plan_, rank_)),
        prefetcher_(prefetch, check_start(start_step), plan_->schedule.steps(),
                    [this] { return batch(layout_, options_.memory); },
                    [this](std::uint64_t step, batch& b) { build(step, b); }) {}

  /// Starts loading the batches of `steps` (any step_range: views::shard's steps, `|
  /// std::views::drop(k)` to resume at step k, a user's own), in order: batch i is built from
  /// step i, by index, by the worker threads. The steps are copied (a view: cheap) and the
  /// dataset shared; both are read by the workers concurrently. Each batch's `step` and
  /// `rank` are the step's own (step.step() and step.rank(), as views::shard's steps have),
  /// else its position and 0.
  ///
  /// Throws what checked_layout_of throws (empty, uneven or out-of-range steps, rows over
  /// the capacity), option_error for bad options, format_error when the mask does not
  /// describe the dataset. Cost: O(steps x micro_batch + pieces) checks, depth buffers,
  /// threads threads.
  template <step_range Steps>
  batch_loader(std::shared_ptr<const D> dataset, Steps steps, batch_options options, const prefetch_options& prefetch)
      : dataset_(std::move(dataset)),
        rank_(0),
        options_(std::move(options)),
        layout_(checked_steps_layout(steps)),
        build_(steps_build(std::move(steps))),
        prefetcher_(prefetch, 0, steps_count_, [this] { return batch(layout_, options_.memory); },
                    [this](std::uint64_t step, batch& b) { build(step, b); }) {}

  /// The next step's batch, in order; std::nullopt after the last step. Blocks until built.
  /// Rethrows a worker's exception at the step that failed. Release the lease (destroy it)
  /// to give the buffer back; at most depth - 1 may be held at once. Consumer thread only.
  [[nodiscard]] std::optional<lease> next() { return prefetcher_.next(); }

  /// The prefetcher's statistics so far; thread-safe (prefetcher::statistics). O(1).
  [[nodiscard]] prefetch_statistics statistics() const { return prefetcher_.statistics(); }
  [[nodiscard]] const batch_layout& layout() const noexcept { return layout_; }
  /// The plan of the plan form. Throws option_error for a loader made from steps.
  [[nodiscard]] const epoch_plan& plan() const {
    if (!plan_) throw option_error("batch_loader: this loader was made from steps, not from a plan");
    return *plan_;
  }
  /// The plan form's rank; 0 for a loader made from steps (each batch records its step's).
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }

 private:
  // Fills the rows of the batch at position i, and the step and rank it records, then collates
  // it (loader.collate) while the step that holds the rows lives: a step given by value (a
  // view's temporary, such as a std::views::transform's) may own its rows, which go with it.
  using build_function = std::function<void(std::uint64_t, batch&, const batch_loader& loader)>;

  void check_dataset() const {
    if (!dataset_) throw option_error("batch_loader: no dataset");
    check_mask_matches(options_.mask, *dataset_);
  }

  batch_layout checked_plan_layout() const {
    if (!plan_) throw option_error("batch_loader: no plan");
    check_dataset();
    detail::check_plan(*dataset_, *plan_, rank_, "batch_loader");
    return layout_of(*plan_, options_);
  }

  template <class Steps>
  batch_layout checked_steps_layout(const Steps& steps) {
    check_dataset();
    steps_count_ = static_cast<std::uint64_t>(std::ranges::size(steps));
    return checked_layout_of(*dataset_, steps, options_.capacity, options_.pad_to_multiple);
  }

  static build_function plan_build(const std::shared_ptr<const epoch_plan>& plan, std::uint32_t rank) {
    return [plan = plan.get(), rank](std::uint64_t step, batch& b, const batch_loader& loader) {
      detail::take_rows_of_plan(*plan, step, rank, b);
      loader.collate(b);
    };
  }

  template <class Steps>
  static build_function steps_build(Steps steps) {
    return [steps = std::move(steps)](std::uint64_t i, batch& b, const batch_loader& loader) {
      auto&& step = std::ranges::begin(steps)[static_cast<std::ranges::range_difference_t<const Steps>>(i)];
      const auto first = std::ranges::begin(step);
      for (std::size_t slot = 0; slot < b.rows.size(); ++slot)
        b.rows[slot] = std::span<const piece>(first[static_cast<std::ranges::range_difference_t<decltype(step)>>(slot)]);
      // A step of views::shard knows its number and rank; a user's step is numbered by position.
      if constexpr (requires { { step.step() } -> std::convertible_to<std::uint64_t>; })
        b.step = step.step();
      else
        b.step = i;
      if constexpr (requires { { step.rank() } -> std::convertible_to<std::uint32_t>; })
        b.rank = step.rank();
      else
        b.rank = 0;
      loader.collate(b);
    };
  }

  std::uint64_t check_start(std::uint64_t start_step) const {
    if (start_step > plan_->schedule.steps())
      throw option_error("batch_loader: start step " + std::to_string(start_step) + " is past the end of the epoch (" +
                         std::to_string(plan_->schedule.steps()) + " steps)");
    return start_step;
  }

  void collate(batch& b) const { detail::collate_rows(*dataset_, options_, b); }
  void build(std::uint64_t position, batch& b) const { build_(position, b, *this); }

  std::shared_ptr<const D> dataset_;
  std::shared_ptr<const epoch_plan> plan_;  // the plan form's
  std::uint32_t rank_;
  batch_options options_;
  std::uint64_t steps_count_ = 0;  // the steps form's; set while the layout is checked
  batch_layout layout_;
  build_function build_;
  prefetcher<batch> prefetcher_;  // last: its workers use everything above
};

/// batch_loader(dataset, steps, ...): the dataset's type from the shared pointer.
template <class D, step_range Steps>
batch_loader(std::shared_ptr<const D>, Steps, batch_options, const prefetch_options&) -> batch_loader<D>;

}  // namespace multipack
