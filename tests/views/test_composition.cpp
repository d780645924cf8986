// The composable pipeline: each view's concept profile first, then standard views between
// every pair of stages, the composed pipeline's batches against batch_loader's on the same plan
// (byte for byte), resume by drop(k), a filter that packs exactly the kept samples (and their
// loss masks), a vector of vectors and a user's own rows as inputs, composed closures, both
// call forms, one epoch seed, and the errors of misuse.

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <ranges>
#include <set>
#include <span>
#include <vector>

#include "multipack/data/concatenated_dataset.hpp"
#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/llmc_dataset.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/schedule/plan.hpp"
#include "multipack/views.hpp"
#include "support/alpaca.hpp"
#include "support/batch_checks.hpp"
#include "support/counted_shards.hpp"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"

using namespace multipack;
using test::all_contents;
using test::alpaca;
using test::alpaca_prompts;

namespace {

using dataset_ref = std::ranges::ref_view<const indexed_dataset>;
using rows_t = views::packed_view<dataset_ref>;
using steps_t = views::shard_view<rows_t>;
using batches_t = views::prefetch_view<steps_t>;

// --- the concept profile of every range, asserted before any value is looked at -------------

// Datasets: random-access, sized, common ranges of samples; not views (they own files).
template <class D>
constexpr bool dataset_profile = std::ranges::random_access_range<const D> && std::ranges::sized_range<const D> &&
                                 std::ranges::common_range<const D> && !std::ranges::view<D> &&
                                 !std::ranges::borrowed_range<D> && sample_range<const D> && token_dataset<D> &&
                                 std::same_as<std::ranges::range_value_t<const D>, dataset_sample<D>>;
static_assert(dataset_profile<indexed_dataset>);
static_assert(dataset_profile<llmc_dataset>);
static_assert(dataset_profile<in_memory_dataset<std::int32_t>>);
static_assert(dataset_profile<in_memory_dataset<std::uint16_t>>);

// Plain integer ranges are samples; a vector of them is a sample range.
static_assert(token_sample<std::vector<int>&>);
static_assert(token_sample<std::span<const std::uint16_t>>);
static_assert(sample_range<std::vector<std::vector<int>>>);
static_assert(!token_sample<std::vector<double>>);
static_assert(!token_sample<std::span<const piece>>);  // rows are not samples
static_assert(!sample_range<std::vector<std::vector<bool>>>);

// views::pack: a random-access, sized, common view of std::span<const piece>; not borrowed (the
// rows live in shared state), a row_range, and it knows its samples.
static_assert(std::ranges::random_access_range<const rows_t> && std::ranges::sized_range<const rows_t>);
static_assert(std::ranges::common_range<rows_t> && std::ranges::view<rows_t> && !std::ranges::borrowed_range<rows_t>);
static_assert(std::same_as<std::ranges::range_value_t<rows_t>, std::span<const piece>>);
static_assert(row_range<rows_t> && resolves_samples<rows_t> && !step_range<rows_t>);
static_assert(row_range<decltype(std::declval<rows_t>() | std::views::take(3))>);
static_assert(resolves_samples<decltype(std::declval<rows_t>() | std::views::drop(3))>);

// views::shard: a random-access, sized, common view of rows_of_step; a step_range.
static_assert(std::ranges::random_access_range<const steps_t> && std::ranges::sized_range<const steps_t>);
static_assert(std::ranges::common_range<steps_t> && std::ranges::view<steps_t> && !std::ranges::borrowed_range<steps_t>);
static_assert(std::same_as<std::ranges::range_value_t<steps_t>, rows_of_step<rows_t>>);
static_assert(step_range<steps_t> && resolves_samples<steps_t> && !row_range<steps_t>);
static_assert(std::ranges::random_access_range<rows_of_step<rows_t>> && std::ranges::sized_range<rows_of_step<rows_t>>);
static_assert(step_range<decltype(std::declval<steps_t>() | std::views::drop(3))>);

// views::prefetch: an input, sized view of batch_view<int32>, not common (a sentinel), not
// borrowed; views::prefetch_as<std::int64_t> the same of int64.
static_assert(std::ranges::input_range<batches_t> && !std::ranges::forward_range<batches_t>);
static_assert(std::ranges::sized_range<batches_t> && !std::ranges::common_range<batches_t>);
static_assert(std::ranges::view<batches_t> && !std::ranges::borrowed_range<batches_t>);
static_assert(std::same_as<std::ranges::range_value_t<batches_t>, batch_view<std::int32_t>>);
static_assert(std::same_as<std::ranges::range_value_t<views::prefetch_view<steps_t, std::int64_t>>, batch_view<std::int64_t>>);

// A store that reads int32 only: int32 batches compile, int64 batches do not.
struct int32_only_store {
  std::vector<std::vector<std::int32_t>> samples;
  [[nodiscard]] std::size_t size() const { return samples.size(); }
  [[nodiscard]] std::uint64_t length(std::size_t i) const { return samples.at(i).size(); }
  void read_tokens(std::size_t i, std::uint64_t first, std::span<std::int32_t> out) const {
    std::copy_n(samples.at(i).begin() + static_cast<std::ptrdiff_t>(first), out.size(), out.begin());
  }
  [[nodiscard]] dataset_iterator<int32_only_store> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<int32_only_store> end() const noexcept { return {this, size()}; }
};
static_assert(token_dataset<int32_only_store> && sample_range<const int32_only_store>);
static_assert(dataset_reads_as<int32_only_store, std::int32_t> && !dataset_reads_as<int32_only_store, std::int64_t>);
using int32_only_steps = views::shard_view<views::packed_view<std::ranges::ref_view<const int32_only_store>>>;
static_assert(detail::prefetchable<int32_only_steps>);
template <class S, class T>
concept prefetches_as = requires(const S& s) { views::prefetch_as<T>(s); };
static_assert(prefetches_as<int32_only_steps, std::int32_t> && !prefetches_as<int32_only_steps, std::int64_t>);

// --- helpers ---------------------------------------------------------------------------------

/// batch_loader's batches of rank `rank` of `plan` from `start`: the reference.
template <class T = std::int32_t>
std::vector<std::vector<std::int64_t>> loader_contents(const epoch_plan& plan, std::uint32_t rank,
                                                       const batch_options& options, std::uint64_t start = 0) {
  batch_loader<indexed_dataset, T> loader(std::shared_ptr<const indexed_dataset>(std::shared_ptr<void>{}, &alpaca()),
                                          std::make_shared<const epoch_plan>(plan), rank, options, {2, 4}, start);
  std::vector<std::vector<std::int64_t>> out;
  while (auto b = loader.next()) out.push_back(test::contents((*b)->view));
  return out;
}

/// The pieces of a batch: for each row, (position of the piece's first token, its length),
/// read from position_ids and sequence_ids alone.
std::vector<std::pair<std::size_t, std::size_t>> pieces_of(const batch_view<>& b) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t r = 0; r < b.rows; ++r) {
    const std::size_t row = r * b.row_length;
    for (std::size_t t = 0; t < b.row_length;) {
      if (b.sequence_ids[row + t] == 0) break;  // padding to the end of the row
      std::size_t n = 1;
      while (t + n < b.row_length && b.sequence_ids[row + t + n] == b.sequence_ids[row + t]) ++n;
      out.emplace_back(row + t, n);
      t += n;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the composed pipeline gives batch_loader's batches on the same plan, byte for byte") {
  const schedule_options schedule{2, 4, 3, 1};
  const pack_options packing{2048, packing_algorithm::randomized_exact_fit, overlong_policy::split, 0, 3, 1};
  batch_options options;
  options.mask = alpaca_prompts();
  const epoch_plan plan = plan_epoch(alpaca().lengths(), packing, schedule);

  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    auto steps = alpaca() | views::pack(packing) | views::shard(schedule, rank);
    REQUIRE(std::ranges::size(steps) == plan.schedule.steps());
    const auto expected = loader_contents(plan, rank, options);
    CHECK(all_contents(steps | views::prefetch({2, 3}, options)) == expected);

    // Resume at step k: steps | drop(k) is exactly the tail of the full run, and what
    // batch_loader gives from start step k.
    for (const std::uint64_t k : {std::uint64_t{1}, plan.schedule.steps() / 2, plan.schedule.steps() - 1}) {
      const auto resumed = all_contents(steps | std::views::drop(k) | views::prefetch({2, 3}, options));
      CHECK(resumed == std::vector(expected.begin() + static_cast<std::ptrdiff_t>(k), expected.end()));
      CHECK(resumed == loader_contents(plan, rank, options, k));
    }
    // batch_loader's steps form records each batch's own step number and rank.
    batch_loader<detail::samples_of_t<decltype(steps)>> from_steps(steps.samples(), steps | std::views::drop(2), options,
                                                                   {2, 3});
    std::uint64_t expected_step = 2;
    while (auto b = from_steps.next()) {
      REQUIRE((*b)->step == expected_step++);
      REQUIRE((*b)->rank == rank);
    }
    CHECK(expected_step == plan.schedule.steps());
    // Cap the steps: take(n) is the head.
    const auto head = all_contents(steps | std::views::take(5) | views::prefetch({1, 2}, options));
    CHECK(head == std::vector(expected.begin(), expected.begin() + 5));
    // Steps a trainer's view makes by value, owning their rows (each a vector of row vectors):
    // each batch is collated while its step lives (the loader once kept spans of the rows past
    // the step, and read freed memory: AddressSanitizer's heap-use-after-free).
    auto owning = steps | std::views::transform([](const auto& step) {
                    std::vector<std::vector<piece>> rows;
                    for (const auto& row : step) rows.emplace_back(row.begin(), row.end());
                    return rows;
                  });
    CHECK(all_contents(owning | views::prefetch({2, 3}, options)) == expected);
  }
}

