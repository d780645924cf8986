// The device loader, on a GPU or on the simulated runtime (simulated_runtime.cpp): batches
// reach device memory exactly as the host builds them, in step order, in every copy path;
// a device buffer is never overwritten while the trainer's stream may still read it (the
// "training step" here is a delay queued on the trainer's stream before it reads the batch
// back); after construction there is no allocation and no synchronous copy; errors and early
// stops leave nothing behind. Suite "device" needs a device (main.cpp skips it otherwise);
// suite "no_device" runs where there is none (ctest hides the devices for it).

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_calls.hpp"
#include "multipack/cuda/batch_stager.hpp"
#include "multipack/cuda/device_loader.hpp"
#include "multipack/cuda/views.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/schedule/plan.hpp"
#include "multipack/views.hpp"
#include "support/batch_checks.hpp"
#include "support/expect.hpp"
#include "support/paths.hpp"

using namespace multipack;

namespace {

std::shared_ptr<const indexed_dataset> alpaca() { return std::make_shared<const indexed_dataset>(test::alpaca_prefix()); }

std::shared_ptr<const epoch_plan> alpaca_plan(std::uint32_t world, std::uint32_t micro_batch, std::uint32_t capacity) {
  const auto lengths = read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
  return std::make_shared<const epoch_plan>(plan_epoch(lengths, {capacity, packing_algorithm::randomized_exact_fit},
                                                       {world, micro_batch, 7, 0}));
}

batch_options masked(std::uint32_t pad_to_multiple) {
  batch_options options;
  options.mask = loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  options.pad_to_multiple = pad_to_multiple;
  return options;
}

/// A stand-in for a training step: holds the stream for a while before it reads the batch.
void CUDART_CB train_for_a_while(void*) { std::this_thread::sleep_for(std::chrono::microseconds(300)); }

/// Holds the copy stream well past the stand-in step, so that a read not ordered after the copy
/// reads the buffer before the batch lands.
void CUDART_CB hold_the_copy_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

/// Reads device batches back on the trainer's stream, into pinned memory allocated up front
/// (so that the reading allocates nothing and copies asynchronously).
template <class T>
class read_back {
 public:
  read_back(const batch_layout& layout, std::uint64_t steps)
      : layout_(layout), stride_((layout.bytes<T>() + 255) / 256 * 256), block_(memory_.allocate(stride_ * steps, 256)), steps_(steps) {
    views_.resize(steps);
  }
  read_back(const read_back&) = delete;
  read_back& operator=(const read_back&) = delete;
  ~read_back() { memory_.deallocate(block_, stride_ * steps_, 256); }

  /// Queues on `stream`: the stand-in step, then the copy of the batch's used arrays.
  void enqueue(std::uint64_t step, const cuda::device_batch_view<T>& device, cudaStream_t stream) {
    MULTIPACK_CUDA_CHECK(cudaLaunchHostFunc(stream, &train_for_a_while, nullptr));
    batch_view<T> host = batch_view<T>::over_bytes(
        layout_, {static_cast<std::byte*>(block_) + step * stride_, static_cast<std::size_t>(stride_)});
    const cuda::device_array<T> from[] = {device.used_input_ids(), device.used_labels(), device.used_position_ids(),
                                          device.used_sequence_ids()};
    const std::span<T> to[] = {host.input_ids, host.labels, host.position_ids, host.sequence_ids};
    for (std::size_t a = 0; a < 4; ++a)
      if (!from[a].empty())
        MULTIPACK_CUDA_CHECK(
            cudaMemcpyAsync(to[a].data(), from[a].get(), from[a].size_bytes(), cudaMemcpyDeviceToHost, stream));
    const auto cu = device.used_cu_seqlens();
    if (!cu.empty())
      MULTIPACK_CUDA_CHECK(cudaMemcpyAsync(host.cu_seqlens.data(), cu.get(), cu.size_bytes(), cudaMemcpyDeviceToHost, stream));
    multipack::detail::copy_batch_results(host, device);
    views_[step] = host;
  }

  /// The batch read back at `step`, once the stream has been synchronized.
  [[nodiscard]] std::vector<std::int64_t> contents(std::uint64_t step) const { return test::contents(views_[step]); }

