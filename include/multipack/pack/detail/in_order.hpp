#pragma once
// Next fit: the packer that follows dataset order rather than the histogram, writing sample
// indices directly.

#include <cstdint>
#include <span>
#include <vector>

#include "multipack/core/packed_rows.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/pack/detail/items.hpp"

namespace multipack::detail {

inline void next_fit(std::span<const std::uint32_t> lengths, const pack_options& options,
                     piece_vector& pieces, std::vector<std::uint64_t>& offsets) {
  const std::uint32_t per_row_limit = options.max_per_row == 0 ? UINT32_MAX : options.max_per_row;
  std::uint64_t room = options.capacity;
  std::uint32_t in_row = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i)
    for_each_piece_of(static_cast<std::uint32_t>(i), lengths[i], options, [&](const piece& p) {
      if (in_row != 0 && (p.length() > room || in_row == per_row_limit)) {
        offsets.push_back(pieces.size());
        room = options.capacity;
        in_row = 0;
      }
      pieces.push_back(p);
      room -= p.length();
      ++in_row;
    });
  if (in_row != 0) offsets.push_back(pieces.size());
}

}  // namespace multipack::detail
