// The packers' successor/predecessor sets against std::set under random operations over
// universes of several word and summary sizes, and the random length sampler against its
// contract: only unplaced lengths, each unplaced item equally likely.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "multipack/core/random.hpp"
#include "multipack/pack/detail/length_sampler.hpp"
#include "multipack/pack/detail/length_set.hpp"

using multipack::splitmix64;
using multipack::detail::length_sampler;
using multipack::detail::length_set;

namespace {

/// Draws `draws` times and checks each length's share of the draws against its share of the
/// `left` items, within 5 sigma; with `every_length_drawn`, also that exactly the lengths
/// with items were drawn.
void check_draw_frequencies(length_sampler& sampler, const std::vector<std::uint32_t>& count, std::uint64_t left,
                            int draws, bool every_length_drawn = false) {
  std::vector<int> seen(count.size(), 0);
  for (int k = 0; k < draws; ++k) ++seen[sampler.draw(count, left)];
  for (std::size_t l = 0; l < count.size(); ++l) {
    const double p = static_cast<double>(count[l]) / static_cast<double>(left);
    const double expected = p * draws;
    const double sigma = std::sqrt(draws * p * (1 - p));
    CAPTURE(l);
    CAPTURE(count[l]);
    if (every_length_drawn) REQUIRE((seen[l] != 0) == (count[l] != 0));
    CHECK(std::abs(seen[l] - expected) <= 5 * sigma + 1e-9);
  }
}

}  // namespace

TEST_CASE("length_set answers find_prev and find_next as std::set does") {
  // Above 2^18 the top level has several words (2 at 2^18 + 1, 256 at 2^26, 1,025 at
  // 2^28 + 3). There members are sparse, and half of them fall near four anchors so that
  // queries also land in occupied words.
  for (const std::uint32_t universe :
       {1U, 2U, 63U, 64U, 65U, 4097U, 65537U, (1U << 18U) + 1, 1U << 26U, (1U << 28U) + 3}) {
    CAPTURE(universe);
    length_set set(universe);
    std::set<std::uint32_t> reference;
    splitmix64 rng(universe);
    const std::uint32_t anchors[] = {0, universe / 3, universe / 2 + 4000, universe > 5000 ? universe - 5000 : 0};
    const auto draw = [&] {
      if (universe <= 65537 || rng.below(2) == 0) return static_cast<std::uint32_t>(rng.below(universe));
      return std::min(universe - 1, anchors[rng.below(4)] + static_cast<std::uint32_t>(rng.below(5000)));
    };
    for (int step = 0; step < 4000; ++step) {
      auto x = draw();
      if (rng.below(3) == 0) {
        // Mostly a member (the next one): emptying words, summary words and the levels above.
        if (const auto member = reference.lower_bound(x); member != reference.end() && rng.below(4) != 0) x = *member;
        set.erase(x);
        reference.erase(x);
      } else {
        set.insert(x);
        reference.insert(x);
      }
      const auto q = draw();
      const auto next = reference.lower_bound(q);
      CHECK(set.find_next(q) == (next == reference.end() ? length_set::none : *next));
      auto prev = reference.upper_bound(q);
      CHECK(set.find_prev(q) == (prev == reference.begin() ? length_set::none : *--prev));
      CHECK(set.contains(x) == (reference.count(x) == 1));
    }
  }
}

TEST_CASE("length_set::find_prev_pair is a member-by-member scan, budget included") {
  for (const std::uint32_t universe : {64U, 65U, 200U, 4097U, 65537U}) {
    splitmix64 rng(universe + 1);
    const int trials = universe > 5000 ? 200 : 3000;  // a row of 65,536 tokens: fewer, they are long
    for (int trial = 0; trial < trials; ++trial) {
      length_set set(universe);
      std::set<std::uint32_t> reference;
      // One member in 1..8 positions, or in 1..600: ranges of empty words, which the scan skips.
      const std::uint64_t density = 1 + rng.below(trial % 2 == 0 ? 8 : 600);
      for (std::uint32_t x = 1; x < universe; ++x)
        if (rng.below(density) == 0) {
          set.insert(x);
          reference.insert(x);
        }
      const auto sum = static_cast<std::uint32_t>(2 + rng.below(2 * universe));
      const auto high = static_cast<std::uint32_t>(rng.below(universe));
      const auto low = static_cast<std::uint32_t>(rng.below(std::uint64_t{high} + 2));  // may exceed high
      const int start_budget = static_cast<int>(1 + rng.below(40));
      CAPTURE(universe);
      CAPTURE(sum);
      CAPTURE(low);
      CAPTURE(high);
      CAPTURE(start_budget);
      // The scan: members of [low, high] from the top whose partner sum - x lies between the
      // smallest and the largest member of [sum - high', sum - low'] (low' and high': the
      // lowest and the highest member of [low, high]), each costing one unit of budget.
      std::uint32_t expected = length_set::none;
      int expected_budget = start_budget;
      std::int64_t lowest_member = -1, highest_member = -1;
      for (const std::uint32_t x : reference)
        if (x >= low && x <= high) {
          if (lowest_member < 0) lowest_member = x;
          highest_member = x;
        }
      std::int64_t partner_low = -1, partner_high = -1;
      for (const std::uint32_t x : reference)
        if (lowest_member >= 0 && x >= std::int64_t{sum} - highest_member && x <= std::int64_t{sum} - lowest_member) {
          if (partner_low < 0) partner_low = x;
          partner_high = x;
        }
      for (auto it = reference.rbegin(); it != reference.rend() && low <= high && partner_low >= 0; ++it) {
        if (*it > high || std::int64_t{sum} - *it < partner_low) continue;
        if (*it < low || std::int64_t{sum} - *it > partner_high || expected_budget == 0) break;
        --expected_budget;
        if (*it <= sum && reference.count(sum - *it) == 1) {
          expected = *it;
          break;
        }
      }
      int budget = start_budget;
      REQUIRE(set.find_prev_pair(low, high, sum, budget) == expected);
      CHECK(budget == expected_budget);
    }
  }
}

