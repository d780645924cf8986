#pragma once
// A small causal transformer in libtorch for packed batches: what examples/torch_trainer.cpp
// trains and what the test torch.training_equivalence runs packed and unpacked.
//
// Packing is exact only if the model keeps each piece to itself:
// - attention is confined to each piece by a block-diagonal causal mask built from
//   sequence_ids (a token attends to the earlier tokens of its own piece; a row's padding is a
//   segment of its own, so no softmax row is empty);
// - positions come from position_ids (learned embeddings), restarting at every piece;
// - the loss is the Hugging Face one: logits at t predict labels at t + 1, tokens labelled
//   -100 carry none (the first token of every piece is -100, so nothing is predicted across
//   pieces).
// Debian's libtorch 1.13 has no scaled_dot_product_attention: attention is written out.

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace example {

struct causal_lm_options {
  std::int64_t vocabulary = 32000;  // Llama's
  std::int64_t width = 64;
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t max_positions = 4096;
};

/// [B, 1, L, L], true where token i may attend to token j: j <= i, in the same segment.
inline torch::Tensor block_causal_mask(const torch::Tensor& sequence_ids) {
  const std::int64_t length = sequence_ids.size(1);
  const auto same = sequence_ids.unsqueeze(2) == sequence_ids.unsqueeze(1);
  const auto causal = torch::ones({length, length}, torch::kBool).tril();
  return (same & causal).unsqueeze(1);
}

/// [1, 1, L, L]: a plain causal mask over whole rows, under which packed samples see each
/// other (the negative control of the equivalence test).
inline torch::Tensor row_causal_mask(std::int64_t length) {
  return torch::ones({length, length}, torch::kBool).tril().unsqueeze(0).unsqueeze(0);
}

struct block_impl : torch::nn::Module {
  block_impl(std::int64_t width, std::int64_t head_count)
      : heads(head_count),
        attention_norm(register_module("attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        qkv(register_module("qkv", torch::nn::Linear(width, 3 * width))),
        out(register_module("out", torch::nn::Linear(width, width))),
        mlp_norm(register_module("mlp_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        up(register_module("up", torch::nn::Linear(width, 4 * width))),
        down(register_module("down", torch::nn::Linear(4 * width, width))) {}

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const std::int64_t batch = x.size(0), length = x.size(1), width = x.size(2), head = width / heads;
    auto parts = qkv(attention_norm(x)).view({batch, length, 3, heads, head}).permute({2, 0, 3, 1, 4});
    const auto q = parts[0], k = parts[1], v = parts[2];  // [B, H, L, head]
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head));
    scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
    const auto attended = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({batch, length, width});
    const auto h = x + out(attended);
    return h + down(torch::gelu(up(mlp_norm(h))));
  }

  std::int64_t heads;
  torch::nn::LayerNorm attention_norm;
  torch::nn::Linear qkv, out;
  torch::nn::LayerNorm mlp_norm;
  torch::nn::Linear up, down;
};
TORCH_MODULE_IMPL(block, block_impl);

struct causal_lm_impl : torch::nn::Module {
  explicit causal_lm_impl(const causal_lm_options& o)
      : tokens(register_module("tokens", torch::nn::Embedding(o.vocabulary, o.width))),
        positions(register_module("positions", torch::nn::Embedding(o.max_positions, o.width))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.width})))),
        head(register_module("head", torch::nn::Linear(torch::nn::LinearOptions(o.width, o.vocabulary).bias(false)))) {
    for (std::int64_t i = 0; i < o.layers; ++i) blocks.push_back(register_module("block" + std::to_string(i), block(o.width, o.heads)));
  }

  /// Logits [B, L, vocabulary] of input_ids [B, L] at position_ids [B, L] (both int64, or
  /// int32 converted here), attending where mask ([B or 1, 1, L, L]) allows.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids, const torch::Tensor& mask) {
    auto x = tokens(input_ids.to(torch::kInt64)) + positions(position_ids.to(torch::kInt64));
    for (auto& b : blocks) x = b->forward(x, mask);
    return head(norm(x));
  }

  torch::nn::Embedding tokens, positions;
  std::vector<block> blocks;
  torch::nn::LayerNorm norm;
  torch::nn::Linear head;
};
TORCH_MODULE_IMPL(causal_lm, causal_lm_impl);

/// The summed token loss after the Hugging Face shift (logits at t predict labels at t + 1),
/// ignoring -100, and the number of tokens it sums over.
struct token_loss {
  torch::Tensor sum;
  std::int64_t tokens = 0;
};
inline token_loss shifted_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  const auto predicted = logits.slice(1, 0, -1).reshape({-1, logits.size(2)});
  const auto targets = labels.slice(1, 1).reshape({-1}).to(torch::kInt64);
  return {torch::nn::functional::cross_entropy(
              predicted, targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum)),
          targets.ne(-100).sum().item<std::int64_t>()};
}

}  // namespace example