 private:
  batch_layout layout_;
  std::uint64_t stride_;
  cuda::pinned_memory_resource memory_;
  void* block_;
  std::uint64_t steps_;
  std::vector<batch_view<T>> views_;
};

template <class T>
void check_one_epoch(std::uint32_t pad_to_multiple, unsigned threads, std::size_t in_flight, std::uint32_t rank) {
  CAPTURE(pad_to_multiple);
  CAPTURE(threads);
  CAPTURE(in_flight);
  const auto dataset = alpaca();
  const auto plan = alpaca_plan(2, 4, 2048);
  const batch_options options = masked(pad_to_multiple);
  const std::uint64_t steps = plan->schedule.steps();
  cuda::stream trainer;
  read_back<T> results(layout_of(*plan, pad_to_multiple), steps);

  const test::cuda_call_counts before = test::cuda_calls();
  std::optional<test::cuda_call_counts> warm;
  std::uint64_t expected_bytes = 0;
  {
    cuda::device_loader<indexed_dataset, T> loader(dataset, plan, rank, options, {threads, 2}, {in_flight});
    REQUIRE(loader.on_device());
    warm = test::cuda_calls();
    CHECK(warm->host_allocations - before.host_allocations == static_cast<std::int64_t>(2 + in_flight));
    CHECK(warm->device_allocations - before.device_allocations == static_cast<std::int64_t>(in_flight));
    std::uint64_t step = 0;
    std::vector<const T*> buffers;  // the device buffer of each step
    while (auto batch = loader.next()) {
      REQUIRE(batch->step() == step);
      REQUIRE(batch->rank() == rank);
      REQUIRE(batch->on_device());
      // Each batch released before the next: the buffers go round, so the copy of a step
      // never waits for the step before it (that one's buffer is the last to be reused).
      buffers.push_back(batch->view().input_ids.get());
      if (step >= in_flight) REQUIRE(buffers[step] == buffers[step - in_flight]);
      if (step >= 1 && in_flight > 1) REQUIRE(buffers[step] != buffers[step - 1]);
      expected_bytes += batch->view().used_bytes();
      batch->wait(trainer.get());
      results.enqueue(step, batch->view(), trainer.get());
      batch->release(trainer.get());
      ++step;
    }
    CHECK(step == steps);
    const test::cuda_call_counts after = test::cuda_calls();
    // Nothing allocated and nothing copied synchronously once the loader was built.
    CHECK(after.host_allocations == warm->host_allocations);
    CHECK(after.device_allocations == warm->device_allocations);
    CHECK(after.synchronous_copies == before.synchronous_copies);
    CHECK(after.async_copies - warm->async_copies >= static_cast<std::int64_t>(steps));
    const cuda::device_statistics statistics = loader.statistics();
    CHECK(statistics.on_device);
    CHECK(statistics.copies == steps);
    CHECK(statistics.bytes_copied == expected_bytes);
    CHECK(statistics.host.batches == steps);
  }
  trainer.synchronize();
  const test::cuda_call_counts end = test::cuda_calls();
  CHECK(end.host_frees - before.host_frees == static_cast<std::int64_t>(2 + in_flight));
  CHECK(end.device_frees - before.device_frees == static_cast<std::int64_t>(in_flight));
  CHECK(test::cuda_violations() == 0);
  for (std::uint64_t step = 0; step < steps; ++step) {
    CAPTURE(step);
    REQUIRE(results.contents(step) == test::reference<T>(*dataset, *plan, step, rank, options));
  }
}

/// Epochs 1 to 3 of the Alpaca lengths for 2 ranks x 4 rows, from epoch 1's step 5: what the
/// epoch tests load, and each epoch's plan made here, as the reference.
struct alpaca_epochs {
  std::vector<std::uint32_t> lengths = read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
  pack_options packing{2048, packing_algorithm::randomized_exact_fit};
  schedule_options schedule{2, 4, 7, 0};
  epoch_range epochs{1, 3, 5};
  std::vector<std::shared_ptr<const epoch_plan>> plans;  // epoch epochs.first + i's at i
  std::uint64_t batches = 0;                             // of the range, for one rank

