// The epoch schedule: every row of the packing in exactly one (step, rank, slot) or counted;
// every rank the same number of steps; each step the next rows of a sequence that does not
// depend on the world size or micro-batch; the same plan from the same inputs and another one
// for another epoch; resume with another world size; balance reported as computed; clear
// errors for bad options. On the real Alpaca lengths and on generated rows.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "multipack/data/length_list.hpp"
#include "multipack/pack/pack.hpp"
#include "multipack/schedule/epoch_schedule.hpp"
#include "multipack/schedule/plan.hpp"
#include "support/expect.hpp"
#include "support/packing_checks.hpp"
#include "support/paths.hpp"

using namespace multipack;

namespace {

std::vector<std::uint32_t> alpaca_lengths() {
  return read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
}

/// Rows with one piece each, of the given lengths (samples 0, 1, 2, ...).
packed_rows rows_of_lengths(const std::vector<std::uint32_t>& lengths) {
  piece_vector pieces;
  std::vector<std::uint64_t> offsets{0};
  for (std::uint32_t i = 0; i < lengths.size(); ++i) {
    pieces.push_back({i, 0, lengths[i]});
    offsets.push_back(pieces.size());
  }
  return packed_rows(std::move(pieces), std::move(offsets));
}

/// The cost model, written out independently of row_cost: tokens plus squared piece lengths.
double cost_of(const packed_rows& rows, std::uint32_t row) {
  double cost = 0;
  for (const piece& p : rows[row]) cost += double(p.end - p.begin) + double(p.end - p.begin) * double(p.end - p.begin);
  return cost;
}

double balance_of(const std::vector<double>& rank_costs) {
  double total = 0;
  double largest = 0;
  for (const double c : rank_costs) {
    total += c;
    largest = std::max(largest, c);
  }
  return total == 0 ? 1.0 : largest * double(rank_costs.size()) / total;
}

/// Every property a schedule must have, checked against the packing and the options alone.
void check_schedule(const packed_rows& rows, const schedule_options& o, const epoch_schedule& s) {
  const std::uint64_t total = rows.size();
  const std::uint64_t step_rows = std::uint64_t{o.world_size} * o.micro_batch;
  const schedule_report& r = s.report();

  // The sequence is a permutation of the rows.
  const auto sequence = s.sequence();
  REQUIRE(sequence.size() == total);
  std::vector<std::uint32_t> sorted(sequence.begin(), sequence.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < total; ++i) REQUIRE(sorted[i] == i);

  // Every (step, rank) has micro_batch slots; every row is in one slot at most; step s takes
  // exactly the next rows of the sequence; padding only in the last step, after real rows.
  std::vector<int> seen(total, 0);
  std::uint64_t padding = 0;
  std::uint64_t scheduled = 0;
  std::uint32_t padding_only_ranks = 0;
  for (std::uint64_t step = 0; step < s.steps(); ++step) {
    const std::uint64_t first = o.consumed_rows + step * step_rows;
    std::multiset<std::uint32_t> expected;
    for (std::uint64_t i = first; i < std::min(total, first + step_rows); ++i) expected.insert(sequence[i]);
    std::multiset<std::uint32_t> got;
    std::vector<double> rank_costs(o.world_size, 0.0);
    for (std::uint32_t rank = 0; rank < o.world_size; ++rank) {
      const auto mine = s.rows(step, rank);
      REQUIRE(mine.size() == o.micro_batch);
      std::int64_t last_position = -1;
      bool padding_seen = false;
      for (const std::uint32_t row : mine) {
        if (row == epoch_schedule::padding_row) {
          REQUIRE_MESSAGE(step + 1 == s.steps(), "padding in step " << step << " of " << s.steps());
          padding_seen = true;
          ++padding;
          continue;
        }
        REQUIRE_MESSAGE(!padding_seen, "a real row after padding, step " << step << " rank " << rank);
        REQUIRE(row < total);
        REQUIRE_MESSAGE(++seen[row] == 1, "row " << row << " is scheduled twice");
        const auto position = std::find(sequence.begin(), sequence.end(), row) - sequence.begin();
        REQUIRE_MESSAGE(position > last_position, "rank " << rank << "'s rows are not in sequence order");
        last_position = position;
        got.insert(row);
        rank_costs[rank] += cost_of(rows, row);
        ++scheduled;
      }
    }
    REQUIRE_MESSAGE(got == expected, "step " << step << " does not take the next rows of the sequence");
    if (!o.balance) {
      // Rank r takes the r-th consecutive micro_batch rows of the step; in a last step that
      // is not full, its rows r, r + world, ...
      const std::uint64_t real = std::min(step_rows, total - first);
      for (std::uint32_t rank = 0; rank < o.world_size; ++rank)
        for (std::uint32_t slot = 0; slot < o.micro_batch; ++slot) {
          const std::uint64_t in_step = real == step_rows ? std::uint64_t{rank} * o.micro_batch + slot
                                                          : rank + std::uint64_t{slot} * o.world_size;
          REQUIRE(s.rows(step, rank)[slot] == (in_step < real ? sequence[first + in_step] : epoch_schedule::padding_row));
        }
    }
    // While the step has a real row for every rank, every rank has one (its loss is over some
    // tokens), balanced or not.
    if (got.size() >= o.world_size)
      for (std::uint32_t rank = 0; rank < o.world_size; ++rank)
        REQUIRE_MESSAGE(s.rows(step, rank)[0] != epoch_schedule::padding_row, "rank " << rank << " has only padding");
    for (std::uint32_t rank = 0; rank < o.world_size; ++rank) {
      const auto mine = s.rows(step, rank);
      padding_only_ranks += std::all_of(mine.begin(), mine.end(), [](std::uint32_t row) {
        return row == epoch_schedule::padding_row;
      }) ? 1 : 0;
    }
  }
  // The rows before consumed_rows and after the last step are exactly those not scheduled.
  for (std::uint64_t i = 0; i < total; ++i) {
    const bool before = i < o.consumed_rows;
    const bool after = i >= o.consumed_rows + s.steps() * step_rows;
    REQUIRE_MESSAGE(seen[sequence[i]] == ((before || after) ? 0 : 1), "position " << i << " of the sequence");
  }
  const std::uint64_t left = total - o.consumed_rows;
  if (o.remainder == remainder_policy::pad) {
    CHECK(s.steps() * step_rows >= left);
    CHECK(s.steps() * step_rows < left + step_rows);
    CHECK(r.dropped_rows == 0);
  } else {
    CHECK(s.steps() * step_rows <= left);
    CHECK(s.steps() * step_rows > left - step_rows);
    CHECK(padding == 0);
  }
  CHECK(r.steps == s.steps());
  CHECK(r.rows == total);
  CHECK(r.scheduled_rows == scheduled);
  CHECK(r.padded_rows == padding);
  CHECK(r.padding_only_ranks == padding_only_ranks);
  CHECK(r.dropped_rows == left - scheduled);
  CHECK(r.consumed_rows == o.consumed_rows);

  // Dropped samples and tokens, from the rows nobody trains on.
  std::set<std::uint32_t> dropped_samples;
  std::uint64_t dropped_tokens = 0;
  for (std::uint64_t i = o.consumed_rows + scheduled; i < total; ++i)
    for (const piece& p : rows[sequence[i]]) {
      dropped_samples.insert(p.sample);
      dropped_tokens += p.length();
    }
  CHECK(r.dropped_samples == dropped_samples.size());
  CHECK(r.dropped_tokens == dropped_tokens);

  // The balance figures, recomputed from the schedule (balanced) and from the sequence (plain).
  double mean = 0, worst = 0, plain_mean = 0, plain_worst = 0;
  for (std::uint64_t step = 0; step < s.steps(); ++step) {
    std::vector<double> costs(o.world_size, 0.0);
    std::vector<double> plain(o.world_size, 0.0);
    for (std::uint32_t rank = 0; rank < o.world_size; ++rank)
      for (const std::uint32_t row : s.rows(step, rank))
        if (row != epoch_schedule::padding_row) costs[rank] += cost_of(rows, row);
    const std::uint64_t first = o.consumed_rows + step * step_rows;
    const std::uint64_t real = std::min(step_rows, total - first);
    for (std::uint64_t i = 0; i < real; ++i)
      plain[real == step_rows ? i / o.micro_batch : i % o.world_size] += cost_of(rows, sequence[first + i]);
    mean += balance_of(costs);
    worst = std::max(worst, balance_of(costs));
    plain_mean += balance_of(plain);
    plain_worst = std::max(plain_worst, balance_of(plain));
  }
  const double steps = double(s.steps());
  CHECK(r.balance_mean == doctest::Approx(mean / steps).epsilon(1e-9));
  CHECK(r.balance_worst == doctest::Approx(worst).epsilon(1e-9));
  CHECK(r.balance_mean_unbalanced == doctest::Approx(plain_mean / steps).epsilon(1e-9));
  CHECK(r.balance_worst_unbalanced == doctest::Approx(plain_worst).epsilon(1e-9));
  CHECK(r.balance_mean >= 1.0);
}

/// Every sample of the lengths is in exactly one scheduled row, or counted as dropped by the
/// packer or the schedule.
void check_every_sample_once(const std::vector<std::uint32_t>& lengths, const epoch_plan& plan) {
  std::vector<std::uint64_t> tokens(lengths.size(), 0);
  const epoch_schedule& s = plan.schedule;
  for (std::uint64_t step = 0; step < s.steps(); ++step)
    for (std::uint32_t rank = 0; rank < s.world_size(); ++rank)
      for (std::uint32_t slot = 0; slot < s.micro_batch(); ++slot)
        for (const piece& p : plan.pieces(step, rank, slot)) tokens[p.sample] += p.length();
  std::uint64_t missing = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] == 0) continue;
    if (tokens[i] == 0) {
      ++missing;
      continue;
    }
    REQUIRE_MESSAGE(tokens[i] == lengths[i], "sample " << i << " has " << tokens[i] << " of its " << lengths[i] << " tokens");
  }
  CHECK(missing == plan.packed.report.dropped_samples + s.report().dropped_samples);
}

}  // namespace