TEST_CASE("standard views between every pair of stages") {
  const pack_options options{1024};
  const schedule_options schedule{1, 2, 5, 0};
  const auto lengths = alpaca().lengths();

  SUBCASE("dataset | take | pack, dataset | drop | pack: pieces number the view's samples") {
    auto rows = alpaca() | std::views::drop(1000) | std::views::take(2000) | views::pack(options);
    const packing reference =
        pack(std::span<const std::uint32_t>(lengths).subspan(1000, 2000), options);
    REQUIRE(rows.size() == reference.rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) REQUIRE(std::ranges::equal(rows[r], reference.rows[r]));
    // ... and the batches read samples 1000 + i of the dataset.
    std::uint64_t tokens = 0;
    auto steps = rows | views::shard(schedule, 0);
    std::uint64_t step = 0;
    for (const auto& b : steps | views::prefetch()) {
      const auto pieces = pieces_of(b);
      std::size_t k = 0;
      for (const auto row : steps[step])
        for (const piece& p : row) {
          REQUIRE(k < pieces.size());
          const auto [start, n] = pieces[k++];
          REQUIRE(n == p.length());
          const auto sample = alpaca().tokens<std::uint16_t>(1000 + p.sample);
          for (std::size_t t = 0; t < n; ++t) REQUIRE(b.input_ids[start + t] == sample[p.begin + t]);
          tokens += n;
        }
      REQUIRE(k == pieces.size());
      ++step;
    }
    CHECK(step == steps.size());
    CHECK(tokens == reference.report.packed_tokens);
  }

  SUBCASE("dataset | transform | pack: a sample as any type with length() and read_tokens()") {
    struct reversed_prefix {  // the first 8 tokens of a sample, in reverse order
      dataset_sample<indexed_dataset> sample;
      [[nodiscard]] std::uint64_t length() const { return std::min<std::uint64_t>(8, sample.length()); }
      void read_tokens(std::uint64_t first, std::span<std::int32_t> out) const {
        std::vector<std::int32_t> all(length());
        sample.read_tokens(0, std::span<std::int32_t>(all));
        for (std::size_t k = 0; k < out.size(); ++k) out[k] = all[length() - 1 - (first + k)];
      }
    };
    auto samples = alpaca() | std::views::take(100) |
                   std::views::transform([](dataset_sample<indexed_dataset> s) { return reversed_prefix{s}; });
    auto rows = samples | views::pack({64});
    CHECK(rows.report().packed_tokens == 800);
    for (const auto& b : rows | views::shard({1, 1}, 0) | views::prefetch()) {
      for (const auto& [start, n] : pieces_of(b)) {
        REQUIRE(n == 8);
        // sample i's tokens reversed: find which sample by its first (its eighth) token.
        std::vector<std::int32_t> got(b.input_ids.begin() + static_cast<std::ptrdiff_t>(start),
                                      b.input_ids.begin() + static_cast<std::ptrdiff_t>(start + n));
        std::ranges::reverse(got);
        bool found = false;
        for (std::size_t i = 0; i < 100 && !found; ++i)
          found = std::ranges::equal(got, alpaca().tokens<std::uint16_t>(i).first(8), std::equal_to<>{});
        REQUIRE(found);
      }
    }
  }

  SUBCASE("rows | take | shard, rows | drop | shard: the schedule of the rows given") {
    auto rows = alpaca() | views::pack(options);
    auto head = rows | std::views::take(100);
    auto steps = head | views::shard(schedule, 0);
    const epoch_schedule reference(head, schedule);
    REQUIRE(steps.size() == reference.steps());
    REQUIRE(reference.report().rows == 100);
    std::uint64_t tokens = 0;
    for (const auto& b : steps | views::prefetch()) tokens += b.real_tokens;
    std::uint64_t expected = 0;
    for (const auto row : head)
      for (const piece& p : row) expected += p.length();
    CHECK(tokens == expected);

    auto tail = rows | std::views::drop(rows.size() - 7);
    auto tail_steps = views::shard(tail, {1, 1}, 0);  // the call form
    CHECK(tail_steps.size() == 7);
    std::uint64_t tail_tokens = 0;
    for (const auto& b : views::prefetch(tail_steps)) tail_tokens += b.real_tokens;
    std::uint64_t tail_expected = 0;
    for (const auto row : tail)
      for (const piece& p : row) tail_expected += p.length();
    CHECK(tail_tokens == tail_expected);
  }

  SUBCASE("rows | transform | shard, steps | transform | prefetch: views that change nothing change no batch") {
    auto rows = alpaca() | views::pack(options);
    auto same_rows = rows | std::views::transform([](std::span<const piece> row) { return row; });
    auto steps = same_rows | views::shard(schedule, 0);
    auto same_steps = steps | std::views::transform([](const auto& step) { return step; });
    std::vector<std::vector<std::int64_t>> direct, transformed;
    for (const auto& b : rows | views::shard(schedule, 0) | views::prefetch()) direct.push_back(test::contents(b));
    for (const auto& b : same_steps | views::prefetch()) transformed.push_back(test::contents(b));
    CHECK(transformed == direct);
    CHECK(!direct.empty());
  }

  SUBCASE("steps | take | prefetch counts; an empty range of steps gives no batch") {
    auto steps = alpaca() | views::pack(options) | views::shard(schedule, 0);
    auto batches = steps | std::views::take(3) | views::prefetch();
    CHECK(batches.size() == 3);
    CHECK(std::ranges::distance(batches) == 3);
    auto none = steps | std::views::take(0) | views::prefetch({2, 2});
    CHECK(none.begin() == none.end());
    CHECK(none.statistics().batches == 0);
  }
}

