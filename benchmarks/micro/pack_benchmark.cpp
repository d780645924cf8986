// Google Benchmark micro-suite: every packing algorithm on 1 M lengths drawn from the real
// Alpaca lengths, beside the floor: sorting the same lengths. Compare within one run.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "multipack/core/random.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/pack/pack.hpp"

namespace {

const std::vector<std::uint32_t>& resampled_alpaca() {
  static const std::vector<std::uint32_t> lengths = [] {
    const std::vector<std::uint32_t> real =
        multipack::read_length_list(std::string(MULTIPACK_SOURCE_DIR) + "/data/alpaca/lengths.txt");
    std::vector<std::uint32_t> drawn(1'000'000);
    multipack::splitmix64 rng(1);
    for (auto& length : drawn) length = real[rng.below(real.size())];
    return drawn;
  }();
  return lengths;
}

void sort_floor(benchmark::State& state) {
  const auto& lengths = resampled_alpaca();
  for (auto _ : state) {
    std::vector<std::uint32_t> copy = lengths;
    std::sort(copy.begin(), copy.end());
    benchmark::DoNotOptimize(copy.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(lengths.size()));
}

void pack_lengths(benchmark::State& state) {
  const auto& lengths = resampled_alpaca();
  const multipack::pack_options options{static_cast<std::uint32_t>(state.range(1)),
                                        static_cast<multipack::packing_algorithm>(state.range(0))};
  double rows_over_bound = 0;
  for (auto _ : state) {
    const multipack::packing result = multipack::pack(lengths, options);
    rows_over_bound = result.report.rows_over_lower_bound();
    benchmark::DoNotOptimize(result.rows.pieces().data());
  }
  state.SetLabel(std::string(multipack::to_string(options.algorithm)));
  state.counters["rows_over_lower_bound"] = rows_over_bound;
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(lengths.size()));
}

}  // namespace

BENCHMARK(sort_floor)->Unit(benchmark::kMillisecond);
BENCHMARK(pack_lengths)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {2048, 4096, 65536}})
    ->ArgNames({"algorithm", "capacity"})
    ->Unit(benchmark::kMillisecond);
