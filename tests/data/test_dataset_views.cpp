// Dataset views that real corpora need: data/alpaca split into 7 shards is, concatenated, the
// same dataset (it packs and loads exactly as the single file); a blend takes w x N
// samples of each corpus in whole passes and a (seed, epoch) subset; a subset keeps each
// sample's identity, so loss masks apply; a shard rewritten while loading fails the batches
// that read it, not the others; and misuse gets a clear error.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <ranges>
#include <set>
#include <span>
#include <vector>

#include "multipack/data/blended_dataset.hpp"
#include "multipack/data/concatenated_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/data/subset_dataset.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/views.hpp"
#include "support/alpaca.hpp"
#include "support/batch_checks.hpp"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"
#include "support/token_masks.hpp"

using namespace multipack;
using test::all_contents;
using test::alpaca;
using test::alpaca_prompts;

static_assert(token_dataset<concatenated_dataset<indexed_dataset>> &&
              std::ranges::random_access_range<const concatenated_dataset<indexed_dataset>> &&
              prefetching_dataset<concatenated_dataset<indexed_dataset>> &&
              change_checked_dataset<concatenated_dataset<indexed_dataset>>);
static_assert(token_dataset<blended_dataset<indexed_dataset>> && sample_range<const blended_dataset<indexed_dataset>> &&
              change_checked_dataset<blended_dataset<indexed_dataset>>);
static_assert(token_dataset<subset_dataset<indexed_dataset>> && has_source_dataset<subset_dataset<indexed_dataset>> &&
              prefetching_dataset<subset_dataset<indexed_dataset>>);
// Datasets of shards say which shard holds each sample, so that the loader checks only those a
// batch reads; wrappers of them forward it; a single file's dataset is checked whole.
static_assert(part_checked_dataset<concatenated_dataset<indexed_dataset>> &&
              part_checked_dataset<blended_dataset<indexed_dataset>> &&
              part_checked_dataset<blended_dataset<concatenated_dataset<indexed_dataset>>> &&
              part_checked_dataset<subset_dataset<concatenated_dataset<indexed_dataset>>>);
static_assert(!part_checked_dataset<indexed_dataset> && !part_checked_dataset<subset_dataset<indexed_dataset>> &&
              change_checked_dataset<subset_dataset<indexed_dataset>>);

namespace {

/// data/alpaca written as shards of the given sizes into `dir` (shard_0 ... shard_N).
std::vector<std::filesystem::path> write_shards(const std::filesystem::path& dir, const std::vector<std::size_t>& sizes) {
  std::vector<std::filesystem::path> prefixes;
  std::size_t next = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    prefixes.push_back(dir / ("shard_" + std::to_string(k)));
    indexed_dataset_writer writer(prefixes.back(), alpaca().dtype());
    for (std::size_t i = 0; i < sizes[k]; ++i, ++next) writer.add_sample(alpaca().tokens<std::uint16_t>(next));
    writer.finish();
  }
  REQUIRE(next == alpaca().size());
  return prefixes;
}

}  // namespace

TEST_CASE("a directory's shards come in natural order; a prefix with pattern characters is itself") {
  // shard_0 ... shard_11: string order would put shard_10 and shard_11 before shard_2, and
  // a list of prompt-length files in the shards' numbered order would go to other shards.
  const auto dir = test::fresh_temp_dir("natural_order");
  const auto written = write_shards(dir, {400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 500, 500});
  CHECK(indexed_prefixes(dir) == written);
  CHECK(indexed_prefixes(dir / "shard_*") == written);
  CHECK(detail::natural_less("shard_2", "shard_10"));
  CHECK(!detail::natural_less("shard_10", "shard_2"));
  CHECK(detail::natural_less("a", "a1"));
  CHECK(detail::natural_less("part_01", "part_1"));  // equal as numbers: string order, so not equivalent
  CHECK(!detail::natural_less("part_1", "part_01"));
  CHECK(detail::natural_less("x9y", "x10"));
  CHECK(!detail::natural_less("same", "same"));
  // A prefix whose name has pattern characters names that dataset when it exists.
  const auto odd = test::fresh_temp_dir("pattern_characters");
  for (const char* suffix : {".idx", ".bin"})
    std::filesystem::copy_file(written[0].string() + suffix, (odd / "x[1]").string() + suffix);
  CHECK(indexed_prefixes(odd / "x[1]") == std::vector{odd / "x[1]"});
}

