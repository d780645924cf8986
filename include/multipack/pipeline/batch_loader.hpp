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
  /// Where the buffers' memory comes from: one block of layout.bytes<T>() bytes a buffer,
  /// allocated when the loader starts and freed when it stops, never in between. nullptr:
  /// operator new. The CUDA room passes pinned host memory here. Must outlive the loader.
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
  std::uint64_t step = 0;
  std::uint32_t rank = 0;

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
        step(other.step),
        rank(other.rank) {}
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

template <token_dataset D, batch_token T = std::int32_t>
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
  /// buffers of layout_of(plan).bytes<T>() bytes, threads threads.
  batch_loader(std::shared_ptr<const D> dataset, std::shared_ptr<const epoch_plan> plan, std::uint32_t rank,
               batch_options options, const prefetch_options& prefetch, std::uint64_t start_step = 0)
      : dataset_(std::move(dataset)),
        plan_(std::move(plan)),
        rank_(rank),
        options_(std::move(options)),
        layout_(checked_layout()),
        prefetcher_(prefetch, check_start(start_step), plan_->schedule.steps(),
                    [this] { return batch(layout_, options_.memory); },
                    [this](std::uint64_t step, batch& b) { build(step, b); }) {}

  /// The next step's batch, in order; std::nullopt after the last step. Blocks until built.
  /// Rethrows a worker's exception at the step that failed. Release the lease (destroy it)
  /// to give the buffer back; at most depth - 1 may be held at once. Consumer thread only.
  [[nodiscard]] std::optional<lease> next() { return prefetcher_.next(); }

  [[nodiscard]] prefetch_statistics statistics() const { return prefetcher_.statistics(); }
  [[nodiscard]] const batch_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] const epoch_plan& plan() const noexcept { return *plan_; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }

 private:
  batch_layout checked_layout() const {
    if (!dataset_ || !plan_) throw option_error("batch_loader: no dataset or no plan");
    if (rank_ >= plan_->schedule.world_size())
      throw option_error("batch_loader: rank " + std::to_string(rank_) + " is outside the world of " +
                         std::to_string(plan_->schedule.world_size()) + " ranks");
    options_.mask.check_matches(*dataset_);
    const std::size_t samples = dataset_->size();
    for (const piece& p : plan_->packed.rows.pieces())
      if (p.sample >= samples || p.end > dataset_->length(p.sample))
        throw sample_error("batch_loader: the plan takes tokens [" + std::to_string(p.begin) + ", " +
                           std::to_string(p.end) + ") of sample " + std::to_string(p.sample) +
                           ", which the dataset of " + std::to_string(samples) + " samples does not have");
    return layout_of(*plan_, options_.pad_to_multiple);
  }

  std::uint64_t check_start(std::uint64_t start_step) const {
    if (start_step > plan_->schedule.steps())
      throw option_error("batch_loader: start step " + std::to_string(start_step) + " is past the end of the epoch (" +
                         std::to_string(plan_->schedule.steps()) + " steps)");
    return start_step;
  }

  void build(std::uint64_t step, batch& b) const {
    // A file-backed dataset says when its files changed under it (a shard rewritten while
    // training): the batch fails with that error instead of reading a shrunk mapping.
    if constexpr (requires(const D& d) { d.check_unchanged(); }) dataset_->check_unchanged();
    for (std::uint32_t slot = 0; slot < layout_.micro_batch; ++slot) b.rows[slot] = plan_->pieces(step, rank_, slot);
    b.step = step;
    b.rank = rank_;
    collate(*dataset_, std::span<const std::span<const piece>>(b.rows), options_.mask, options_.collate, b.view);
  }

  std::shared_ptr<const D> dataset_;
  std::shared_ptr<const epoch_plan> plan_;
  std::uint32_t rank_;
  batch_options options_;
  batch_layout layout_;
  prefetcher<batch> prefetcher_;  // last: its workers use everything above
};

}  // namespace multipack
