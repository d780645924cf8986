#pragma once
// Collation: one micro-batch of packed rows (lists of pieces of samples) written into the
// caller's buffers as the arrays a Hugging Face / FlashAttention model takes. Nothing is
// allocated here: the buffers come from the caller (batch_buffers, or pinned memory).
//
// Conventions, for a batch of B rows of row_length tokens (see batch_layout for row_length;
// T[B, row_length] arrays are row-major in the first B x row_length elements of each span):
//
//  - input_ids:    each row's pieces' tokens back to back, in the row's order, then padding
//                  (collate_options::pad_token_id, 0 by default) up to row_length.
//  - labels:       UNSHIFTED, as Hugging Face causal-LM models expect (the model shifts them:
//                  labels[t] is predicted from position t - 1). labels[t] = input_ids[t],
//                  except ignore_index (-100 by default) at
//                    * the first token of every piece: with the model's shift it would be
//                      predicted from the last token of the previous piece, another sample;
//                    * every padding token;
//                    * tokens that carry no loss by the loss_mask (prompt tokens), unless
//                      train_on_inputs is set or the mask is empty.
//  - position_ids: 0, 1, 2, ... restarting at every piece (a piece that starts mid-sample,
//                  when the packer split a long sample, also starts at 0); a row's padding
//                  counts 0, 1, 2, ... as a segment of its own.
//  - sequence_ids: 1, 2, 3, ... for the pieces of a row, in order; 0 for padding.
//  - cu_seqlens:   int32, FlashAttention's varlen convention over the flattened
//                  [B x row_length] batch: 0, then the cumulative end of every segment, where
//                  each piece is a segment and each row's trailing padding (if any) is one
//                  more; a padding row is one padding segment of row_length tokens. So
//                  cu_seqlens[segments] == B x row_length, every value is strictly larger
//                  than the previous one, and row boundaries are segment boundaries.
//  - max_seqlen:   the longest segment (padding segments included).
//  - real_tokens:  tokens of pieces; loss_tokens: tokens whose label != ignore_index;
//                  padding_rows: rows with no pieces.
//
// Cost: O(pieces) checks before anything is written, then one sequential pass per row over
// each array: per piece, input_ids are read from the dataset straight into the output, and
// labels (a copy of them, then masked), position_ids and sequence_ids are written in one loop
// while the piece is in L1; then the row's padding. No allocation, no per-token branch.
// Memory-bound: a memcpy-class operation on the output bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "multipack/batch/layout.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/data/loss_mask.hpp"

