#pragma once
// The histogram packers that close rows exactly. They work on the counts of item lengths
// alone, one row at a time:
//  - randomized_exact_fit first takes uniformly random unplaced items, as long as each leaves
//    a gap that two items could still close;
//  - then the gap is closed exactly when it can be: one unplaced item of exactly the gap, or
//    two whose lengths sum to it;
//  - failing that, the longest item is taken that leaves a gap k items could fill
//    (k * shortest <= gap <= k * longest for some k), and the closing is tried again.
// Gaps shorter than the shortest item are what best-fit decreasing wastes; closing them
// exactly is what brings the row count to the lower bound on real length distributions.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "multipack/core/packed_rows.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/core/random.hpp"
#include "multipack/pack/detail/items.hpp"
#include "multipack/pack/detail/length_sampler.hpp"
#include "multipack/pack/detail/length_set.hpp"

namespace multipack::detail {

/// Candidate pairs probed per gap: bounds the cost on adversarial length sets.
inline constexpr int exact_fit_pair_probes = 1024;

/// Unplaced items by length, with the shortest and longest kept at hand (queried for
/// every item placed).
struct unplaced_items {
  std::vector<std::uint32_t> count;
  length_set present;
  std::uint64_t left;
  std::uint32_t shortest;
  std::uint32_t longest;

  unplaced_items(item_histogram histogram, std::uint32_t capacity)
      : count(std::move(histogram.count)),
        present(capacity + 1),
        left(histogram.items),
        shortest(histogram.shortest),
        longest(histogram.longest) {
    for (std::uint32_t l = 1; l <= capacity; ++l)
      if (count[l] != 0) present.insert(l);
  }

  /// Removes `n` (at least 1, at most count[length]) items of `length`.
  void remove(std::uint32_t length, std::uint32_t n = 1) noexcept {
    left -= n;
    count[length] -= n;
    if (count[length] != 0) return;
    present.erase(length);
    if (left == 0) return;
    if (length == shortest) shortest = present.find_next(length);
    if (length == longest) longest = present.find_prev(length);
  }
};

/// exact_fit's opening: none (it takes the longest item that keeps the gap fillable); pairs
/// are searched from the longest down.
struct longest_first {
  /// open() never opens a row: runs of the longest length can be taken in one step.
  static constexpr bool opens_rows = false;
  std::uint32_t open(const unplaced_items&) noexcept { return 0; }
  std::uint32_t pair_start(std::uint32_t, std::uint32_t high) noexcept { return high; }
};

/// randomized_exact_fit's opening: a uniformly random unplaced item; pairs are searched
/// from a random length down, then from the top down to it.
class random_first {
 public:
  static constexpr bool opens_rows = true;
  random_first(const unplaced_items& items, std::uint64_t seed) : sampler_(items.count), rng_(seed) {}
  std::uint32_t open(const unplaced_items& items) { return sampler_.draw(items.count, items.left, rng_); }
  std::uint32_t pair_start(std::uint32_t low, std::uint32_t high) noexcept {
    return static_cast<std::uint32_t>(low + rng_.below(std::uint64_t{high} - low + 1));
  }

 private:
  length_sampler sampler_;
  splitmix64 rng_;
};

template <class Opening>
void fill_rows_exactly(unplaced_items& items, Opening& opening, std::uint32_t capacity,
                       std::uint32_t max_per_row, piece_vector& pieces,
                       std::vector<std::uint64_t>& offsets, slot_assignment& slots) {
  std::vector<std::uint32_t>& count = items.count;
  length_set& present = items.present;
  const std::uint32_t per_row_limit = max_per_row == 0 ? UINT32_MAX : max_per_row;
  std::size_t position = 0;

  while (items.left != 0) {
    std::uint32_t gap = capacity;
    std::uint32_t in_row = 0;
    // Places `n` items of `length` in the row.
    auto take = [&](std::uint32_t length, std::uint32_t n = 1) {
      for (std::uint32_t k = 0; k < n; ++k) slots.add(pieces, position++, length);
      items.remove(length, n);
      gap -= n * length;
      in_row += n;
    };
    // Two items a >= b with a + b == gap, a searched downwards from `from` then from `high`.
    auto close_with_pair = [&](std::uint32_t shortest, std::uint32_t longest) {
      const std::uint32_t low = (gap + 1) / 2;
      const std::uint32_t high = std::min(longest, gap - shortest);
      if (high < low) return false;
      const std::uint32_t from = opening.pair_start(low, high);
      int probes = exact_fit_pair_probes;
      for (const auto& [top, bottom] : {std::pair{from, low}, std::pair{high, from + 1}}) {
        std::uint32_t a = present.find_prev_pair(bottom, top, gap, probes);
        // a == gap - a needs two items of a; it is the lowest candidate, so the scan ends there.
        if (a != length_set::none && 2 * a == gap && count[a] < 2) a = length_set::none;
        if (a != length_set::none) {
          const std::uint32_t b = gap - a;  // before take(a) shrinks the gap
          take(a);
          take(b);
          return true;
        }
      }
      return false;
    };
    while (gap != 0 && items.left != 0 && in_row < per_row_limit) {
      if (count[gap] != 0) {  // one item closes the row exactly
        take(gap);
        break;
      }
      const std::uint32_t shortest = items.shortest;
      const std::uint32_t longest = items.longest;
      const bool spread = 2 * std::uint64_t{shortest} <= longest;
      if constexpr (!Opening::opens_rows) {
        // While the gap is over twice the longest item, nothing closes the row and the step
        // below takes the longest item (fillable(gap - longest) == gap - longest when spread):
        // take the whole run at once, as many as keep the gap over twice the longest.
        if (spread && gap > 2 * longest) {
          const std::uint32_t run = std::min({count[longest], (gap - 2 * longest + longest - 1) / longest,
                                              per_row_limit - in_row});
          take(longest, run);
          continue;
        }
      }
      if (shortest > gap) break;  // no item fits
      // The smallest gap >= `rest` that k items could fill, for some k. When the longest item
      // is at least twice the shortest, k items of [shortest, longest] fill every gap from
      // `shortest` up, so the division is needed only when the lengths are close together.
      auto fillable = [&](std::uint32_t rest) {
        if (rest == 0) return std::uint32_t{0};
        if (spread) return rest > longest ? rest : std::max(rest, shortest);
        return std::max(rest, (rest + longest - 1) / longest * shortest);
      };
      const std::uint32_t opened = opening.open(items);
      if (opened != 0 && opened <= gap && gap - opened >= 2 * shortest) {  // a pair can still close it
        take(opened);
        continue;
      }
      if (in_row + 2 <= per_row_limit && gap >= 2 * shortest && close_with_pair(shortest, longest)) break;
      // The longest item that fits: looked up only here, as most opened items are taken above.
      const std::uint32_t fits = gap >= longest ? longest : present.find_prev(gap);
      const std::uint32_t rest = fillable(gap - fits);
      const std::uint32_t keeps_gap_fillable = rest <= gap ? present.find_prev(gap - rest) : length_set::none;
      take(keeps_gap_fillable != length_set::none ? keeps_gap_fillable : fits);
    }
    offsets.push_back(position);
  }
}

}  // namespace multipack::detail
