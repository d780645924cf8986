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
// exact_fit takes a row again, without searching, as long as its choices cannot change
// (row_takes): most of its rows are such repeats.

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <utility>
#include <vector>

#include "multipack/core/packed_rows.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/core/random.hpp"
#include "multipack/pack/options.hpp"
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

  /// count[l]: the items of length l, l in [1, capacity] (count[0] == 0). O(capacity).
  explicit unplaced_items(std::vector<std::uint32_t> counts)
      : count(std::move(counts)), present(count.size()), left(0), shortest(0), longest(0) {
    for (std::uint32_t l = 1; l < count.size(); ++l) {
      if (count[l] == 0) continue;
      present.insert(l);
      left += count[l];
      if (shortest == 0) shortest = l;
      longest = l;
    }
  }

  /// Removes `n` (at least 1, at most count[length]) items of `length`.
  void remove(std::uint32_t length, std::uint32_t n = 1) noexcept {
    left -= n;
    count[length] -= n;
    if (count[length] == 0) [[unlikely]] remove_length(length);
  }

 private:
  /// The last item of `length` is gone. Out of line: with length_set's calls inlined here,
  /// remove() saved six registers at every call (randomized_exact_fit 4 % more instructions).
  [[gnu::noinline]] void remove_length(std::uint32_t length) noexcept {
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
  /// A row's choices depend on the set of lengths alone (row_takes): rows can be repeated.
  static constexpr bool repeats_rows = true;
  /// Its rows read each length's bucket as a stream: samples are handed out at add().
  static constexpr bool may_gather = false;
  std::uint32_t open(const unplaced_items&) noexcept { return 0; }
  std::uint32_t pair_start(std::uint32_t, std::uint32_t high) noexcept { return high; }
};

/// randomized_exact_fit's opening: a uniformly random unplaced item; pairs are searched
/// from a random length down, then from the top down to it. The items and the pairs' starts
/// are drawn from two generators seeded from `seed`.
class random_first {
 public:
  static constexpr bool opens_rows = true;
  static constexpr bool repeats_rows = false;  // each row draws its own items
  /// Its rows read the buckets of random lengths: gathered where hand_out_for says so.
  static constexpr bool may_gather = true;
  random_first(const unplaced_items& items, std::uint64_t seed)
      : sampler_(items.count, mix64(seed ^ 0x5851f42d4c957f2dULL)), rng_(seed) {}
  std::uint32_t open(const unplaced_items& items) { return sampler_.draw(items.count, items.left); }
  std::uint32_t pair_start(std::uint32_t low, std::uint32_t high) noexcept {
    return static_cast<std::uint32_t>(low + rng_.below(std::uint64_t{high} - low + 1));
  }

 private:
  length_sampler sampler_;
  splitmix64 rng_;
};

/// randomized_exact_fit's openings for pack_exactly: fill k's generators seeded from the
/// epoch's seed (k = 0, a whole fill) or from a mix of it and k (the halves and the rest).
[[nodiscard]] inline auto random_first_openings(std::uint64_t seed) noexcept {
  return [seed](const unplaced_items& items, std::uint64_t fill) {
    return random_first(items, fill == 0 ? seed : mix64(seed + fill));
  };
}

/// The takes of the row just filled, in order, so that exact_fit can repeat the row. With the
/// longest-first opening a row's choices depend only on the set of unplaced lengths (and so
/// the shortest and the longest) and on counts it compares with what the row itself takes
/// (a run of the longest, limited by its count; a pair of equal lengths, which needs two): so
/// while no length of the row runs out, not even within its last repeat, the next row makes
/// the same choices. (Running out within the last repeat would change the longest or the
/// shortest halfway through it.) Near the capacity, rows of one long item and a closing pair
/// repeat for thousands of rows; repeating them skips the pair search and reads each length's
/// bucket in one stream.
class row_takes {
 public:
  /// For rows of up to `capacity` tokens. O(capacity) memory; throws std::bad_alloc.
  explicit row_takes(std::uint32_t capacity) : of_length_(std::size_t{capacity} + 1, 0) { takes_.reserve(64); }

  void clear() noexcept { takes_.clear(); }
  /// Records a take of `n` items of `length`. Throws std::bad_alloc (a row's first takes past
  /// 64 allocate, once a fill).
  void add(std::uint32_t length, std::uint32_t n) { takes_.emplace_back(length, n); }