namespace multipack {

struct collate_options {
  /// The label of tokens that carry no loss (PyTorch CrossEntropyLoss's ignore_index).
  std::int64_t ignore_index = -100;
  /// The input id of padding tokens (their labels are ignore_index whatever it is).
  std::int64_t pad_token_id = 0;
  /// true: prompt tokens carry loss too (the loss mask is not applied); false (the default):
  /// tokens the loss mask marks get ignore_index.
  bool train_on_inputs = false;
};

namespace detail {

template <batch_token T>
T collate_option_value(std::int64_t value, const char* name) {
  if (!std::in_range<T>(value))
    throw option_error(std::string("collate_options: ") + name + " " + std::to_string(value) +
                       " does not fit the batch's " + (sizeof(T) == 4 ? "int32" : "int64") + " tokens");
  return static_cast<T>(value);
}

inline void check_span_size(std::size_t have, std::size_t need, const char* array) {
  if (have < need)
    throw option_error(std::string("collate: ") + array + " has " + std::to_string(have) +
                       " elements, the batch layout needs " + std::to_string(need));
}

template <batch_token T>
void check_batch_spans(const batch_view<T>& out) {
  const std::size_t tokens = out.layout.tokens();
  check_span_size(out.input_ids.size(), tokens, "input_ids");
  check_span_size(out.labels.size(), tokens, "labels");
  check_span_size(out.position_ids.size(), tokens, "position_ids");
  check_span_size(out.sequence_ids.size(), tokens, "sequence_ids");
  check_span_size(out.cu_seqlens.size(), out.layout.cu_seqlens_size(), "cu_seqlens");
}

[[noreturn]] inline void throw_row_error(std::size_t r, const std::string& what) {
  throw option_error("collate: row " + std::to_string(r) + what);
}

[[noreturn]] inline void throw_piece_error(std::size_t r, std::size_t k, const piece& p, const std::string& what) {
  throw_row_error(r, ", piece " + std::to_string(k) + " (sample " + std::to_string(p.sample) + ", tokens [" +
                         std::to_string(p.begin) + ", " + std::to_string(p.end) + ")): " + what);
}

/// Tokens of row `r`, after checking every piece against the dataset and the row against the
/// layout. O(pieces of the row); allocates only the message of an error.
template <token_dataset D>
std::uint32_t checked_row_tokens(const D& dataset, std::span<const piece> row, std::size_t r,
                                 const batch_layout& layout) {
  if (layout.max_pieces_per_row != 0 && row.size() > layout.max_pieces_per_row)
    throw_row_error(r, " holds " + std::to_string(row.size()) + " pieces, more than max_pieces_per_row = " +
                           std::to_string(layout.max_pieces_per_row));
  const auto samples = static_cast<std::uint64_t>(dataset.size());
  std::uint64_t tokens = 0;
  for (std::size_t k = 0; k < row.size(); ++k) {
    const piece& p = row[k];
    if (p.sample >= samples)
      throw_piece_error(r, k, p, "the sample is out of range (the dataset has " + std::to_string(samples) + " samples)");
    if (p.begin >= p.end)
      throw_piece_error(r, k, p, p.begin == p.end ? "the piece is empty" : "the piece ends before it begins");
    const auto length = static_cast<std::uint64_t>(dataset.length(p.sample));
    if (p.end > length)
      throw_piece_error(r, k, p, "the piece ends past its sample, which has " + std::to_string(length) + " tokens");
    tokens += p.length();
  }
  if (tokens > layout.capacity)
    throw_row_error(r, " holds " + std::to_string(tokens) + " tokens, more than the capacity of " +
                           std::to_string(layout.capacity));
  return static_cast<std::uint32_t>(tokens);
}

/// The index by which a loss mask describes sample i of `dataset`: its index in the source
/// dataset where it has one (has_source_dataset: a filter of a dataset), followed to the
/// dataset that has none; else i. O(views between).
template <class D>
std::size_t mask_index(const D& dataset, std::size_t i) {
  if constexpr (has_source_dataset<D>)
    return mask_index(*dataset.source(), dataset.source_index(i));  // a subset of a filter of ...: the first
  else
    return i;
}

/// out[k] = k for k < n (n < 2^31: a row). Counts in T, so that int32 positions vectorise four
/// to a 16-byte register rather than through 64-bit lanes.
template <class T>
void write_positions(T* out, std::size_t n) noexcept {
  T position = 0;
  for (std::size_t k = 0; k < n; ++k) out[k] = position++;
}

/// 1 when x differs from `ignore`, else 0, without a branch or a compare on T's unsigned width
/// (y = x ^ ignore is nonzero iff x differs; (y | -y) has its top bit set iff y is nonzero), so
/// that loops over it vectorise with baseline SSE2 for int64 too, which has no 64-bit compare.
template <class T>
std::make_unsigned_t<T> differs(T x, T ignore) noexcept {
  using U = std::make_unsigned_t<T>;
  const U y = static_cast<U>(static_cast<U>(x) ^ static_cast<U>(ignore));
  return static_cast<U>((y | static_cast<U>(U{0} - y)) >> (sizeof(U) * 8 - 1));
}

/// How many of values[0, n) differ from `ignore`; n < 2^31 (a row). Vectorises.
template <class T>
std::uint64_t count_not_equal(const T* values, std::size_t n, T ignore) noexcept {
  std::make_unsigned_t<T> count = 0;
  for (std::size_t k = 0; k < n; ++k) count += differs(values[k], ignore);
  return count;
}

/// For tokens [0, n) of one piece (n < 2^31): labels = ignore before `first_label`, input_ids
/// from it; position_ids = 0, 1, 2, ...; sequence_ids = sequence. Two loops over the output
/// streams (the ignored labels are never copied first), the labels counted as they are
/// written. Returns how many labels differ from ignore. Vectorises.
template <class T>
std::uint64_t write_piece_arrays(const T* input_ids, T* labels, T* position_ids, T* sequence_ids, std::size_t n,
                                 std::size_t first_label, T ignore, T sequence) noexcept {
  T position = 0;
  for (std::size_t k = 0; k < first_label; ++k) {
    labels[k] = ignore;
    position_ids[k] = position++;
    sequence_ids[k] = sequence;
  }
  std::make_unsigned_t<T> count = 0;
  for (std::size_t k = first_label; k < n; ++k) {
    const T token = input_ids[k];
    labels[k] = token;
    count += differs(token, ignore);
    position_ids[k] = position++;
    sequence_ids[k] = sequence;
  }
  return count;
}

}  // namespace detail

/// Throws format_error unless `mask` describes the samples of `dataset`, or of its source
/// dataset where it has one, followed to the first (see has_source_dataset and
/// loss_mask::check_matches). A no-op
/// for an empty mask. O(samples of the dataset the mask describes).
template <token_dataset D>
void check_mask_matches(const loss_mask& mask, const D& dataset) {
  if constexpr (has_source_dataset<D>) {
    if (dataset.source() != nullptr) check_mask_matches(mask, *dataset.source());
  } else {
    mask.check_matches(dataset);
  }
}

/// Writes the micro-batch `rows` (one span of pieces a row, rows.size() == B; an empty span is
/// a padding row) of `dataset` into `out`, by the conventions at the top of this file, and
/// sets out's results (rows, row_length, segments, max_seqlen, padding_rows, real_tokens,
/// loss_tokens). Only the first B x row_length elements of each token array and the first
/// segments + 1 of cu_seqlens are written; nothing is allocated, nothing outside the spans is
/// touched. `mask` (may be empty) is applied to the labels unless options.train_on_inputs;
/// call check_mask_matches(mask, dataset) once beforehand.
///
/// Cost: O(pieces) checks, then one sequential pass per row over each output array:
/// memory-bound, about B x row_length x (4 sizeof(T)) bytes written. No allocation but the
/// messages of errors.
///
/// Throws, before anything is written, option_error naming the row (and piece and sample) for:
/// an invalid out.layout (validate), a span of `out` smaller than the layout needs,
/// rows.size() != B, an ignore_index or pad_token_id that T cannot hold, a row with more
/// pieces than max_pieces_per_row or more tokens than capacity, an empty piece, a piece whose
/// sample is out of range or that ends past its sample. While writing, rethrows what
/// dataset.read_tokens throws (sample_error for a token value T cannot hold, io errors of a
/// user's dataset) and what mask.mask_labels throws (a sample the mask does not describe).
/// On a throw the arrays hold unspecified values and out's results are 0.
///
/// Thread-safe as long as no two calls write the same `out` memory: `dataset` and `mask` are
/// only read through const members (which token_dataset and loss_mask make thread-safe).
template <token_dataset D, batch_token T>
  requires dataset_reads_as<D, T>
void collate(const D& dataset, std::span<const std::span<const piece>> rows, const loss_mask& mask,
             const collate_options& options, batch_view<T>& out) {
  out.rows = out.row_length = out.segments = out.max_seqlen = out.padding_rows = 0;
  out.real_tokens = out.loss_tokens = 0;

  const batch_layout& layout = out.layout;
  validate(layout);
  detail::check_batch_spans(out);
  if (rows.size() != layout.micro_batch)
    throw option_error("collate: " + std::to_string(rows.size()) + " rows given, the batch layout has micro_batch = " +
                       std::to_string(layout.micro_batch));
  const T ignore = detail::collate_option_value<T>(options.ignore_index, "ignore_index");
  const T pad = detail::collate_option_value<T>(options.pad_token_id, "pad_token_id");

  // Check every row before writing anything; find the longest.
  std::uint32_t longest = 0;
  for (std::size_t r = 0; r < rows.size(); ++r)
    longest = std::max(longest, detail::checked_row_tokens(dataset, rows[r], r, layout));
  const std::uint32_t length = layout.row_length(longest);
  const bool apply_mask = !mask.empty() && !options.train_on_inputs;
  // Prompt-length masks: the ignored prefix of each piece is written once, never copied.
  const bool prompt_mask = apply_mask && !mask.is_token_mask();

  std::int32_t* cu = out.cu_seqlens.data();
  std::int32_t offset = 0;
  *cu++ = 0;
  std::uint32_t max_seqlen = 0;
  std::uint32_t padding_rows = 0;
  std::uint64_t real_tokens = 0;
  std::uint64_t loss_tokens = 0;
  // Pieces sit at random places of the dataset: ask for the next row's tokens while this one
  // is written, so that reading them does not wait on memory.
  auto prefetch_row = [&](std::size_t r) {
    if constexpr (prefetching_dataset<D>)
      if (r < rows.size())
        for (const piece& p : rows[r]) dataset.prefetch_tokens(p.sample, p.begin, p.length());
  };
  prefetch_row(0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    prefetch_row(r + 1);
    const std::span<const piece> row = rows[r];
    const std::size_t row_start = r * length;
    T* const input_ids = out.input_ids.data() + row_start;
    T* const labels = out.labels.data() + row_start;
    T* const position_ids = out.position_ids.data() + row_start;
    T* const sequence_ids = out.sequence_ids.data() + row_start;
    std::size_t tokens = 0;  // of the row's pieces, so far

    // Each piece: input_ids straight from the dataset; labels, position_ids and
    // sequence_ids from them in one loop while they are in L1; then the mask on the labels,
    // the piece start, and the loss count of the piece (still in L1).
    T sequence = 0;
    for (const piece& p : row) {
      const std::size_t n = p.length();
      T* const piece_labels = labels + tokens;
      dataset.read_tokens(p.sample, p.begin, std::span<T>(input_ids + tokens, n));
      std::size_t first_label = 1;  // the piece's first token is never a target
      if (prompt_mask) {
        const std::uint32_t prompt = mask.prompt_length(detail::mask_index(dataset, p.sample));
        if (prompt > p.begin) first_label = std::max<std::size_t>(first_label, std::min<std::size_t>(n, prompt - p.begin));
      }
      const std::uint64_t targets = detail::write_piece_arrays(input_ids + tokens, piece_labels, position_ids + tokens,
                                                               sequence_ids + tokens, n, first_label, ignore, ++sequence);
      if (apply_mask && !prompt_mask) {
        mask.mask_labels(detail::mask_index(dataset, p.sample), p.begin, std::span<T>(piece_labels, n), ignore);
        loss_tokens += detail::count_not_equal(piece_labels, n, ignore);
      } else {
        loss_tokens += targets;
      }
      tokens += n;
    }
    // The row's padding: one segment.
    std::fill(input_ids + tokens, input_ids + length, pad);
    std::fill(labels + tokens, labels + length, ignore);
    detail::write_positions(position_ids + tokens, length - tokens);
    std::fill(sequence_ids + tokens, sequence_ids + length, T{0});

    // cu_seqlens: one segment a piece, and the padding.
    for (const piece& p : row) {
      offset += static_cast<std::int32_t>(p.length());
      *cu++ = offset;
      max_seqlen = std::max(max_seqlen, p.length());
    }
    if (tokens < length) {
      const auto padding = static_cast<std::uint32_t>(length - tokens);
      offset += static_cast<std::int32_t>(padding);
      *cu++ = offset;
      max_seqlen = std::max(max_seqlen, padding);
    }
    real_tokens += tokens;
    if (row.empty()) ++padding_rows;
  }

  out.rows = layout.micro_batch;
  out.row_length = length;
  out.segments = static_cast<std::uint32_t>(cu - out.cu_seqlens.data() - 1);
  out.max_seqlen = max_seqlen;
  out.padding_rows = padding_rows;
  out.real_tokens = real_tokens;
  out.loss_tokens = loss_tokens;
}

/// collate with no loss mask: every token but piece starts and padding carries loss. Same
/// cost, failure modes and thread safety.
template <token_dataset D, batch_token T>
  requires dataset_reads_as<D, T>
void collate(const D& dataset, std::span<const std::span<const piece>> rows, const collate_options& options,
             batch_view<T>& out) {
  static const loss_mask no_mask;
  collate(dataset, rows, no_mask, options, out);
}

}  // namespace multipack
