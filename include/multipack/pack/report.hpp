#pragma once
// What a packing did with every sample and token. Nothing is lost silently: every sample is
// packed, or counted here under exactly one cause.

#include <cstdint>

namespace multipack {

struct pack_report {
  std::uint64_t samples = 0;            ///< samples in the input
  std::uint64_t tokens = 0;             ///< tokens in the input
  std::uint64_t packed_samples = 0;     ///< samples with at least one piece in a row
  std::uint64_t packed_tokens = 0;      ///< tokens in rows
  std::uint64_t pieces = 0;             ///< pieces in rows (a split sample has several)
  std::uint64_t rows = 0;
  std::uint32_t capacity = 0;
  /// No packing of the packed pieces has fewer rows: the larger of Martello and Toth's L2 bound,
  /// which is at least ceil(packed_tokens / capacity) and the number of pieces longer than
  /// capacity / 2 (no two share a row), and counts the gaps of long pieces too short for any
  /// short one, and Fekete and Schepers' bound for pieces over a third of a row (at most two
  /// share a row); with max_per_row, at least ceil(pieces / max_per_row).
  std::uint64_t lower_bound = 0;
  std::uint64_t empty_samples = 0;      ///< length 0: counted, not packed
  std::uint64_t dropped_samples = 0;    ///< longer than a row, policy drop
  std::uint64_t dropped_tokens = 0;
  std::uint64_t truncated_samples = 0;  ///< longer than a row, policy truncate
  std::uint64_t truncated_tokens = 0;   ///< tokens cut off (not in any row)
  std::uint64_t split_samples = 0;      ///< longer than a row, policy split (all tokens packed)

  /// packed tokens / (rows * capacity); 0 when there are no rows.
  [[nodiscard]] double efficiency() const noexcept {
    return rows == 0 ? 0.0
                     : static_cast<double>(packed_tokens) /
                           (static_cast<double>(rows) * static_cast<double>(capacity));
  }
  /// rows / lower_bound; 1 is optimal. 0 when nothing was packed.
  [[nodiscard]] double rows_over_lower_bound() const noexcept {
    return lower_bound == 0 ? 0.0 : static_cast<double>(rows) / static_cast<double>(lower_bound);
  }

  friend bool operator==(const pack_report&, const pack_report&) = default;
};

}  // namespace multipack
