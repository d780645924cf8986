#pragma once
// Per-token loss masks as `convert --labels-field` writes them (an indexed dataset of uint8,
// nonzero: the token carries loss), for the tests of token masks.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "multipack/data/indexed_dataset_writer.hpp"

namespace multipack::test {

/// Writes at `prefix` a mask of one sample a length, a document each; token j of sample i
/// carries loss where carries_loss(i, j).
template <class Lengths, class CarriesLoss>
void write_token_mask(const std::filesystem::path& prefix, const Lengths& lengths, const CarriesLoss& carries_loss) {
  indexed_dataset_writer w(prefix, token_dtype::uint8);
  std::size_t i = 0;
  for (const auto length : lengths) {
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(length));
    for (std::size_t j = 0; j < mask.size(); ++j) mask[j] = carries_loss(i, j) ? 1 : 0;
    w.add_sample(mask);
    w.end_document();
    ++i;
  }
  w.finish();
}

}  // namespace multipack::test
