// The range adaptors: the README's pipeline compiles and runs on the real data; each stage
// alone gives what the room it wraps gives; the standard range concepts hold; a loop that
// breaks off early stops the workers.

#include <doctest/doctest.h>

#include <cstdint>
#include <iterator>
#include <ranges>
#include <span>
#include <vector>

#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/schedule/distributed_env.hpp"
#include "multipack/views.hpp"
#include "support/batch_checks.hpp"
#include "support/expect.hpp"
#include "support/paths.hpp"
#include "support/threads.hpp"

using namespace multipack;

using alpaca_rows = views::packed_view<std::ranges::ref_view<const indexed_dataset>>;
using alpaca_steps = views::shard_view<alpaca_rows>;
static_assert(std::ranges::random_access_range<alpaca_rows>);
static_assert(std::ranges::view<alpaca_rows>);
static_assert(std::ranges::sized_range<alpaca_rows>);
static_assert(std::ranges::random_access_range<alpaca_steps>);
static_assert(std::ranges::view<alpaca_steps>);
static_assert(std::ranges::input_range<views::prefetch_view<alpaca_steps>>);
static_assert(std::ranges::view<views::prefetch_view<alpaca_steps>>);

TEST_CASE("the README's pipeline compiles and runs: every step, as many tokens as the packing holds") {
  std::uint64_t steps = 0;
  std::uint64_t real_tokens = 0;
  auto train = [&](std::span<std::int32_t> input_ids, std::span<std::int32_t> labels, std::span<std::int32_t> positions,
                   std::span<std::int32_t> cu_seqlens, std::uint32_t max_seqlen) {
    ++steps;
    REQUIRE(labels.size() == input_ids.size());
    REQUIRE(positions.size() == input_ids.size());
    REQUIRE(static_cast<std::size_t>(cu_seqlens.back()) == input_ids.size());
    REQUIRE(max_seqlen <= 4096);
    for (std::size_t t = 0; t < input_ids.size(); ++t)
      if (positions[t] == 0) REQUIRE(labels[t] == -100);  // a piece's first token is never a target
  };
  // --- the README's code, with the data found from the source tree ---
  multipack::indexed_dataset dataset(test::alpaca_prefix());
  // The README reads the real environment (from_environment()); here, none: rank 0 of 1.
  const auto env = multipack::distributed_env::from([](const char*) -> const char* { return nullptr; });
  multipack::batch_options batch;   // row length rule, collation conventions, loss mask
  batch.mask = multipack::loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  auto batches = dataset
               | multipack::views::pack({.capacity = 4096})
               | multipack::views::shard({.world_size = env.world_size, .micro_batch = 16, .seed = 1, .epoch = 0}, env.rank)
               | multipack::views::prefetch({.threads = 2, .depth = 8}, batch);
  for (const multipack::batch_view<>& b : batches) {  // in step order, built ahead by 2 threads
    train(b.used_input_ids(), b.used_labels(), b.used_position_ids(), b.used_cu_seqlens(), b.max_seqlen);
    real_tokens += b.real_tokens;
  }
  // --- checks, from the rooms directly: one rank, so every packed token once ---
  const auto lengths = read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
  const packing packed = pack(lengths, {.capacity = 4096});
  const epoch_schedule schedule(packed.rows, {.world_size = 1, .micro_batch = 16, .seed = 1, .epoch = 0});
  CHECK(steps == schedule.steps());
  CHECK(real_tokens == packed.report.packed_tokens);
  CHECK(batches.statistics().batches == steps);
}