  alpaca_epochs() {
    for (std::uint64_t e = epochs.first; e < epochs.first + epochs.count; ++e) {
      schedule_options s = schedule;
      s.epoch = e;
      plans.push_back(std::make_shared<const epoch_plan>(plan_epoch(lengths, packing, s)));
      batches += plans.back()->schedule.steps() - (e == epochs.first ? epochs.start_step : 0);
    }
  }

  /// Where the loader's batch `position` belongs: (epoch, step).
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> at(std::uint64_t position) const {
    std::uint64_t step = position + epochs.start_step;
    for (std::uint64_t i = 0;; ++i) {
      if (step < plans[i]->schedule.steps()) return {epochs.first + i, step};
      step -= plans[i]->schedule.steps();
    }
  }
};

}  // namespace

TEST_SUITE("device") {
  TEST_CASE("batches reach the device as the host built them, in order, with no allocation after start") {
    // Full-length rows (one copy a batch) and rows padded to a multiple (a copy an array),
    // one buffer in flight (every copy waits for the previous release) and several.
    check_one_epoch<std::int32_t>(0, 2, 1, 0);
    check_one_epoch<std::int32_t>(0, 1, 3, 1);
    check_one_epoch<std::int64_t>(64, 2, 2, 0);
    check_one_epoch<std::int64_t>(0, 3, 4, 1);
  }

  TEST_CASE("wait() orders the trainer's stream after the batch's copy, however late the copy runs") {
    // The copy stream is held 50 ms before each copy is queued: the trainer's read-back (queued
    // at once) sees the batch only if wait() made its stream wait for the copy.
    const auto dataset = alpaca();
    const auto plan = alpaca_plan(1, 4, 2048);
    const batch_options options = masked(0);
    const std::uint64_t steps = 3;
    cuda::stream trainer;
    read_back<std::int32_t> results(layout_of(*plan), steps);
    {
      cuda::device_loader<indexed_dataset> loader(dataset, plan, 0, options, {2, 2}, {2});
      REQUIRE(loader.on_device());
      for (std::uint64_t step = 0; step < steps; ++step) {
        MULTIPACK_CUDA_CHECK(cudaLaunchHostFunc(loader.copy_stream(), &hold_the_copy_stream, nullptr));
        auto batch = loader.next();
        REQUIRE(batch);
        batch->wait(trainer.get());
        results.enqueue(step, batch->view(), trainer.get());
        batch->release(trainer.get());
      }
      trainer.synchronize();
    }
    for (std::uint64_t step = 0; step < steps; ++step) {
      CAPTURE(step);
      CHECK(results.contents(step) == test::reference<std::int32_t>(*dataset, *plan, step, 0, options));
    }
  }

  TEST_CASE("device_epoch_loader: epochs as one stream, each as the host built it, nothing made between them") {
    const auto dataset = alpaca();
    const alpaca_epochs run;
    const batch_options options = masked(0);
    const std::uint32_t rank = 1;
    const std::size_t in_flight = 2;
    cuda::stream trainer;
    std::optional<read_back<std::int32_t>> results;

    const test::cuda_call_counts before = test::cuda_calls();
    {
      cuda::device_epoch_loader<indexed_dataset> loader(dataset, plan_each_epoch(run.lengths, run.packing, run.schedule),
                                                        rank, options, {2, 2}, {in_flight}, run.epochs);
      REQUIRE(loader.on_device());
      const test::cuda_call_counts built = test::cuda_calls();
      CHECK(built.host_allocations - before.host_allocations == static_cast<std::int64_t>(2 + in_flight));
      CHECK(built.device_allocations - before.device_allocations == static_cast<std::int64_t>(in_flight));
      results.emplace(loader.layout(), run.batches);  // its own pinned block
      const test::cuda_call_counts warm = test::cuda_calls();
      std::uint64_t position = 0;
      while (auto batch = loader.next()) {
        REQUIRE(position < run.batches);
        const auto [epoch, step] = run.at(position);
        REQUIRE(batch->epoch() == epoch);
        REQUIRE(batch->step() == step);
        REQUIRE(batch->rank() == rank);
        batch->wait(trainer.get());
        results->enqueue(position, batch->view(), trainer.get());
        batch->release(trainer.get());
        ++position;
      }
      CHECK(position == run.batches);
      // Two epoch boundaries crossed with no allocation and no synchronous copy.
      const test::cuda_call_counts after = test::cuda_calls();
      CHECK(after.host_allocations == warm.host_allocations);
      CHECK(after.device_allocations == warm.device_allocations);
      CHECK(after.synchronous_copies == before.synchronous_copies);
      CHECK(loader.statistics().copies == run.batches);
      const epoch_loader_statistics host = loader.host_statistics();
      CHECK(host.boundaries == run.epochs.count - 1);
      CHECK(host.prefetch.batches == run.batches);
    }
    trainer.synchronize();
    const test::cuda_call_counts end = test::cuda_calls();
    CHECK(end.host_frees - before.host_frees == static_cast<std::int64_t>(2 + in_flight));
    CHECK(end.device_frees - before.device_frees == static_cast<std::int64_t>(in_flight));
    CHECK(test::cuda_violations() == 0);
    for (std::uint64_t position = 0; position < run.batches; ++position) {
      const auto [epoch, step] = run.at(position);
      CAPTURE(epoch);
      CAPTURE(step);
      REQUIRE(results->contents(position) ==
              test::reference<std::int32_t>(*dataset, *run.plans[epoch - run.epochs.first], step, rank, options));
    }
  }

  TEST_CASE("a consumer holding every device buffer gets a clear error, and can go on") {
    const auto plan = alpaca_plan(1, 2, 2048);
    cuda::stream trainer;
    cuda::device_loader<indexed_dataset> loader(alpaca(), plan, 0, {}, {2, 2}, {2});
    auto first = loader.next();
    auto second = loader.next();
    REQUIRE(first);
    REQUIRE(second);
    const std::string message = test::message_of<option_error>([&] { static_cast<void>(loader.next()); });
    CHECK(message.find("holds all 2 device buffers") != std::string::npos);
    first->wait(trainer.get());
    first->release(trainer.get());
    auto third = loader.next();
    REQUIRE(third);
    CHECK(third->step() == 2);
  }

  TEST_CASE("a consumer holding every device buffer at the end gets the end, not an error") {
    // A trainer that keeps its last batches_in_flight batches (to accumulate over them) asks
    // for one more after the last step: there is none, so no buffer is needed for it.
    const auto plan = alpaca_plan(1, 2, 2048);
    const std::uint64_t steps = plan->schedule.steps();
    REQUIRE(steps > 2);
    cuda::stream trainer;
    cuda::device_loader<indexed_dataset> loader(alpaca(), plan, 0, {}, {2, 2}, {2});
    std::deque<cuda::device_loader<indexed_dataset>::batch> held;
    for (std::uint64_t step = 0; step < steps; ++step) {
      if (held.size() == 2) {
        held.front().wait(trainer.get());
        held.front().release(trainer.get());
        held.pop_front();
      }
      auto batch = loader.next();
      REQUIRE(batch);
      REQUIRE(batch->step() == step);
      held.push_back(std::move(*batch));
    }
    CHECK_FALSE(loader.next().has_value());
    CHECK_FALSE(loader.next().has_value());
    for (auto& batch : held) {
      batch.wait(trainer.get());
      batch.release(trainer.get());
    }
  }

  TEST_CASE("a batch waited on one stream refuses a wait on another: its release orders one stream") {
    // release() records on the last stream waited on: the first stream's reads could meet the
    // next copy into the buffer (once overwritten under them, with no error).
    const auto plan = alpaca_plan(1, 2, 2048);
    cuda::stream trainer, other;
    cuda::device_loader<indexed_dataset> loader(alpaca(), plan, 0, {}, {2, 2}, {2});
    auto batch = loader.next();
    REQUIRE(batch);
    batch->wait(trainer.get());
    batch->wait(trainer.get());  // the same stream again: nothing new to order
    CHECK(test::contains(test::message_of<option_error>([&] { batch->wait(other.get()); }), "waited on another stream"));
    batch->release();
  }

  TEST_CASE("a read failing at sample k fails the batch holding k; the loader stops cleanly") {
    const auto plan = alpaca_plan(1, 4, 2048);
    const std::uint64_t failing_step = 6;
    const std::uint32_t sample = plan->pieces(failing_step, 0, 0).front().sample;
    std::uint64_t first_holding = 0;
    while (first_holding < failing_step) {
      bool holds = false;
      for (std::uint32_t slot = 0; slot < 4; ++slot)
        for (const piece& p : plan->pieces(first_holding, 0, slot)) holds = holds || p.sample == sample;
      if (holds) break;
      ++first_holding;
    }
    const auto before = test::cuda_calls();
    {
      const auto dataset = std::make_shared<const test::failing_dataset>(test::failing_dataset{alpaca(), sample});
      cuda::stream trainer;
      cuda::device_loader<test::failing_dataset> loader(dataset, plan, 0, {}, {2, 3}, {2});
      std::uint64_t delivered = 0;
      const std::string message = test::message_of<io_error>([&] {
        while (auto batch = loader.next()) {
          REQUIRE(batch->step() == delivered);
          batch->wait(trainer.get());
          ++delivered;
        }
      });
      CHECK(delivered == first_holding);
      CHECK(message.find("sample " + std::to_string(sample)) != std::string::npos);
      CHECK_THROWS_AS(static_cast<void>(loader.next()), io_error);
    }
    const auto after = test::cuda_calls();
    CHECK(after.host_frees - before.host_frees == after.host_allocations - before.host_allocations);
    CHECK(after.device_frees - before.device_frees == after.device_allocations - before.device_allocations);
    // And a new loader works.
    cuda::device_loader<indexed_dataset> again(alpaca(), plan, 0, {}, {2, 3}, {2});
    CHECK(again.next());
  }

  TEST_CASE("stopping mid-epoch, holding batches, with copies in flight, leaves nothing behind") {
    const auto plan = alpaca_plan(1, 4, 2048);
    for (const std::uint64_t stop : {0, 1, 2, 9}) {
      CAPTURE(stop);
      const auto before = test::cuda_calls();
      {
        cuda::stream trainer;
        cuda::device_loader<indexed_dataset> loader(alpaca(), plan, 0, {}, {2, 4}, {3});
        std::optional<cuda::device_batch<>> held;
        for (std::uint64_t i = 0; i < stop; ++i) {
          auto batch = loader.next();
          REQUIRE(batch);
          batch->wait(trainer.get());
          CHECK(cudaLaunchHostFunc(trainer.get(), &train_for_a_while, nullptr) == cudaSuccess);
          held = std::move(batch);  // the previous one is released on `trainer`
        }
        held.reset();
      }
      const auto after = test::cuda_calls();
      CHECK(after.host_frees - before.host_frees == after.host_allocations - before.host_allocations);
      CHECK(after.device_frees - before.device_frees == after.device_allocations - before.device_allocations);
    }
  }

  TEST_CASE("a batch kept after its loader is gone still holds its copy; the memory goes with the last") {
    // libtorch tensors over a device batch may outlive the loader (torch/device_tensors.hpp).
    const auto dataset = alpaca();
    const auto plan = alpaca_plan(1, 4, 2048);
    const batch_options options = masked(0);
    const auto before = test::cuda_calls();
    {
      cuda::stream trainer;
      std::optional<cuda::device_batch<>> kept;
      std::optional<read_back<std::int32_t>> reader;
      {
        cuda::device_loader<indexed_dataset> loader(dataset, plan, 0, options, {2, 3}, {2});
        reader.emplace(loader.layout(), 1);
        auto first = loader.next();
        REQUIRE(first);
        first->wait(trainer.get());
        kept = std::move(first);
        auto second = loader.next();  // the loader goes on, and is destroyed holding nothing
        REQUIRE(second);
      }
      reader->enqueue(0, kept->view(), trainer.get());
      trainer.synchronize();
      CHECK(reader->contents(0) == test::reference<std::int32_t>(*dataset, *plan, 0, 0, options));
      kept.reset();  // the last holder: the device memory goes now
    }
    const auto after = test::cuda_calls();
    CHECK(after.device_frees - before.device_frees == after.device_allocations - before.device_allocations);
    CHECK(after.host_frees - before.host_frees == after.host_allocations - before.host_allocations);
  }

  TEST_CASE("views::to_device: the pipeline's batches, ready on the trainer's stream") {
    const auto plan = alpaca_plan(1, 4, 2048);
    cuda::stream trainer;
    std::uint64_t tokens = 0;
    std::uint64_t batches = 0;
    auto device = indexed_dataset(test::alpaca_prefix()) | views::pack({2048, packing_algorithm::randomized_exact_fit, overlong_policy::drop, 0, 7}) |
                  views::shard({1, 4, 7, 0}, 0) | views::prefetch({2, 2}) | views::to_device(trainer.get(), {2, false, true});
    static_assert(std::ranges::input_range<decltype(device)>);
    for (const cuda::device_batch_view<>& batch : device) {
      tokens += batch.real_tokens;
      ++batches;
      CHECK(cudaLaunchHostFunc(trainer.get(), &train_for_a_while, nullptr) == cudaSuccess);
    }
    std::uint64_t all_tokens = 0;
    const auto dataset = alpaca();
    for (std::size_t i = 0; i < dataset->size(); ++i) all_tokens += dataset->length(i);
    CHECK(tokens == all_tokens);
    const cuda::device_statistics statistics = device.statistics();
    CHECK(statistics.copies == batches);
    // Timed copies: every buffer reused so far had its copy timed.
    CHECK(statistics.timed_copies + 2 >= batches);
    CHECK(statistics.timed_copies > 0);
    CHECK(statistics.copy_seconds > 0);
    CHECK(statistics.timed_bytes > 0);
  }
}