TEST_CASE("dataset | filter | pack | shard | prefetch: exactly the kept samples, with their prompts masked") {
  auto keep = [](const dataset_sample<indexed_dataset>& s) { return s.index() % 3 != 0 && s.length() < 600; };
  batch_options options;
  options.mask = alpaca_prompts();
  auto rows = alpaca() | std::views::filter(keep) | views::pack({2048});
  const auto samples = rows.samples();
  std::set<std::size_t> kept;
  for (std::size_t i = 0; i < alpaca().size(); ++i)
    if (keep(dataset_sample<indexed_dataset>(&alpaca(), i))) kept.insert(i);
  REQUIRE(samples->size() == kept.size());
  CHECK(rows.report().samples == kept.size());

  std::map<std::size_t, int> seen;  // dataset index -> times its tokens arrived
  std::uint64_t loss_tokens = 0;
  auto steps = rows | views::shard({1, 3, 11, 0}, 0);
  std::uint64_t step = 0;
  for (const batch_view<>& b : steps | views::prefetch({2, 4}, options)) {
    const auto pieces = pieces_of(b);
    std::size_t k = 0;
    for (const auto row : steps[step]) {
      for (const piece& p : row) {
        REQUIRE(k < pieces.size());
        const auto [start, n] = pieces[k++];
        REQUIRE(n == p.length());
        const std::size_t source = samples->source_index(p.sample);  // the sample's index in the dataset
        REQUIRE(kept.contains(source));
        ++seen[source];
        const auto tokens = alpaca().tokens<std::uint16_t>(source);
        const std::uint32_t prompt = alpaca_prompts().prompt_length(source);
        for (std::size_t t = 0; t < n; ++t) {
          REQUIRE(b.input_ids[start + t] == tokens[p.begin + t]);
          const bool carries_loss = t > 0 && p.begin + t >= prompt;
          REQUIRE(b.labels[start + t] == (carries_loss ? b.input_ids[start + t] : -100));
          loss_tokens += carries_loss;
        }
      }
    }
    REQUIRE(k == pieces.size());
    ++step;
  }
  CHECK(step == steps.size());
  CHECK(seen.size() == kept.size());  // every kept sample arrived ...
  for (const auto& [source, times] : seen) REQUIRE(times == 1);  // ... exactly once
  CHECK(loss_tokens > 0);
}

