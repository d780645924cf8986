// libFuzzer target: an llm.c shard of any bytes. Opening either throws
// multipack::format_error or gives a dataset every sample of which reads within the file.

#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_input.hpp"
#include "multipack/data/llmc_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto path = multipack::fuzz::scratch("llmc.bin");
  multipack::fuzz::write_file(path, data, size);
  try {
    const multipack::llmc_dataset ds(path, 50256);
    std::vector<std::int64_t> out;
    std::uint64_t tokens = 0;
    for (std::size_t i = 0; i < ds.size(); ++i) {
      out.resize(ds.length(i));
      ds.read_tokens(i, 0, std::span(out));
      tokens += out.size();
    }
    if (tokens != ds.token_count()) __builtin_trap();  // every token in exactly one sample
  } catch (const multipack::format_error&) {
  }
  return 0;
}