TEST_SUITE("device") {
  TEST_CASE("views::to_device loads what the user put before it: steps | drop(k) | take(n) | prefetch") {
    const auto dataset = alpaca();
    const batch_options options = masked(64);
    auto steps = *dataset | views::pack({2048}) | views::shard({2, 4, 3, 0}, 1);
    const std::uint64_t k = 3, n = 9;
    auto chosen = steps | std::views::drop(k) | std::views::take(n);
    std::vector<std::vector<std::int64_t>> expected;
    for (const auto& b : chosen | views::prefetch({2, 3}, options)) expected.push_back(test::contents(b));
    REQUIRE(expected.size() == n);

    cuda::stream trainer;
    read_back<std::int32_t> results(
        checked_layout_of(*steps.samples(), chosen, 0, options.pad_to_multiple), n);
    std::uint64_t got = 0;
    {
      auto device = chosen | views::prefetch({2, 3}, options) | views::to_device(trainer.get(), {2, false, false});
      for (const cuda::device_batch_view<>& batch : device) results.enqueue(got++, batch, trainer.get());
      MULTIPACK_CUDA_CHECK(cudaStreamSynchronize(trainer.get()));
    }
    REQUIRE(got == n);
    for (std::uint64_t i = 0; i < n; ++i) REQUIRE(results.contents(i) == expected[i]);
  }

  TEST_CASE("views::to_device stages any other range of host batches through pinned memory") {
    const auto dataset = alpaca();
    const batch_options options = masked(0);
    auto steps = *dataset | views::pack({2048}) | views::shard({1, 4, 3, 0}, 0);
    const std::uint64_t n = 7;
    std::vector<std::vector<std::int64_t>> expected;
    for (const auto& b : steps | views::prefetch({2, 3}, options) | std::views::take(n)) expected.push_back(test::contents(b));
    REQUIRE(expected.size() == n);

    for (const std::size_t in_flight : {std::size_t{1}, std::size_t{3}}) {
      CAPTURE(in_flight);
      cuda::stream trainer;
      read_back<std::int32_t> results(checked_layout_of(*steps.samples(), steps, 0, 0), n);
      std::uint64_t got = 0;
      const auto before = test::cuda_calls();
      {
        // take(n) over a prefetch view is not a prefetch view: the stager copies each batch.
        auto device = steps | views::prefetch({2, 3}, options) | std::views::take(n) |
                      views::to_device(trainer.get(), {in_flight, false, true});
        for (const cuda::device_batch_view<>& batch : device) results.enqueue(got++, batch, trainer.get());
        MULTIPACK_CUDA_CHECK(cudaStreamSynchronize(trainer.get()));
        const cuda::device_statistics statistics = device.statistics();
        CHECK(statistics.copies == n);
        // time_copies: each copy is timed at its buffer's reuse, as device_loader times them.
        CHECK(statistics.timed_copies == n - in_flight);
        CHECK(statistics.copy_seconds > 0);
        CHECK(statistics.timed_bytes > 0);
      }
      const auto after = test::cuda_calls();
      CHECK(after.host_allocations - before.host_allocations >= in_flight);  // the staging pool
      CHECK(after.host_frees - before.host_frees == after.host_allocations - before.host_allocations);
      CHECK(after.device_frees - before.device_frees == after.device_allocations - before.device_allocations);
      REQUIRE(got == n);
      for (std::uint64_t i = 0; i < n; ++i) REQUIRE(results.contents(i) == expected[i]);
    }
    CHECK(test::cuda_violations() == 0);
  }
}