TEST_CASE("data/alpaca in 7 shards, concatenated, packs and loads exactly as the single file") {
  const auto dir = test::fresh_temp_dir("shards");
  const auto written = write_shards(dir, {1, 999, 0, 1500, 700, 1300, 500});
  CHECK(indexed_prefixes(dir) == written);                   // a directory
  CHECK(indexed_prefixes(dir / "shard_*") == written);       // a pattern
  CHECK(indexed_prefixes(dir / "shard_[34]").size() == 2);   // a narrower one
  CHECK(indexed_prefixes(written[3]) == std::vector{written[3]});  // a prefix

  const auto shards = open_indexed_datasets(written);
  REQUIRE(shards.size() == alpaca().size());
  CHECK(shards.shards().size() == 7);
  CHECK(shards.first_sample(3) == 1000);
  CHECK(shards.shard_of(999) == 1);
  CHECK(shards.shard_of(1000) == 3);  // shard 2 is empty
  for (std::size_t i = 0; i < shards.size(); ++i) {
    REQUIRE(shards.length(i) == alpaca().length(i));
    std::vector<std::int32_t> a(shards.length(i)), b(alpaca().length(i));
    shards.read_tokens(i, 0, std::span<std::int32_t>(a));
    alpaca().read_tokens(i, 0, std::span<std::int32_t>(b));
    REQUIRE(a == b);
  }
  CHECK_NOTHROW(shards.check_unchanged());

  batch_options options;
  options.mask = alpaca_prompts();  // the single file's mask describes the concatenation too
  const schedule_options schedule{2, 4, 6, 1};
  const pack_options packing{2048, packing_algorithm::randomized_exact_fit, overlong_policy::split, 0, 6, 1};
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    const auto one = all_contents(alpaca() | views::pack(packing) | views::shard(schedule, rank) |
                                  views::prefetch({2, 4}, options));
    const auto seven = all_contents(shards | views::pack(packing) | views::shard(schedule, rank) |
                                    views::prefetch({2, 4}, options));
    CHECK(seven == one);
  }
}

TEST_CASE("a dataset's file parts: one a shard, numbered across the corpora of a blend") {
  const auto dir = test::fresh_temp_dir("file_parts");
  const auto written = write_shards(dir, {1, 999, 0, 1500, 700, 1300, 500});
  const auto shards = open_indexed_datasets(written);
  CHECK(shards.file_parts() == 7);
  for (std::size_t i = 0; i < shards.size(); ++i) REQUIRE(shards.file_part_of(i) == shards.shard_of(i));
  CHECK(shards.file_part_of(999) == 1);
  CHECK(shards.file_part_of(1000) == 3);  // shard 2 is empty
  for (std::size_t k = 0; k < 7; ++k) CHECK_NOTHROW(shards.check_part_unchanged(k));

  // Two corpora of shards: corpus 1's shards are parts 3 ... 6.
  std::vector<concatenated_dataset<indexed_dataset>> corpora;
  corpora.push_back(open_indexed_datasets(std::span(written).first(3)));
  corpora.push_back(open_indexed_datasets(std::span(written).subspan(3)));
  const blended_dataset blend(std::move(corpora), {1.0, 3.0}, {.samples = 3000, .seed = 5});
  CHECK(blend.file_parts() == 7);
  for (std::size_t i = 0; i < blend.size(); ++i) {
    const auto [corpus, local] = blend.where(i);
    REQUIRE(blend.file_part_of(i) == (corpus == 0 ? 0 : 3) + blend.corpora()[corpus].shard_of(local));
  }
  // A blend of single files: a corpus each.
  std::vector<indexed_dataset> files;
  for (const auto& p : {written[1], written[3]}) files.emplace_back(p);
  const blended_dataset<indexed_dataset> of_files(std::move(files), {1.0, 1.0});
  CHECK(of_files.file_parts() == 2);
  CHECK(of_files.file_part_of(0) == 0);
  CHECK(of_files.file_part_of(of_files.size() - 1) == 1);
  // A subset: the part of the sample it names.
  const std::vector<std::size_t> picked{4999, 0, 1000};
  const subset_dataset subset(open_indexed_datasets(written), picked);
  CHECK(subset.file_parts() == 7);
  CHECK(subset.file_part_of(0) == 6);
  CHECK(subset.file_part_of(1) == 0);
  CHECK(subset.file_part_of(2) == 3);
}