TEST_CASE("a vector of vectors is a dataset; a user's own rows shard and load") {
  std::vector<std::vector<int>> samples;
  for (int i = 0; i < 200; ++i) samples.push_back(std::vector<int>(static_cast<std::size_t>(1 + (i * 37) % 50), i));
  std::uint64_t total = 0;
  for (const auto& s : samples) total += s.size();

  auto check_tokens = [&](auto&& batches) {
    std::uint64_t tokens = 0;
    for (const batch_view<std::int64_t>& b : batches)
      for (std::size_t t = 0; t < b.flat_length(); ++t)
        if (b.sequence_ids[t] != 0) {
          // every token of sample i is i, and its position is inside the sample
          const auto i = static_cast<std::size_t>(b.input_ids[t]);
          REQUIRE(i < samples.size());
          REQUIRE(static_cast<std::size_t>(b.position_ids[t]) < samples[i].size());
          ++tokens;
        }
    return tokens;
  };
  CHECK(check_tokens(samples | views::pack({64}) | views::shard({1, 2}, 0) | views::prefetch_as<std::int64_t>()) ==
        total);

  // A user's own rows: a vector of vectors of pieces that says where its samples are.
  struct my_rows : std::vector<std::vector<piece>> {
    std::shared_ptr<const in_memory_dataset<int>> data;
    [[nodiscard]] std::shared_ptr<const in_memory_dataset<int>> samples() const { return data; }
  };
  my_rows rows;
  rows.data = std::make_shared<const in_memory_dataset<int>>(samples);
  for (std::uint32_t i = 0; i < samples.size(); i += 2) {
    rows.push_back({{i, 0, static_cast<std::uint32_t>(samples[i].size())}});
    if (i + 1 < samples.size()) rows.back().push_back({i + 1, 0, static_cast<std::uint32_t>(samples[i + 1].size())});
  }
  static_assert(row_range<my_rows> && resolves_samples<my_rows>);
  CHECK(check_tokens(rows | views::shard({1, 4}, 0) | views::prefetch_as<std::int64_t>()) == total);
  // An empty piece in a user's rows is an option_error that says so (the sample exists).
  my_rows with_empty = rows;
  with_empty[0].push_back({1, 1, 1});
  auto refused = with_empty | views::shard({1, 4}, 0) | views::prefetch_as<std::int64_t>();
  CHECK(test::contains(test::message_of<option_error>([&] { (void)refused.begin(); }),
                       "has an empty piece, tokens [1, 1) of sample 1: a piece holds at least one token"));
}

