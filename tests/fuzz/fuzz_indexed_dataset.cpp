// libFuzzer target: an .idx of any bytes (Megatron's layout or fairseq's) over a fixed .bin.
// Opening either throws multipack::format_error or gives a dataset every sample of which
// reads within the files.

#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_input.hpp"
#include "multipack/data/indexed_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto prefix = [] {
    const auto p = multipack::fuzz::scratch("indexed");
    std::vector<std::uint8_t> bin(256);
    for (std::size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<std::uint8_t>(i * 7);
    auto bin_path = p;
    bin_path += ".bin";
    multipack::fuzz::write_file(bin_path, bin.data(), bin.size());
    return p;
  }();
  auto idx = prefix;
  idx += ".idx";
  multipack::fuzz::write_file(idx, data, size);
  try {
    const multipack::indexed_dataset ds(prefix);
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < ds.size(); ++i) {
      out.resize(ds.length(i));
      try {
        ds.read_tokens(i, 0, std::span(out));
      } catch (const multipack::sample_error&) {  // a float dtype's fractional value
      }
    }
    for (const std::int64_t entry : ds.documents()) static_cast<void>(entry);
  } catch (const multipack::format_error&) {
  }
  return 0;
}
