#pragma once
// A set of integers in [0, universe) with O(1)-ish predecessor and successor queries: a
// bitset, a summary bit per 64-bit word and a top bit per summary word. A query whose nearest
// member is far reads at most universe/2^18 top words (one up to 2^18, 256 at 2^26): with the
// summary alone it scanned universe/2^12 summary words, and a long item among many short
// ones took seconds at a capacity of 2^26. Three fixed levels, not as many as the universe
// needs: insert and erase stay branch-light and call nothing, as the packers inline them
// (generic levels cost best-fit 3 % more instructions at 65,536). The packers use it over
// lengths (which lengths still have unplaced samples) and over remaining room (which room
// sizes have open rows), instead of scanning rows.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace multipack::detail {

class length_set {
 public:
  static constexpr std::uint32_t none = UINT32_MAX;

  explicit length_set(std::uint32_t universe)
      : words_((std::size_t{universe} + 63) / 64),
        summary_((words_.size() + 63) / 64),
        top_((summary_.size() + 63) / 64) {}

  [[nodiscard]] bool contains(std::uint32_t x) const noexcept {
    return (words_[x >> 6U] >> (x & 63U)) & 1U;
  }
  void insert(std::uint32_t x) noexcept {
    words_[x >> 6U] |= bit(x);
    std::uint64_t& summary = summary_[x >> 12U];
    if (summary == 0) top_[x >> 18U] |= bit(x >> 12U);
    summary |= bit(x >> 6U);
  }
  void erase(std::uint32_t x) noexcept {
    std::uint64_t& word = words_[x >> 6U];
    word &= ~bit(x);
    if (word != 0) return;
    std::uint64_t& summary = summary_[x >> 12U];
    summary &= ~bit(x >> 6U);
    if (summary == 0) top_[x >> 18U] &= ~bit(x >> 12U);
  }

  /// The largest member <= x, or none. Always inlined, as find_next: the exact packers call
  /// them for most items placed, and where a packer instantiates its loop several times GCC
  /// stopped inlining them (randomized_exact_fit 20 % slower).
  [[nodiscard, gnu::always_inline]] std::uint32_t find_prev(std::uint32_t x) const noexcept {
    if (x == none) return none;
    std::size_t w = x >> 6U;
    if (w >= words_.size()) {
      w = words_.size() - 1;
      x = static_cast<std::uint32_t>(w * 64 + 63);
    }
    const std::uint64_t here = words_[w] & (~std::uint64_t{0} >> (63U - (x & 63U)));
    if (here != 0) return static_cast<std::uint32_t>(w * 64 + 63 - std::countl_zero(here));
    // The previous non-empty word, through the summary, and past its summary word's 64
    // words through the top.
    std::size_t s = w >> 6U;
    std::uint64_t below = (w & 63U) == 0 ? 0 : summary_[s] & (~std::uint64_t{0} >> (64U - (w & 63U)));
    if (below == 0) {
      std::size_t t = s >> 6U;
      std::uint64_t groups = (s & 63U) == 0 ? 0 : top_[t] & (~std::uint64_t{0} >> (64U - (s & 63U)));
      while (groups == 0) {
        if (t == 0) return none;
        groups = top_[--t];
      }
      s = t * 64 + 63 - static_cast<std::size_t>(std::countl_zero(groups));
      below = summary_[s];
    }
    const std::size_t pw = s * 64 + 63 - static_cast<std::size_t>(std::countl_zero(below));
    return static_cast<std::uint32_t>(pw * 64 + 63 - static_cast<std::size_t>(std::countl_zero(words_[pw])));
  }

