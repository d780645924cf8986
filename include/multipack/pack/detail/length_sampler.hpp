#pragma once
// Draws a uniformly random unplaced item from the histogram of item lengths, for the
// randomized packer, which opens rows with such items before closing each row's gap exactly.
//
// Rejection over a snapshot: the items of the last snapshot are laid out by length (the k-th
// length present owns positions [start[k], start[k + 1])); a uniform position is drawn, and
// kept when its offset in its length's range is below the count of that length still
// unplaced. Every unplaced item owns exactly one position, so the draw is uniform over them.
// A table of one length per 2^shift positions finds a position's length in about one step.
// The snapshot is retaken whenever fewer than 7/8 of its items are left, so a draw takes at
// most 8/7 tries on average, in O(1) each: the Fenwick tree this replaced took O(log capacity)
// dependent loads a draw, 85 % of the randomized packer's time. Retaken at a half, 28 % of the
// tries were rejected, each a mispredicted branch; the 6x more snapshots cost less (10 M
// lengths, 1 thread: 4-14 % faster at 2,048 and 4,096, 1-5 % at 65,536).
//
// The counts only decrease, so a snapshot lays out only the lengths present at the one before:
// O(those lengths), the first O(capacity). Laid out over every length up to the capacity, the
// snapshots were 40 % of the packer's instructions at 65,536 (1 M Alpaca lengths, 333 of them
// present) and 7 of its 8 s on 1.6 M items of length 1 and two of 2^25 + 1 at 2^26. A length
// without items owns no position either way: the draws, and so the rows, are the same.
//
// The sampler draws from a generator of its own, so the positions of the next two draws are
// known ahead: each draw prefetches the table cell of the one after next and the range and
// count of the next one's length. Over every length, at 65,536 tokens a row the table and the
// starts (768 KB) outgrew the L2 cache, and the draw's dependent loads took 40 % of the
// packer's fill; over the lengths present the table takes at most 32 KB or 8 bytes a length,
// and the ranges 8 bytes a length (Alpaca's 333 lengths: under 35 KB in all).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "multipack/core/random.hpp"

namespace multipack::detail {

class length_sampler {
 public:
  /// count[l]: unplaced items of length l (count[0] == 0); the draws are a function of the
  /// counts and `seed`. O(count.size()).
  length_sampler(const std::vector<std::uint32_t>& count, std::uint64_t seed) : rng_(seed) {
    std::uint64_t items = 0;
    for (std::size_t l = 1; l < count.size(); ++l) {
      if (count[l] == 0) continue;
      lengths_.push_back({0, static_cast<std::uint32_t>(l)});
      items += count[l];
    }
    lengths_.push_back({0, 0});  // where the last range ends
    // No later snapshot has more items or lengths, so no larger a table.
    table_.reserve(std::min(items, std::max<std::uint64_t>(2 * lengths_.size(), least_cells)) + 1);
    snapshot(count);
  }

  /// The length of a uniformly random item among the `left` (> 0) that `count` holds. The
  /// counts only decrease between calls. O(1) expected; allocates nothing.
  [[nodiscard]] std::uint32_t draw(const std::vector<std::uint32_t>& count, std::uint64_t left) {
    if (8 * left < 7 * std::uint64_t{total_}) snapshot(count);
    for (;;) {
      const std::uint32_t position = next_position_;
      std::uint32_t k = next_cell_;
      next_position_ = after_next_position_;
      next_cell_ = table_[next_position_ >> shift_];
      __builtin_prefetch(&lengths_[next_cell_]);
      __builtin_prefetch(&count[lengths_[next_cell_].length]);
      after_next_position_ = draw_position();
      while (lengths_[k + 1].start <= position) ++k;
      const std::uint32_t length = lengths_[k].length;
      if (position - lengths_[k].start < count[length]) return length;
    }
  }

 private:
  /// Lays out the items of the lengths present at the last snapshot: the counts only
  /// decrease, so no other length can have any. O(those lengths).
  void snapshot(const std::vector<std::uint32_t>& count) {
    std::uint32_t sum = 0;  // < 2^32 - 1: pack refuses more items
    std::size_t present = 0;
    for (std::size_t k = 0; k + 1 < lengths_.size(); ++k) {
      const std::uint32_t length = lengths_[k].length;
      if (count[length] == 0) continue;
      lengths_[present++] = {sum, length};
      sum += count[length];
    }
    lengths_.resize(present + 1);
    lengths_[present] = {sum, 0};
    total_ = sum;
    // About two table cells a length, and least_cells: a position's cell starts at most a length
    // or so below it.
    shift_ = 0;
    while ((std::uint64_t{total_} >> shift_) > std::max<std::uint64_t>(2 * present, least_cells)) ++shift_;
    table_.resize((std::size_t{total_} >> shift_) + 1);
    // Length k's cells are those that start in its range: a fill a length, which the compiler
    // vectorizes (a cell at a time, the table took 3 % of the packer's instructions at 4,096).
    const std::size_t round_up = (std::size_t{1} << shift_) - 1;
    std::size_t cell = 0;
    for (std::size_t k = 0; k < present; ++k) {
      const std::size_t end = (lengths_[k + 1].start + round_up) >> shift_;
      std::fill(table_.begin() + cell, table_.begin() + end, static_cast<std::uint32_t>(k));
      cell = end;
    }
    // A last cell that starts at total_ is never drawn.
    std::fill(table_.begin() + cell, table_.end(), present == 0 ? 0 : static_cast<std::uint32_t>(present - 1));
    // Positions drawn for the previous snapshot are out of this one's range: draw anew.
    next_position_ = draw_position();
    next_cell_ = table_[next_position_ >> shift_];
    after_next_position_ = draw_position();
  }

  /// A uniform position of the snapshot, its table cell prefetched.
  std::uint32_t draw_position() noexcept {
    const auto position = static_cast<std::uint32_t>(rng_.below(std::max<std::uint64_t>(total_, 1)));
    __builtin_prefetch(&table_[position >> shift_]);
    return position;
  }

  /// Table cells at least (32 KB, the table at 4,096 tokens a row when it covered every
  /// length). With two cells a length alone, Alpaca's 333 lengths at 4,096 had cells of 2^14
  /// positions: many draws stepped to the next length on a mispredicted branch (3.3x the
  /// packer's, callgrind), and the packer took 0.173 s instead of 0.157 s (10 M lengths).
  static constexpr std::uint64_t least_cells = 8192;

  /// A length present at the last snapshot, and where its items start there.
  struct range {
    std::uint32_t start;
    std::uint32_t length;
  };

  std::vector<range> lengths_;        ///< increasing, then {total_, 0}
  std::vector<std::uint32_t> table_;  ///< per cell of 2^shift_ positions: the index in lengths_ at its start
  std::uint32_t total_ = 0;           ///< items in the snapshot
  unsigned shift_ = 0;
  splitmix64 rng_;
  std::uint32_t next_position_ = 0;        ///< the next draw's position
  std::uint32_t next_cell_ = 0;            ///< the index in lengths_ at the start of its table cell
  std::uint32_t after_next_position_ = 0;  ///< the position of the draw after it
};

}  // namespace multipack::detail