TEST_CASE("closures compose before they see a range, and both call forms agree") {
  const schedule_options schedule{1, 4, 2, 0};
  batch_options options;
  options.mask = alpaca_prompts();
  auto pipeline = views::pack({4096}) | views::shard(schedule, 0) | views::prefetch({2, 4}, options);
  const auto composed = all_contents(alpaca() | pipeline);
  const auto chained = all_contents(alpaca() | views::pack({4096}) | views::shard(schedule, 0) |
                                    views::prefetch({2, 4}, options));
  const auto called = all_contents(
      views::prefetch(views::shard(views::pack(alpaca(), {4096}), schedule, 0), {2, 4}, options));
  CHECK(composed == chained);
  CHECK(called == chained);
  CHECK(composed.size() == plan_epoch(alpaca().lengths(), {4096}, schedule).schedule.steps());

  // A standard closure composes with ours, on either side.
  auto short_only = std::views::filter([](const auto& s) { return s.length() < 100; }) | views::pack({4096});
  CHECK((alpaca() | short_only).report().samples ==
        static_cast<std::uint64_t>(std::ranges::count_if(alpaca().lengths(), [](auto n) { return n < 100; })));
  auto steps_of_head = views::pack({4096}) | std::views::take(20) | views::shard({1, 2}, 0);
  CHECK((alpaca() | steps_of_head).size() == 10);
}

