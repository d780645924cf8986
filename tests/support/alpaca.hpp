#pragma once
// The embedded Alpaca data, opened once per test executable, its prompt-length mask, and every
// batch of a range of batches flattened (batch_checks.hpp's contents), for the tests that
// compare pipelines batch for batch.

#include <cstdint>
#include <vector>

#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/loss_mask.hpp"
#include "support/batch_checks.hpp"
#include "support/paths.hpp"

namespace multipack::test {

inline const indexed_dataset& alpaca() {
  static const indexed_dataset dataset(alpaca_prefix());
  return dataset;
}

inline const loss_mask& alpaca_prompts() {
  static const loss_mask mask = loss_mask::open_prompt_lengths(source_dir() / "data/alpaca/prompt_lengths.txt");
  return mask;
}

/// Every batch of `batches`, in order, flattened.
template <class Batches>
std::vector<std::vector<std::int64_t>> all_contents(Batches&& batches) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& b : batches) out.push_back(contents(b));
  return out;
}

}  // namespace multipack::test
