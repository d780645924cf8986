#pragma once
// A piece of a sample: tokens [begin, end) of sample `sample`. A row of a packing is a list
// of pieces; a sample that is not split is one piece [0, length).

#include <cstdint>

namespace multipack {

struct piece {
  std::uint32_t sample = 0;  ///< index of the sample in its dataset
  std::uint32_t begin = 0;   ///< first token of the piece
  std::uint32_t end = 0;     ///< one past the last token of the piece

  [[nodiscard]] constexpr std::uint32_t length() const noexcept { return end - begin; }
  friend constexpr bool operator==(const piece&, const piece&) noexcept = default;
};

}  // namespace multipack
