#pragma once
// Flat storage of packed rows: all pieces in one array, rows as offsets into it.
// No container per row, so a packing of 100 M samples costs one allocation of pieces
// (12 bytes each) and one of row offsets (8 bytes a row).

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/core/detail/huge_page_allocator.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"

namespace multipack {

namespace detail {
struct packed_rows_blocks;
}  // namespace detail

/// Pieces of a packing, in one block (huge pages where the system has them).
using piece_vector = detail::large_vector<piece>;

class packed_rows {
 public:
  /// No rows: one row offset (0). Throws std::bad_alloc. A packed_rows moved from has no rows
  /// either, and no row offset (the move does not allocate).
  packed_rows() = default;

  /// Takes `pieces` and `row_offsets` (row r is pieces [row_offsets[r], row_offsets[r+1])).
  /// Throws option_error unless the offsets start at 0, never decrease and end at
  /// pieces.size(). Cost: O(rows).
  packed_rows(piece_vector pieces, std::vector<std::uint64_t> row_offsets)
      : pieces_(std::move(pieces)), offsets_(std::move(row_offsets)) {
    if (offsets_.empty()) offsets_.push_back(0);
    if (offsets_.front() != 0 || offsets_.back() != pieces_.size())
      throw option_error("packed_rows: row offsets must start at 0 and end at the piece count (" +
                         std::to_string(pieces_.size()) + ")");
    for (std::size_t r = 1; r < offsets_.size(); ++r)
      if (offsets_[r] < offsets_[r - 1])
        throw option_error("packed_rows: row offset " + std::to_string(r) + " decreases");
  }

  /// Number of rows. O(1).
  [[nodiscard]] std::size_t size() const noexcept { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }

  /// The pieces of row `r`, in the order the packer placed them. O(1); r < size() is the
  /// caller's duty (checked by assert only, as for std::vector).
  [[nodiscard]] std::span<const piece> operator[](std::size_t r) const noexcept {
    return {pieces_.data() + offsets_[r], pieces_.data() + offsets_[r + 1]};
  }

  /// Tokens in row `r`. O(pieces of the row).
  [[nodiscard]] std::uint64_t tokens(std::size_t r) const noexcept {
    std::uint64_t sum = 0;
    for (const piece& p : (*this)[r]) sum += p.length();
    return sum;
  }

  /// Every piece, row after row. O(1).
  [[nodiscard]] std::span<const piece> pieces() const noexcept { return pieces_; }
  /// size() + 1 offsets into pieces() (none once moved from). O(1).
  [[nodiscard]] std::span<const std::uint64_t> row_offsets() const noexcept { return offsets_; }

  friend bool operator==(const packed_rows&, const packed_rows&) = default;

 private:
  friend struct detail::packed_rows_blocks;

  piece_vector pieces_;
  std::vector<std::uint64_t> offsets_{0};
};

namespace detail {

/// The blocks of packed rows, for a packing to write into again (pack's storage argument).
struct packed_rows_blocks {
  piece_vector pieces;
  std::vector<std::uint64_t> offsets;

  /// Takes the blocks of `rows`, which is left with no rows. Throws std::bad_alloc (the empty
  /// rows' one offset).
  [[nodiscard]] static packed_rows_blocks take(packed_rows& rows) {
    packed_rows taken = std::exchange(rows, packed_rows());
    return {std::move(taken.pieces_), std::move(taken.offsets_)};
  }

  /// Packed rows over these blocks, whose offsets the packer made: not checked row by row as
  /// the public constructor does (a pass over 8 bytes a row, 2 % of exact-fit's time where
  /// rows are many). Requires offsets starting at 0, never decreasing, ending at the piece
  /// count (assert checks the ends). Throws std::bad_alloc (as take()).
  [[nodiscard]] static packed_rows give(piece_vector pieces, std::vector<std::uint64_t> offsets) {
    assert(!offsets.empty() && offsets.front() == 0 && offsets.back() == pieces.size());
    packed_rows rows;
    rows.pieces_ = std::move(pieces);
    rows.offsets_ = std::move(offsets);
    return rows;
  }
};

}  // namespace detail

}  // namespace multipack
