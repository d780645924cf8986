#pragma once
// First fit without scanning rows: a max-tree over the rooms of rows (rows not yet opened
// have the whole capacity), descended to the leftmost row with room for the item.
// O(log rows) per item; the tree doubles when every row it covers is in use.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace multipack::detail {

class first_fit_rows {
 public:
  first_fit_rows(std::uint32_t capacity, std::uint32_t max_per_row, std::uint64_t expected_rows)
      : capacity_(capacity), per_row_limit_(max_per_row == 0 ? UINT32_MAX : max_per_row) {
    std::size_t leaves = 64;
    while (leaves < expected_rows) leaves *= 2;
    resize(leaves);
  }

  /// Places an item of `length` (1..capacity); returns its row.
  std::uint32_t place(std::uint32_t length) {
    if (room_[1] < length) resize(leaves_ * 2);  // every covered row is too full
    std::size_t node = 1;
    while (node < leaves_) node = room_[2 * node] >= length ? 2 * node : 2 * node + 1;
    const auto row = static_cast<std::uint32_t>(node - leaves_);
    if (row >= pieces_in_row_.size()) pieces_in_row_.resize(std::size_t{row} + 1, 0);
    room_[node] -= length;
    if (++pieces_in_row_[row] >= per_row_limit_) room_[node] = 0;
    for (node /= 2; node != 0; node /= 2) room_[node] = std::max(room_[2 * node], room_[2 * node + 1]);
    return row;
  }

  [[nodiscard]] const std::vector<std::uint32_t>& pieces_in_row() const noexcept { return pieces_in_row_; }

 private:
  void resize(std::size_t leaves) {
    std::vector<std::uint32_t> room(2 * leaves, capacity_);
    for (std::size_t r = 0; r < leaves_; ++r) room[leaves + r] = room_[leaves_ + r];
    for (std::size_t node = leaves - 1; node != 0; --node)
      room[node] = std::max(room[2 * node], room[2 * node + 1]);
    room_ = std::move(room);
    leaves_ = leaves;
  }

  std::uint32_t capacity_;
  std::uint32_t per_row_limit_;
  std::size_t leaves_ = 0;
  std::vector<std::uint32_t> room_;
  std::vector<std::uint32_t> pieces_in_row_;
};

}  // namespace multipack::detail
