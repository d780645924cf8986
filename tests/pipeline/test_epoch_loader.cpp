// The epoch loader on the real data: the batches of several epochs from one loader are each
// epoch's plan collated, in order, whatever the threads; its threads and buffers are made once
// for every epoch (counted); a resumed loader gives exactly the tail; a planner that fails,
// or gives a plan the buffers cannot hold, fails that epoch's first batch after every earlier
// batch; a loader stopped at any point returns.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "multipack/data/concatenated_dataset.hpp"
#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/schedule/plan.hpp"
#include "support/batch_checks.hpp"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"
#include "support/threads.hpp"

using namespace multipack;

namespace {

using test::contents;
using test::reference;

std::shared_ptr<const indexed_dataset> alpaca() { return std::make_shared<const indexed_dataset>(test::alpaca_prefix()); }

std::vector<std::uint32_t> alpaca_lengths() { return read_length_list(test::source_dir() / "data/alpaca/lengths.txt"); }

const pack_options alpaca_packing{2048, packing_algorithm::randomized_exact_fit};
const schedule_options alpaca_schedule{.world_size = 2, .micro_batch = 4, .seed = 3, .epoch = 0};

/// Epoch e's plan, made directly: the reference the loader's batches are checked against.
epoch_plan plan_of(const std::vector<std::uint32_t>& lengths, std::uint64_t epoch) {
  schedule_options options = alpaca_schedule;
  options.epoch = epoch;
  return plan_epoch(lengths, alpaca_packing, options);
}

/// Counts what it hands out; checks everything comes back.
class counting_resource : public std::pmr::memory_resource {
 public:
  std::atomic<int> allocations{0};
  std::atomic<int> live{0};

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    ++allocations;
    ++live;
    return std::pmr::new_delete_resource()->allocate(bytes, alignment);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
    --live;
    std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
  }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

/// Alpaca, recording which threads read it.
struct thread_recording_dataset {
  std::shared_ptr<const indexed_dataset> inner;
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  std::shared_ptr<std::set<long>> readers = std::make_shared<std::set<long>>();  // kernel thread ids
  [[nodiscard]] std::size_t size() const { return inner->size(); }
  [[nodiscard]] std::uint64_t length(std::size_t i) const { return inner->length(i); }
  template <class Out>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<Out> out) const {
    {
      const std::lock_guard lock(*mutex);
      readers->insert(test::kernel_thread_id());
    }
    inner->read_tokens(i, first, out);
  }
};

}  // namespace

TEST_CASE("every epoch's batches, in order, are its plan's rows collated, whatever the threads") {
  const auto dataset = alpaca();
  const auto lengths = alpaca_lengths();
  batch_options options;
  options.mask = loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  options.pad_to_multiple = 64;
  const std::uint32_t rank = 1;
  std::vector<std::vector<std::int64_t>> expected;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> where;  // (epoch, step) of each batch
  for (std::uint64_t epoch = 1; epoch < 4; ++epoch) {
    const epoch_plan plan = plan_of(lengths, epoch);
    for (std::uint64_t step = 0; step < plan.schedule.steps(); ++step) {
      expected.push_back(reference<std::int32_t>(*dataset, plan, step, rank, options));
      where.emplace_back(epoch, step);
    }
  }
  // The randomized packing gives every epoch other rows: the test covers epochs that differ.
  REQUIRE(expected[0] != expected[expected.size() / 3]);
  for (const unsigned threads : {1U, 2U, 4U}) {
    CAPTURE(threads);
    epoch_loader<indexed_dataset> loader(dataset, plan_each_epoch(lengths, alpaca_packing, alpaca_schedule), rank, options,
                                         {threads, 3}, {.first = 1, .count = 3});
    std::size_t i = 0;
    while (auto b = loader.next()) {
      REQUIRE(i < expected.size());
      REQUIRE((*b)->epoch == where[i].first);
      REQUIRE((*b)->step == where[i].second);
      REQUIRE((*b)->rank == rank);
      REQUIRE(contents((*b)->view) == expected[i]);
      ++i;
    }
    CHECK(i == expected.size());
    CHECK_FALSE(loader.next().has_value());
    const epoch_loader_statistics s = loader.statistics();
    CHECK(s.boundaries == 2);
    CHECK(s.prefetch.batches == expected.size());
  }
}