namespace {

/// Writes data/alpaca as 20 shards of 250 samples, opens them with `open(shards)` (a
/// std::shared_ptr<const D>), rewrites shard 7's .bin (`shrink`: cut to 1000 bytes; else the
/// same bytes, a later time), then loads 4 batches of one whole sample each, from shards 0, 1,
/// 7 and 2: the first two come, with their tokens, and the third fails naming the file,
/// whatever the threads. `sample_in(dataset, k)` is a sample of the dataset that shard k holds.
template <class Open, class SampleIn>
void rewrite_shard_7_while_loading(const std::string& name, const Open& open, const SampleIn& sample_in) {
  for (const bool shrink : {false, true}) {
    CAPTURE(shrink);
    const auto written = write_shards(test::fresh_temp_dir(name), std::vector<std::size_t>(20, 250));
    const auto dataset = open(written);
    using D = typename decltype(dataset)::element_type;
    std::vector<std::vector<std::vector<piece>>> steps;
    for (const std::size_t shard : {0, 1, 7, 2}) {
      const auto i = static_cast<std::uint32_t>(sample_in(*dataset, shard));
      steps.push_back({{piece{i, 0, static_cast<std::uint32_t>(dataset->length(i))}}});
    }
    const std::filesystem::path bin = written[7].string() + ".bin";
    if (shrink) {
      std::filesystem::resize_file(bin, 1000);  // nothing reads shard 7 before its check
    } else {
      test::rewrite_in_place(bin);
    }
    for (const unsigned threads : {1U, 3U}) {
      CAPTURE(threads);
      batch_loader<std::remove_const_t<D>> loader(dataset, steps, {}, {threads, 4});
      for (std::uint64_t step = 0; step < 2; ++step) {
        const auto batch = loader.next();  // shards 0 and 1: unchanged
        REQUIRE(batch);
        const piece p = steps[step][0][0];
        std::vector<std::int32_t> tokens(p.end);
        dataset->read_tokens(p.sample, 0, std::span<std::int32_t>(tokens));
        CHECK(std::vector<std::int32_t>((*batch)->view.input_ids.begin(), (*batch)->view.input_ids.begin() + p.end) ==
              tokens);
      }
      const std::string message = test::message_of<io_error>([&] { (void)loader.next(); });
      CHECK(test::contains(message, bin.string() + ": changed since it was opened"));
      CHECK(test::contains(message, shrink ? "1000 now" : "written since"));
    }
  }
}

}  // namespace

