// range-v3's views between every pair of stages. multipack's headers need only the standard
// library; range-v3 is what data pipelines reach for where C++20 lacks a view (stride, chunk,
// concat), so the stages must take its views as they take the standard's. range-v3's views
// are not std::ranges::view (no enable_view): the stages hold them as std::views::all does.

#include <doctest/doctest.h>

#include <cstdint>
#include <ranges>
#include <vector>

#include <range/v3/view/drop.hpp>
#include <range/v3/view/filter.hpp>
#include <range/v3/view/stride.hpp>
#include <range/v3/view/take.hpp>

#include "multipack/data/indexed_dataset.hpp"
#include "multipack/views.hpp"
#include "support/alpaca.hpp"
#include "support/batch_checks.hpp"
#include "support/paths.hpp"

using namespace multipack;
using test::all_contents;
using test::alpaca;
using test::alpaca_prompts;

namespace {

auto short_sample = [](const dataset_sample<indexed_dataset>& s) { return s.length() < 400; };

}  // namespace

TEST_CASE("range-v3 views model the stages' concepts") {
  using filtered = decltype(alpaca() | ranges::views::filter(short_sample));
  static_assert(sample_range<filtered> && !std::ranges::view<filtered>);
  using rows = decltype(alpaca() | views::pack({1024}));
  using strided = decltype(std::declval<rows&>() | ranges::views::stride(2));
  static_assert(row_range<strided> && resolves_samples<strided>);
  using steps = decltype(std::declval<rows&>() | views::shard({1, 2}, 0));
  using dropped = decltype(std::declval<steps&>() | ranges::views::drop(3));  // a subrange of our iterators
  static_assert(step_range<dropped> && resolves_samples<dropped>);
}

TEST_CASE("range-v3 between dataset and pack, pack and shard, shard and prefetch: what the standard's give") {
  const schedule_options schedule{1, 2, 4, 0};
  // dataset | filter | pack
  auto rows = alpaca() | ranges::views::filter(short_sample) | views::pack({1024});
  auto std_rows = alpaca() | std::views::filter(short_sample) | views::pack({1024});
  REQUIRE(rows.size() == std_rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) REQUIRE(std::ranges::equal(rows[r], std_rows[r]));
  CHECK(rows.samples()->source_index(0) == std_rows.samples()->source_index(0));

  // rows | stride | shard: every other row (C++23's std::views::stride; here range-v3's)
  auto strided = rows | ranges::views::stride(2);
  auto steps = strided | views::shard(schedule, 0);
  const epoch_schedule reference(strided, schedule);
  REQUIRE(reference.report().rows == (rows.size() + 1) / 2);
  REQUIRE(steps.size() == reference.steps());

  // steps | drop | prefetch and steps | take | prefetch: the tail and the head of the full run
  const auto full = all_contents(steps | views::prefetch({2, 3}));
  REQUIRE(full.size() == steps.size());
  const auto tail = all_contents(steps | ranges::views::drop(5) | views::prefetch({2, 3}));
  CHECK(tail == std::vector(full.begin() + 5, full.end()));
  const auto head = all_contents(steps | ranges::views::take(4) | views::prefetch({1, 2}));
  CHECK(head == std::vector(full.begin(), full.begin() + 4));
  // The row length is the packing's capacity after a drop too, not the longest row of the
  // steps left: rows of 8, 8 and 3 + 3 tokens at 8, with the short row last for some seeds.
  const std::vector<std::vector<int>> short_rows = {std::vector<int>(8, 1), std::vector<int>(8, 2), {3, 3, 3}, {4, 4, 4}};
  auto few = short_rows | views::pack({8});
  int short_last = 0;
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    auto few_steps = few | views::shard({1, 1, seed, 0}, 0);
    REQUIRE(few_steps.size() == 3);
    short_last += few_steps[2][0].size() == 2 ? 1 : 0;
    for (std::size_t k = 0; k < few_steps.size(); ++k) {
      CAPTURE(seed);
      CAPTURE(k);
      for (const auto& batch : few_steps | ranges::views::drop(k) | views::prefetch()) CHECK(batch.row_length == 8);
      for (const auto& batch : few_steps | std::views::drop(k) | views::prefetch()) CHECK(batch.row_length == 8);
    }
  }
  CHECK(short_last > 0);  // or the drops above would prove nothing

  // rows | take | shard, against the standard's take
  auto a = rows | ranges::views::take(40) | views::shard(schedule, 0) | views::prefetch();
  auto b = rows | std::views::take(40) | views::shard(schedule, 0) | views::prefetch();
  CHECK(all_contents(a) == all_contents(b));
}
