#pragma once
// Best fit without scanning rows: open rows are kept in buckets by their remaining room, a
// length_set says which rooms have rows, and each bucket is a min-heap of row numbers so that
// ties go to the earliest row. Placing an item is a successor query and two heap operations:
// O(log rows) worst case, O(1) typical.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "multipack/core/packed_rows.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/pack/detail/items.hpp"
#include "multipack/pack/detail/length_set.hpp"

namespace multipack::detail {

class best_fit_rows {
 public:
  /// Rows with less room than `shortest_item` can take nothing more: they are not kept.
  best_fit_rows(std::uint32_t capacity, std::uint32_t max_per_row, std::uint32_t shortest_item)
      : capacity_(capacity),
        per_row_limit_(max_per_row == 0 ? UINT32_MAX : max_per_row),
        shortest_(std::max<std::uint32_t>(shortest_item, 1)),
        rooms_(capacity + 1),
        buckets_(std::size_t{capacity} + 1) {}

  /// Places an item of `length` (1..capacity); returns its row.
  std::uint32_t place(std::uint32_t length) {
    const std::uint32_t room = rooms_.find_next(length);
    std::uint32_t row = 0;
    std::uint32_t left = 0;
    if (room == length_set::none) {
      row = static_cast<std::uint32_t>(pieces_in_row_.size());
      pieces_in_row_.push_back(0);
      left = capacity_ - length;
    } else {
      std::vector<std::uint32_t>& bucket = buckets_[room];
      std::pop_heap(bucket.begin(), bucket.end(), std::greater<>{});
      row = bucket.back();
      bucket.pop_back();
      if (bucket.empty()) rooms_.erase(room);
      left = room - length;
    }
    if (++pieces_in_row_[row] < per_row_limit_ && left >= shortest_) {
      std::vector<std::uint32_t>& bucket = buckets_[left];
      if (bucket.empty()) rooms_.insert(left);
      bucket.push_back(row);
      std::push_heap(bucket.begin(), bucket.end(), std::greater<>{});
    }
    return row;
  }

  /// Pieces placed in each row so far.
  [[nodiscard]] const std::vector<std::uint32_t>& pieces_in_row() const noexcept { return pieces_in_row_; }

 private:
  std::uint32_t capacity_;
  std::uint32_t per_row_limit_;
  std::uint32_t shortest_;
  length_set rooms_;
  std::vector<std::vector<std::uint32_t>> buckets_;
  std::vector<std::uint32_t> pieces_in_row_;
};

/// Row offsets from pieces per row; returns the first free position of every row (to fill).
inline std::vector<std::uint64_t> offsets_from_counts(const std::vector<std::uint32_t>& pieces_in_row,
                                                      std::vector<std::uint64_t>& offsets) {
  std::vector<std::uint64_t> next(pieces_in_row.size());
  std::uint64_t position = offsets.back();
  for (std::size_t r = 0; r < pieces_in_row.size(); ++r) {
    next[r] = position;
    position += pieces_in_row[r];
    offsets.push_back(position);
  }
  return next;
}

/// Items of the histogram longest first, in placement order: calls visit(length) for each.
template <class Visit>
void for_each_item_longest_first(const item_histogram& histogram, Visit&& visit) {
  for (std::uint32_t l = histogram.longest; l >= 1 && l >= histogram.shortest; --l)
    for (std::uint32_t k = histogram.count[l]; k != 0; --k) visit(l);
}

/// Best-fit or first-fit decreasing on the histogram: `placer(length) -> row`, then the
/// pieces grouped by row (placement order within a row) as slots for slot_assignment.
template <class Placer>
void pack_longest_first(const item_histogram& histogram, Placer& placer,
                        piece_vector& pieces, std::vector<std::uint64_t>& offsets,
                        slot_assignment& slots) {
  large_vector<std::uint32_t> row_of;
  row_of.reserve(histogram.items);
  for_each_item_longest_first(histogram, [&](std::uint32_t length) { row_of.push_back(placer.place(length)); });
  std::vector<std::uint64_t> next = offsets_from_counts(placer.pieces_in_row(), offsets);
  std::size_t p = 0;
  for_each_item_longest_first(histogram, [&](std::uint32_t length) {
    slots.add(pieces, next[row_of[p++]]++, length);
  });
}

}  // namespace multipack::detail