TEST_CASE("statistics() from another thread while the consumer iterates: figures that only grow") {
  // A trainer's monitoring thread, or Python's close() from another thread, reads the
  // statistics while the consumer waits in next(): under ThreadSanitizer this was a data race
  // on every figure next() updates.
  const auto lengths = alpaca_lengths();
  epoch_loader<indexed_dataset> loader(alpaca(), plan_each_epoch(lengths, alpaca_packing, alpaca_schedule), 0, {},
                                       {2, 2}, {.first = 0, .count = 3});
  std::atomic<bool> done{false};
  std::atomic<bool> monitoring{false};
  std::uint64_t reads = 0;
  bool grew_only = true;
  std::thread monitor([&] {
    epoch_loader_statistics last;
    // At least one read whatever the scheduler does: on a loaded 2-core machine the consumer
    // could otherwise finish before this thread first runs (CI saw reads == 0).
    do {
      const epoch_loader_statistics s = loader.statistics();
      grew_only = grew_only && s.prefetch.batches >= last.prefetch.batches && s.boundaries >= last.boundaries &&
                  s.boundary_wait_seconds >= last.boundary_wait_seconds &&
                  s.max_step_wait_seconds >= last.max_step_wait_seconds &&
                  s.prefetch.consumer_wait_seconds >= last.prefetch.consumer_wait_seconds &&
                  s.prefetch.max_ready >= last.prefetch.max_ready && s.boundaries <= 2;
      last = s;
      ++reads;
      monitoring = true;
    } while (!done.load());
  });
  const test::on_exit joined([&] {  // a next() that throws still stops and joins the monitor
    done = true;
    if (monitor.joinable()) monitor.join();
  });
  while (!monitoring.load()) std::this_thread::yield();  // the reads overlap the iteration
  std::uint64_t batches = 0;
  while (auto b = loader.next()) ++batches;
  done = true;
  monitor.join();
  CHECK(grew_only);
  CHECK(reads > 0);
  CHECK(loader.statistics().prefetch.batches == batches);
  CHECK(loader.statistics().boundaries == 2);
}

TEST_CASE("one loader's threads and buffers serve every epoch: none made between epochs") {
  const thread_recording_dataset recorded{alpaca()};
  const auto dataset = std::make_shared<const thread_recording_dataset>(recorded);
  const auto lengths = alpaca_lengths();
  const epoch_planner plan_each = plan_each_epoch(lengths, alpaca_packing, alpaca_schedule);
  std::mutex mutex;
  std::set<long> planners;  // the threads that planned epochs after the first (kernel ids)
  std::vector<const piece*> pieces_block(4, nullptr);  // where each epoch's pieces lie
  const epoch_planner recording_planner = [&](std::uint64_t epoch) {
    std::shared_ptr<const epoch_plan> plan = plan_each(epoch);
    const std::lock_guard lock(mutex);
    if (epoch > 0) planners.insert(test::kernel_thread_id());
    pieces_block.at(epoch) = plan->packed.rows.pieces().data();
    return plan;
  };
  counting_resource memory;
  batch_options options;
  options.memory = &memory;
  const unsigned threads = 2;
  const std::size_t depth = 3;
  std::uint64_t batches = 0;
  {
    epoch_loader<thread_recording_dataset> loader(dataset, recording_planner, 0, options, {threads, depth},
                                                  {.first = 0, .count = 4});
    CHECK(memory.allocations == static_cast<int>(depth));
    // Its threads carry multipack's names, for whoever looks at the process (top -H, gdb).
    CHECK(test::threads_named_once(detail::batch_thread_name, threads) == threads);
    CHECK(test::threads_named_once(detail::plan_thread_name, 1) == 1);
    std::uint64_t epoch = 0;
    while (auto b = loader.next()) {
      REQUIRE((*b)->epoch >= epoch);
      epoch = (*b)->epoch;
      ++batches;
    }
    CHECK(epoch == 3);
    CHECK(memory.allocations == static_cast<int>(depth));  // no buffer allocated (nor zeroed) after the first
    CHECK(loader.statistics().boundaries == 3);
  }
  CHECK(memory.live == 0);
  CHECK(test::threads_named_once(detail::batch_thread_name, 0) == 0);  // every thread joined
  CHECK(test::threads_named_once(detail::plan_thread_name, 0) == 0);
  CHECK(batches > 4 * 10);
  // The same worker threads read every epoch's samples, and one thread planned every later epoch.
  CHECK(recorded.readers->size() <= threads);
  CHECK_FALSE(recorded.readers->contains(test::kernel_thread_id()));
  REQUIRE(planners.size() == 1);
  CHECK(*planners.begin() != test::kernel_thread_id());
  // Two plans at a time, and each later epoch packed into the memory of a plan let go before
  // it: the four epochs' pieces lie in two blocks at most. (Which epochs share one depends on
  // timing: epoch 1 is packed into epoch 0's block when the workers finish epoch 0 before the
  // planning thread, woken at half of it, takes the lock.)
  CHECK(std::set<const piece*>(pieces_block.begin(), pieces_block.end()).size() <= 2);
}

