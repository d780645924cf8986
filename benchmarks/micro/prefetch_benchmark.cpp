// Google Benchmark micro-suite: the prefetcher's hand-off, the cost of a batch between a
// claimed step and its delivery when there is nothing to build (issue: <= 5 us a batch), beside
// the floor: the same queue operations (a buffer taken from the free queue, put on the ready
// queue, taken from it and given back) on one thread, with no waiting.
//
// Each iteration runs one prefetcher over `steps` steps; its construction (buffers, threads)
// and destruction are outside the timing. A batch's build writes its step into the buffer, and
// the consumer reads it back, so that nothing is optimised away.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>

#include "multipack/pipeline/detail/blocking_queue.hpp"
#include "multipack/pipeline/prefetcher.hpp"

namespace {

constexpr std::uint64_t steps = 20000;

void prefetch_handoff(benchmark::State& state) {
  const multipack::prefetch_options options{static_cast<unsigned>(state.range(0)),
                                            static_cast<std::size_t>(state.range(1))};
  std::uint64_t sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::optional<multipack::prefetcher<std::uint64_t>> batches;
    batches.emplace(options, 0, steps, [] { return std::uint64_t{0}; },
                    [](std::uint64_t step, std::uint64_t& buffer) { buffer = step; });
    state.ResumeTiming();
    while (auto lease = batches->next()) sum += **lease;
    state.PauseTiming();
    batches.reset();
    state.ResumeTiming();
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * steps));
  state.counters["per_batch"] = benchmark::Counter(static_cast<double>(state.iterations() * steps),
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void prefetch_queue_floor(benchmark::State& state) {
  multipack::detail::blocking_queue<std::uint64_t*> free(4);
  multipack::detail::blocking_queue<std::uint64_t*> ready(4);
  std::uint64_t buffer = 0;
  free.enqueue(&buffer);
  std::uint64_t sum = 0;
  for (auto _ : state) {
    for (std::uint64_t step = 0; step < steps; ++step) {
      std::uint64_t* b = nullptr;
      free.wait_dequeue(b);
      *b = step;
      ready.enqueue(b);
      ready.wait_dequeue(b);
      sum += *b;
      free.enqueue(b);
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * steps));
  state.counters["per_batch"] = benchmark::Counter(static_cast<double>(state.iterations() * steps),
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(prefetch_handoff)->ArgNames({"threads", "depth"})->Args({1, 4})->Args({2, 4})->Args({1, 64})->Args({2, 64})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
// Wall time, as the hand-off's: its per_batch rate is then on the same clock.
BENCHMARK(prefetch_queue_floor)->Unit(benchmark::kMillisecond)->UseRealTime();
