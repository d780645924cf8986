// The smallest use of multipack: open a Megatron indexed dataset, pack its samples into rows
// of a given capacity, and print the first rows and the report.
//
//   pack_dataset data/alpaca/alpaca_llama 4096

#include <cstdint>
#include <cstdio>
#include <exception>
#include <ranges>
#include <string>

#include "multipack/data/indexed_dataset.hpp"
#include "multipack/pack/pack.hpp"

int main(int argc, char** argv) try {
  const std::string prefix = argc > 1 ? argv[1] : "data/alpaca/alpaca_llama";
  const multipack::pack_options options{argc > 2 ? static_cast<std::uint32_t>(std::stoul(argv[2])) : 4096};

  const multipack::indexed_dataset dataset(prefix);
  const auto lengths = std::views::iota(std::size_t{0}, dataset.size()) |
                       std::views::transform([&](std::size_t i) { return dataset.length(i); });
  const multipack::packing result = multipack::pack(lengths, options);

  for (std::size_t r = 0; r < std::min<std::size_t>(3, result.rows.size()); ++r) {
    std::printf("row %zu (%llu tokens):", r, static_cast<unsigned long long>(result.rows.tokens(r)));
    for (const multipack::piece& p : result.rows[r]) std::printf(" %u", p.sample);
    std::printf("\n");
  }
  const multipack::pack_report& report = result.report;
  // Samples longer than a row are dropped by default (pack_options::overlong): said, not hidden.
  std::printf("%llu samples, %llu of them in %llu rows of %u tokens (lower bound %llu), %.3f%% full; %llu dropped, "
              "%llu truncated, %llu split (longer than a row)\n",
              static_cast<unsigned long long>(report.samples), static_cast<unsigned long long>(report.packed_samples),
              static_cast<unsigned long long>(report.rows), report.capacity,
              static_cast<unsigned long long>(report.lower_bound), 100 * report.efficiency(),
              static_cast<unsigned long long>(report.dropped_samples),
              static_cast<unsigned long long>(report.truncated_samples),
              static_cast<unsigned long long>(report.split_samples));
  return report.rows >= report.lower_bound && report.samples == dataset.size() ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "pack_dataset: %s\n", e.what());
  return 1;
}