TEST_CASE("plan_each_epoch packs into the memory of a plan let go: the same plans") {
  const auto lengths = alpaca_lengths();
  auto planner = std::make_unique<epoch_planner>(plan_each_epoch(lengths, alpaca_packing, alpaca_schedule));
  std::shared_ptr<const epoch_plan> first = (*planner)(0);
  const piece* const block = first->packed.rows.pieces().data();
  first.reset();
  // Epoch 1 in epoch 0's memory; randomized_exact_fit gives it other rows, the ones a fresh
  // plan of epoch 1 has.
  const std::shared_ptr<const epoch_plan> second = (*planner)(1);
  CHECK(second->packed.rows.pieces().data() == block);
  const epoch_plan fresh = plan_of(lengths, 1);
  CHECK(second->packed.rows == fresh.packed.rows);
  CHECK(second->packed.report == fresh.packed.report);
  CHECK(std::ranges::equal(second->schedule.sequence(), fresh.schedule.sequence()));
  CHECK(second->schedule.steps() == fresh.schedule.steps());
  // A plan still held is not reused: the next one has memory of its own, and is the same.
  const std::shared_ptr<const epoch_plan> third = (*planner)(2);
  CHECK(third->packed.rows.pieces().data() != block);
  CHECK(third->packed.rows == plan_of(lengths, 2).packed.rows);
  // Plans outlive their planner (freed, not given back, once it is gone).
  planner.reset();
  CHECK(third->schedule.steps() > 0);
}

TEST_CASE("a loader resumed at (epoch, step) gives exactly the tail of a full run") {
  const auto dataset = alpaca();
  const auto lengths = alpaca_lengths();
  const epoch_plan first = plan_of(lengths, 2);
  const epoch_plan second = plan_of(lengths, 3);
  const std::uint64_t steps = first.schedule.steps();
  for (const std::uint64_t start : {std::uint64_t{0}, std::uint64_t{1}, steps - 1, steps}) {
    CAPTURE(start);
    epoch_loader<indexed_dataset, std::int64_t> loader(dataset, plan_each_epoch(lengths, alpaca_packing, alpaca_schedule), 0, {},
                                                       {2, 4}, {.first = 2, .count = 2, .start_step = start});
    std::uint64_t epoch = 2, step = start;
    if (step == steps) epoch = 3, step = 0;  // resumed at the end of an epoch: the next one from its start
    while (auto b = loader.next()) {
      REQUIRE((*b)->epoch == epoch);
      REQUIRE((*b)->step == step);
      REQUIRE(contents((*b)->view) == reference<std::int64_t>(*dataset, epoch == 2 ? first : second, step, 0, {}));
      if (++step == steps && epoch == 2) epoch = 3, step = 0;
    }
    CHECK(epoch == 3);
    CHECK(step == second.schedule.steps());
  }
}

