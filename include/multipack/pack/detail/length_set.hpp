#pragma once
// A set of integers in [0, universe) with O(1)-ish predecessor and successor queries: a
// bitset plus a summary bit per 64-bit word. The packers use it over lengths (which lengths
// still have unplaced samples) and over remaining room (which room sizes have open rows),
// instead of scanning rows.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace multipack::detail {

class length_set {
 public:
  static constexpr std::uint32_t none = UINT32_MAX;

  explicit length_set(std::uint32_t universe)
      : words_((std::size_t{universe} + 63) / 64), summary_((words_.size() + 63) / 64) {}

  [[nodiscard]] bool contains(std::uint32_t x) const noexcept {
    return (words_[x >> 6U] >> (x & 63U)) & 1U;
  }
  void insert(std::uint32_t x) noexcept {
    words_[x >> 6U] |= bit(x);
    summary_[x >> 12U] |= bit(x >> 6U);
  }
  void erase(std::uint32_t x) noexcept {
    std::uint64_t& word = words_[x >> 6U];
    word &= ~bit(x);
    if (word == 0) summary_[x >> 12U] &= ~bit(x >> 6U);
  }

  /// The largest member <= x, or none.
  [[nodiscard]] std::uint32_t find_prev(std::uint32_t x) const noexcept {
    if (x == none) return none;
    std::size_t w = x >> 6U;
    if (w >= words_.size()) {
      w = words_.size() - 1;
      x = static_cast<std::uint32_t>(w * 64 + 63);
    }
    const std::uint64_t here = words_[w] & (~std::uint64_t{0} >> (63U - (x & 63U)));
    if (here != 0) return static_cast<std::uint32_t>(w * 64 + 63 - std::countl_zero(here));
    // The previous non-empty word, through the summary.
    std::size_t s = w >> 6U;
    std::uint64_t below = (w & 63U) == 0 ? 0 : summary_[s] & (~std::uint64_t{0} >> (64U - (w & 63U)));
    while (below == 0) {
      if (s == 0) return none;
      below = summary_[--s];
    }
    const std::size_t pw = s * 64 + 63 - static_cast<std::size_t>(std::countl_zero(below));
    return static_cast<std::uint32_t>(pw * 64 + 63 - static_cast<std::size_t>(std::countl_zero(words_[pw])));
  }

  /// The smallest member >= x, or none.
  [[nodiscard]] std::uint32_t find_next(std::uint32_t x) const noexcept {
    std::size_t w = x >> 6U;
    if (w >= words_.size()) return none;
    const std::uint64_t here = words_[w] & (~std::uint64_t{0} << (x & 63U));
    if (here != 0) return static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(here)));
    std::size_t s = w >> 6U;
    std::uint64_t above = (w & 63U) == 63 ? 0 : summary_[s] & (~std::uint64_t{0} << ((w & 63U) + 1));
    while (above == 0) {
      if (++s == summary_.size()) return none;
      above = summary_[s];
    }
    const std::size_t nw = s * 64 + static_cast<std::size_t>(std::countr_zero(above));
    return static_cast<std::uint32_t>(nw * 64 + static_cast<std::size_t>(std::countr_zero(words_[nw])));
  }

 private:
  static constexpr std::uint64_t bit(std::uint32_t x) noexcept { return std::uint64_t{1} << (x & 63U); }

  std::vector<std::uint64_t> words_;
  std::vector<std::uint64_t> summary_;
};

}  // namespace multipack::detail