TEST_CASE("schedules of the real Alpaca packing hold every row once, for every world and micro-batch") {
  const std::vector<std::uint32_t> lengths = alpaca_lengths();
  for (const std::uint32_t capacity : {1024U, 4096U}) {
    for (const auto algorithm : {packing_algorithm::exact_fit, packing_algorithm::randomized_exact_fit}) {
      const packing packed = pack(lengths, {capacity, algorithm});
      for (const std::uint32_t world : {1U, 2U, 3U, 8U}) {
        for (const std::uint32_t batch : {1U, 4U, 16U}) {
          for (const auto remainder : {remainder_policy::pad, remainder_policy::drop}) {
            for (const bool balance : {true, false}) {
              const schedule_options o{world, batch, 7, 2, remainder, balance, 0};
              if (remainder == remainder_policy::drop && packed.rows.size() < std::uint64_t{world} * batch) continue;
              CAPTURE(capacity);
              CAPTURE(to_string(algorithm));
              CAPTURE(world);
              CAPTURE(batch);
              CAPTURE(to_string(remainder));
              CAPTURE(balance);
              check_schedule(packed.rows, o, epoch_schedule(packed.rows, o));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("plan_epoch: every sample of the real data is trained on once or counted") {
  const std::vector<std::uint32_t> lengths = alpaca_lengths();
  for (const auto remainder : {remainder_policy::pad, remainder_policy::drop}) {
    const epoch_plan plan = plan_epoch(lengths, {2048, packing_algorithm::randomized_exact_fit},
                                       {8, 16, 1, 0, remainder, true, 0});
    test::check_packing(lengths, {2048, packing_algorithm::randomized_exact_fit}, plan.packed);
    check_schedule(plan.packed.rows, plan.schedule.options(), plan.schedule);
    check_every_sample_once(lengths, plan);
    if (remainder == remainder_policy::drop) CHECK(plan.schedule.report().dropped_samples > 0);
  }
  // Overlong samples split and dropped by the packer are accounted for too.
  std::vector<std::uint32_t> lengths_with_overlong = lengths;
  lengths_with_overlong[10] = 5000;
  lengths_with_overlong[20] = 9000;
  lengths_with_overlong[30] = 0;
  for (const auto overlong : {overlong_policy::split, overlong_policy::drop}) {
    const pack_options packing{2048, packing_algorithm::exact_fit, overlong};
    const epoch_plan plan = plan_epoch(lengths_with_overlong, packing, {3, 5, 1, 0});
    test::check_packing(lengths_with_overlong, packing, plan.packed);
    check_every_sample_once(lengths_with_overlong, plan);
  }
}

TEST_CASE("the plan is a pure function of (lengths, options, seed, epoch)") {
  const std::vector<std::uint32_t> lengths = alpaca_lengths();
  const pack_options packing{2048, packing_algorithm::randomized_exact_fit};
  const schedule_options o{4, 2, 11, 3};
  const epoch_plan a = plan_epoch(lengths, packing, o);
  const epoch_plan b = plan_epoch(lengths, packing, o);
  CHECK(a.packed.rows == b.packed.rows);
  REQUIRE(a.schedule.steps() == b.schedule.steps());
  for (std::uint64_t step = 0; step < a.schedule.steps(); ++step)
    for (std::uint32_t rank = 0; rank < 4; ++rank) {
      const auto x = a.schedule.rows(step, rank);
      const auto y = b.schedule.rows(step, rank);
      REQUIRE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
    }

  // Another epoch or seed: the randomized packer repacks, and the order changes.
  schedule_options next = o;
  next.epoch = 4;
  const epoch_plan c = plan_epoch(lengths, packing, next);
  CHECK(c.packed.rows != a.packed.rows);
  schedule_options reseeded = o;
  reseeded.seed = 12;
  CHECK(plan_epoch(lengths, packing, reseeded).packed.rows != a.packed.rows);

  // exact-fit packs the same rows every epoch; only their order differs.
  const pack_options exact{2048, packing_algorithm::exact_fit};
  const epoch_plan e3 = plan_epoch(lengths, exact, o);
  const epoch_plan e4 = plan_epoch(lengths, exact, next);
  CHECK(e3.packed.rows == e4.packed.rows);
  const auto s3 = e3.schedule.sequence();
  const auto s4 = e4.schedule.sequence();
  CHECK(!std::equal(s3.begin(), s3.end(), s4.begin(), s4.end()));
  // Not a rotation or near-identity: few rows keep their position.
  std::size_t same = 0;
  for (std::size_t i = 0; i < s3.size(); ++i) same += s3[i] == s4[i];
  CHECK(same < s3.size() / 10);
}

TEST_CASE("the sequence of rows does not depend on the world size or the micro-batch") {
  const packing packed = pack(alpaca_lengths(), {2048});
  const epoch_schedule reference(packed.rows, {1, 1, 5, 1});
  for (const std::uint32_t world : {2U, 5U, 8U})
    for (const std::uint32_t batch : {1U, 3U, 16U}) {
      const epoch_schedule s(packed.rows, {world, batch, 5, 1});
      CHECK(std::ranges::equal(s.sequence(), reference.sequence()));
    }
}

TEST_CASE("resuming after k steps with another world size trains on exactly the rows left") {
  const packing packed = pack(alpaca_lengths(), {1024});
  const schedule_options first{4, 2, 9, 0};
  const epoch_schedule before(packed.rows, first);
  for (const std::uint64_t k : {std::uint64_t{0}, std::uint64_t{1}, before.steps() / 2, before.steps() - 1}) {
    schedule_options after = first;
    after.world_size = 3;
    after.micro_batch = 5;
    after.consumed_rows = before.consumed_rows_after(k);
    CAPTURE(k);
    const epoch_schedule resumed(packed.rows, after);
    check_schedule(packed.rows, after, resumed);
    std::vector<int> seen(packed.rows.size(), 0);
    for (std::uint64_t step = 0; step < k; ++step)
      for (std::uint32_t rank = 0; rank < 4; ++rank)
        for (const std::uint32_t row : before.rows(step, rank))
          if (row != epoch_schedule::padding_row) ++seen[row];
    for (std::uint64_t step = 0; step < resumed.steps(); ++step)
      for (std::uint32_t rank = 0; rank < 3; ++rank)
        for (const std::uint32_t row : resumed.rows(step, rank))
          if (row != epoch_schedule::padding_row) ++seen[row];
    for (std::size_t row = 0; row < seen.size(); ++row) REQUIRE_MESSAGE(seen[row] == 1, "row " << row);
  }
  CHECK(before.consumed_rows_after(before.steps()) == packed.rows.size());
  CHECK(test::contains(test::message_of<option_error>([&] { (void)before.consumed_rows_after(before.steps() + 1); }),
                       "steps"));
  // A checkpoint saved after the epoch's last step resumes to no step, with the same world or
  // another; under remainder drop, so does one whose rows left fill no step (they are dropped).
  for (const std::uint32_t world : {4U, 3U}) {
    schedule_options done = first;
    done.world_size = world;
    done.consumed_rows = before.consumed_rows_after(before.steps());
    const epoch_schedule none(packed.rows, done);
    CHECK(none.steps() == 0);
    CHECK(none.report().scheduled_rows == 0);
    CHECK(none.report().balance_mean == 0);
  }
  // Under remainder drop too, whatever the shape of the run that resumes: the rows the epoch
  // dropped are not trained on (a run with a smaller step once trained them after the end).
  schedule_options dropping = first;
  dropping.remainder = remainder_policy::drop;
  dropping.micro_batch = 3;
  const epoch_schedule saved(packed.rows, dropping);
  REQUIRE(saved.report().dropped_rows > 0);
  CHECK(saved.consumed_rows_after(saved.steps()) == packed.rows.size());
  for (const auto& [world, batch] : {std::pair{4U, 3U}, std::pair{1U, 1U}, std::pair{2U, 1U}}) {
    schedule_options done = dropping;
    done.world_size = world;
    done.micro_batch = batch;
    done.consumed_rows = saved.consumed_rows_after(saved.steps());
    CHECK(epoch_schedule(packed.rows, done).steps() == 0);
  }
  schedule_options drop = first;
  drop.remainder = remainder_policy::drop;
  drop.consumed_rows = packed.rows.size() - 5;  // fewer than a step of 4 x 2
  const epoch_schedule dropped(packed.rows, drop);
  CHECK(dropped.steps() == 0);
  CHECK(dropped.report().dropped_rows == 5);
  CHECK(dropped.report().dropped_samples > 0);
}

TEST_CASE("balancing gives the costliest rows to different ranks") {
  // One step of 2 ranks x 2 rows, the two costly rows first in the sequence order: without
  // balancing one rank takes both of them whatever the order, with it each takes one.
  const packed_rows rows = rows_of_lengths({1000, 1000, 10, 10});
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const epoch_schedule s(rows, {2, 2, seed, 0});
    REQUIRE(s.steps() == 1);
    for (std::uint32_t rank = 0; rank < 2; ++rank) {
      const auto mine = s.rows(0, rank);
      CHECK(((mine[0] < 2) != (mine[1] < 2)));  // one costly, one cheap row
    }
    CHECK(s.report().balance_worst == doctest::Approx(1.0));
  }
  // On the real data, with 16 rows a rank, balancing brings the step's costliest rank close
  // to the mean, and much closer than consecutive slices do.
  const packing packed = pack(alpaca_lengths(), {1024});
  const epoch_schedule balanced(packed.rows, {8, 16, 0, 0, remainder_policy::drop});
  const schedule_report& r = balanced.report();
  CHECK(r.balance_mean < r.balance_mean_unbalanced);
  CHECK(r.balance_worst <= r.balance_worst_unbalanced);
  CHECK(r.balance_mean < 1.05);
}

TEST_CASE("padding completes the last step; a small remainder is dropped and counted") {
  const packed_rows rows = rows_of_lengths({5, 6, 7, 8, 9, 10, 11});
  const epoch_schedule padded(rows, {2, 2, 1, 0});
  CHECK(padded.steps() == 2);
  CHECK(padded.report().padded_rows == 1);
  check_schedule(rows, padded.options(), padded);
  const epoch_schedule dropped(rows, {2, 2, 1, 0, remainder_policy::drop});
  CHECK(dropped.steps() == 1);
  CHECK(dropped.report().dropped_rows == 3);
  CHECK(dropped.report().dropped_samples == 3);
  check_schedule(rows, dropped.options(), dropped);
  // One row, one rank.
  const packed_rows one = rows_of_lengths({3});
  const epoch_schedule single(one, {1, 1, 0, 0});
  CHECK(single.steps() == 1);
  CHECK(single.rows(0, 0)[0] == 0);
  // More rows a step than rows: one step, mostly padding, every rank with a real row.
  const epoch_schedule wide(rows, {7, 4, 0, 0});
  CHECK(wide.steps() == 1);
  check_schedule(rows, wide.options(), wide);
  for (std::uint32_t rank = 0; rank < 7; ++rank) CHECK(wide.rows(0, rank)[0] != epoch_schedule::padding_row);
  CHECK(wide.report().padding_only_ranks == 0);
}

TEST_CASE("a last step with fewer real rows than ranks: the ranks with only padding are counted") {
  // 11 rows, 4 ranks x 2 rows a step: the last step has 3 real rows, so one rank trains on no
  // token there, balanced or not; under remainder drop that step is left out.
  const packed_rows rows = rows_of_lengths({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  for (const bool balance : {true, false}) {
    CAPTURE(balance);
    schedule_options o{4, 2, 3, 0};
    o.balance = balance;
    const epoch_schedule padded(rows, o);
    CHECK(padded.steps() == 2);
    CHECK(padded.report().padding_only_ranks == 1);
    check_schedule(rows, padded.options(), padded);
    // Resumed after 4 rows: 7 left, the last step has 7 real rows of 8, so every rank has one.
    o.consumed_rows = 4;
    const epoch_schedule resumed(rows, o);
    CHECK(resumed.report().padding_only_ranks == 0);
    check_schedule(rows, resumed.options(), resumed);
    // Resumed at the last step (3 rows left for 4 ranks), on the same ranks or on 8: one step,
    // the ranks past the rows with only padding, as in the whole epoch. It was refused as if
    // the epoch had fewer rows than ranks.
    o.consumed_rows = padded.consumed_rows_after(1);
    for (const std::uint32_t world : {4U, 8U}) {
      o.world_size = world;
      const epoch_schedule last(rows, o);
      CHECK(last.steps() == 1);
      CHECK(last.report().scheduled_rows == 3);
      CHECK(last.report().padding_only_ranks == world - 3);
      check_schedule(rows, last.options(), last);
    }
    o.world_size = 4;
    o.consumed_rows = 0;
    o.remainder = remainder_policy::drop;
    const epoch_schedule dropped(rows, o);
    CHECK(dropped.report().padding_only_ranks == 0);
    check_schedule(rows, dropped.options(), dropped);
  }
}

TEST_CASE("bad options are clear errors, not empty or wrong schedules") {
  const packed_rows rows = rows_of_lengths({5, 6, 7, 8, 9});
  auto error = [&](const schedule_options& o) {
    return test::message_of<option_error>([&] { (void)epoch_schedule(rows, o); });
  };
  CHECK(test::contains(error({0, 1}), "world_size"));
  CHECK(test::contains(error({1, 0}), "micro_batch"));
  CHECK(test::contains(error({4096, 4097}), "at most 16777216"));
  CHECK(test::contains(error({1, 1U << 25}), "at most 16777216"));
  CHECK(test::contains(error({6, 1}), "5 rows to schedule for 6 ranks"));
  CHECK(test::contains(error({2, 3, 0, 0, remainder_policy::drop}), "drop leaves no step"));
  CHECK(test::contains(error({1, 1, 0, 0, remainder_policy::pad, true, 6}), "consumed_rows 6"));
  // A resume may leave fewer rows than ranks (the whole epoch may not): not an error.
  CHECK(epoch_schedule(rows, {2, 1, 0, 0, remainder_policy::pad, true, 4}).report().padding_only_ranks == 1);
  CHECK(error({1, 1, 0, 0, static_cast<remainder_policy>(9)}) ==
        "schedule_options: remainder policy 9 is none of pad, drop");
  CHECK(test::contains(test::message_of<option_error>([] { (void)epoch_schedule(packed_rows{}, {1, 1}); }),
                       "no rows"));

  const epoch_schedule s(rows, {2, 2});
  CHECK(test::contains(test::message_of<option_error>([&] { (void)s.rows(2, 0); }), "step 2 is past the end"));
  CHECK(test::contains(test::message_of<option_error>([&] { (void)s.rows(0, 2); }), "rank 2 is outside the world of 2"));
  // The rank as given: -1 (not 4294967295), and 2^32 (which a uint32 parameter wrapped to rank 0).
  CHECK(test::contains(test::message_of<option_error>([&] { (void)s.rows(0, -1); }), "rank -1 is outside the world of 2"));
  CHECK(test::contains(test::message_of<option_error>([&] { (void)s.rows(0, std::uint64_t{1} << 32); }),
                       "rank 4294967296 is outside the world of 2"));
  CHECK(s.rows(1, std::int64_t{1}).data() == s.rows(1, std::uint8_t{1}).data());
  const epoch_plan plan = plan_epoch(std::vector<std::uint32_t>{5, 6, 7}, {8}, {1, 2});
  CHECK(test::contains(test::message_of<option_error>([&] { (void)plan.pieces(0, 0, 2); }), "slot 2"));
  CHECK(test::contains(test::message_of<option_error>([&] { (void)plan.pieces(0, std::uint64_t{1} << 32, 0); }),
                       "rank 4294967296 is outside the world of 1"));
  CHECK(test::contains(test::message_of<option_error>([] { (void)plan_epoch(std::vector<std::uint32_t>{}, {8}, {1, 1}); }),
                       "no rows"));
  CHECK(parse_remainder_policy("drop") == remainder_policy::drop);
  CHECK(test::contains(test::message_of<option_error>([] { (void)parse_remainder_policy("keep"); }), "pad, drop"));
}

TEST_CASE("the plans let go are kept two at most, the first let go taken first") {
  // An epoch loader holds two plans; when its planning thread is slow to wake, both come back
  // before the next planning, and both must be kept for the next two epochs (a CI run where
  // the second was freed allocated the fourth epoch anew).
  detail::plan_recycler recycler;
  CHECK(recycler.take() == nullptr);
  std::unique_ptr<epoch_plan> plans[3] = {std::make_unique<epoch_plan>(), std::make_unique<epoch_plan>(),
                                          std::make_unique<epoch_plan>()};
  const epoch_plan* const first = plans[0].get();
  const epoch_plan* const second = plans[1].get();
  for (std::unique_ptr<epoch_plan>& plan : plans) recycler.give_back(std::move(plan));  // the third is freed
  CHECK(recycler.take().get() == first);
  recycler.give_back(std::make_unique<epoch_plan>());
  CHECK(recycler.take().get() == second);
  CHECK(recycler.take() != nullptr);
  CHECK(recycler.take() == nullptr);
  CHECK(recycler.reused() == 3);
}

TEST_CASE("plan_epoch_recycling: a plan let go comes back and the next is packed into it, the same plan") {
  const std::vector<std::uint32_t> lengths = read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
  const pack_options packing{2048, packing_algorithm::randomized_exact_fit};
  schedule_options options;
  options.world_size = 2;
  options.micro_batch = 4;
  auto recycler = std::make_shared<detail::plan_recycler>();
  std::shared_ptr<const epoch_plan> plan = detail::plan_epoch_recycling(recycler, lengths, packing, options);
  const piece* const block = plan->packed.rows.pieces().data();
  CHECK(recycler->reused() == 0);
  plan.reset();  // back to the recycler
  options.epoch = 1;
  plan = detail::plan_epoch_recycling(recycler, lengths, packing, options);
  CHECK(recycler->reused() == 1);
  CHECK(plan->packed.rows.pieces().data() == block);
  const epoch_plan fresh = plan_epoch(lengths, packing, options);
  CHECK(plan->packed.rows == fresh.packed.rows);
  CHECK(std::ranges::equal(plan->schedule.sequence(), fresh.schedule.sequence()));
  // A plan outlives its recycler: freed, not given back, once the recycler is gone.
  recycler.reset();
  CHECK(plan->schedule.steps() == fresh.schedule.steps());
}
