// Google Benchmark micro-suite: every packing algorithm on 1 M lengths of three shapes, beside
// the floor: sorting the same lengths. Compare within one run. The shapes (argument `shape`):
//   0  drawn from the real Alpaca lengths;
//   1  long-tailed, as scripts/long-tail-lengths: 80 % chat-like (log-normal, median 200
//      tokens), 20 % documents (Pareto, alpha 1.1 from 1,000 tokens), capped at 32,768;
//   2  near the capacity, as scripts/near-capacity-lengths: 40 % uniform in [capacity / 2,
//      capacity], 60 % chat-like, capped at the capacity.
// Shapes 1 and 2 are drawn with the standard library's distributions here (the scripts use
// Python's): the same shape, not the same numbers.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
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

std::vector<std::uint32_t> drawn_lengths(int shape, std::uint32_t capacity) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::lognormal_distribution<double> chat(5.3, 1.0);
  std::vector<std::uint32_t> drawn(1'000'000);
  for (auto& length : drawn) {
    double l = 0;
    if (shape == 1)
      l = unit(rng) < 0.8 ? chat(rng) : 1000.0 * std::pow(1.0 - unit(rng), -1.0 / 1.1);  // Pareto by inversion
    else
      l = unit(rng) < 0.4 ? capacity / 2 + unit(rng) * (capacity - capacity / 2) : chat(rng);
    const double cap = shape == 1 ? 32768.0 : capacity;
    length = static_cast<std::uint32_t>(std::clamp(l, 1.0, cap));
  }
  return drawn;
}

/// The lengths of `shape` (the capacity matters to shape 2 only), made once each.
const std::vector<std::uint32_t>& lengths_of(int shape, std::uint32_t capacity) {
  if (shape == 0) return resampled_alpaca();
  static std::map<std::pair<int, std::uint32_t>, std::vector<std::uint32_t>> made;
  const auto key = std::pair{shape, shape == 2 ? capacity : 0U};
  auto found = made.find(key);
  if (found == made.end()) found = made.emplace(key, drawn_lengths(shape, capacity)).first;
  return found->second;
}

void sort_floor(benchmark::State& state) {
  const auto& lengths = lengths_of(static_cast<int>(state.range(0)), static_cast<std::uint32_t>(state.range(1)));
  for (auto _ : state) {
    std::vector<std::uint32_t> copy = lengths;
    std::sort(copy.begin(), copy.end());
    benchmark::DoNotOptimize(copy.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(lengths.size()));
}

void pack_lengths(benchmark::State& state) {
  const auto& lengths = lengths_of(static_cast<int>(state.range(2)), static_cast<std::uint32_t>(state.range(1)));
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

/// The same, each packing written into the last one's memory (pack's storage argument), as a
/// trainer's later epochs are: no page of the result is faulted in again.
void pack_into_last_packing(benchmark::State& state) {
  const auto& lengths = lengths_of(static_cast<int>(state.range(2)), static_cast<std::uint32_t>(state.range(1)));
  const multipack::pack_options options{static_cast<std::uint32_t>(state.range(1)),
                                        static_cast<multipack::packing_algorithm>(state.range(0))};
  multipack::packing result = multipack::pack(lengths, options);
  for (auto _ : state) {
    result = multipack::pack(lengths, options, std::move(result));
    benchmark::DoNotOptimize(result.rows.pieces().data());
  }
  state.SetLabel(std::string(multipack::to_string(options.algorithm)));
  state.counters["rows_over_lower_bound"] = result.report.rows_over_lower_bound();
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(lengths.size()));
}

}  // namespace

// The sort's capacity matters to shape 2 only.
BENCHMARK(sort_floor)
    ->ArgNames({"shape", "capacity"})
    ->Args({0, 4096})
    ->Args({1, 4096})
    ->Args({2, 2048})
    ->Args({2, 4096})
    ->Args({2, 65536})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(pack_lengths)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {2048, 4096, 65536}, {0, 1, 2}})
    ->ArgNames({"algorithm", "capacity", "shape"})
    ->Unit(benchmark::kMillisecond);
// exact-fit (0) and randomized-exact-fit (4).
BENCHMARK(pack_into_last_packing)
    ->ArgsProduct({{0, 4}, {2048, 4096, 65536}, {0, 1, 2}})
    ->ArgNames({"algorithm", "capacity", "shape"})
    ->Unit(benchmark::kMillisecond);