TEST_CASE("a later epoch's failed planning fails its first batch, after every earlier batch") {
  const auto dataset = alpaca();
  const auto lengths = alpaca_lengths();
  const epoch_planner plan_each = plan_each_epoch(lengths, alpaca_packing, alpaca_schedule);
  const std::uint64_t steps_0 = plan_of(lengths, 0).schedule.steps();
  const std::uint64_t steps_1 = plan_of(lengths, 1).schedule.steps();

  const auto delivered_before_failure = [&](const epoch_planner& planner, const std::string& expected_message) {
    epoch_loader<indexed_dataset> loader(dataset, planner, 0, {}, {2, 4}, {.first = 0, .count = 4});
    std::uint64_t batches = 0;
    const std::string message = test::message_of<multipack::error>([&] {
      while (auto b = loader.next()) {
        REQUIRE((*b)->epoch == (batches < steps_0 ? 0U : 1U));
        ++batches;
      }
    });
    CHECK(test::contains(message, expected_message));
    // The failure stays: a later call fails the same way.
    CHECK(test::contains(test::message_of<multipack::error>([&] { (void)loader.next(); }), expected_message));
    return batches;
  };

  SUBCASE("the planner throws") {
    const epoch_planner failing = [&](std::uint64_t epoch) {
      if (epoch == 2) throw io_error("lengths of epoch 2 unreadable");
      return plan_each(epoch);
    };
    CHECK(delivered_before_failure(failing, "lengths of epoch 2 unreadable") == steps_0 + steps_1);
  }
  SUBCASE("a plan with another micro-batch") {
    const epoch_planner other_micro_batch = [&](std::uint64_t epoch) {
      schedule_options options = alpaca_schedule;
      options.epoch = epoch;
      if (epoch == 2) options.micro_batch = 8;
      return std::make_shared<const epoch_plan>(plan_epoch(lengths, alpaca_packing, options));
    };
    CHECK(delivered_before_failure(other_micro_batch, "epoch 2 has a micro-batch of 8 rows, the first epoch 4") ==
          steps_0 + steps_1);
  }
  SUBCASE("a plan for another world, this rank in it") {
    const epoch_planner other_world = [&](std::uint64_t epoch) {
      schedule_options options = alpaca_schedule;
      options.epoch = epoch;
      if (epoch == 2) options.world_size = 3;
      return std::make_shared<const epoch_plan>(plan_epoch(lengths, alpaca_packing, options));
    };
    CHECK(delivered_before_failure(other_world, "epoch 2 is scheduled for 3 ranks, the first epoch for 2") ==
          steps_0 + steps_1);
  }
  SUBCASE("a plan at a larger capacity than the buffers") {
    const epoch_planner larger = [&](std::uint64_t epoch) {
      pack_options options = alpaca_packing;
      if (epoch == 2) options.capacity = 4096;
      schedule_options s = alpaca_schedule;
      s.epoch = epoch;
      return std::make_shared<const epoch_plan>(plan_epoch(lengths, options, s));
    };
    CHECK(delivered_before_failure(larger, "epoch 2 is packed at capacity 4096") == steps_0 + steps_1);
  }
  SUBCASE("no plan") {
    const epoch_planner none = [&](std::uint64_t epoch) {
      return epoch == 2 ? std::shared_ptr<const epoch_plan>{} : plan_each(epoch);
    };
    CHECK(delivered_before_failure(none, "epoch 2: the planner gave no plan") == steps_0 + steps_1);
  }
}

TEST_CASE("a shard this rank never reads, changed while training, fails the next epoch's planning clearly") {
  // The batches check only the shards they read; the next epoch's plan is checked against the
  // lengths of every rank's samples, which read every shard's .idx. A shard cut there raised
  // SIGBUS on the planning thread; rewritten at the same size (here, so that nothing can
  // fault), the check read its new lengths unnoticed.
  const std::filesystem::path dir = test::fresh_temp_dir("epoch_loader_unread_shard");
  std::vector<indexed_dataset> shards;
  for (int k = 0; k < 40; ++k) {
    indexed_dataset_writer writer(dir / std::to_string(k), token_dtype::int32);
    for (int i = 0; i < 8; ++i) writer.add_sample(std::vector<int>(static_cast<std::size_t>(5 + (k + i) % 8), k));
    writer.finish();
    shards.emplace_back(dir / std::to_string(k));
  }
  using shards_type = concatenated_dataset<indexed_dataset>;
  const auto dataset = std::make_shared<const shards_type>(std::move(shards));
  std::vector<std::uint32_t> lengths;
  for (std::size_t i = 0; i < dataset->size(); ++i) lengths.push_back(static_cast<std::uint32_t>(dataset->length(i)));
  const epoch_planner planner = plan_each_epoch(lengths, {16, packing_algorithm::randomized_exact_fit}, {4, 1, 3, 0});
  const auto first = planner(0);
  std::set<std::size_t> read;  // the shards rank 0 reads in epoch 0
  for (std::uint64_t step = 0; step < first->schedule.steps(); ++step)
    for (const piece& p : first->pieces(step, 0, 0)) read.insert(dataset->shard_of(p.sample));
  std::size_t unread = 0;
  while (read.count(unread) != 0) ++unread;
  REQUIRE(unread < 40);

  epoch_loader<shards_type> loader(dataset, planner, 0, {}, {1, 2}, {.first = 0, .count = 2});
  REQUIRE(loader.next());
  const std::filesystem::path idx = dir / (std::to_string(unread) + ".idx");
  test::rewrite_in_place(idx);
  std::uint64_t batches = 1;
  const std::string message = test::message_of<io_error>([&] {
    while (auto b = loader.next()) {
      REQUIRE((*b)->epoch == 0);  // epoch 0 reads no changed file: all of it comes
      ++batches;
    }
  });
  CHECK(batches == first->schedule.steps());
  CHECK(test::contains(message, idx.string()));
  CHECK(test::contains(message, "changed since it was opened"));
}

