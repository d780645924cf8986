// The batch loader on the real data: every rank's batches are the plan's rows collated, the
// same bytes with any number of threads; a resumed loader gives exactly the tail; a dataset
// that fails at sample k fails the batch that holds k, after every earlier batch; bad ranks,
// starts and masks are errors naming what is wrong; of a dataset of many shards, only the
// shards a batch reads have their files checked before it.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <cstddef>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "multipack/batch/collate.hpp"
#include "multipack/data/blended_dataset.hpp"
#include "multipack/data/concatenated_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/data/prompt_lengths_writer.hpp"
#include "multipack/data/subset_dataset.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/schedule/plan.hpp"
#include "support/batch_checks.hpp"
#include "support/counted_shards.hpp"
#include "multipack/core/random.hpp"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"
#include "support/threads.hpp"
#include "support/token_masks.hpp"

using namespace multipack;

namespace {

using test::contents;
using test::failing_dataset;
using test::reference;

std::shared_ptr<const indexed_dataset> alpaca() { return std::make_shared<const indexed_dataset>(test::alpaca_prefix()); }

std::shared_ptr<const epoch_plan> alpaca_plan(std::uint32_t world, std::uint32_t micro_batch, std::uint32_t capacity) {
  const auto lengths = read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
  return std::make_shared<const epoch_plan>(plan_epoch(lengths, {capacity, packing_algorithm::randomized_exact_fit},
                                                       {world, micro_batch, 3, 1}));
}

/// A memory resource that counts what it hands out and checks what comes back.
class counting_resource : public std::pmr::memory_resource {
 public:
  std::atomic<int> allocations{0};
  std::atomic<int> live{0};
  std::atomic<int> mismatches{0};
  std::size_t expected_bytes = 0;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    ++allocations;
    ++live;
    if (bytes != expected_bytes) ++mismatches;
    return std::pmr::new_delete_resource()->allocate(bytes, alignment);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
    --live;
    std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
  }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

}  // namespace

TEST_CASE("buffers come from the caller's memory resource: depth blocks, once, all returned") {
  const auto dataset = alpaca();
  const auto plan = alpaca_plan(2, 4, 2048);
  counting_resource memory;
  memory.expected_bytes = layout_of(*plan).bytes<std::int64_t>();
  batch_options options;
  options.memory = &memory;
  {
    batch_loader<indexed_dataset, std::int64_t> loader(dataset, plan, 1, options, {2, 5});
    CHECK(memory.allocations == 5);
    std::uint64_t step = 0;
    while (auto batch = loader.next()) {
      const std::span<const std::byte> block = (*batch)->block();
      // The arrays lie in the block, back to back: one copy moves the batch.
      REQUIRE(reinterpret_cast<const std::byte*>((*batch)->view.input_ids.data()) == block.data());
      REQUIRE(reinterpret_cast<const std::byte*>((*batch)->view.cu_seqlens.data() + (*batch)->view.cu_seqlens.size()) ==
              block.data() + block.size());
      REQUIRE(contents((*batch)->view) == reference<std::int64_t>(*dataset, *plan, step, 1, {}));
      ++step;
    }
    CHECK(step == plan->schedule.steps());
    CHECK(memory.allocations == 5);
  }
  CHECK(memory.live == 0);
  CHECK(memory.mismatches == 0);
}

TEST_CASE("every rank's batches are the plan's rows collated, whatever the threads") {
  const auto dataset = alpaca();
  const auto plan = alpaca_plan(3, 4, 2048);
  batch_options options;
  options.mask = loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  options.pad_to_multiple = 64;
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    std::vector<std::vector<std::int64_t>> expected;
    for (std::uint64_t step = 0; step < plan->schedule.steps(); ++step)
      expected.push_back(reference<std::int32_t>(*dataset, *plan, step, rank, options));
    for (const unsigned threads : {1U, 2U, 4U}) {
      CAPTURE(rank);
      CAPTURE(threads);
      batch_loader<indexed_dataset> loader(dataset, plan, rank, options, {threads, 3});
      std::uint64_t step = 0;
      while (auto batch = loader.next()) {
        REQUIRE((*batch)->step == step);
        REQUIRE((*batch)->rank == rank);
        REQUIRE(contents((*batch)->view) == expected[step]);
        ++step;
      }
      CHECK(step == plan->schedule.steps());
      CHECK(loader.statistics().batches == step);
    }
  }
}

