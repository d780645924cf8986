// libFuzzer target: a lengths text (one integer a line). Parsing either throws
// multipack::format_error or gives the integers, which written back parse the same.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "multipack/data/length_list.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<std::uint32_t> lengths = multipack::parse_length_list(text, "fuzz");
    std::string again;
    for (const std::uint32_t n : lengths) again += std::to_string(n) + "\n";
    if (multipack::parse_length_list(again, "again") != lengths) __builtin_trap();
  } catch (const multipack::format_error&) {
  }
  return 0;
}