TEST_CASE("a shard rewritten while loading fails the first batch that reads it, naming it; the others come") {
  // Before each batch the loader checks the files of the shards that the batch reads, not all 20.
  using shards_type = concatenated_dataset<indexed_dataset>;
  SUBCASE("a concatenation") {
    rewrite_shard_7_while_loading(
        "rewritten_shard",
        [](const auto& written) { return std::make_shared<const shards_type>(open_indexed_datasets(written)); },
        [](const shards_type& d, std::size_t k) { return d.first_sample(k) + 3; });
  }
  SUBCASE("a subset of it, in reverse") {
    rewrite_shard_7_while_loading(
        "rewritten_shard_subset",
        [](const auto& written) {
          std::vector<std::size_t> reversed(5000);
          for (std::size_t i = 0; i < reversed.size(); ++i) reversed[i] = reversed.size() - 1 - i;
          return std::make_shared<const subset_dataset<shards_type>>(open_indexed_datasets(written), reversed);
        },
        [](const subset_dataset<shards_type>&, std::size_t k) { return 4999 - (250 * k + 3); });
  }
  SUBCASE("a blend of two corpora of shards") {
    using blend_type = blended_dataset<shards_type>;
    rewrite_shard_7_while_loading(
        "rewritten_shard_blend",
        [](const std::vector<std::filesystem::path>& written) {
          std::vector<shards_type> corpora;
          corpora.push_back(open_indexed_datasets(std::span(written).first(5)));
          corpora.push_back(open_indexed_datasets(std::span(written).subspan(5)));
          return std::make_shared<const blend_type>(std::move(corpora), std::vector{1.0, 1.0},
                                                    blend_options{.samples = 4000, .seed = 9});
        },
        [](const blend_type& blend, std::size_t k) {
          for (std::size_t i = 0; i < blend.size(); ++i) {
            const auto [corpus, local] = blend.where(i);
            if ((corpus == 0 ? 0 : 5) + blend.corpora()[corpus].shard_of(local) == k) return i;
          }
          FAIL("no sample of shard " << k);
          return std::size_t{0};
        });
  }
}