  /// How many more times the row can be taken with the same choices: while each of its
  /// lengths keeps an item after the last repeat, and each repeat starts with more than
  /// `reserve` items left, as a row of the fill does. O(takes).
  [[nodiscard]] std::uint64_t repeats(const unplaced_items& items, std::uint64_t reserve) noexcept {
    if (takes_.empty() || items.left <= reserve) return 0;
    for (const auto& [length, n] : takes_)
      if (items.count[length] == 0) return 0;  // the usual case of a row not repeated
    std::uint64_t in_row = 0;
    for (const auto& [length, n] : takes_) {
      in_row += n;
      of_length_[length] += n;  // a length may be taken more than once in a row
    }
    std::uint64_t repeats = (items.left - reserve - 1) / in_row + 1;
    for (const auto& [length, n] : takes_)
      repeats = std::min(repeats, (items.count[length] - std::uint64_t{1}) / of_length_[length]);
    for (const auto& [length, n] : takes_) of_length_[length] = 0;
    return repeats;
  }

  /// Takes the row `repeats` more times: place(length, n) for each take, in order, then
  /// end_row() after each row; the items are removed at the end.
  template <class Place, class EndRow>
  void repeat(unplaced_items& items, std::uint64_t repeats, const Place& place, const EndRow& end_row) const {
    if (repeats == 0) return;
    for (std::uint64_t r = 0; r < repeats; ++r) {
      for (const auto& [length, n] : takes_) place(length, n);
      end_row();
    }
    for (const auto& [length, n] : takes_) items.remove(length, static_cast<std::uint32_t>(repeats * n));
  }

 private:
  std::vector<std::pair<std::uint32_t, std::uint32_t>> takes_;  ///< (length, items), in order
  std::vector<std::uint32_t> of_length_;  ///< all zero but within repeats()
};

/// Where a fill records its rows: going up, each row's end, in the offsets themselves; going
/// down, each row's start, highest first, until they join the offsets. The starts take 4
/// bytes (a piece's position is under 2^32): 8 took the peak over 13 bytes a sample on
/// long-tailed lengths (0.2 rows a sample). One type for both, so that the fill is one
/// function (see fill_rows_exactly).
struct row_bounds {
  std::vector<std::uint64_t> ends;
  std::vector<std::uint32_t> starts;

  void add(bool down, std::size_t position) {
    if (down)
      starts.push_back(static_cast<std::uint32_t>(position));
    else
      ends.push_back(position);
  }
};

