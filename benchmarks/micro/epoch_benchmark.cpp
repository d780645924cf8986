// Google Benchmark micro-suite: epochs. Eight short epochs (a repacked randomized plan each)
// of small batches, through one epoch_loader and, as the floor a trainer had before it,
// through a batch_loader made for each epoch after planning it. Each is timed whole, from the
// first plan to the last batch, so what a boundary costs is in the time a batch.
//
// Counters: per_batch (time a batch over the whole run); for the epoch_loader,
// boundary_wait_max_us (the consumer's longest wait for an epoch's first batch) beside
// step_wait_max_us (its longest wait for any other batch), the longest over the iterations.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "multipack/core/random.hpp"
#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/schedule/plan.hpp"

namespace {

constexpr std::uint64_t epochs = 8;

struct epoch_inputs {
  std::shared_ptr<const multipack::in_memory_dataset<std::int32_t>> dataset;
  std::vector<std::uint32_t> lengths;
  multipack::pack_options packing{.capacity = 512, .algorithm = multipack::packing_algorithm::randomized_exact_fit};
  multipack::schedule_options schedule{.world_size = 1, .micro_batch = 4, .seed = 5};
};

/// 20,000 samples of 1 to 128 tokens: about 10,000 rows of 512, 600 steps of 4 rows an epoch.
const epoch_inputs& inputs() {
  static const epoch_inputs in = [] {
    epoch_inputs made;
    std::vector<std::vector<std::int32_t>> samples(20000);
    for (std::size_t i = 0; i < samples.size(); ++i) {
      samples[i].assign(1 + multipack::detail::mix64(i) % 128, static_cast<std::int32_t>(i));
      made.lengths.push_back(static_cast<std::uint32_t>(samples[i].size()));
    }
    made.dataset = std::make_shared<const multipack::in_memory_dataset<std::int32_t>>(samples);
    return made;
  }();
  return in;
}

void epochs_one_epoch_loader(benchmark::State& state) {
  const epoch_inputs& in = inputs();
  const multipack::prefetch_options prefetch{static_cast<unsigned>(state.range(0)), 4};
  std::uint64_t batches = 0, sum = 0;
  double boundary_max = 0, step_max = 0;
  for (auto _ : state) {
    multipack::epoch_loader loader(in.dataset, multipack::plan_each_epoch(in.lengths, in.packing, in.schedule), 0,
                                   multipack::batch_options{}, prefetch, {.first = 0, .count = epochs});
    while (auto b = loader.next()) {
      sum += (*b)->view.loss_tokens;
      ++batches;
    }
    const multipack::epoch_loader_statistics s = loader.statistics();
    boundary_max = std::max(boundary_max, s.max_boundary_wait_seconds);
    step_max = std::max(step_max, s.max_step_wait_seconds);
  }
  benchmark::DoNotOptimize(sum);
  state.counters["per_batch"] =
      benchmark::Counter(static_cast<double>(batches), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["boundary_wait_max_us"] = boundary_max * 1e6;
  state.counters["step_wait_max_us"] = step_max * 1e6;
}

void epochs_batch_loader_per_epoch(benchmark::State& state) {
  const epoch_inputs& in = inputs();
  const multipack::prefetch_options prefetch{static_cast<unsigned>(state.range(0)), 4};
  std::uint64_t batches = 0, sum = 0;
  for (auto _ : state) {
    for (std::uint64_t epoch = 0; epoch < epochs; ++epoch) {
      multipack::schedule_options schedule = in.schedule;
      schedule.epoch = epoch;
      auto plan = std::make_shared<const multipack::epoch_plan>(multipack::plan_epoch(in.lengths, in.packing, schedule));
      multipack::batch_loader<multipack::in_memory_dataset<std::int32_t>> loader(in.dataset, std::move(plan), 0,
                                                                                  multipack::batch_options{}, prefetch);
      while (auto b = loader.next()) {
        sum += (*b)->view.loss_tokens;
        ++batches;
      }
    }
  }
  benchmark::DoNotOptimize(sum);
  state.counters["per_batch"] =
      benchmark::Counter(static_cast<double>(batches), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(epochs_one_epoch_loader)->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(epochs_batch_loader_per_epoch)->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