TEST_CASE("length_sampler draws only unplaced lengths, as removals and snapshots go") {
  // Up to 3 items a length: a table cell a position. Up to 199: cells of many positions, some
  // inside one length's range, some across a boundary.
  for (const std::uint64_t most : {4U, 200U}) {
    CAPTURE(most);
    splitmix64 rng(3);
    std::vector<std::uint32_t> count(1000, 0);
    std::uint64_t left = 0;
    for (std::size_t l = 1; l < count.size(); ++l) left += count[l] = static_cast<std::uint32_t>(rng.below(most));
    length_sampler sampler(count, 5);
    while (left != 0) {  // to the last item: every snapshot is retaken on the way
      const std::uint32_t length = sampler.draw(count, left);
      REQUIRE(length >= 1);
      REQUIRE(length < count.size());
      REQUIRE(count[length] != 0);
      --count[length];
      --left;
    }
  }
}

TEST_CASE("length_sampler draws each unplaced item with the same probability") {
  // Lengths with 1, 10, 100 and 1,000 items; after removals that force a new snapshot, the
  // frequencies must follow the counts left, not those of the snapshot. Over 5,000
  // lengths a table cell is a position; over 6 (70,000 of the longest), a cell is 16
  // positions, the first across the boundaries of three lengths, the seventh across that of
  // the longest, the others inside its range.
  for (const std::size_t lengths : {5000U, 6U}) {
    CAPTURE(lengths);
    std::vector<std::uint32_t> count(lengths, 0);
    const std::size_t longest = lengths - 1;
    count[1] = 1;
    count[2] = 10;
    count[3] = 100;
    count[longest] = 1000;
    if (lengths == 6) count[longest] = 70000;
    std::uint64_t left = 111 + count[longest];
    length_sampler sampler(count, 11);
    auto check_frequencies = [&] { check_draw_frequencies(sampler, count, left, 200'000); };
    check_frequencies();
    left -= count[longest] - 100;  // under 7/8 of the items left: the next draw takes a new snapshot
    count[longest] = 100;
    check_frequencies();
    left -= 20;  // 191 of its 211 left, over 7/8: the same snapshot, where 20 positions of the longest are gone
    count[longest] = 80;
    check_frequencies();
  }
}

TEST_CASE("length_sampler stays uniform as its snapshots lose lengths, down to a few") {
  // As in the packer: items go that the sampler did not draw (pairs, the longest), whole
  // lengths run out, and each snapshot lays out only the lengths present at the one before.
  // From 528,000 items of 9,851 lengths, 22 snapshots down to 31,968 items of 1,971 lengths,
  // most of one item, then one of 20,004 items of 6 lengths; table cells of 4 positions,
  // across the ranges of lengths of one item, which a cell mapped to the wrong length would
  // never let be drawn.
  constexpr std::uint32_t capacity = 65536;
  splitmix64 rng(17);
  std::vector<std::uint32_t> end(capacity + 1, 0);  // the counts to remove down to
  for (int k = 0; k < 2000; ++k) end[1 + rng.below(capacity)] = 1;
  for (const std::uint32_t l : {3U, 40000U, capacity}) end[l] = 10000;
  std::vector<std::uint32_t> count(capacity + 1, 0);
  std::uint64_t left = 0;
  std::uint64_t end_left = 0;
  for (std::uint32_t l = 1; l <= capacity; ++l) {
    if (end[l] != 0 || rng.below(8) == 0) count[l] = end[l] + static_cast<std::uint32_t>(rng.below(100));
    left += count[l];
    end_left += end[l];
  }
  length_sampler sampler(count, 29);
  int external = 0;
  while (left > end_left) {
    const std::uint32_t length = sampler.draw(count, left);
    REQUIRE(count[length] != 0);
    if (count[length] > end[length]) {
      --count[length];
      --left;
    }
    if (++external % 16 == 0) {  // items that were not drawn: a whole length's, beyond its end count
      const auto l = static_cast<std::uint32_t>(1 + rng.below(capacity));
      left -= count[l] - end[l];
      count[l] = end[l];
    }
  }
  // 2 M draws: 62 expected of a single item, so each length with items is drawn.
  auto check_frequencies = [&] { check_draw_frequencies(sampler, count, left, 2'000'000, true); };
  check_frequencies();
  // Down to six lengths, three of one item: the next draw takes a snapshot of them alone.
  int singles = 0;
  for (std::uint32_t l = 1; l <= capacity; ++l) {
    if (count[l] != 1) continue;
    if (++singles <= 3) continue;
    count[l] = 0;
    --left;
  }
  count[capacity] = 1;  // 10,000 of length 3 and 40,000, one of the capacity
  left -= 9999;
  check_frequencies();
}
