// libFuzzer target: JSON Lines of any bytes through multipack-bench convert's converter.
// It either throws multipack::error (naming a line) and leaves no output, or writes a dataset
// that opens with the samples and tokens it counted.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "command/convert_command.hpp"
#include "command/jsonl_converter.hpp"
#include "fuzz_input.hpp"
#include "multipack/data/indexed_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto output = multipack::fuzz::scratch("converted").string();
  multipack::bench::convert_command_options o;
  o.input = "fuzz.jsonl";
  o.output = output;
  o.dtype = "int32";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    multipack::bench::detail::jsonl_converter converter(o, multipack::token_dtype::int32);
    std::uint64_t line = 0;
    std::size_t offset = 0;
    while (offset < text.size()) {
      std::size_t end = text.find('\n', offset);
      if (end == std::string_view::npos) end = text.size();
      converter.add(std::string(text.substr(offset, end - offset)), ++line, offset);
      offset = end + 1;
    }
    converter.finish();
    const multipack::indexed_dataset ds(output);
    std::uint64_t tokens = 0;
    for (std::size_t i = 0; i < ds.size(); ++i) tokens += ds.length(i);
    if (ds.size() != converter.samples() || tokens != converter.tokens()) __builtin_trap();
  } catch (const multipack::error&) {
    if (std::filesystem::exists(output + ".idx.tmp") || std::filesystem::exists(output + ".bin.tmp")) __builtin_trap();
  }
  return 0;
}