TEST_CASE("a loader started at step k gives exactly the tail of a full run, in int64 too") {
  const auto dataset = alpaca();
  const auto plan = alpaca_plan(2, 8, 4096);
  const std::uint64_t steps = plan->schedule.steps();
  for (const std::uint64_t start : {std::uint64_t{1}, steps / 2, steps - 1, steps}) {
    CAPTURE(start);
    batch_loader<indexed_dataset, std::int64_t> loader(dataset, plan, 1, {}, {2, 4}, start);
    std::uint64_t step = start;
    while (auto batch = loader.next()) {
      REQUIRE((*batch)->step == step);
      REQUIRE(contents((*batch)->view) == reference<std::int64_t>(*dataset, *plan, step, 1, {}));
      ++step;
    }
    CHECK(step == steps);
  }
}

TEST_CASE("a read that fails at sample k fails the batch holding k, after every earlier batch") {
  const auto plan = alpaca_plan(2, 4, 2048);
  for (const std::uint64_t failing_step : {std::uint64_t{0}, std::uint64_t{5}, plan->schedule.steps() - 1}) {
    // A sample of rank 0's batch at failing_step that no earlier batch of rank 0 holds.
    std::optional<std::uint32_t> sample;
    for (std::uint32_t slot = 0; slot < 4 && !sample; ++slot)
      for (const piece& p : plan->pieces(failing_step, 0, slot)) {
        bool earlier = false;
        for (std::uint64_t s = 0; s < failing_step && !earlier; ++s)
          for (std::uint32_t t = 0; t < 4 && !earlier; ++t)
            for (const piece& q : plan->pieces(s, 0, t)) earlier = earlier || q.sample == p.sample;
        if (!earlier) {
          sample = p.sample;
          break;
        }
      }
    REQUIRE(sample);
    CAPTURE(failing_step);
    for (const unsigned threads : {1U, 3U}) {
      const auto dataset = std::make_shared<const failing_dataset>(failing_dataset{alpaca(), *sample});
      batch_loader<failing_dataset> loader(dataset, plan, 0, {}, {threads, 4});
      std::uint64_t delivered = 0;
      const std::string message = test::message_of<io_error>([&] {
        while (auto batch = loader.next()) {
          REQUIRE((*batch)->step == delivered);
          ++delivered;
        }
      });
      CHECK(delivered == failing_step);
      CHECK(message == "read of sample " + std::to_string(*sample) + " failed");
    }
  }
}

TEST_CASE("stopping a loader mid-epoch with workers blocked returns") {
  const auto dataset = alpaca();
  const auto plan = alpaca_plan(1, 2, 1024);
  for (int cycle = 0; cycle < 50; ++cycle) {
    batch_loader<indexed_dataset> loader(dataset, plan, 0, {}, {static_cast<unsigned>(1 + cycle % 4), 2});
    for (int i = 0; i < cycle % 5; ++i) REQUIRE(loader.next());
  }
}

TEST_CASE("bad ranks, starts and masks are errors naming what is wrong") {
  const auto dataset = alpaca();
  const auto plan = alpaca_plan(2, 4, 2048);
  CHECK(test::contains(test::message_of<option_error>([&] { batch_loader<indexed_dataset> l(dataset, plan, 2, {}, {}); }),
                       "rank 2 is outside the world of 2"));
  // Named as given, not as the uint32 it would wrap to (4294967295, or 0 for 2^32).
  CHECK(test::contains(test::message_of<option_error>([&] { batch_loader<indexed_dataset> l(dataset, plan, -1, {}, {}); }),
                       "batch_loader: rank -1 is outside the world of 2"));
  CHECK(test::contains(
      test::message_of<option_error>([&] { batch_loader<indexed_dataset> l(dataset, plan, std::int64_t{1} << 32, {}, {}); }),
      "rank 4294967296 is outside the world of 2"));
  CHECK(test::contains(
      test::message_of<option_error>([&] { batch_loader<indexed_dataset> l(dataset, plan, 0, {}, {}, plan->schedule.steps() + 1); }),
      "past the end"));
  batch_options short_mask;
  short_mask.mask = loss_mask::from_prompt_lengths(std::vector<std::uint32_t>(10, 1), "ten prompts");
  CHECK(test::contains(test::message_of<format_error>([&] { batch_loader<indexed_dataset> l(dataset, plan, 0, short_mask, {}); }),
                       "ten prompts"));
  // Buffers for shorter rows than the plan's packing: refused here, not at the first long row.
  batch_options narrow;
  narrow.capacity = 1024;
  CHECK(test::contains(test::message_of<option_error>([&] { batch_loader<indexed_dataset> l(dataset, plan, 0, narrow, {}); }),
                       "batch_options::capacity is 1024, below the plan's packing capacity of 2048"));
  // A plan made for another dataset (more samples than this one has).
  const auto other = std::make_shared<const epoch_plan>(plan_epoch(std::vector<std::uint32_t>(6000, 5), {2048}, {1, 1}));
  CHECK(test::contains(test::message_of<sample_error>([&] { batch_loader<indexed_dataset> l(dataset, other, 0, {}, {}); }),
                       "does not have"));
}