TEST_CASE("a blend takes w x N samples of each corpus, N in all: whole passes, then a (seed, epoch) subset") {
  const auto dir = test::fresh_temp_dir("blend");
  const auto written = write_shards(dir, {4000, 1000});
  auto open_both = [&] {
    std::vector<indexed_dataset> corpora;
    for (const auto& p : written) corpora.emplace_back(p);
    return corpora;
  };
  // N = 5000 at 0.5 / 0.5: 2500 of corpus 0 (no pass, a subset), 2500 of corpus 1 (2 passes + 500)
  const blended_dataset blend(open_both(), {1.0, 1.0}, {.samples = 5000, .seed = 3, .epoch = 0});
  REQUIRE(blend.size() == 5000);
  const auto report = blend.report();
  CHECK(report[0].weight == 0.5);
  CHECK(report[0].taken == 2500);
  CHECK(report[0].whole_passes == 0);
  CHECK(report[0].subset == 2500);
  CHECK(report[1].taken == 2500);
  CHECK(report[1].whole_passes == 2);
  CHECK(report[1].subset == 500);
  // Shares rounded so that they add up to N (each rounded alone, 2500.5 and 2500.5 made 5002).
  const blended_dataset odd(open_both(), {1.0, 1.0}, {.samples = 5001, .seed = 3});
  CHECK(odd.size() == 5001);
  CHECK(odd.report()[0].taken + odd.report()[1].taken == 5001);
  CHECK(std::max(odd.report()[0].taken, odd.report()[1].taken) == 2501);
  const blended_dataset thirds(open_both(), {1.0, 2.0}, {.samples = 10, .seed = 3});
  CHECK(thirds.report()[0].taken == 3);
  CHECK(thirds.report()[1].taken == 7);

  std::map<std::pair<std::size_t, std::size_t>, int> times;
  std::uint64_t tokens[2] = {0, 0};
  for (std::size_t i = 0; i < blend.size(); ++i) {
    const auto [corpus, index] = blend.where(i);
    ++times[{corpus, index}];
    tokens[corpus] += blend.length(i);
    REQUIRE(blend.length(i) == alpaca().length((corpus == 0 ? 0 : 4000) + index));
  }
  CHECK(tokens[0] == report[0].tokens);
  CHECK(tokens[1] == report[1].tokens);
  std::size_t corpus0 = 0, thrice = 0, twice = 0;
  for (const auto& [key, n] : times) {
    if (key.first == 0) {
      ++corpus0;
      REQUIRE(n == 1);  // a subset: no repeats
    } else {
      REQUIRE((n == 2 || n == 3));
      (n == 3 ? thrice : twice)++;
    }
  }
  CHECK(corpus0 == 2500);
  CHECK(thrice == 500);
  CHECK(twice == 500);

  // The same (seed, epoch) chooses the same subsets; another epoch other ones.
  const blended_dataset again(open_both(), {1.0, 1.0}, {.samples = 5000, .seed = 3, .epoch = 0});
  const blended_dataset next(open_both(), {1.0, 1.0}, {.samples = 5000, .seed = 3, .epoch = 1});
  bool same = true, differs = false;
  for (std::size_t i = 0; i < blend.size(); ++i) {
    same = same && again.where(i) == blend.where(i);
    differs = differs || next.where(i) != blend.where(i);
  }
  CHECK(same);
  CHECK(differs);

  // It packs and loads like any dataset.
  std::uint64_t real = 0;
  for (const auto& b : blend | views::pack({4096}) | views::shard({1, 8}, 0) | views::prefetch({2, 4})) real += b.real_tokens;
  CHECK(real == report[0].tokens + report[1].tokens);

  CHECK(test::contains(test::message_of<option_error>([&] { blended_dataset<indexed_dataset>(open_both(), {1.0, 0.0}); }),
                       "weight of corpus 1 is 0.000000"));
  CHECK(test::contains(test::message_of<option_error>([&] { blended_dataset<indexed_dataset>(open_both(), {1.0}); }),
                       "1 weights for 2 corpora"));
  // Finite weights whose sum overflows: each corpus still takes its share (the sum once became
  // infinite, every normalised weight 0, and the last corpus took all N).
  const double huge = std::numeric_limits<double>::max();
  const blended_dataset big(open_both(), {huge, huge}, {.samples = 1000});
  CHECK(big.report()[0].weight == 0.5);
  CHECK(big.report()[0].taken == 500);
  CHECK(big.report()[1].taken == 500);
  const blended_dataset big_and_small(open_both(), {huge, huge / 3}, {.samples = 1000});
  CHECK(big_and_small.report()[0].taken == 750);
  CHECK(big_and_small.report()[1].taken == 250);
  // The scaling keeps the counts of weights that never overflowed, ties at .5 included (a
  // division by the largest weight once moved 0.1, 0.6, 0.1 of 4 from 1, 3, 0 to 1, 2, 1).
  std::vector<indexed_dataset> three;
  for (const auto& p : {written[0], written[1], written[0]}) three.emplace_back(p);
  const blended_dataset tie(std::move(three), {0.1, 0.6, 0.1}, {.samples = 4});
  CHECK(tie.report()[0].taken == 1);
  CHECK(tie.report()[1].taken == 3);
  CHECK(tie.report()[2].taken == 0);
  // A -1 that became 2^64 - 1 once overflowed llround and the sum of the corpora's shares into
  // an empty blend; it is refused, as any N of 2^32 - 1 or more is.
  const int minus_one = -1;
  CHECK(test::contains(test::message_of<option_error>([&] {
                         blended_dataset<indexed_dataset>(open_both(), {1.0, 1.0},
                                                          {.samples = static_cast<std::uint64_t>(minus_one)});
                       }),
                       "blend_options::samples is 18446744073709551615"));
}