TEST_SUITE("no_device") {
  TEST_CASE("staged without a device: the error, or the host batches with host_fallback") {
    REQUIRE_FALSE(cuda::device_available());
    const auto dataset = alpaca();
    auto steps = *dataset | views::pack({2048}) | views::shard({1, 4}, 0);
    auto staged = steps | views::prefetch() | std::views::take(3) | views::to_device(cuda::stream_ref::default_stream());
    CHECK(test::contains(test::message_of<cuda_error>([&] { (void)staged.begin(); }), "no CUDA device to stage"));
    // code() is the runtime's answer, the one the message names.
    try {
      cuda::batch_stager<> stager;
      FAIL("no error without a device");
    } catch (const cuda_error& e) {
      CHECK(test::contains(e.what(), cudaGetErrorName(e.code())));
    }
    std::vector<std::vector<std::int64_t>> host, fallback;
    for (const auto& b : steps | views::prefetch() | std::views::take(3)) host.push_back(test::contents(b));
    for (const auto& b : steps | views::prefetch() | std::views::take(3) | views::to_device(cuda::stream_ref::default_stream(), {3, true, false}))
      fallback.push_back(test::contents(b.host()));
    CHECK(fallback == host);

    // A staged batch holds a batch until it is released or moved from, as a loader's does.
    cuda::batch_stager<> stager({3, true, false});
    for (const auto& b : steps | views::prefetch() | std::views::take(1)) {
      cuda::device_batch<> staged_batch = stager.stage(b);
      CHECK(static_cast<bool>(staged_batch));
      CHECK(staged_batch.borrowed());
      CHECK_FALSE(staged_batch.on_device());
      cuda::device_batch<> moved = std::move(staged_batch);
      CHECK(static_cast<bool>(moved));
      CHECK(moved.borrowed());
      CHECK_FALSE(static_cast<bool>(staged_batch));  // NOLINT(bugprone-use-after-move): what a move leaves
      CHECK_FALSE(staged_batch.borrowed());  // NOLINT(bugprone-use-after-move)
      moved.release();
      CHECK_FALSE(static_cast<bool>(moved));
    }
  }

  TEST_CASE("without a device the loader says why, or hands out host batches when asked to") {
    REQUIRE_FALSE(cuda::device_available());
    const auto dataset = alpaca();
    const auto plan = alpaca_plan(2, 4, 2048);
    const std::string message =
        test::message_of<cuda_error>([&] { cuda::device_loader<indexed_dataset> loader(dataset, plan, 0, {}, {}); });
    CHECK(message.find("no CUDA device") != std::string::npos);
    CHECK(message.find("host_fallback") != std::string::npos);
    try {
      cuda::device_loader<indexed_dataset> loader(dataset, plan, 0, {}, {});
      FAIL("no error without a device");
    } catch (const cuda_error& e) {
      CHECK(test::contains(e.what(), cudaGetErrorName(e.code())));  // the runtime's answer, as the message says
    }
    CHECK(!cuda::no_device_reason().empty());

    const auto before = test::cuda_calls();
    const batch_options options = masked(0);
    cuda::device_loader<indexed_dataset> loader(dataset, plan, 1, options, {2, 3}, {2, true});
    CHECK_FALSE(loader.on_device());
    std::uint64_t step = 0;
    while (auto batch = loader.next()) {
      CHECK_FALSE(batch->on_device());
      batch->wait(cuda::stream_ref::default_stream());  // nothing to wait for
      REQUIRE(batch->step() == step);
      REQUIRE(test::contents(batch->view().host()) == test::reference<std::int32_t>(*dataset, *plan, step, 1, options));
      ++step;
    }
    CHECK(step == plan->schedule.steps());
    const auto after = test::cuda_calls();
    CHECK(after.host_allocations == before.host_allocations);
    CHECK(after.device_allocations == before.device_allocations);

    // A loop that keeps its last two batches (fewer than batches_in_flight, as it may on a
    // device) with a prefetch depth of 2 runs here too: the fallback's pool has the in-flight
    // buffers as well (it refused the third batch: "the consumer holds all 2 buffers").
    cuda::device_loader<indexed_dataset> keeping(dataset, plan, 0, {}, {.threads = 2, .depth = 2},
                                                 {.batches_in_flight = 3, .host_fallback = true});
    std::deque<cuda::device_batch<>> kept;
    std::uint64_t taken = 0;
    while (auto batch = keeping.next()) {
      kept.push_back(std::move(*batch));
      if (kept.size() > 2) kept.pop_front();
      ++taken;
    }
    CHECK(taken == plan->schedule.steps());
  }

  TEST_CASE("without a device, device_epoch_loader hands out every epoch's host batches when asked to") {
    REQUIRE_FALSE(cuda::device_available());
    const auto dataset = alpaca();
    const alpaca_epochs run;
    const epoch_planner planner = plan_each_epoch(run.lengths, run.packing, run.schedule);
    CHECK(test::contains(test::message_of<cuda_error>([&] {
            cuda::device_epoch_loader<indexed_dataset> loader(dataset, planner, 0, {}, {}, {}, run.epochs);
          }),
                         "no CUDA device"));
    const batch_options options = masked(0);
    cuda::device_epoch_loader<indexed_dataset> loader(dataset, planner, 0, options, {2, 3}, {2, true}, run.epochs);
    CHECK_FALSE(loader.on_device());
    std::uint64_t position = 0;
    while (auto batch = loader.next()) {
      REQUIRE(position < run.batches);
      CHECK_FALSE(batch->on_device());
      const auto [epoch, step] = run.at(position);
      REQUIRE(batch->epoch() == epoch);
      REQUIRE(batch->step() == step);
      REQUIRE(test::contents(batch->view().host()) ==
              test::reference<std::int32_t>(*dataset, *run.plans[epoch - run.epochs.first], step, 0, options));
      ++position;
    }
    CHECK(position == run.batches);
  }
}