  /// The smallest member >= x, or none.
  [[nodiscard, gnu::always_inline]] std::uint32_t find_next(std::uint32_t x) const noexcept {
    std::size_t w = x >> 6U;
    if (w >= words_.size()) return none;
    const std::uint64_t here = words_[w] & (~std::uint64_t{0} << (x & 63U));
    if (here != 0) return static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(here)));
    std::size_t s = w >> 6U;
    std::uint64_t above = (w & 63U) == 63 ? 0 : summary_[s] & (~std::uint64_t{0} << ((w & 63U) + 1));
    if (above == 0) {
      std::size_t t = s >> 6U;
      std::uint64_t groups = (s & 63U) == 63 ? 0 : top_[t] & (~std::uint64_t{0} << ((s & 63U) + 1));
      while (groups == 0) {
        if (++t == top_.size()) return none;
        groups = top_[t];
      }
      s = t * 64 + static_cast<std::size_t>(std::countr_zero(groups));
      above = summary_[s];
    }
    const std::size_t nw = s * 64 + static_cast<std::size_t>(std::countr_zero(above));
    return static_cast<std::uint32_t>(nw * 64 + static_cast<std::size_t>(std::countr_zero(words_[nw])));
  }

  /// Membership of [x, x + 64) as bits: bit i is contains(x + i); positions outside
  /// [0, universe) read as absent. O(1), never throws.
  [[nodiscard]] std::uint64_t bits_from(std::int64_t x) const noexcept {
    auto word = [&](std::int64_t w) -> std::uint64_t {
      return w < 0 || w >= static_cast<std::int64_t>(words_.size()) ? 0 : words_[static_cast<std::size_t>(w)];
    };
    const std::int64_t w = x >> 6;  // floor, also for negative x
    const unsigned shift = static_cast<unsigned>(x & 63);
    if (shift == 0) return word(w);
    return (word(w) >> shift) | (word(w + 1) << (64U - shift));
  }

  /// The largest x in [low, high] (high < universe) such that x and sum - x are both members,
  /// as a scan from the top down that checks sum - x for each member x of [low, high] whose
  /// partner could be one (sum - x between the smallest and the largest member of
  /// [sum - high', sum - low'], where low' and high' are the lowest and highest members of
  /// [low, high]) and gives up after `budget` such members would find it;
  /// `budget` is decreased by the members scanned (to 0 when it gives up). none when there is
  /// none within the budget. 64 candidates a step: one word of x, and the word of sum - x
  /// bit-reversed.
  [[nodiscard]] std::uint32_t find_prev_pair(std::uint32_t low, std::uint32_t high, std::uint32_t sum,
                                             int& budget) const noexcept {
    if (low > high || budget <= 0) return none;
    // Scan only from the highest member to the lowest (two summary lookups): where long items
    // leave gaps that only short ones reach, the range is mostly empty words.
    high = find_prev(high);
    if (high == none || high < low) return none;
    low = find_next(low);
    if (sum < low) return none;
    // And only the x whose partner sum - x lies between the smallest and the largest member
    // in [sum - high, sum - low]: where short items ran out, this empties the range without a
    // scan (exact_fit on lengths near the capacity: 12 % of its time).
    const std::uint32_t partner_high = find_prev(sum - low);
    if (partner_high == none) return none;
    const std::uint32_t partner_low = find_next(sum >= high ? sum - high : 0);
    if (partner_low == none || partner_low > partner_high) return none;
    high = std::min(high, sum - partner_low);
    low = std::max(low, sum - partner_high);
    if (low > high) return none;
    for (std::int64_t w = high >> 6U; w >= static_cast<std::int64_t>(low >> 6U) && budget > 0; --w) {
      const auto base = static_cast<std::uint32_t>(w << 6);
      std::uint64_t candidates = words_[static_cast<std::size_t>(w)];
      if (high - base < 63) candidates &= ~std::uint64_t{0} >> (63U - (high - base));
      if (low > base) candidates &= ~std::uint64_t{0} << (low - base);
      if (candidates == 0) continue;
      // Bit i: sum - (base + i) is a member, i.e. bit 63 - i of the 64 bits from sum - base - 63.
      const std::uint64_t partners =
          reverse_bits(bits_from(static_cast<std::int64_t>(sum) - static_cast<std::int64_t>(base) - 63));
      const std::uint64_t matches = candidates & partners;
      if (matches == 0) {
        budget -= count_bits(candidates);
        continue;
      }
      const unsigned top = 63U - static_cast<unsigned>(std::countl_zero(matches));
      const int scanned = count_bits(candidates >> top);  // the candidates from the top down to it
      if (scanned > budget) {
        budget = 0;
        return none;
      }
      budget -= scanned;
      return base + top;
    }
    if (budget < 0) budget = 0;
    return none;
  }

 private:
  static constexpr std::uint64_t reverse_bits(std::uint64_t x) noexcept {
    x = ((x >> 1U) & 0x5555555555555555ULL) | ((x & 0x5555555555555555ULL) << 1U);
    x = ((x >> 2U) & 0x3333333333333333ULL) | ((x & 0x3333333333333333ULL) << 2U);
    x = ((x >> 4U) & 0x0f0f0f0f0f0f0f0fULL) | ((x & 0x0f0f0f0f0f0f0f0fULL) << 4U);
    return __builtin_bswap64(x);
  }

  /// std::popcount, inline: without POPCNT in the target (x86-64's baseline, where -march is
  /// not given) std::popcount is a call into libgcc, 6 % of exact_fit's time on lengths near
  /// the capacity.
  [[gnu::always_inline]] static constexpr int count_bits(std::uint64_t x) noexcept {
#if defined(__x86_64__) && !defined(__POPCNT__)
    x -= (x >> 1U) & 0x5555555555555555ULL;
    x = (x & 0x3333333333333333ULL) + ((x >> 2U) & 0x3333333333333333ULL);
    x = (x + (x >> 4U)) & 0x0f0f0f0f0f0f0f0fULL;
    return static_cast<int>((x * 0x0101010101010101ULL) >> 56U);
#else
    return std::popcount(x);
#endif
  }

  static constexpr std::uint64_t bit(std::uint32_t x) noexcept { return std::uint64_t{1} << (x & 63U); }

  std::vector<std::uint64_t> words_;
  std::vector<std::uint64_t> summary_;
  std::vector<std::uint64_t> top_;
};

}  // namespace multipack::detail