namespace {

/// A private copy of the Alpaca files, which a test may rewrite or delete.
std::filesystem::path alpaca_copy(const std::string& name) {
  const std::filesystem::path dir = test::fresh_temp_dir(name);
  for (const char* suffix : {".idx", ".bin"}) {
    std::filesystem::path from = test::alpaca_prefix(), to = dir / "alpaca";
    from += suffix;
    to += suffix;
    std::filesystem::copy_file(from, to);
  }
  return dir / "alpaca";
}

}  // namespace

TEST_CASE("after a failed read no loader thread is left, and a new loader over the same data works") {
  const auto plan = alpaca_plan(1, 4, 2048);
  const std::uint32_t sample = plan->pieces(3, 0, 0).front().sample;
  const std::size_t before = test::thread_count();
  {
    const auto dataset = std::make_shared<const failing_dataset>(failing_dataset{alpaca(), sample});
    batch_loader<failing_dataset> loader(dataset, plan, 0, {}, {3, 4});
    CHECK(test::thread_count() <= before + 3);  // a worker that met the failure may have ended already
    CHECK_THROWS_AS(
        [&] {
          while (loader.next()) {
          }
        }(),
        io_error);
  }
  CHECK(test::threads_named_once(detail::batch_thread_name, 0) == 0);  // waits out a joined one not yet reaped
  batch_loader<indexed_dataset> again(alpaca(), plan, 0, {}, {2, 2});
  std::uint64_t steps = 0;
  while (auto batch = again.next()) ++steps;
  CHECK(steps == plan->schedule.steps());
}

TEST_CASE("a consumer destroying the loader at random points, 1,000 times: no deadlock, no leak, no race") {
  const auto dataset = alpaca();
  const auto plan = alpaca_plan(1, 4, 2048);
  const std::uint64_t steps = plan->schedule.steps();
  splitmix64 rng(12345);
  const auto draw = [&](std::uint64_t n) { return rng.below(n); };
  for (int round = 0; round < 1000; ++round) {
    const unsigned threads = 1 + static_cast<unsigned>(draw(4));
    const std::size_t depth = 1 + draw(4);
    const std::uint64_t start = draw(steps);
    const std::uint64_t take = draw(steps - start + 1);
    batch_loader<indexed_dataset> loader(dataset, plan, 0, {}, {threads, depth}, start);
    for (std::uint64_t k = 0; k < take; ++k) {
      auto batch = loader.next();
      REQUIRE(batch);
      REQUIRE((*batch)->step == start + k);
      if (draw(8) == 0) batch->release();  // released early, before the next is asked for
    }
  }  // each loader destroyed wherever its round stopped
  CHECK(test::threads_named_once(detail::batch_thread_name, 0) == 0);  // waits out a joined one not yet reaped
}