/// Fills rows with the items until no more than `reserve` are left at a row's end, one row
/// after another from `position`, upwards or (`down`) each row just below the one before,
/// and adds each row to `bounds`. Returns where the next row would start (upwards) or end
/// (down). The direction is a value, not a template argument: a copy of this loop per
/// direction kept the compiler from inlining its calls.
template <class Opening>
std::size_t fill_rows_exactly(unplaced_items& items, Opening& opening, const pack_options& options,
                              std::uint64_t reserve, bool down, std::size_t position, piece_vector& pieces,
                              row_bounds& bounds, slot_assignment& slots) {
  std::vector<std::uint32_t>& count = items.count;
  length_set& present = items.present;
  const std::uint32_t capacity = options.capacity;
  const std::uint32_t per_row_limit = options.max_per_row == 0 ? UINT32_MAX : options.max_per_row;
  // An item goes at `position - below`, and the next at `position + above` from there.
  const std::size_t below = down ? 1 : 0;
  const std::size_t above = 1 - below;

  // Lays out `n` items of `length` from `position`.
  auto place = [&](std::uint32_t length, std::uint32_t n) {
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::size_t at = position - below;
      slots.add<Opening::may_gather>(pieces, at, length);
      position = at + above;
    }
  };
  row_takes row(Opening::repeats_rows ? capacity : 0);
  while (items.left > reserve) {
    if constexpr (Opening::opens_rows) {
      // Rows of the longest item alone, while even the shortest does not fit beside it (see
      // `alone` below): every item of that length at once, a row each, as the loop below
      // would make them (lengths near the capacity at 65,536: 3.8 M of 4 M rows).
      if (items.longest + items.shortest > capacity) {
        const std::uint32_t l = items.longest;
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(count[l], items.left - reserve));
        for (std::uint32_t k = 0; k < n; ++k) {
          place(l, 1);
          bounds.add(down, position);
        }
        items.remove(l, n);
        continue;
      }
    }
    std::uint32_t gap = capacity;
    std::uint32_t in_row = 0;
    row.clear();
    // Places `n` items of `length` in the row.
    auto take = [&](std::uint32_t length, std::uint32_t n = 1) {
      place(length, n);
      items.remove(length, n);
      gap -= n * length;
      in_row += n;
      if constexpr (Opening::repeats_rows) row.add(length, n);
    };
    // Two items a >= b with a + b == gap, a searched downwards from `from` then from `high`.
    // `fits`: the longest length up to the gap.
    auto close_with_pair = [&](std::uint32_t shortest, std::uint32_t longest, std::uint32_t fits) {
      const std::uint32_t low = (gap + 1) / 2;
      const std::uint32_t high = std::min(longest, gap - shortest);
      if (high < low) return false;
      const std::uint32_t from = opening.pair_start(low, high);
      // No length in [low, high] at all (after a long item, the gap's upper half is mostly
      // lengths no item has): neither range below holds a pair. `fits` is the longest length
      // up to `high` where it is not above it.
      const std::uint32_t highest = fits <= high ? fits : present.find_prev(high);
      if (highest == length_set::none || highest < low) return false;
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
    // An item that no other can join (the longest, when even the shortest does not fit
    // beside it) has a row of its own in any packing: given it now, it no longer holds
    // `longest` up for the rows of shorter items, where it kept the runs of the longest item
    // below from being taken and sent every gap to a pair search that could not succeed
    // (long-tailed lengths at 4,096: 4,086-4,095 tokens left beside items of 11 and up,
    // 6.9 M failed searches for 1.3 M rows, half the time).
    const bool alone = items.longest + items.shortest > capacity;
    if (alone) take(items.longest);
    while (!alone && gap != 0 && items.left != 0 && in_row < per_row_limit) {
      // One item closes the row exactly. The set of lengths, not the counts: at 65,536 tokens
      // a row the counts (256 KB) miss the L1 cache at a random gap, the set (8 KB) does not.
      if (present.contains(gap)) {
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
      // The longest item that fits: looked up only here, as most opened items are taken above.
      const std::uint32_t fits = gap >= longest ? longest : present.find_prev(gap);
      if (in_row + 2 <= per_row_limit && gap >= 2 * shortest && close_with_pair(shortest, longest, fits)) break;
      const std::uint32_t rest = fillable(gap - fits);
      // No length lies in (fits, gap]: from gap - rest >= fits down, the first is fits itself.
      const std::uint32_t keeps_gap_fillable =
          rest > gap ? length_set::none : gap - rest >= fits ? fits : present.find_prev(gap - rest);
      take(keeps_gap_fillable != length_set::none ? keeps_gap_fillable : fits);
    }
    bounds.add(down, position);
    if constexpr (Opening::repeats_rows) {
      row.repeat(items, row.repeats(items, reserve), place, [&] { bounds.add(down, position); });
    }
  }
  return position;
}

/// Items from which the exact packers fill their rows in two halves (pack_exactly).
inline constexpr std::uint64_t min_halved_items = std::uint64_t{1} << 20;

/// Whether pack_exactly fills these items in two halves: a pure function of the histogram, so
/// the rows do not depend on the thread count. Each half then has at least 2^19 items and 8
/// a length of the row, enough that its histogram closes rows as the whole one does.
[[nodiscard]] inline bool fills_in_halves(const item_histogram& histogram, std::uint32_t capacity) noexcept {
  return histogram.items >= min_halved_items && histogram.items >= 16 * std::uint64_t{capacity};
}

/// One half of a fill in halves (pack_exactly), aligned to cache lines of its own: its thread
/// updates the items left and the opening's generator at every item, and sharing a line with
/// the other half's made two threads slower than one.
template <class Opening>
struct alignas(128) half_fill {
  unplaced_items items;
  Opening opening;
  slot_assignment slots;
  row_bounds bounds;
  std::size_t position;