TEST_CASE("each stage alone gives what its room gives") {
  const indexed_dataset dataset(test::alpaca_prefix());
  const auto lengths = read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
  const pack_options options{2048, packing_algorithm::randomized_exact_fit, overlong_policy::drop, 0, 5, 2};

  auto rows = dataset | views::pack(options);
  const packing packed = pack(lengths, options);
  REQUIRE(std::ranges::size(rows) == packed.rows.size());
  std::size_t r = 0;
  for (const std::span<const piece> row : rows) {
    const auto expected = packed.rows[r++];
    REQUIRE(std::ranges::equal(row, expected, [](const piece& a, const piece& b) { return a == b; }));
  }
  CHECK(rows[3].size() == packed.rows[3].size());

  const schedule_options schedule{3, 2, 5, 2};
  auto steps = rows | views::shard(schedule, 2);
  const epoch_schedule reference(packed.rows, schedule);
  REQUIRE(std::ranges::size(steps) == reference.steps());
  for (const auto& step : steps) {
    REQUIRE(step.size() == 2);
    for (std::uint32_t slot = 0; slot < 2; ++slot) {
      const std::uint32_t row = reference.rows(step.step(), 2)[slot];
      const auto expected = row == epoch_schedule::padding_row ? std::span<const piece>{} : packed.rows[row];
      REQUIRE(step[slot].size() == expected.size());
      REQUIRE(std::equal(step[slot].begin(), step[slot].end(), expected.begin()));
    }
  }

  batch_options batch;
  batch.mask = loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  auto batches = steps | views::prefetch_as<std::int64_t>({3, 4}, batch);
  batch_layout layout;  // the step's rows collated on this thread, into buffers of any pieces a row
  layout.micro_batch = 2;
  layout.capacity = 2048;
  std::uint64_t count = 0;
  for (const batch_view<std::int64_t>& b : batches) {
    const auto step = steps[count];
    const std::vector<std::span<const piece>> step_rows(step.begin(), step.end());
    REQUIRE(test::contents(b) == test::collated<std::int64_t>(dataset, layout, step_rows, batch));
    REQUIRE(b.loss_tokens < b.real_tokens);  // prompts and piece starts carry no loss
    ++count;
  }
  CHECK(count == reference.steps());
}

TEST_CASE("breaking out of the loop stops the workers; a dataset moved into the pipeline lives in it") {
  for (int cycle = 0; cycle < 20; ++cycle) {
    auto batches = indexed_dataset(test::alpaca_prefix()) | views::pack({1024}) | views::shard({1, 2}, 0) |
                   views::prefetch({static_cast<unsigned>(1 + cycle % 3), 3});
    int taken = 0;
    for (const auto& b : batches) {
      CHECK(b.rows == 2);
      if (++taken == cycle % 7) break;
    }
  }
  CHECK(test::threads_named_once(detail::batch_thread_name, 0) == 0);  // every view's workers stopped with it
  auto steps = indexed_dataset(test::alpaca_prefix()) | views::pack({1024}) | views::shard({2, 2}, 1);
  CHECK(std::ranges::distance(steps) > 0);
  auto rows = indexed_dataset(test::alpaca_prefix()) | views::pack({1024});
  CHECK(test::contains(test::message_of<option_error>([&] { (void)(rows | views::shard({2, 2}, 2)); }),
                       "rank 2 is outside the world of 2"));
  // A negative rank is named as given, not as 4294967295 (a bool or a double rank does not
  // compile: tests/compile_errors/shard_rank_of_bool.cpp).
  CHECK(test::contains(test::message_of<option_error>([&] { (void)(rows | views::shard({2, 2}, -1)); }),
                       "rank -1 is outside the world of 2"));
  CHECK(test::contains(test::message_of<option_error>([&] { (void)views::shard(rows, {2, 2}, std::int64_t{1} << 32); }),
                       "rank 4294967296 is outside the world of 2"));
  auto batches = steps | views::prefetch();
  (void)batches.begin();
  CHECK(test::contains(test::message_of<option_error>([&] { (void)batches.begin(); }), "begin() called twice"));
  // A begin() that failed (here the first batch: a sample cannot be read) fails again the
  // same way, rather than saying it was called twice: what a trainer retrying needs to hear.
  struct unreadable_sample {
    std::uint32_t tokens;
    [[nodiscard]] std::uint32_t length() const noexcept { return tokens; }
    void read_tokens(std::uint64_t, std::span<std::int32_t>) const { throw io_error("sample file is gone"); }
  };
  const std::vector<unreadable_sample> unreadable = {{5}, {7}};
  auto failing = unreadable | views::pack({16}) | views::shard({1, 1}, 0) | views::prefetch();
  CHECK(test::message_of<io_error>([&] { (void)failing.begin(); }) == "sample file is gone");
  CHECK(test::message_of<io_error>([&] { (void)failing.begin(); }) == "sample file is gone");
  // No steps start no threads, and are begun once too.
  auto none = steps | std::views::take(0) | views::prefetch();
  CHECK(none.begin() == none.end());
  CHECK(test::contains(test::message_of<option_error>([&] { (void)none.begin(); }), "begin() called twice"));
}
