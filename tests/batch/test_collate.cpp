// Collation of micro-batches: every array against a reference built token by token from the
// dataset read independently (tokens<uint16_t>, the prompt lengths read by iostream), on every
// batch of real Alpaca epochs (int32 and int64, fixed shapes and pad_to_multiple, with and
// without the loss mask, prompt lengths or per token, split samples), then hand-written batches of generated data for the
// edge cases and every error.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "multipack/batch/collate.hpp"
#include "multipack/batch/layout.hpp"
#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/schedule/plan.hpp"
#include "support/expect.hpp"
#include "support/paths.hpp"
#include "support/token_masks.hpp"

using namespace multipack;

namespace {

constexpr std::int64_t sentinel = 0x5a5a5a5a;

using row_list = std::vector<std::vector<piece>>;

/// The spans collate takes, over `rows`.
std::vector<std::span<const piece>> spans_of(const row_list& rows) {
  return {rows.begin(), rows.end()};
}

/// Fills every element of every array with `sentinel`, so that a test can see what collate
/// wrote and what it left alone.
template <class T>
void fill_with_sentinel(const batch_view<T>& v) {
  std::fill(v.input_ids.begin(), v.input_ids.end(), static_cast<T>(sentinel));
  std::fill(v.labels.begin(), v.labels.end(), static_cast<T>(sentinel));
  std::fill(v.position_ids.begin(), v.position_ids.end(), static_cast<T>(sentinel));
  std::fill(v.sequence_ids.begin(), v.sequence_ids.end(), static_cast<T>(sentinel));
  std::fill(v.cu_seqlens.begin(), v.cu_seqlens.end(), static_cast<std::int32_t>(sentinel));
}

/// What a batch must hold, built one token at a time from the rows alone.
struct expected_batch {
  std::uint32_t row_length = 0;
  std::vector<std::int64_t> input_ids, labels, position_ids, sequence_ids;
  std::vector<std::int64_t> cu_seqlens;
  std::uint32_t max_seqlen = 0;
  std::uint32_t padding_rows = 0;
  std::uint64_t real_tokens = 0;
  std::uint64_t loss_tokens = 0;
};

/// The reference. token_of(sample, j) is token j of the sample; carries_no_loss(sample, j)
/// says whether the loss mask marks it (called only when the mask applies).
template <class TokenOf, class NoLoss>
expected_batch reference_batch(const row_list& rows, const batch_layout& layout, const collate_options& o,
                               bool apply_mask, TokenOf token_of, NoLoss carries_no_loss) {
  expected_batch e;
  std::uint64_t longest = 0;
  for (const auto& row : rows) {
    std::uint64_t n = 0;
    for (const piece& p : row) n += p.end - p.begin;
    longest = std::max(longest, n);
  }
  if (layout.pad_to_multiple == 0) {
    e.row_length = layout.capacity;
  } else {
    std::uint64_t len = layout.pad_to_multiple;
    while (len < longest) len += layout.pad_to_multiple;
    e.row_length = static_cast<std::uint32_t>(std::min<std::uint64_t>(len, layout.capacity));
  }
  e.cu_seqlens.push_back(0);
  for (const auto& row : rows) {
    std::uint32_t used = 0;
    std::int64_t sequence = 0;
    for (const piece& p : row) {
      ++sequence;
      for (std::uint32_t j = p.begin; j < p.end; ++j) {
        const std::int64_t token = token_of(p.sample, j);
        const bool ignored = j == p.begin || (apply_mask && carries_no_loss(p.sample, j));
        e.input_ids.push_back(token);
        e.labels.push_back(ignored ? o.ignore_index : token);
        e.position_ids.push_back(j - p.begin);
        e.sequence_ids.push_back(sequence);
        if (!ignored && token != o.ignore_index) ++e.loss_tokens;
      }
      used += p.end - p.begin;
      e.cu_seqlens.push_back(e.cu_seqlens.back() + (p.end - p.begin));
      e.max_seqlen = std::max(e.max_seqlen, p.end - p.begin);
    }
    e.real_tokens += used;
    if (row.empty()) ++e.padding_rows;
    for (std::uint32_t j = 0; used + j < e.row_length; ++j) {
      e.input_ids.push_back(o.pad_token_id);
      e.labels.push_back(o.ignore_index);
      e.position_ids.push_back(j);
      e.sequence_ids.push_back(0);
    }
    if (used < e.row_length) {
      e.cu_seqlens.push_back(e.cu_seqlens.back() + (e.row_length - used));
      e.max_seqlen = std::max(e.max_seqlen, e.row_length - used);
    }
  }
  return e;
}

/// Index of the first element where `actual` and `expected` differ (over expected.size()).
template <class T>
std::size_t first_difference(std::span<const T> actual, const std::vector<std::int64_t>& expected) {
  for (std::size_t k = 0; k < expected.size(); ++k)
    if (static_cast<std::int64_t>(actual[k]) != expected[k]) return k;
  return expected.size();
}

template <class T>
void check_array(const char* name, std::span<T> actual, const std::vector<std::int64_t>& expected,
                 std::uint32_t row_length) {
  REQUIRE(actual.size() >= expected.size());
  const std::size_t k = first_difference(std::span<const T>(actual), expected);
  REQUIRE_MESSAGE(k == expected.size(), name << " differs at row " << k / row_length << ", column "
                                             << k % row_length << ": " << static_cast<std::int64_t>(actual[k])
                                             << ", expected " << expected[k]);
}

/// Everything collate wrote, against the reference; what it must not have written, against
/// the sentinel; and the structure of cu_seqlens, checked directly.
template <class T>
void check_batch(const batch_view<T>& v, const row_list& rows, const expected_batch& e) {
  const batch_layout& layout = v.layout;
  REQUIRE(v.rows == layout.micro_batch);
  REQUIRE(v.row_length == e.row_length);
  REQUIRE(v.flat_length() == std::size_t{v.rows} * v.row_length);
  REQUIRE(e.input_ids.size() == v.flat_length());
  check_array("input_ids", v.input_ids, e.input_ids, v.row_length);
  check_array("labels", v.labels, e.labels, v.row_length);
  check_array("position_ids", v.position_ids, e.position_ids, v.row_length);
  check_array("sequence_ids", v.sequence_ids, e.sequence_ids, v.row_length);
  REQUIRE(v.segments + 1 == e.cu_seqlens.size());
  check_array("cu_seqlens", v.cu_seqlens, e.cu_seqlens, std::numeric_limits<std::uint32_t>::max());
  CHECK(v.max_seqlen == e.max_seqlen);
  CHECK(v.padding_rows == e.padding_rows);
  CHECK(v.real_tokens == e.real_tokens);
  CHECK(v.loss_tokens == e.loss_tokens);

  // Nothing past the used part.
  const auto untouched = [](auto values, std::size_t from) {
    return std::all_of(values.begin() + static_cast<std::ptrdiff_t>(from), values.end(),
                       [](auto x) { return static_cast<std::int64_t>(x) == sentinel; });
  };
  CHECK(untouched(v.input_ids, v.flat_length()));
  CHECK(untouched(v.labels, v.flat_length()));
  CHECK(untouched(v.position_ids, v.flat_length()));
  CHECK(untouched(v.sequence_ids, v.flat_length()));
  CHECK(untouched(v.cu_seqlens, std::size_t{v.segments} + 1));

  // cu_seqlens by its definition: strictly increasing from 0 to B x row_length, segments
  // = pieces and paddings in order, max_seqlen the longest, row ends on segment ends.
  const auto cu = v.used_cu_seqlens();
  REQUIRE(cu.size() == std::size_t{v.segments} + 1);
  CHECK(cu.front() == 0);
  CHECK(std::uint64_t(cu.back()) == std::uint64_t{v.rows} * v.row_length);
  std::uint32_t longest = 0;
  for (std::size_t s = 1; s < cu.size(); ++s) {
    REQUIRE_MESSAGE(cu[s] > cu[s - 1], "cu_seqlens not strictly increasing at " << s);
    longest = std::max(longest, std::uint32_t(cu[s] - cu[s - 1]));
  }
  CHECK(v.max_seqlen == longest);
  std::size_t s = 1;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::uint32_t used = 0;
    for (const piece& p : rows[r]) {
      REQUIRE(s < cu.size());
      CHECK(std::uint32_t(cu[s] - cu[s - 1]) == p.end - p.begin);
      CHECK(v.position_ids[std::size_t(cu[s - 1])] == 0);
      used += p.end - p.begin;
      ++s;
    }
    if (used < v.row_length) {
      REQUIRE(s < cu.size());
      CHECK(std::uint32_t(cu[s] - cu[s - 1]) == v.row_length - used);
      ++s;
    }
    CHECK(std::uint64_t(cu[s - 1]) == (r + 1) * std::uint64_t{v.row_length});
  }
  CHECK(s == cu.size());
}

