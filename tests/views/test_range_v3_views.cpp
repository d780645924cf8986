// <multipack/range_v3.hpp>: with it, temporaries of the rows and the steps go into range-v3's
// adaptors, and range-v3's closures compose with the stages'. A program includes it in every
// file that applies range-v3's adaptors to multipack's views or in none (see the header): so
// it has a test executable of its own, and views.range_v3 tests the stages without it.

#include <doctest/doctest.h>

#include <cstdint>
#include <ranges>
#include <vector>

#include <range/v3/view/drop.hpp>
#include <range/v3/view/stride.hpp>
#include <range/v3/view/take.hpp>

#include "multipack/data/indexed_dataset.hpp"
#include "multipack/range_v3.hpp"
#include "multipack/views.hpp"
#include "support/alpaca.hpp"
#include "support/batch_checks.hpp"

using namespace multipack;
using test::all_contents;
using test::alpaca;

TEST_CASE("with multipack/range_v3.hpp the rows and the steps are range-v3 views") {
  using rows = decltype(alpaca() | views::pack({1024}));
  using steps = decltype(std::declval<rows>() | views::shard({1, 2}, 0));
  static_assert(ranges::view_<rows> && ranges::random_access_range<rows> && ranges::sized_range<rows>);
  static_assert(ranges::view_<steps> && ranges::random_access_range<steps> && ranges::sized_range<steps>);
  static_assert(ranges::viewable_range<rows> && ranges::viewable_range<steps>);
}

TEST_CASE("temporaries of the stages go into range-v3's adaptors; its closures compose with the stages'") {
  const schedule_options schedule{1, 2, 4, 0};
  // rows | take | shard, each stage a temporary, against the standard's take
  auto a = alpaca() | views::pack({1024}) | ranges::views::take(40) | views::shard(schedule, 0) | views::prefetch();
  auto b = alpaca() | views::pack({1024}) | std::views::take(40) | views::shard(schedule, 0) | views::prefetch();
  const auto taken = all_contents(b);
  REQUIRE(taken.size() == 40 / schedule.micro_batch);
  CHECK(all_contents(a) == taken);

  // steps | drop | prefetch (the resume), the steps a temporary
  const auto full = all_contents(alpaca() | views::pack({1024}) | views::shard(schedule, 0) | views::prefetch());
  const auto tail =
      all_contents(alpaca() | views::pack({1024}) | views::shard(schedule, 0) | ranges::views::drop(5) | views::prefetch());
  REQUIRE(full.size() > 5);
  CHECK(tail == std::vector(full.begin() + 5, full.end()));

  // A closure of ours, range-v3's and ours again: what the stages give one at a time.
  auto every_other_row = views::pack({1024}) | ranges::views::stride(2) | views::shard(schedule, 0);
  auto rows = alpaca() | views::pack({1024});
  auto strided = rows | ranges::views::stride(2);
  CHECK(all_contents(alpaca() | every_other_row | views::prefetch()) ==
        all_contents(strided | views::shard(schedule, 0) | views::prefetch()));
}
