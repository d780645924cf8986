#pragma once
// Draws a uniformly random unplaced item from the histogram of item lengths, for the
// randomized packer, which opens rows with such items before closing each row's gap exactly.
//
// Rejection over a snapshot: the items of the last snapshot are laid out by length (length l
// owns positions [start[l], start[l + 1])); a uniform position is drawn, and kept when its
// offset in its length's range is below the count of that length still unplaced. Every
// unplaced item owns exactly one position, so the draw is uniform over them. A table of one
// length per 2^shift positions finds a position's length in about one step. The snapshot is
// retaken whenever fewer than 7/8 of its items are left, so a draw takes at most 8/7 tries on
// average, in O(1) each: the Fenwick tree this replaced took O(log capacity) dependent loads a
// draw, 85 % of the randomized packer's time. Retaken at a half, 28 % of the tries were
// rejected, each a mispredicted branch; the 6x more snapshots (O(capacity) each) cost less
// (10 M lengths, 1 thread: 4-14 % faster at 2,048 and 4,096, 1-5 % at 65,536).
//
// The sampler draws from a generator of its own, so the positions of the next two draws are
// known ahead: each draw prefetches the table cell of the one after next and the start and
// count of the next one's length. At 65,536 tokens a row, the table and the starts (768 KB)
// outgrow the L2 cache, and the draw's dependent loads took 40 % of the packer's fill.

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
  length_sampler(const std::vector<std::uint32_t>& count, std::uint64_t seed) : start_(count.size() + 1), rng_(seed) {
    snapshot(count);
  }

  /// The length of a uniformly random item among the `left` (> 0) that `count` holds.
  /// O(1) expected; allocates nothing (a new snapshot only shrinks the table).
  [[nodiscard]] std::uint32_t draw(const std::vector<std::uint32_t>& count, std::uint64_t left) {
    if (8 * left < 7 * std::uint64_t{total_}) snapshot(count);
    for (;;) {
      const std::uint32_t position = next_position_;
      std::uint32_t length = next_cell_length_;
      next_position_ = after_next_position_;
      next_cell_length_ = table_[next_position_ >> shift_];
      __builtin_prefetch(&start_[next_cell_length_]);
      __builtin_prefetch(&count[next_cell_length_]);
      after_next_position_ = draw_position();
      while (start_[length + 1] <= position) ++length;
      if (position - start_[length] < count[length]) return length;
    }
  }

 private:
  void snapshot(const std::vector<std::uint32_t>& count) {
    std::uint32_t sum = 0;  // < 2^32 - 1: pack refuses more items
    for (std::size_t l = 0; l < count.size(); ++l) {
      start_[l] = sum;
      sum += count[l];
    }
    start_[count.size()] = sum;
    total_ = sum;
    // About two table cells a length: a position's cell starts at most a length or so below it.
    shift_ = 0;
    while ((std::uint64_t{total_} >> shift_) > 2 * count.size()) ++shift_;
    table_.resize((std::size_t{total_} >> shift_) + 1);
    std::uint32_t length = 0;
    for (std::size_t cell = 0; cell < table_.size(); ++cell) {
      const std::uint64_t position = std::uint64_t{cell} << shift_;
      while (length + 1 < count.size() && start_[length + 1] <= position) ++length;
      table_[cell] = length;
    }
    // Positions drawn for the previous snapshot are out of this one's range: draw anew.
    next_position_ = draw_position();
    next_cell_length_ = table_[next_position_ >> shift_];
    after_next_position_ = draw_position();
  }

  /// A uniform position of the snapshot, its table cell prefetched.
  std::uint32_t draw_position() noexcept {
    const auto position = static_cast<std::uint32_t>(rng_.below(std::max<std::uint64_t>(total_, 1)));
    __builtin_prefetch(&table_[position >> shift_]);
    return position;
  }

  std::vector<std::uint32_t> start_;  ///< per length: its first position in the snapshot
  std::vector<std::uint32_t> table_;  ///< per cell of 2^shift_ positions: the length at its start
  std::uint32_t total_ = 0;           ///< items in the snapshot
  unsigned shift_ = 0;
  splitmix64 rng_;
  std::uint32_t next_position_ = 0;        ///< the next draw's position
  std::uint32_t next_cell_length_ = 0;     ///< the length at the start of its table cell
  std::uint32_t after_next_position_ = 0;  ///< the position of the draw after it
};

}  // namespace multipack::detail
