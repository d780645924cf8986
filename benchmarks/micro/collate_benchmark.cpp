// Google Benchmark micro-suite: collating one micro-batch of the real Alpaca data (Llama
// tokens, prompt tokens masked) at capacity 4096 x 16 rows and 65536 x 1 row, beside the floor:
// a memcpy of the same bytes, batch by batch. Compare bytes_per_second within one run.
//
// The batches are every step of the plans of 16 epochs (each epoch another order of the
// rows), cycled, so that no two consecutive iterations collate the same batch. Both sides write
// into one batch-sized buffer, as a loader's ring of a few buffers does: the floor is a copy
// of the same bytes into the same kind of cache-resident buffer.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/batch/collate.hpp"
#include "multipack/batch/layout.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/schedule/plan.hpp"

namespace {

constexpr std::uint64_t epochs = 16;

/// Every batch of the plans of `epochs` epochs at one capacity and micro-batch, and the layout
/// that holds any of them.
struct collate_case {
  std::shared_ptr<const multipack::indexed_dataset> dataset;
  multipack::loss_mask mask;
  std::vector<multipack::epoch_plan> plans;
  std::vector<std::vector<std::span<const multipack::piece>>> batches;
  multipack::batch_layout layout;
};

const collate_case& case_for(std::uint32_t capacity, std::uint32_t micro_batch) {
  static std::map<std::pair<std::uint32_t, std::uint32_t>, std::unique_ptr<collate_case>> cases;
  auto& cached = cases[{capacity, micro_batch}];
  if (cached) return *cached;
  auto c = std::make_unique<collate_case>();
  const std::string prefix = std::string(MULTIPACK_SOURCE_DIR) + "/data/alpaca/alpaca_llama";
  c->dataset = std::make_shared<const multipack::indexed_dataset>(prefix);
  c->mask = multipack::loss_mask::open_prompt_lengths(std::string(MULTIPACK_SOURCE_DIR) + "/data/alpaca/prompt_lengths.txt");
  c->mask.check_matches(*c->dataset);
  std::vector<std::uint32_t> lengths(c->dataset->size());
  for (std::size_t i = 0; i < lengths.size(); ++i) lengths[i] = static_cast<std::uint32_t>(c->dataset->length(i));
  c->plans.reserve(epochs);
  std::uint32_t most_pieces = 1;
  for (std::uint64_t e = 0; e < epochs; ++e) {
    multipack::schedule_options options;
    options.micro_batch = micro_batch;
    options.epoch = e;
    c->plans.push_back(multipack::plan_epoch(lengths, multipack::pack_options{capacity}, options));
    c->layout = multipack::layout_of(c->plans.back());
    most_pieces = std::max(most_pieces, c->layout.max_pieces_per_row);
  }
  c->layout.max_pieces_per_row = most_pieces;
  for (const multipack::epoch_plan& plan : c->plans)
    for (std::uint64_t step = 0; step < plan.schedule.steps(); ++step) {
      std::vector<std::span<const multipack::piece>> rows(micro_batch);
      for (std::uint32_t slot = 0; slot < micro_batch; ++slot) rows[slot] = plan.pieces(step, 0, slot);
      c->batches.push_back(std::move(rows));
    }
  cached = std::move(c);
  return *cached;
}

/// Bytes of the ring of batch buffers the uncached cases write into: more than any core's
/// share of the last-level cache, so that every batch lands in memory no cache holds, as it
/// does in a loader that cycles through `depth` buffers while the trainer reads others.
constexpr std::size_t ring_bytes = std::size_t{256} << 20;

/// How many buffers of `bytes` each the case writes into in turn: 1 (cache-resident) or a
/// ring of ring_bytes.
std::size_t buffer_count(bool uncached, std::size_t bytes) {
  return uncached ? std::max<std::size_t>(2, ring_bytes / bytes) : 1;
}

/// The case's layout with the benchmark's pad_to_multiple (argument 2).
multipack::batch_layout layout_of(const collate_case& c, const benchmark::State& state) {
  multipack::batch_layout layout = c.layout;
  layout.pad_to_multiple = static_cast<std::uint32_t>(state.range(2));
  return layout;
}

const collate_case& case_of(const benchmark::State& state) {
  return case_for(static_cast<std::uint32_t>(state.range(0)), static_cast<std::uint32_t>(state.range(1)));
}

template <class T>
void collate_batch(benchmark::State& state) {
  const collate_case& c = case_of(state);
  const multipack::batch_layout layout = layout_of(c, state);
  std::vector<multipack::batch_buffers<T>> buffers(buffer_count(state.range(3) != 0, layout.bytes<T>()),
                                                   multipack::batch_buffers<T>(layout));
  std::vector<multipack::batch_view<T>> views;
  for (auto& b : buffers) views.push_back(b.view());
  const multipack::collate_options options;
  std::size_t next = 0;
  std::size_t target = 0;
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    const auto& rows = c.batches[next];
    next = next + 1 == c.batches.size() ? 0 : next + 1;
    multipack::batch_view<T>& view = views[target];
    target = target + 1 == views.size() ? 0 : target + 1;
    multipack::collate(*c.dataset, std::span<const std::span<const multipack::piece>>(rows), c.mask, options, view);
    bytes += view.used_bytes();
    benchmark::DoNotOptimize(view.input_ids.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["batches"] = static_cast<double>(c.batches.size());
  state.counters["batch_bytes"] = static_cast<double>(layout.bytes<T>());
  state.counters["buffers"] = static_cast<double>(views.size());
}

/// The floor: for the same batches in the same order, a memcpy of each one's output bytes
/// from one cache-resident buffer (as the collator's source, the dataset, is) into the same
/// buffers as collate_batch's (one, or the ring).
template <class T>
void memcpy_batch(benchmark::State& state) {
  const collate_case& c = case_of(state);
  const multipack::batch_layout layout = layout_of(c, state);
  std::vector<std::uint64_t> sizes;
  {
    multipack::batch_buffers<T> buffers(layout);
    multipack::batch_view<T> view = buffers.view();
    for (const auto& rows : c.batches) {
      multipack::collate(*c.dataset, std::span<const std::span<const multipack::piece>>(rows), c.mask,
                         multipack::collate_options{}, view);
      sizes.push_back(view.used_bytes());
    }
  }
  const std::size_t size = layout.bytes<T>();
  std::vector<std::byte> source(size, std::byte{0x5a});
  std::vector<std::vector<std::byte>> targets(buffer_count(state.range(3) != 0, size),
                                              std::vector<std::byte>(size, std::byte{0}));
  std::size_t next = 0;
  std::size_t target = 0;
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    const std::uint64_t n = sizes[next];
    next = next + 1 == sizes.size() ? 0 : next + 1;
    std::byte* out = targets[target].data();
    target = target + 1 == targets.size() ? 0 : target + 1;
    std::memcpy(out, source.data(), n);
    bytes += n;
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

/// capacity, micro_batch, pad_to_multiple (0: fixed rows), uncached (0: one cache-resident
/// buffer; 1: the ring).
void batch_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"capacity", "micro_batch", "pad_to_multiple", "uncached"});
  for (const std::int64_t uncached : {0, 1})
    for (const std::int64_t pad : {0, 64}) {
      if (uncached == 0 && pad != 0) continue;  // in cache, padding changes only the size
      b->Args({4096, 16, pad, uncached});
      b->Args({65536, 1, pad, uncached});
    }
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK_TEMPLATE(collate_batch, std::int32_t)->Apply(batch_shapes);
BENCHMARK_TEMPLATE(memcpy_batch, std::int32_t)->Apply(batch_shapes);
BENCHMARK_TEMPLATE(collate_batch, std::int64_t)->Apply(batch_shapes);
BENCHMARK_TEMPLATE(memcpy_batch, std::int64_t)->Apply(batch_shapes);
