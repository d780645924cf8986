// libFuzzer target: a prompt-lengths file of any bytes (text, or the binary MPPROMPT form).
// Opening either throws multipack::format_error or gives a mask whose every entry reads.

#include <cstdint>

#include "fuzz_input.hpp"
#include "multipack/data/loss_mask.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto path = multipack::fuzz::scratch("prompts");
  multipack::fuzz::write_file(path, data, size);
  try {
    const multipack::loss_mask mask = multipack::loss_mask::open_prompt_lengths(path);
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < mask.size(); ++i) sum += mask.prompt_length(i);
    static_cast<void>(sum);
  } catch (const multipack::format_error&) {
  }
  return 0;
}