TEST_SUITE("no_device") {
  TEST_CASE("views::to_device: a default-constructed view, and one of no steps, yield no batches") {
    // Default construction is part of a view's profile (a member of a trainer's class, assigned
    // later); such a view dereferenced no state at begin().
    const auto dataset = alpaca();
    auto steps = *dataset | views::pack({2048}) | views::shard({1, 4}, 0);
    const auto consumer = cuda::stream_ref::default_stream();
    using device_type = decltype(steps | views::prefetch() | views::to_device(consumer));
    using staged_type = decltype(steps | views::prefetch() | std::views::take(3) | views::to_device(consumer));
    static_assert(std::default_initializable<device_type> && std::default_initializable<staged_type>);
    // Sized as their sources are: a prefetch view knows its steps, take(3) its count.
    static_assert(std::ranges::sized_range<device_type> && std::ranges::sized_range<staged_type>);
    using unsized_type = decltype(steps | views::prefetch() | std::views::take_while([](const auto&) { return true; }) |
                                  views::to_device(consumer));
    static_assert(!std::ranges::sized_range<unsized_type>);
    CHECK((steps | views::prefetch() | views::to_device(consumer)).size() == steps.size());
    CHECK((steps | views::prefetch() | std::views::take(3) | views::to_device(consumer)).size() == 3);
    device_type device;
    CHECK(device.size() == 0);
    CHECK(device.begin() == device.end());
    CHECK(device.statistics().copies == 0);
    staged_type staged;
    CHECK(staged.size() == 0);
    CHECK(staged.begin() == staged.end());
    CHECK(staged.statistics().copies == 0);
    // No steps: nothing to copy, so no device is needed either.
    auto none = steps | std::views::drop(steps.size()) | views::prefetch() | views::to_device(consumer);
    CHECK(none.begin() == none.end());
  }
}