TEST_CASE("a loss-mask file changed while loading fails the next batches clearly, as the dataset's") {
  // The mask is read in place like the dataset: a mask file cut while training raised SIGBUS
  // at the next batch that read past its new end. Here it is written again with the same
  // bytes and a later time (no read can fault), and the loader must notice.
  const auto dataset = std::make_shared<const indexed_dataset>(test::alpaca_prefix());
  const auto plan = alpaca_plan(1, 4, 2048);
  const std::filesystem::path dir = test::fresh_temp_dir("mask_changed");
  const auto prompts = read_length_list(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  batch_options options;
  std::filesystem::path rewritten;
  SUBCASE("binary prompt lengths") {
    rewritten = dir / "alpaca.prompt_lengths";
    write_prompt_lengths(rewritten, prompts);
    options.mask = loss_mask::open_prompt_lengths(rewritten);
  }
  SUBCASE("a token mask (its .bin)") {
    test::write_token_mask(dir / "mask", dataset->lengths(), [&](std::size_t i, std::size_t j) { return j >= prompts[i]; });
    rewritten = dir / "mask.bin";
    options.mask = loss_mask::open_token_mask(dir / "mask");
  }
  batch_loader<indexed_dataset> loader(dataset, plan, 0, options, {1, 2});
  REQUIRE(loader.next());
  test::rewrite_in_place(rewritten);
  std::uint64_t delivered = 1;
  const std::string message = test::message_of<io_error>([&] {
    while (loader.next()) ++delivered;
  });
  CHECK(test::contains(message, rewritten.string()));
  CHECK(test::contains(message, "changed since it was opened"));
  CHECK(delivered <= 1 + 2 + 1);  // at most the batches built before the write, and one in the making
}

TEST_CASE("a dataset file changed while loading fails the next batches clearly; deleting it is harmless") {
  SUBCASE("rewritten (written, same size): an io_error within the batches already built") {
    const auto prefix = alpaca_copy("changed_written");
    const auto dataset = std::make_shared<const indexed_dataset>(prefix);
    const auto plan = alpaca_plan(1, 4, 2048);
    batch_loader<indexed_dataset> loader(dataset, plan, 0, {}, {1, 2});
    REQUIRE(loader.next());
    std::filesystem::path bin = prefix;
    bin += ".bin";
    // A write of the same bytes: the contents stay valid, only the time changes, so no read
    // can fault whatever the workers are doing meanwhile.
    test::rewrite_in_place(bin);
    std::uint64_t delivered = 1;
    const std::string message = test::message_of<io_error>([&] {
      while (loader.next()) ++delivered;
    });
    CHECK(test::contains(message, bin.string()));
    CHECK(test::contains(message, "changed since it was opened"));
    CHECK(delivered <= 1 + 2 + 1);  // at most the batches built before the write, and one in the making
  }
  SUBCASE("shrunk: check_unchanged says so before any read faults") {
    const auto prefix = alpaca_copy("changed_shrunk");
    const indexed_dataset dataset(prefix);
    std::filesystem::path bin = prefix;
    bin += ".bin";
    std::filesystem::resize_file(bin, 1000);
    const std::string message = test::message_of<io_error>([&] { dataset.check_unchanged(); });
    CHECK(test::contains(message, "1000 now"));
  }
  SUBCASE("deleted: the mappings keep the data, every batch as the reference") {
    const auto prefix = alpaca_copy("deleted");
    const auto dataset = std::make_shared<const indexed_dataset>(prefix);
    const auto plan = alpaca_plan(1, 4, 2048);
    batch_loader<indexed_dataset> loader(dataset, plan, 0, {}, {2, 3});
    std::filesystem::remove_all(prefix.parent_path());
    std::uint64_t step = 0;
    while (auto batch = loader.next()) {
      REQUIRE(contents((*batch)->view) == reference<std::int32_t>(*dataset, *plan, step, 0, {}));
      ++step;
    }
    CHECK(step == plan->schedule.steps());
  }
}

namespace {

/// The steps of `rank` in `plan`, as rows of pieces.
std::vector<std::vector<std::span<const piece>>> steps_of(const epoch_plan& plan, std::uint32_t rank) {
  std::vector<std::vector<std::span<const piece>>> steps(plan.schedule.steps());
  for (std::uint64_t s = 0; s < steps.size(); ++s)
    for (std::uint32_t slot = 0; slot < plan.schedule.micro_batch(); ++slot)
      steps[s].push_back(plan.pieces(s, rank, slot));
  return steps;
}

/// Loads rank 1's batches of an epoch of `dataset`, whose samples lie in counted shards
/// (`checks()`: their checks so far, in shard order; `shard_of(i)`: the shard of sample i):
/// each shard is checked once for each batch that reads it, and never for another. Then,
/// batch by batch on this thread, the shards checked are those the batch reads, fewer than
/// its pieces.
template <class D, class Checks, class ShardOf>
void check_shards_checked(const std::shared_ptr<const D>& dataset, const Checks& checks, const ShardOf& shard_of) {
  std::vector<std::uint32_t> lengths;
  for (std::size_t i = 0; i < dataset->size(); ++i) lengths.push_back(static_cast<std::uint32_t>(dataset->length(i)));
  const auto plan = std::make_shared<const epoch_plan>(
      plan_epoch(lengths, {256, packing_algorithm::randomized_exact_fit}, {2, 4, 7, 0}));
  const auto steps = steps_of(*plan, 1);
  const std::size_t shards = checks().size();
  const std::vector<std::uint64_t> reading = test::steps_reading(steps, shards, shard_of);
  std::uint64_t pieces = 0;
  for (const auto& step : steps)
    for (const auto& row : step) pieces += row.size();
  REQUIRE(pieces > 10 * steps.size());  // several pieces a batch, so that checking once a shard is tested
  const std::vector<std::uint64_t> before = checks();
  {
    batch_loader<D> loader(dataset, plan, 1, {}, {2, 3});
    std::uint64_t batches = 0;
    while (loader.next()) ++batches;
    CHECK(batches == steps.size());
  }
  std::vector<std::uint64_t> made = checks();
  for (std::size_t k = 0; k < shards; ++k) made[k] -= before[k];
  CHECK(made == reading);  // before the fix: every shard, every batch

  // One batch at a time: the shards it reads, each once (steps_reading counts a shard once a step).
  std::vector<std::size_t> scratch;
  for (const auto& step : steps) {
    const std::vector<std::uint64_t> at = checks();
    detail::check_files_read(*dataset, std::span<const std::span<const piece>>(step), 1, scratch);
    const std::vector<std::uint64_t> after = checks();
    const std::vector<std::uint64_t> read_by_step = test::steps_reading(std::span(&step, 1), shards, shard_of);
    for (std::size_t k = 0; k < shards; ++k) REQUIRE(after[k] - at[k] == read_by_step[k]);
  }
}

}  // namespace

TEST_CASE("of a dataset of 1,000 shards, only the shards that a batch reads are checked, each once") {
  using shards_type = concatenated_dataset<test::counted_shard>;
  SUBCASE("a concatenation") {
    const auto dataset = std::make_shared<const shards_type>(test::counted_shards(1000, 3));
    check_shards_checked(dataset, [&] { return test::checks_of(dataset->shards()); },
                         [&](std::size_t i) { return dataset->shard_of(i); });
  }
  SUBCASE("a subset of it: every other sample, in reverse") {
    std::vector<std::size_t> indices;
    for (std::size_t i = 3000; i >= 2; i -= 2) indices.push_back(i - 1);
    const auto dataset =
        std::make_shared<const subset_dataset<shards_type>>(shards_type(test::counted_shards(1000, 3)), indices);
    check_shards_checked(dataset, [&] { return test::checks_of(dataset->source()->shards()); },
                         [&](std::size_t i) { return dataset->source()->shard_of(dataset->source_index(i)); });
  }
  SUBCASE("a blend of two corpora of 500 shards") {
    std::vector<shards_type> corpora;
    const auto shards = test::counted_shards(1000, 3);
    corpora.emplace_back(std::vector(shards.begin(), shards.begin() + 500));
    corpora.emplace_back(std::vector(shards.begin() + 500, shards.end()));
    const auto dataset = std::make_shared<const blended_dataset<shards_type>>(
        std::move(corpora), std::vector{1.0, 2.0}, blend_options{.samples = 2500, .seed = 4});
    check_shards_checked(dataset, [&] { return test::checks_of(shards); },
                         [&](std::size_t i) {
                           const auto [corpus, local] = dataset->where(i);
                           return 500 * corpus + dataset->corpora()[corpus].shard_of(local);
                         });
  }
  SUBCASE("a dataset that has only check_unchanged: checked whole, before every batch") {
    std::vector<test::counted_shard> one = test::counted_shards(1, 3000);
    const auto dataset = std::make_shared<const test::counted_shard>(one[0]);
    static_assert(change_checked_dataset<test::counted_shard> && !part_checked_dataset<test::counted_shard>);
    check_shards_checked(dataset, [&] { return test::checks_of(one); }, [](std::size_t) { return std::size_t{0}; });
  }
}