std::vector<std::uint32_t> alpaca_lengths() {
  return read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
}

const std::vector<std::uint32_t>& alpaca_prompts() {
  static const std::vector<std::uint32_t> prompts =
      test::numbers_by_iostream<std::uint32_t>(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  return prompts;
}

enum class masking { none, prompts, train_on_inputs, tokens };

/// Whether the per-token mask of masking::tokens marks token j of a sample as carrying no loss:
/// its prompt, and every fifth token past it (a pattern prompt lengths cannot express).
bool token_mask_drops(const std::vector<std::uint32_t>& prompts, std::uint32_t sample, std::uint32_t j) {
  return j < prompts[sample] || (sample + j) % 5 == 0;
}

/// That per-token mask of the Alpaca samples, written once with the indexed dataset writer.
const loss_mask& alpaca_token_mask(const indexed_dataset& dataset, const std::vector<std::uint32_t>& prompts) {
  static const loss_mask mask = [&] {
    const auto prefix = test::fresh_temp_dir("collate_token_mask") / "mask";
    test::write_token_mask(prefix, dataset.lengths(), [&](std::size_t i, std::size_t j) {
      return !token_mask_drops(prompts, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
    });
    return loss_mask::open_token_mask(prefix);
  }();
  return mask;
}

struct real_run {
  std::uint64_t batches = 0;
  std::uint64_t real_tokens = 0;
  std::uint64_t padding_rows = 0;
  std::uint64_t mid_sample_pieces = 0;
  std::uint64_t rows_with_padding_segment = 0;
  std::uint64_t full_rows = 0;
};

/// Collates every (step, rank) micro-batch of a real Alpaca epoch and checks each.
template <class T>
real_run collate_real_epoch(const indexed_dataset& dataset, const pack_options& packing,
                            const schedule_options& schedule, std::uint32_t pad_to_multiple, masking mode) {
  const epoch_plan plan = plan_epoch(alpaca_lengths(), packing, schedule);
  const batch_layout layout{schedule.micro_batch, packing.capacity, pad_to_multiple, packing.max_per_row};
  batch_buffers<T> buffers(layout);
  collate_options options;
  options.train_on_inputs = mode == masking::train_on_inputs;
  const auto& prompts = alpaca_prompts();
  REQUIRE(prompts.size() == dataset.size());
  loss_mask mask;
  if (mode == masking::tokens)
    mask = alpaca_token_mask(dataset, prompts);
  else if (mode != masking::none)
    mask = loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  if (mode != masking::none) mask.check_matches(dataset);
  const auto token_of = [&](std::uint32_t sample, std::uint32_t j) -> std::int64_t {
    return dataset.tokens<std::uint16_t>(sample)[j];
  };
  const auto no_loss = [&](std::uint32_t sample, std::uint32_t j) {
    return mode == masking::tokens ? token_mask_drops(prompts, sample, j) : j < prompts[sample];
  };

  real_run run;
  for (std::uint64_t step = 0; step < plan.schedule.steps(); ++step) {
    for (std::uint32_t rank = 0; rank < schedule.world_size; ++rank) {
      row_list rows;
      for (std::uint32_t slot = 0; slot < schedule.micro_batch; ++slot) {
        const auto row = plan.pieces(step, rank, slot);
        rows.emplace_back(row.begin(), row.end());
      }
      batch_view<T> view = buffers.view();
      fill_with_sentinel(view);
      // The rows as the plan hands them (spans into the packing), not the copies.
      std::vector<std::span<const piece>> plan_rows;
      for (std::uint32_t slot = 0; slot < schedule.micro_batch; ++slot)
        plan_rows.push_back(plan.pieces(step, rank, slot));
      collate(dataset, plan_rows, mask, options, view);
      INFO("step " << step << ", rank " << rank);
      check_batch(view, rows,
                  reference_batch(rows, layout, options, mode == masking::prompts || mode == masking::tokens, token_of,
                                  no_loss));
      ++run.batches;
      run.real_tokens += view.real_tokens;
      run.padding_rows += view.padding_rows;
      for (const auto& row : rows) {
        std::uint32_t used = 0;
        for (const piece& p : row) {
          run.mid_sample_pieces += p.begin > 0 ? 1 : 0;
          used += p.end - p.begin;
        }
        (used < view.row_length ? run.rows_with_padding_segment : run.full_rows) += 1;
      }
    }
  }
  CHECK(run.real_tokens == plan.packed.report.packed_tokens);
  return run;
}

}  // namespace

TEST_CASE("batch_layout: sizes, row lengths and validation") {
  const batch_layout fixed{16, 4096, 0, 0};
  CHECK(fixed.tokens() == 65536);
  CHECK(fixed.pieces_per_row() == 4096);
  CHECK(fixed.cu_seqlens_size() == 16 * 4097 + 1);
  CHECK(fixed.bytes<std::int32_t>() == 4 * 65536 * 4 + (16 * 4097 + 1) * 4);
  CHECK(fixed.bytes<std::int64_t>() == 4 * 65536 * 8 + (16 * 4097 + 1) * 4);
  CHECK(fixed.row_length(0) == 4096);
  CHECK(fixed.row_length(100) == 4096);

  const batch_layout capped{4, 100, 0, 8};
  CHECK(capped.pieces_per_row() == 8);
  CHECK(capped.cu_seqlens_size() == 4 * 9 + 1);
  CHECK(batch_layout{4, 5, 0, 8}.pieces_per_row() == 5);  // a piece has at least one token

  const batch_layout padded{2, 100, 64, 0};
  CHECK(padded.row_length(0) == 64);  // all padding: one multiple
  CHECK(padded.row_length(1) == 64);
  CHECK(padded.row_length(64) == 64);
  CHECK(padded.row_length(65) == 100);  // 128, at most the capacity
  CHECK(padded.row_length(100) == 100);
  CHECK(batch_layout{2, 4096, 64, 0}.row_length(65) == 128);
  CHECK(batch_layout{2, 10, 4096, 0}.row_length(3) == 10);

  CHECK_NOTHROW(validate(fixed));
  CHECK(test::contains(test::message_of<option_error>([] { validate(batch_layout{0, 4096, 0, 0}); }), "micro_batch"));
  CHECK(test::contains(test::message_of<option_error>([] { validate(batch_layout{1, 0, 0, 0}); }), "capacity"));
  CHECK(test::contains(test::message_of<option_error>([] { validate(batch_layout{65536, 32768, 0, 0}); }),
                       "2^31 - 1"));
  CHECK_NOTHROW(validate(batch_layout{65535, 32768, 0, 0}));  // 2^31 - 32768
  CHECK_THROWS_AS(batch_buffers<std::int32_t>(batch_layout{0, 1, 0, 0}), option_error);
}

TEST_CASE_TEMPLATE("collate: every batch of a real Alpaca epoch, fixed shapes and pad_to_multiple", T,
                   std::int32_t, std::int64_t) {
  const indexed_dataset dataset(test::alpaca_prefix());
  pack_options packing;
  packing.capacity = 2048;
  schedule_options schedule;
  schedule.world_size = 2;
  schedule.micro_batch = 4;  // 2 x 4 does not divide the rows: the last step has padding rows
  for (const std::uint32_t pad : {0U, 64U}) {
    for (const masking mode : {masking::none, masking::prompts, masking::train_on_inputs, masking::tokens}) {
      CAPTURE(pad);
      CAPTURE(static_cast<int>(mode));
      const real_run run = collate_real_epoch<T>(dataset, packing, schedule, pad, mode);
      CHECK(run.batches > 30);
      CHECK(run.padding_rows > 0);
      CHECK(run.rows_with_padding_segment > 0);
    }
  }
}

TEST_CASE_TEMPLATE("collate: split samples start mid-sample and read the right tokens", T, std::int32_t,
                   std::int64_t) {
  const indexed_dataset dataset(test::alpaca_prefix());
  pack_options packing;
  packing.capacity = 256;  // 221 Alpaca samples are longer
  packing.overlong = overlong_policy::split;
  packing.max_per_row = 6;
  schedule_options schedule;
  schedule.micro_batch = 16;
  for (const std::uint32_t pad : {0U, 64U}) {
    for (const masking mode : {masking::prompts, masking::tokens}) {  // a piece's mask from its begin on
      CAPTURE(pad);
      CAPTURE(static_cast<int>(mode));
      const real_run run = collate_real_epoch<T>(dataset, packing, schedule, pad, mode);
      CHECK(run.mid_sample_pieces > 100);
      CHECK(run.full_rows > 100);  // split pieces of capacity tokens fill rows: no padding segment
    }
  }
}

TEST_CASE_TEMPLATE("collate: hand-written batches", T, std::int32_t, std::int64_t) {
  const in_memory_dataset<std::int32_t> dataset{{11, 12, 13}, {21, 22}, {31, 32, 33, 34, 35}, {41}};
  const loss_mask prompts = loss_mask::from_prompt_lengths({2, 1, 3, 0});
  const auto token_of = [&](std::uint32_t sample, std::uint32_t j) -> std::int64_t {
    return dataset.tokens(sample)[j];
  };
  const std::vector<std::uint32_t> prompt_lengths{2, 1, 3, 0};
  const auto no_loss = [&](std::uint32_t sample, std::uint32_t j) { return j < prompt_lengths[sample]; };
  constexpr std::int64_t X = -100;

  SUBCASE("a full row (no padding segment) and a row with padding") {
    batch_buffers<T> buffers(batch_layout{2, 8, 0, 0});
    auto v = buffers.view();
    fill_with_sentinel(v);
    const row_list rows{{{0, 0, 3}, {2, 0, 5}}, {{1, 0, 2}}};
    collate(dataset, spans_of(rows), collate_options{}, v);
    const expected_batch e{
        8,
        {11, 12, 13, 31, 32, 33, 34, 35, 21, 22, 0, 0, 0, 0, 0, 0},
        {X, 12, 13, X, 32, 33, 34, 35, X, 22, X, X, X, X, X, X},
        {0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 4, 5},
        {1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0},
        {0, 3, 8, 10, 16},
        6, 0, 10, 7};
    check_batch(v, rows, e);
    CHECK(e.labels == reference_batch(rows, v.layout, collate_options{}, false, token_of, no_loss).labels);

    // The loss mask: prompt tokens ignored unless train_on_inputs.
    fill_with_sentinel(v);
    collate(dataset, spans_of(rows), prompts, collate_options{}, v);
    expected_batch masked = e;
    masked.labels = {X, X, 13, X, X, X, 34, 35, X, 22, X, X, X, X, X, X};
    masked.loss_tokens = 4;
    check_batch(v, rows, masked);
    collate_options train_on_inputs;
    train_on_inputs.train_on_inputs = true;
    fill_with_sentinel(v);
    collate(dataset, spans_of(rows), prompts, train_on_inputs, v);
    check_batch(v, rows, e);
  }

  SUBCASE("pieces that start mid-sample are masked by their place in the sample") {
    batch_buffers<T> buffers(batch_layout{1, 8, 0, 0});
    auto v = buffers.view();
    fill_with_sentinel(v);
    const row_list rows{{{2, 1, 5}, {0, 1, 3}}};
    collate(dataset, spans_of(rows), prompts, collate_options{}, v);
    const expected_batch e{
        8,
        {32, 33, 34, 35, 12, 13, 0, 0},
        {X, X, 34, 35, X, 13, X, X},
        {0, 1, 2, 3, 0, 1, 0, 1},
        {1, 1, 1, 1, 2, 2, 0, 0},
        {0, 4, 6, 8},
        4, 0, 6, 3};
    check_batch(v, rows, e);
  }

  SUBCASE("a row of one token, a padding row, options") {
    batch_buffers<T> buffers(batch_layout{3, 6, 0, 0});
    auto v = buffers.view();
    fill_with_sentinel(v);
    const row_list rows{{{3, 0, 1}}, {}, {{1, 1, 2}}};
    collate_options o;
    o.ignore_index = -1;
    o.pad_token_id = 7;
    collate(dataset, spans_of(rows), o, v);
    const expected_batch e{
        6,
        {41, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 22, 7, 7, 7, 7, 7},
        {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
        {0, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 0, 0, 1, 2, 3, 4},
        {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {0, 1, 6, 12, 13, 18},
        6, 1, 2, 0};
    check_batch(v, rows, e);
  }

  SUBCASE("all padding, fixed and pad_to_multiple") {
    const row_list rows{{}, {}};
    batch_buffers<T> fixed(batch_layout{2, 8, 0, 0});
    auto v = fixed.view();
    fill_with_sentinel(v);
    collate(dataset, spans_of(rows), prompts, collate_options{}, v);
    const expected_batch e{
        8,
        std::vector<std::int64_t>(16, 0),
        std::vector<std::int64_t>(16, X),
        {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7},
        std::vector<std::int64_t>(16, 0),
        {0, 8, 16},
        8, 2, 0, 0};
    check_batch(v, rows, e);

    batch_buffers<T> padded(batch_layout{2, 8, 3, 0});
    auto w = padded.view();
    fill_with_sentinel(w);
    collate(dataset, spans_of(rows), collate_options{}, w);
    check_batch(w, rows, expected_batch{3, {0, 0, 0, 0, 0, 0}, {X, X, X, X, X, X}, {0, 1, 2, 0, 1, 2},
                                        {0, 0, 0, 0, 0, 0}, {0, 3, 6}, 3, 2, 0, 0});
  }

  SUBCASE("pad_to_multiple rounds the longest row up, at most the capacity") {
    batch_buffers<T> buffers(batch_layout{2, 7, 4, 0});
    auto v = buffers.view();
    fill_with_sentinel(v);
    const row_list rows{{{2, 0, 5}}, {{1, 0, 2}}};
    collate(dataset, spans_of(rows), collate_options{}, v);
    CHECK(v.row_length == 7);  // 8 rounded, capped at 7
    check_batch(v, rows, reference_batch(rows, v.layout, collate_options{}, false, token_of, no_loss));

    const row_list shorter{{{0, 0, 3}}, {{1, 0, 2}}};
    fill_with_sentinel(v);
    collate(dataset, spans_of(shorter), prompts, collate_options{}, v);
    CHECK(v.row_length == 4);
    check_batch(v, shorter, reference_batch(shorter, v.layout, collate_options{}, true, token_of, no_loss));

    const row_list exact{{{0, 0, 3}, {3, 0, 1}}, {}};  // 4 tokens: a multiple, no padding segment
    fill_with_sentinel(v);
    collate(dataset, spans_of(exact), collate_options{}, v);
    CHECK(v.row_length == 4);
    CHECK(v.segments == 3);
    check_batch(v, exact, reference_batch(exact, v.layout, collate_options{}, false, token_of, no_loss));
  }

  SUBCASE("a view over one block of bytes gives the same batch") {
    const batch_layout layout{2, 8, 0, 3};
    const row_list rows{{{0, 0, 3}, {2, 0, 5}}, {{1, 0, 2}}};
    batch_buffers<T> buffers(layout);
    auto v = buffers.view();
    fill_with_sentinel(v);
    collate(dataset, spans_of(rows), prompts, collate_options{}, v);

    std::vector<std::int64_t> storage(layout.bytes<T>() / 8 + 2);
    const std::span<std::byte> block(reinterpret_cast<std::byte*>(storage.data()), storage.size() * 8);
    auto w = batch_view<T>::over_bytes(layout, block);
    CHECK(reinterpret_cast<std::byte*>(w.cu_seqlens.data() + w.cu_seqlens.size()) ==
          block.data() + layout.bytes<T>());
    fill_with_sentinel(w);
    collate(dataset, spans_of(rows), prompts, collate_options{}, w);
    check_batch(w, rows, reference_batch(rows, layout, collate_options{}, true, token_of, no_loss));
    CHECK(std::equal(v.used_labels().begin(), v.used_labels().end(), w.used_labels().begin()));

    CHECK(test::contains(test::message_of<option_error>([&] {
                           (void)batch_view<T>::over_bytes(layout, block.first(layout.bytes<T>() - 1));
                         }),
                         "too small"));
    CHECK(test::contains(
        test::message_of<option_error>([&] { (void)batch_view<T>::over_bytes(layout, block.subspan(2)); }),
        "aligned"));
    if constexpr (sizeof(T) == 4)
      CHECK_NOTHROW((void)batch_view<T>::over_bytes(layout, block.subspan(4)));
  }
}

TEST_CASE_TEMPLATE("collate: errors name what is wrong, and leave no results", T, std::int32_t, std::int64_t) {
  const in_memory_dataset<std::int32_t> dataset{{11, 12, 13}, {21, 22}, {31, 32, 33, 34, 35}, {41}};
  batch_buffers<T> buffers(batch_layout{2, 6, 0, 2});
  const auto message = [&](const row_list& rows, const loss_mask& mask = {}, const collate_options& o = {}) {
    auto v = buffers.view();
    v.rows = 99;
    v.real_tokens = 99;
    const std::string m = test::message_of<option_error>([&] { collate(dataset, spans_of(rows), mask, o, v); });
    CHECK(v.rows == 0);
    CHECK(v.real_tokens == 0);
    return m;
  };

  // The same rows collate when nothing is wrong.
  {
    auto v = buffers.view();
    CHECK_NOTHROW(collate(dataset, spans_of(row_list{{{0, 0, 3}, {1, 0, 2}}, {}}), collate_options{}, v));
    CHECK(v.rows == 2);
  }

  const std::string wrong_count = message(row_list{{{0, 0, 3}}});
  CHECK(test::contains(wrong_count, "1 rows given"));
  CHECK(test::contains(wrong_count, "micro_batch = 2"));
  CHECK(test::contains(message(row_list{{}, {}, {}}), "3 rows given"));

  const std::string over = message(row_list{{}, {{2, 0, 5}, {1, 0, 2}}});
  CHECK(test::contains(over, "row 1 holds 7 tokens, more than the capacity of 6"));
  CHECK(test::contains(message(row_list{{{0, 0, 1}, {1, 0, 1}, {3, 0, 1}}, {}}),
                       "row 0 holds 3 pieces, more than max_pieces_per_row = 2"));
  CHECK(test::contains(message(row_list{{}, {{2, 3, 6}}}), "row 1, piece 0 (sample 2, tokens [3, 6)): the piece ends past its sample, which has 5 tokens"));
  CHECK(test::contains(message(row_list{{{1, 0, 1}, {9, 0, 1}}, {}}),
                       "row 0, piece 1 (sample 9, tokens [0, 1)): the sample is out of range"));
  CHECK(test::contains(message(row_list{{{1, 1, 1}}, {}}), "row 0, piece 0 (sample 1, tokens [1, 1)): the piece is empty"));
  CHECK(test::contains(message(row_list{{{1, 2, 1}}, {}}), "(sample 1, tokens [2, 1)): the piece ends before it begins"));

  collate_options big;
  big.ignore_index = std::int64_t{1} << 40;
  if constexpr (sizeof(T) == 4) {
    CHECK(test::contains(message(row_list{{}, {}}, loss_mask{}, big), "ignore_index"));
    big.ignore_index = -100;
    big.pad_token_id = -(std::int64_t{1} << 40);
    CHECK(test::contains(message(row_list{{}, {}}, loss_mask{}, big), "pad_token_id"));
  } else {
    auto v = buffers.view();
    CHECK_NOTHROW(collate(dataset, spans_of(row_list{{}, {}}), big, v));
  }

  // A mask that does not describe the sample: the mask's own error.
  CHECK(test::contains(message(row_list{{{3, 0, 1}}, {}}, loss_mask::from_prompt_lengths({1, 1}, "short mask")),
                       "short mask"));

  // Buffers smaller than the layout, one array at a time.
  const row_list fine{{{0, 0, 3}}, {}};
  const auto too_small = [&](auto shrink) {
    auto v = buffers.view();
    shrink(v);
    return test::message_of<option_error>([&] { collate(dataset, spans_of(fine), collate_options{}, v); });
  };
  CHECK(test::contains(too_small([](auto& v) { v.input_ids = v.input_ids.first(11); }),
                       "input_ids has 11 elements, the batch layout needs 12"));
  CHECK(test::contains(too_small([](auto& v) { v.labels = v.labels.first(11); }), "labels has 11"));
  CHECK(test::contains(too_small([](auto& v) { v.position_ids = v.position_ids.first(0); }), "position_ids has 0"));
  CHECK(test::contains(too_small([](auto& v) { v.sequence_ids = v.sequence_ids.first(11); }), "sequence_ids has 11"));
  CHECK(test::contains(too_small([](auto& v) { v.cu_seqlens = v.cu_seqlens.first(6); }),
                       "cu_seqlens has 6 elements, the batch layout needs 7"));
  CHECK(test::contains(too_small([](auto& v) { v.layout.capacity = 7; }), "input_ids has 12 elements, the batch layout needs 14"));
  CHECK(test::contains(too_small([](auto& v) { v.layout.micro_batch = 0; }), "micro_batch"));
}

TEST_CASE("collate: a token the batch type cannot hold is the dataset's error") {
  const in_memory_dataset<std::int64_t> dataset{{1, std::int64_t{1} << 40, 3}};
  batch_buffers<std::int32_t> narrow(batch_layout{1, 4, 0, 0});
  auto v = narrow.view();
  CHECK(test::contains(test::message_of<sample_error>([&] {
                         collate(dataset, spans_of(row_list{{{0, 0, 3}}}), collate_options{}, v);
                       }),
                       "sample 0, token 1"));
  CHECK(v.rows == 0);
  batch_buffers<std::int64_t> wide(batch_layout{1, 4, 0, 0});
  auto w = wide.view();
  collate(dataset, spans_of(row_list{{{0, 0, 3}}}), collate_options{}, w);
  CHECK(w.input_ids[1] == std::int64_t{1} << 40);
  CHECK(w.labels[1] == std::int64_t{1} << 40);
}