TEST_CASE("a subset keeps each sample's identity: the dataset's loss mask applies") {
  auto keep = [](const dataset_sample<indexed_dataset>& s) { return s.index() % 4 == 1 && s.length() > 200; };
  batch_options options;
  options.mask = alpaca_prompts();
  const schedule_options schedule{1, 3, 2, 0};

  const subset_dataset by_predicate(indexed_dataset(test::alpaca_prefix()), keep);
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < alpaca().size(); ++i)
    if (keep(dataset_sample<indexed_dataset>(&alpaca(), i))) indices.push_back(i);
  const subset_dataset by_index(indexed_dataset(test::alpaca_prefix()), indices);
  REQUIRE(by_predicate.size() == indices.size());
  REQUIRE(by_index.size() == indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) REQUIRE(by_predicate.source_index(k) == indices[k]);

  // Batches of the subset equal those of the same filter over the dataset, masks included.
  const auto filtered = all_contents(alpaca() | std::views::filter(keep) | views::pack({2048}) |
                                     views::shard(schedule, 0) | views::prefetch({2, 2}, options));
  CHECK(all_contents(by_predicate | views::pack({2048}) | views::shard(schedule, 0) | views::prefetch({2, 2}, options)) ==
        filtered);
  CHECK(all_contents(by_index | views::pack({2048}) | views::shard(schedule, 0) | views::prefetch({2, 2}, options)) ==
        filtered);
  // ... and each sample's own prompt is masked, found by its index in the dataset: every
  // sample is whole (all are shorter than a row), so its tokens from max(prompt, 1) on carry
  // loss (a piece's first token never does).
  std::uint64_t masked = 0, expected = 0;
  for (const auto& b : by_index | views::pack({2048}) | views::shard(schedule, 0) | views::prefetch({2, 2}, options))
    masked += b.loss_tokens;
  for (const std::size_t source : indices)
    expected += alpaca().length(source) - std::max<std::uint64_t>(alpaca_prompts().prompt_length(source), 1);
  CHECK(masked == expected);

  const std::vector<std::size_t> bad{3, 5000};
  CHECK(test::contains(
      test::message_of<option_error>([&] { subset_dataset<indexed_dataset>(indexed_dataset(test::alpaca_prefix()), bad); }),
      "index 1 is sample 5000, but the dataset has 5000 samples"));
}

TEST_CASE("a directory's token masks (PREFIX.loss_mask beside PREFIX) are not shards") {
  // As `multipack-bench convert --labels-field` writes them: taken as shards, their 0/1 values
  // would be trained on as tokens.
  const auto dir = test::fresh_temp_dir("masked_shards");
  const auto written = write_shards(dir, {2000, 3000});
  for (const auto& prefix : written) {
    test::write_token_mask(prefix.string() + std::string(token_mask_suffix), indexed_dataset(prefix).lengths(),
                           [](std::size_t, std::size_t) { return true; });
    const indexed_dataset shard(prefix);
    CHECK(loss_mask::open_token_mask(prefix.string() + std::string(token_mask_suffix)).size() == shard.size());
  }
  CHECK(indexed_prefixes(dir) == written);
  CHECK(indexed_prefixes(dir / "shard_*") == written);
  // Named alone (a pattern that finds the mask without its dataset, or the prefix itself), a
  // mask is what was asked for.
  const std::filesystem::path first_mask = written[0].string() + std::string(token_mask_suffix);
  CHECK(indexed_prefixes(dir / "*.loss_mask") == std::vector<std::filesystem::path>{first_mask, written[1].string() + ".loss_mask"});
  CHECK(indexed_prefixes(first_mask) == std::vector{first_mask});
}

namespace {

/// A corpus of more than 2^32 samples (FineWeb has about 2.2e10 documents) that stores none:
/// sample i has 1 + i % 1000 tokens, each i % 2^31.
struct huge_corpus {
  std::size_t samples = (std::size_t{1} << 32) + 100;
  [[nodiscard]] std::size_t size() const { return samples; }
  [[nodiscard]] std::uint64_t length(std::size_t i) const { return 1 + i % 1000; }
  template <class T>
  void read_tokens(std::size_t i, std::uint64_t, std::span<T> out) const {
    for (T& token : out) token = static_cast<T>(i % (std::size_t{1} << 31));
  }
};

}  // namespace

