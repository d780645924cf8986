// Sample packing's whole claim, checked in a real framework: a packed micro-batch from the
// multipack pipeline, fed to a causal transformer in libtorch (block-diagonal attention from
// sequence_ids, positions from position_ids, the Hugging Face shifted loss), gives the same
// summed token loss and the same gradient of every parameter as its pieces run alone,
// unpacked, each its own sequence, rebuilt from the dataset and the prompt lengths without
// the collator. Real Alpaca samples; the batch holds a split sample, prompt-masked samples,
// a row of several pieces and a padding row (each asserted). The negative control: the same
// model with a plain causal mask over whole rows gives another loss.

#include "support/torch_doctest.hpp"  // first: libtorch, then doctest

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "../../examples/torch_model.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/pack/pack.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/torch/tensors.hpp"
#include "support/alpaca.hpp"
#include "support/paths.hpp"

using multipack::packing;
using multipack::piece;
namespace test = multipack::test;

namespace {

constexpr std::uint32_t capacity = 256;

double relative_difference(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

/// The rows of the micro-batch: a row of several pieces that holds the tail of a split
/// sample, a row of several pieces, and a padding row.
std::vector<std::span<const piece>> chosen_rows(const packing& packed, const std::vector<std::uint32_t>& lengths) {
  std::vector<std::span<const piece>> rows;
  for (std::size_t r = 0; r < packed.rows.size() && rows.size() < 2; ++r) {
    const std::span<const piece> row = packed.rows[r];
    const bool holds_split_tail = std::ranges::any_of(row, [](const piece& p) { return p.begin > 0; });
    const bool whole_samples = std::ranges::all_of(row, [&](const piece& p) { return p.begin == 0 && p.end == lengths[p.sample]; });
    if (row.size() >= 2 && ((rows.empty() && holds_split_tail) || (!rows.empty() && whole_samples))) rows.push_back(row);
  }
  rows.emplace_back();  // padding
  return rows;
}

}  // namespace

TEST_CASE("a packed micro-batch trains exactly as its pieces alone, and a leaking mask does not") {
  ::torch::manual_seed(0);
  at::set_num_threads(1);  // one summation order for the reductions, run to run
  auto dataset = std::make_shared<const multipack::indexed_dataset>(test::alpaca_prefix());
  const std::vector<std::uint32_t> lengths = multipack::read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
  const std::vector<std::uint32_t> prompts = multipack::read_length_list(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  REQUIRE(lengths.size() == dataset->size());
  const packing packed = multipack::pack(lengths, {.capacity = capacity, .overlong = multipack::overlong_policy::split});
  REQUIRE(packed.report.split_samples > 0);
  const std::vector<std::span<const piece>> rows = chosen_rows(packed, lengths);
  REQUIRE(rows.size() == 3);

  // What the batch must cover, so that the test cannot pass on an easy batch.
  std::size_t split_pieces = 0, masked_pieces = 0;
  for (const auto& row : rows)
    for (const piece& p : row) {
      split_pieces += (p.begin > 0 || p.end < lengths[p.sample]) ? 1 : 0;
      masked_pieces += prompts[p.sample] > p.begin + 1 ? 1 : 0;  // a prompt token past the piece's first
    }
  CHECK(split_pieces >= 1);
  CHECK(masked_pieces >= 1);
  CHECK(rows[0].size() >= 2);
  CHECK(rows[2].empty());

  // The batch, through the library: the loader's steps form, int64 tokens, prompts masked.
  const std::vector<std::vector<std::span<const piece>>> steps{rows};
  multipack::batch_options options;
  options.mask = test::alpaca_prompts();
  options.capacity = capacity;
  multipack::batch_loader<multipack::indexed_dataset, std::int64_t> loader(dataset, steps, options, {.threads = 1, .depth = 2});
  auto lease = loader.next();
  REQUIRE(lease);
  const multipack::torch::batch_tensors batch = multipack::torch::to_tensors(std::move(*lease));
  REQUIRE(batch.input_ids.sizes() == at::IntArrayRef({3, capacity}));

  example::causal_lm model(example::causal_lm_options{.width = 32, .layers = 2, .heads = 2, .max_positions = capacity});
  const auto parameters = model->named_parameters();
  {
    // Weights eight times their initial scale: at libtorch's initialisation attention is
    // nearly uniform and the logits nearly flat, so that whatever attends to whatever the
    // loss barely moves; sharper weights make a leak between samples show.
    at::NoGradGuard no_grad;
    for (const auto& p : parameters)
      if (p.value().dim() == 2) p.value().mul_(8.0);
  }

  // Packed: one forward and backward over the micro-batch.
  const example::token_loss packed_loss = example::shifted_loss(
      model(batch.input_ids, batch.position_ids, example::block_causal_mask(batch.sequence_ids)), batch.labels);
  packed_loss.sum.backward();
  CHECK(packed_loss.tokens == batch.loss_tokens);
  std::vector<at::Tensor> packed_gradients;
  for (const auto& p : parameters) packed_gradients.push_back(p.value().grad().clone());
  model->zero_grad();

  // Unpacked: every piece its own sequence, from the dataset's tokens and the prompt lengths.
  double unpacked_sum = 0;
  std::int64_t unpacked_tokens = 0;
  std::size_t sequences = 0;
  for (const auto& row : rows)
    for (const piece& p : row) {
      const auto n = static_cast<std::int64_t>(p.length());
      std::vector<std::int64_t> tokens(static_cast<std::size_t>(n)), labels(static_cast<std::size_t>(n));
      dataset->read_tokens(p.sample, p.begin, std::span<std::int64_t>(tokens));
      for (std::int64_t j = 0; j < n; ++j)
        labels[static_cast<std::size_t>(j)] =
            (j == 0 || p.begin + static_cast<std::uint64_t>(j) < prompts[p.sample]) ? -100 : tokens[static_cast<std::size_t>(j)];
      const auto input = at::tensor(tokens, at::kLong).view({1, n});
      const auto target = at::tensor(labels, at::kLong).view({1, n});
      const auto positions = at::arange(n, at::kLong).view({1, n});
      const example::token_loss alone = example::shifted_loss(model(input, positions, example::row_causal_mask(n)), target);
      alone.sum.backward();
      unpacked_sum += alone.sum.item<double>();
      unpacked_tokens += alone.tokens;
      ++sequences;
    }
  CHECK(unpacked_tokens == packed_loss.tokens);

  // The tolerances: fp32 sums in another order.
  constexpr double loss_tolerance = 1e-5, gradient_tolerance = 1e-4;
  const double loss_difference = relative_difference(packed_loss.sum.item<double>(), unpacked_sum);
  CHECK(loss_difference <= loss_tolerance);
  std::vector<at::Tensor> unpacked_gradients;
  for (const auto& p : parameters) unpacked_gradients.push_back(p.value().grad().clone());
  const auto worst_gradient_difference = [&](const std::vector<at::Tensor>& gradients, double tolerance) {
    double worst = 0;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const double scale = unpacked_gradients[i].abs().max().item<double>();
      const double difference = (gradients[i] - unpacked_gradients[i]).abs().max().item<double>() / std::max(scale, 1e-30);
      if (tolerance > 0) {
        CAPTURE(parameters[i].key());
        CHECK(difference <= tolerance);
      }
      worst = std::max(worst, difference);
    }
    return worst;
  };
  const double worst_gradient = worst_gradient_difference(packed_gradients, gradient_tolerance);

  // The negative control: the same model and batch under a plain causal mask over whole rows,
  // where samples see each other. Its loss and gradients must miss the tolerances by far, or
  // the checks above could not tell a leak from rounding.
  model->zero_grad();
  const example::token_loss leaked =
      example::shifted_loss(model(batch.input_ids, batch.position_ids, example::row_causal_mask(capacity)), batch.labels);
  leaked.sum.backward();
  std::vector<at::Tensor> leaked_gradients;
  for (const auto& p : parameters) leaked_gradients.push_back(p.value().grad().clone());
  const double leak_difference = relative_difference(leaked.sum.item<double>(), unpacked_sum);
  const double leak_gradient = worst_gradient_difference(leaked_gradients, 0);
  CHECK(leak_difference > 10 * loss_tolerance);
  CHECK(leak_gradient > 10 * gradient_tolerance);

  std::printf("training equivalence: %zu pieces (%zu split, %zu prompt-masked), %lld loss tokens; "
              "loss %.6f packed, %.6f unpacked: relative difference %.2e; largest relative gradient difference "
              "%.2e over %zu parameters; a plain causal mask: loss %.6f, relative difference %.2e, largest "
              "relative gradient difference %.2e\n",
              sequences, split_pieces, masked_pieces, static_cast<long long>(packed_loss.tokens),
              packed_loss.sum.item<double>(), unpacked_sum, loss_difference, worst_gradient, parameters.size(),
              leaked.sum.item<double>(), leak_difference, leak_gradient);
}