  template <class MakeOpening>
  half_fill(std::vector<std::uint32_t> count, const MakeOpening& make_opening, std::uint64_t fill,
            slot_assignment hand_out, row_bounds rows, std::size_t start)
      : items(std::move(count)),
        opening(make_opening(items, fill)),
        slots(std::move(hand_out)),
        bounds(std::move(rows)),
        position(start) {}
};

/// exact_fit and randomized_exact_fit: the rows of the histogram's items (`count`), with the
/// openings make_opening(items, k) gives (k: 0 for a whole fill, 1 and 2 for the halves, 3
/// for the rest). With `halves` (fills_in_halves), two halves are filled side by side, on two
/// threads when options.threads > 1: the first takes ceil(count[l] / 2) of each length and
/// every full piece of a split sample, and lays its rows out from the first piece up; the
/// second the other items, from the last piece down. Each stops at a row's end with at most
/// 1/64 of its items left; what both left is then filled as one histogram between the two, so
/// that the last rows, where a thin histogram closes gaps less well, draw on both halves.
/// Each fill's slots are gathered (slot_assignment::gather) as it ends, by its own thread.
/// Throws std::bad_alloc; the rows are the same whatever the threads.
template <class MakeOpening>
void pack_exactly(std::vector<std::uint32_t> count, bool halves, const pack_options& options, piece_vector& pieces,
                  std::vector<std::uint64_t>& offsets, slot_assignment& slots, const MakeOpening& make_opening) {
  if (!halves) {
    unplaced_items items(std::move(count));
    auto opening = make_opening(items, 0);
    row_bounds bounds{std::move(offsets), {}};
    slots.gather(pieces, 0, fill_rows_exactly(items, opening, options, 0, false, 0, pieces, bounds, slots));
    offsets = std::move(bounds.ends);
    return;
  }
  using opening_type = decltype(make_opening(std::declval<const unplaced_items&>(), 0));
  const std::size_t capacity = options.capacity;
  std::vector<std::uint32_t> second_count(count.size(), 0);
  for (std::size_t l = 1; l < capacity; ++l) {
    second_count[l] = count[l] / 2;
    count[l] -= second_count[l];
  }
  slot_assignment second_slots = slots.second_half(pieces, count);
  std::vector<std::uint32_t> second_starts{static_cast<std::uint32_t>(pieces.size())};
  second_starts.reserve(offsets.capacity() / 2 + 1);
  half_fill<opening_type> first(std::move(count), make_opening, 1, std::move(slots), {std::move(offsets), {}}, 0);
  half_fill<opening_type> second(std::move(second_count), make_opening, 2, std::move(second_slots),
                                 {{}, std::move(second_starts)}, pieces.size());
  std::exception_ptr failure[2];
  const auto fill_half = [&](std::size_t half) noexcept {
    try {
      half_fill<opening_type>& h = half == 0 ? first : second;
      const std::size_t start = h.position;
      h.position = fill_rows_exactly(h.items, h.opening, options, h.items.left / 64, half == 1, h.position, pieces,
                                     h.bounds, h.slots);
      h.slots.gather(pieces, std::min(start, h.position), std::max(start, h.position));  // the half's slots
    } catch (...) {  // std::bad_alloc from a row bound
      failure[half] = std::current_exception();
    }
  };
  if (options.threads > 1) {
    run_parts(2, fill_half);
  } else {
    fill_half(0);
    fill_half(1);
  }
  slots = std::move(first.slots);
  for (const std::exception_ptr& f : failure)
    if (f) std::rethrow_exception(f);

  slots.take_remaining(second.slots, pieces);
  for (std::size_t l = 1; l <= capacity; ++l) first.items.count[l] += second.items.count[l];
  unplaced_items rest(std::move(first.items.count));
  auto rest_opening = make_opening(rest, 3);
  [[maybe_unused]] const std::size_t rest_end =
      fill_rows_exactly(rest, rest_opening, options, 0, false, first.position, pieces, first.bounds, slots);
  assert(rest_end == second.position);
  slots.gather(pieces, first.position, second.position);
  offsets = std::move(first.bounds.ends);
  offsets.insert(offsets.end(), second.bounds.starts.rbegin() + 1, second.bounds.starts.rend());
}

}  // namespace multipack::detail