TEST_CASE("subsets and blends of a corpus of more than 2^32 samples take the samples asked for") {
  static_assert(token_dataset<huge_corpus>);
  const huge_corpus corpus;
  const std::vector<std::size_t> indices{(std::size_t{1} << 32) + 7, 5, corpus.size() - 1};
  const subset_dataset<huge_corpus> subset(corpus, indices);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    CHECK(subset.source_index(k) == indices[k]);  // not wrapped to 32 bits
    CHECK(subset.length(k) == corpus.length(indices[k]));
  }
  // 2,000 samples drawn from a corpus of 2^34: a permutation of the whole corpus, so about 3/4
  // of them past 2^32 (all were below 2^32 when the subsets held 32-bit indices).
  const huge_corpus larger{std::size_t{1} << 34};
  const blended_dataset<huge_corpus> blend(std::vector<huge_corpus>{larger}, {1.0}, {.samples = 2000, .seed = 1});
  REQUIRE(blend.size() == 2000);
  std::set<std::size_t> drawn;
  for (std::size_t i = 0; i < blend.size(); ++i) drawn.insert(blend.where(i).second);
  CHECK(drawn.size() == 2000);
  CHECK(*drawn.rbegin() < larger.size());
  const auto past = static_cast<std::size_t>(std::count_if(drawn.begin(), drawn.end(), [](std::size_t i) { return i >> 32 != 0; }));
  CHECK(past > 1000);

  // Without options.samples, all of two such corpora: refused at once, before a subset of 10^9
  // samples was permuted into 8 GB (which ran out of memory, or took minutes, then refused).
  const std::vector<huge_corpus> two(2, huge_corpus{3'000'000'000});
  CHECK(test::contains(test::message_of<option_error>([&] { blended_dataset<huge_corpus> all(two, {2.0, 1.0}); }),
                       "6000000000 samples; at most 2^32 - 2 are supported"));
}

TEST_CASE("a directory or a pattern with a half-copied shard is refused, naming the missing file") {
  // Skipping the shard would train on less data with no word (rsync copies .bin before .idx).
  const auto dir = test::fresh_temp_dir("half_copied");
  const auto written = write_shards(dir, {2000, 1000, 2000});
  for (const auto& [keep, drop] : {std::pair{".idx", ".bin"}, std::pair{".bin", ".idx"}}) {
    CAPTURE(drop);
    const std::filesystem::path aside = dir / "aside";
    std::filesystem::rename(written[1].string() + drop, aside);
    const std::string missing = written[1].string() + drop + " is missing beside its " + keep;
    CHECK(test::contains(test::message_of<option_error>([&] { (void)indexed_prefixes(dir); }), missing));
    CHECK(test::contains(test::message_of<option_error>([&] { (void)indexed_prefixes(dir / "shard_*"); }), missing));
    // A pattern that leaves the shard out, and the other shards named alone, still open.
    CHECK(indexed_prefixes(dir / "shard_[02]") == std::vector{written[0], written[2]});
    CHECK(indexed_prefixes(written[0]) == std::vector{written[0]});
    std::filesystem::rename(aside, written[1].string() + drop);
    CHECK(indexed_prefixes(dir) == written);
  }
}

TEST_CASE("shards that are not there, a file named for its prefix: a clear error") {
  const auto dir = test::fresh_temp_dir("no_shards");
  CHECK(test::contains(test::message_of<option_error>([&] { (void)indexed_prefixes(dir); }),
                       "names no Megatron indexed dataset"));
  CHECK(test::contains(test::message_of<option_error>([&] { (void)indexed_prefixes(dir / "absent"); }),
                       "no Megatron indexed dataset there"));
  CHECK(test::contains(test::message_of<option_error>([&] { (void)indexed_prefixes(dir / "x_*"); }),
                       "names no Megatron indexed dataset"));
  // One of the two files: the error names the other.
  std::filesystem::copy_file(test::alpaca_prefix().string() + ".idx", dir / "half.idx");
  CHECK(test::contains(test::message_of<option_error>([&] { (void)indexed_prefixes(dir / "half"); }),
                       (dir / "half.bin").string() + " is missing beside its .idx"));
  // A file's name for its prefix (a common slip): the error says which prefix was meant.
  for (const char* suffix : {".bin", ".idx"}) {
    std::filesystem::path named = test::alpaca_prefix();
    named += suffix;
    const std::string meant = "a dataset is named by its prefix, without .bin or .idx: " + test::alpaca_prefix().string();
    CHECK(test::contains(test::message_of<option_error>([&] { (void)indexed_prefixes(named); }), meant));
    CHECK(test::contains(test::message_of<io_error>([&] { indexed_dataset{named}; }), meant));
  }
}
