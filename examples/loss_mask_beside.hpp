#pragma once
// The loss mask the examples take for a dataset, found beside it: PREFIX.prompt_lengths (what
// `multipack-bench convert --prompt-field` writes), the token mask PREFIX.loss_mask (`convert
// --labels-field`), or the directory's prompt_lengths.txt (data/alpaca's); none: every token
// carries loss. A trainer of its own names its mask instead (batch_options::mask).

#include <filesystem>
#include <string>

#include "multipack/data/loss_mask.hpp"

namespace example {

inline multipack::loss_mask loss_mask_beside(const std::string& prefix) {
  namespace fs = std::filesystem;
  const std::string prompt_lengths = prefix + std::string(multipack::prompt_lengths_suffix);
  if (fs::exists(prompt_lengths)) return multipack::loss_mask::open_prompt_lengths(prompt_lengths);
  const std::string token_mask = prefix + std::string(multipack::token_mask_suffix);
  if (fs::exists(token_mask + ".idx")) return multipack::loss_mask::open_token_mask(token_mask);
  const fs::path beside = fs::path(prefix).parent_path() / "prompt_lengths.txt";
  if (fs::exists(beside)) return multipack::loss_mask::open_prompt_lengths(beside);
  return {};
}

}  // namespace example