TEST_CASE("a loader stopped anywhere returns: mid-epoch, at a boundary, with its next plan coming") {
  const auto dataset = alpaca();
  const auto lengths = alpaca_lengths();
  const epoch_planner plan_each = plan_each_epoch(lengths, alpaca_packing, alpaca_schedule);
  const std::uint64_t steps_0 = plan_of(lengths, 0).schedule.steps();
  const epoch_planner slow = [&](std::uint64_t epoch) {
    if (epoch > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return plan_each(epoch);
  };
  for (const std::uint64_t taken : {std::uint64_t{0}, std::uint64_t{1}, steps_0 - 1, steps_0, steps_0 + 1}) {
    for (const unsigned threads : {1U, 3U}) {
      CAPTURE(taken);
      CAPTURE(threads);
      epoch_loader<indexed_dataset> loader(dataset, slow, 0, {}, {threads, 2}, {.first = 0, .count = 100});
      for (std::uint64_t i = 0; i < taken; ++i) REQUIRE(loader.next().has_value());
    }
  }
}

TEST_CASE("a loader destroyed while its planner runs waits for that plan, then returns") {
  // The planner of epoch 1 holds until the destructor has begun, so the stop lands while it
  // plans; a helper lets it go after that (the destructor joins the planning thread, which
  // cannot interrupt a planner).
  const auto dataset = alpaca();
  const auto lengths = alpaca_lengths();
  const epoch_planner plan_each = plan_each_epoch(lengths, alpaca_packing, alpaca_schedule);
  std::atomic<bool> planning{false}, destroying{false}, released{false}, returned{false};
  const epoch_planner held = [&](std::uint64_t epoch) {
    if (epoch > 0) {
      planning = true;
      while (!released.load()) std::this_thread::yield();
    }
    auto plan = plan_each(epoch);
    if (epoch > 0) returned = true;
    return plan;
  };
  const std::uint64_t steps_0 = plan_of(lengths, 0).schedule.steps();
  std::thread releaser([&] {
    while (!destroying.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the destructor is waiting by now, or soon
    released = true;
  });
  // Whatever way the test leaves (a failed REQUIRE too), the planner is let go and the helper
  // joined: a failure fails, never hangs.
  const test::on_exit joined([&] {
    destroying = true;
    releaser.join();
  });
  {
    epoch_loader<indexed_dataset> loader(dataset, held, 0, {}, {2, 2}, {.first = 0, .count = 3});
    const test::on_exit stopping([&] { destroying = true; });  // after the loader: just before its destructor
    // All of epoch 0, so its half is built whatever the scheduler does (a next() past it would
    // wait for the held plan), then the planner, which starts at that half.
    for (std::uint64_t i = 0; i < steps_0; ++i) REQUIRE(loader.next().has_value());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // bounds a hang
    while (!planning.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    REQUIRE(planning.load());
    CHECK_FALSE(returned.load());
  }
  CHECK(returned.load());  // the destructor waited for the plan it could not interrupt
}

TEST_CASE("the next epoch is planned once half of an epoch is built: a loader closed before plans nothing") {
  // A loader stopped early in an epoch (a break, a restart) does not wait for a planning.
  const auto dataset = alpaca();
  const auto lengths = alpaca_lengths();
  const epoch_planner plan_each = plan_each_epoch(lengths, alpaca_packing, alpaca_schedule);
  const std::uint64_t steps_0 = plan_of(lengths, 0).schedule.steps();
  const std::size_t depth = 2;
  std::mutex mutex;
  std::vector<std::uint64_t> planned;
  const epoch_planner recording = [&](std::uint64_t epoch) {
    {
      const std::lock_guard lock(mutex);
      planned.push_back(epoch);
    }
    return plan_each(epoch);
  };
  // Built at most: the batches taken and one a buffer.
  const std::uint64_t before_half = steps_0 / 2 - depth - 1;
  REQUIRE(before_half > 10);
  for (const std::uint64_t taken : {std::uint64_t{0}, std::uint64_t{1}, before_half}) {
    for (const unsigned threads : {1U, 3U}) {
      CAPTURE(taken);
      CAPTURE(threads);
      planned.clear();
      {
        epoch_loader<indexed_dataset> loader(dataset, recording, 0, {}, {threads, depth}, {.first = 0, .count = 3});
        for (std::uint64_t i = 0; i < taken; ++i) REQUIRE(loader.next().has_value());
        // Epoch 1 is the next to plan, but not before half of epoch 0 is built.
        CHECK_FALSE(loader.plans_next(1));
        CHECK_FALSE(loader.plans_next(0));
        CHECK_FALSE(loader.plans_next(2));
      }
      CHECK(planned == std::vector<std::uint64_t>{0});
    }
  }
  // Every epoch is still planned ahead: the three epochs, each once, in order.
  planned.clear();
  {
    epoch_loader<indexed_dataset> loader(dataset, recording, 0, {}, {2, depth}, {.first = 0, .count = 3});
    std::uint64_t batches = 0;
    while (auto b = loader.next()) {
      // Epoch 0 all built but its last depth steps: epoch 1 is planned, or its planning is due.
      if (batches + 1 == steps_0) {
        const bool due = loader.plans_next(1);
        const std::lock_guard lock(mutex);
        CHECK((due || planned.size() >= 2));
      }
      ++batches;
    }
    CHECK(batches > 2 * steps_0);
    CHECK(loader.statistics().boundaries == 2);
    CHECK_FALSE(loader.plans_next(3));  // past the range
  }
  CHECK(planned == std::vector<std::uint64_t>{0, 1, 2});
}

TEST_CASE("bad arguments are errors naming what is wrong") {
  const auto dataset = alpaca();
  const auto lengths = alpaca_lengths();
  const epoch_planner plan_each = plan_each_epoch(lengths, alpaca_packing, alpaca_schedule);
  const auto error_of = [&](const epoch_planner& planner, int rank, const prefetch_options& prefetch,
                            const epoch_range& epochs) {
    return test::message_of<multipack::error>(
        [&] { epoch_loader<indexed_dataset> loader(dataset, planner, rank, {}, prefetch, epochs); });
  };
  const std::uint64_t steps = plan_of(lengths, 0).schedule.steps();
  CHECK(test::contains(error_of(plan_each, 0, {1, 2}, {.count = 0}), "no epoch"));
  CHECK(test::contains(error_of(plan_each, 0, {1, 2}, {.start_step = steps + 1}),
                       "start step " + std::to_string(steps + 1) + " is past the end of epoch 0"));
  CHECK(test::contains(error_of(plan_each, 2, {1, 2}, {}), "rank 2 is outside the world of 2 ranks"));
  CHECK(test::contains(error_of(plan_each, -1, {1, 2}, {}), "rank -1"));
  CHECK(test::contains(error_of({}, 0, {1, 2}, {}), "no planner"));
  CHECK(test::contains(error_of([](std::uint64_t) { return std::shared_ptr<const epoch_plan>{}; }, 0, {1, 2}, {}),
                       "gave no plan for epoch 0"));
  CHECK(test::contains(error_of(plan_each, 0, {0, 2}, {.count = 3}), "threads must be at least 1"));
  CHECK(test::contains(error_of(plan_each, 0, {1, 0}, {.count = 3}), "depth must be at least 1"));
  CHECK(test::contains(error_of(plan_each, 0, {1, 2}, {.first = UINT64_MAX, .count = 2}), "past epoch 2^64 - 1"));
}

TEST_CASE("cu_seqlens has room for the most pieces any packing puts in a row") {
  std::mt19937_64 random(11);
  for (int trial = 0; trial < 40; ++trial) {
    const std::uint32_t capacity = 16 + static_cast<std::uint32_t>(random() % 200);
    std::vector<std::vector<std::int32_t>> samples(1 + random() % 300);
    for (auto& sample : samples) sample.assign(1 + random() % (trial % 2 == 0 ? 40 : 3 * capacity), 1);
    const in_memory_dataset<std::int32_t> dataset(samples);
    const std::uint32_t bound = detail::most_pieces_in_a_row(dataset, capacity);
    // The bound from the sorted pieces: the longest prefix of the shortest that fits.
    std::vector<std::uint64_t> pieces;
    for (const auto& sample : samples) {
      const std::uint64_t length = sample.size();
      if (length <= capacity) pieces.push_back(length);
      else if (length % capacity != 0) pieces.push_back(length % capacity);
    }
    std::ranges::sort(pieces);
    std::uint64_t sum = 0, fitting = 0;
    while (fitting < pieces.size() && sum + pieces[fitting] <= capacity) sum += pieces[fitting++];
    CAPTURE(trial);
    CHECK(bound == std::max<std::uint64_t>(fitting, 1));
    // No packing puts more pieces in a row.
    std::vector<std::uint32_t> lengths;
    for (const auto& sample : samples) lengths.push_back(static_cast<std::uint32_t>(sample.size()));
    for (const auto algorithm : {packing_algorithm::exact_fit, packing_algorithm::randomized_exact_fit,
                                 packing_algorithm::best_fit_decreasing, packing_algorithm::next_fit}) {
      const packing packed = pack(lengths, {capacity, algorithm, overlong_policy::split});
      for (std::size_t r = 0; r < packed.rows.size(); ++r) REQUIRE(packed.rows[r].size() <= bound);
    }
  }
}

TEST_CASE("buffers larger than the packing: room for the pieces of samples split at the packing's capacity") {
  // 9-token samples packed at 8 with overlong split are pieces of 8 + 1; in 16-token buffers
  // (batch_options::capacity) the bound at 16 counts each as one piece of 9. A randomized
  // epoch putting more 1-token pieces in a row than that bound was refused mid-training.
  std::vector<std::vector<std::int32_t>> samples;
  for (int i = 0; i < 12; ++i) samples.emplace_back(9, 1 + i);
  for (int i = 0; i < 12; ++i) samples.emplace_back(3, 100 + i);
  const auto dataset = std::make_shared<const in_memory_dataset<std::int32_t>>(samples);
  std::vector<std::uint32_t> lengths;
  for (const auto& sample : samples) lengths.push_back(static_cast<std::uint32_t>(sample.size()));
  const pack_options packing{.capacity = 8, .algorithm = packing_algorithm::randomized_exact_fit,
                             .overlong = overlong_policy::split};
  std::uint32_t most_pieces_seen = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    CAPTURE(seed);
    const schedule_options schedule{.world_size = 1, .micro_batch = 1, .seed = seed};
    std::uint64_t expected = 0;
    for (std::uint64_t epoch = 0; epoch < 6; ++epoch) {
      schedule_options o = schedule;
      o.epoch = epoch;
      const epoch_plan plan = plan_epoch(lengths, packing, o);
      expected += plan.schedule.steps();
      most_pieces_seen = std::max(most_pieces_seen, layout_of(plan).max_pieces_per_row);
    }
    batch_options buffers;
    buffers.capacity = 16;
    epoch_loader<in_memory_dataset<std::int32_t>> loader(dataset, plan_each_epoch(lengths, packing, schedule), 0, buffers,
                                                          {.threads = 1, .depth = 2}, {.first = 0, .count = 6});
    std::uint64_t got = 0;
    while (auto batch = loader.next()) ++got;
    CHECK(got == expected);
  }
  // The case arises: some epoch has a row of more pieces than the bound at the buffers' 16.
  CHECK(most_pieces_seen > detail::most_pieces_in_a_row(*dataset, 16));
}
