// expect: deleted
// 0 as the mask's name (read as a sample count or an offset): it converted to a null
// const char*, then to std::string, which threw std::logic_error at run time.
#include <cstdint>
#include <vector>

#include "multipack/data/loss_mask.hpp"

int main() {
  std::vector<std::uint32_t> prompts{3, 0, 5};
  auto mask = multipack::loss_mask::from_prompt_lengths(prompts, 0);
}