TEST_CASE("one epoch seed: views::pack and plan_epoch give the same rows; a mismatch is refused") {
  const auto lengths = alpaca().lengths();
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    const schedule_options schedule{1, 2, 17, epoch};
    const pack_options packing{2048, packing_algorithm::randomized_exact_fit, overlong_policy::drop, 0, 17, epoch};
    const epoch_plan plan = plan_epoch(lengths, {2048, packing_algorithm::randomized_exact_fit}, schedule);
    auto rows = alpaca() | views::pack(packing);
    REQUIRE(rows.size() == plan.packed.rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) REQUIRE(std::ranges::equal(rows[r], plan.packed.rows[r]));
    auto steps = rows | views::shard(schedule, 0);
    for (std::size_t s = 0; s < steps.size(); ++s)
      for (std::uint32_t slot = 0; slot < 2; ++slot) REQUIRE(std::ranges::equal(steps[s][slot], plan.pieces(s, 0, slot)));
  }
  auto rows = alpaca() | views::pack({2048, packing_algorithm::randomized_exact_fit, overlong_policy::drop, 0, 17, 1});
  CHECK(test::contains(test::message_of<option_error>([&] { (void)(rows | views::shard({1, 2, 17, 2}, 0)); }),
                       "packed by randomized-exact-fit for seed 17, epoch 1, the schedule is for seed 17, epoch 2"));
  // exact-fit's rows do not depend on the seed: any schedule takes them.
  CHECK((alpaca() | views::pack({2048}) | views::shard({1, 2, 5, 9}, 0)).size() > 0);
}

TEST_CASE("misuse: a clear error, at the call that misuses") {
  auto rows = alpaca() | views::pack({1024});
  CHECK(test::contains(test::message_of<option_error>([&] { (void)(rows | views::shard({2, 2}, 2)); }),
                       "rank 2 is outside the world of 2"));
  CHECK(test::contains(test::message_of<option_error>([&] { (void)(rows | views::shard({0, 2}, 0)); }),
                       "world_size must be at least 1"));

  // A user's steps of uneven size.
  struct uneven_steps : std::vector<std::vector<std::span<const piece>>> {
    std::shared_ptr<const indexed_samples<dataset_ref>> data;
    [[nodiscard]] auto samples() const { return data; }
  };
  uneven_steps steps;
  steps.data = rows.samples();
  steps.push_back({rows[0], rows[1]});
  steps.push_back({rows[2]});
  static_assert(step_range<uneven_steps>);
  auto batches = steps | views::prefetch();
  CHECK(test::contains(test::message_of<option_error>([&] { (void)batches.begin(); }),
                       "step 1 has 1 rows, the first step 2: every step needs the same micro-batch"));

  // A mask that describes another dataset.
  batch_options options;
  options.mask = loss_mask::from_prompt_lengths(std::vector<std::uint32_t>(10, 1));
  auto masked = rows | views::shard({1, 2}, 0) | views::prefetch({}, options);
  CHECK(test::contains(test::message_of<format_error>([&] { (void)masked.begin(); }), "describes 10 samples"));

  // Samples of two datasets in a random-access range (a vector of them): refused as a filter of
  // them is, or the mask would be applied to the second's samples by the first's indices.
  const indexed_dataset other(test::alpaca_prefix());
  std::vector<dataset_sample<indexed_dataset>> mixed{alpaca().begin()[0], alpaca().begin()[1], other.begin()[2]};
  CHECK(test::contains(test::message_of<option_error>([&] { (void)(mixed | views::pack({1024})); }),
                       "samples of two datasets"));
  mixed.pop_back();
  CHECK((mixed | views::pack({1024})).size() == 1);

  // An input view: one pass.
  auto once = rows | views::shard({1, 2}, 0) | views::prefetch();
  (void)once.begin();
  CHECK(test::contains(test::message_of<option_error>([&] { (void)once.begin(); }), "begin() called twice"));

  // A default-constructed view (a trainer's member, assigned later) is empty: it dereferenced
  // no state at size() and begin().
  decltype(once) unset;
  CHECK(unset.size() == 0);
  CHECK(unset.begin() == unset.end());
  CHECK(std::ranges::distance(unset) == 0);
  CHECK(unset.statistics().batches == 0);
  decltype(rows | views::shard({1, 2}, 0)) unset_steps;
  CHECK(unset_steps.size() == 0);
  CHECK(unset_steps.begin() == unset_steps.end());
}

TEST_CASE("the capabilities of a dataset reach the loader through the views: cache hints, the changed-file check") {
  auto keep = [](const dataset_sample<indexed_dataset>& s) { return s.length() < 1000; };
  using filtered = indexed_samples<std::ranges::filter_view<dataset_ref, decltype(keep)>>;
  static_assert(prefetching_dataset<filtered> && change_checked_dataset<filtered>);
  static_assert(prefetching_dataset<indexed_samples<std::ranges::take_view<dataset_ref>>>);
  static_assert(!change_checked_dataset<indexed_samples<std::ranges::ref_view<std::vector<std::vector<int>>>>>);

  // A copy of the data, rewritten under a running pipeline: the next batches fail, naming it.
  const auto dir = test::fresh_temp_dir("changed_under_views");
  for (const char* suffix : {".idx", ".bin"}) {
    std::filesystem::path from = test::alpaca_prefix(), to = dir / "alpaca";
    from += suffix;
    to += suffix;
    std::filesystem::copy_file(from, to);
  }
  const indexed_dataset copy(dir / "alpaca");
  auto batches = copy | std::views::filter(keep) | views::pack({2048}) | views::shard({1, 4}, 0) | views::prefetch({1, 2});
  auto it = batches.begin();
  REQUIRE(it != batches.end());
  const std::filesystem::path bin = dir / "alpaca.bin";
  test::rewrite_in_place(bin);  // the same bytes: no read can fault
  std::uint64_t delivered = 1;
  const std::string message = test::message_of<io_error>([&] {
    for (++it; it != batches.end(); ++it) ++delivered;
  });
  CHECK(test::contains(message, bin.string()));
  CHECK(test::contains(message, "changed since it was opened"));
  CHECK(delivered <= 1 + 2 + 1);  // the batches built before the write, and one in the making
}

TEST_CASE("through the views too, of 1,000 shards only those that a batch reads are checked, each once") {
  using shards_type = concatenated_dataset<test::counted_shard>;
  const shards_type shards(test::counted_shards(1000, 3));
  auto keep = [](const dataset_sample<shards_type>& s) { return s.index() % 3 != 1; };
  static_assert(part_checked_dataset<indexed_samples<std::ranges::filter_view<std::ranges::ref_view<const shards_type>,
                                                                              decltype(keep)>>>);
  static_assert(part_checked_dataset<indexed_samples<std::ranges::ref_view<const shards_type>>>);
  const auto check = [&](const auto& steps) {
    const auto samples = steps.base().samples();  // positions in the view -> samples of the shards
    const auto expected =
        test::steps_reading(steps, 1000, [&](std::size_t i) { return shards.shard_of(samples->source_index(i)); });
    const auto before = test::checks_of(shards.shards());
    std::uint64_t batches = 0;
    for (const auto& b : steps | views::prefetch({2, 3})) batches += b.rows > 0 ? 1 : 0;
    CHECK(batches == steps.size());
    auto made = test::checks_of(shards.shards());
    for (std::size_t k = 0; k < made.size(); ++k) made[k] -= before[k];
    CHECK(made == expected);  // before the fix: every shard, every batch
  };
  check(shards | views::pack({256}) | views::shard({1, 4}, 0));
  check(shards | std::views::filter(keep) | views::pack({256}) | views::shard({1, 4}, 0));
}
