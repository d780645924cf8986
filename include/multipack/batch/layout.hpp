#pragma once
// The shape of a micro-batch and the memory that holds one: how many rows, how long a row can
// be, how large every array is, and the buffers collate writes into.
//
// A batch is five arrays (see collate.hpp for what they hold):
//   input_ids, labels, position_ids, sequence_ids   T[B, row_length], row-major
//   cu_seqlens                                      int32[segments + 1]
// where B = micro_batch and row_length <= capacity is chosen per batch (pad_to_multiple).
// Buffers are sized once for the largest batch the layout allows, so the same memory (pinned
// memory, later) serves every batch: each token array has tokens() = B x capacity elements,
// of which a batch uses the first B x row_length; cu_seqlens has cu_seqlens_size() elements,
// of which a batch uses the first segments + 1.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "multipack/core/concepts.hpp"  // batch_token
#include "multipack/core/error.hpp"

namespace multipack {

/// The largest B x capacity a layout may have: cu_seqlens are int32 (FlashAttention's type),
/// and their last value is B x row_length.
inline constexpr std::uint64_t max_batch_tokens = std::numeric_limits<std::int32_t>::max();

struct batch_layout {
  std::uint32_t micro_batch = 1;  ///< B: rows in the batch (padding rows included)
  std::uint32_t capacity = 4096;  ///< C: the most tokens a row holds
  /// 0 (the default): every row is exactly `capacity` tokens, so every batch has the same
  /// shape (no recompilation, no allocator churn on the device). N > 0: the batch's row
  /// length is its longest row rounded up to a multiple of N (a batch of padding rows only:
  /// N), at most `capacity`: less padding, shapes vary in steps of N.
  std::uint32_t pad_to_multiple = 0;
  /// The most pieces one row may hold; 0 = up to `capacity` (one token each). Sizes
  /// cu_seqlens: set it to the packer's max_per_row to keep that array small.
  std::uint32_t max_pieces_per_row = 0;

  /// Elements of each [B, C] token array: B x C. O(1), never throws.
  [[nodiscard]] constexpr std::size_t tokens() const noexcept {
    return static_cast<std::size_t>(std::uint64_t{micro_batch} * capacity);
  }

  /// The most pieces a row can hold: max_pieces_per_row, or capacity when that is 0 or
  /// larger (a piece has at least one token). O(1), never throws.
  [[nodiscard]] constexpr std::uint32_t pieces_per_row() const noexcept {
    return max_pieces_per_row == 0 ? capacity : std::min(max_pieces_per_row, capacity);
  }

  /// Elements of cu_seqlens: B x (pieces_per_row() + 1) + 1 (every piece is a segment, a
  /// row's trailing padding one more, plus the leading 0). O(1), never throws.
  [[nodiscard]] constexpr std::size_t cu_seqlens_size() const noexcept {
    return static_cast<std::size_t>(std::uint64_t{micro_batch} * (std::uint64_t{pieces_per_row()} + 1) + 1);
  }

  /// Bytes of all five arrays together, with token type T: 4 x tokens() x sizeof(T) +
  /// cu_seqlens_size() x 4. Meaningful for a layout that passes validate. O(1), never throws.
  template <class T>
  [[nodiscard]] constexpr std::size_t bytes() const noexcept {
    return 4 * tokens() * sizeof(T) + cu_seqlens_size() * sizeof(std::int32_t);
  }

  /// The row length of a batch whose longest row holds `longest_row` tokens (<= capacity):
  /// capacity when pad_to_multiple is 0, else max(longest_row, 1) rounded up to a multiple of
  /// pad_to_multiple, at most capacity. O(1), never throws.
  [[nodiscard]] constexpr std::uint32_t row_length(std::uint64_t longest_row) const noexcept {
    if (pad_to_multiple == 0) return capacity;
    const std::uint64_t multiple = pad_to_multiple;
    const std::uint64_t rounded = (std::max<std::uint64_t>(longest_row, 1) + multiple - 1) / multiple * multiple;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(rounded, capacity));
  }

  friend constexpr bool operator==(const batch_layout&, const batch_layout&) noexcept = default;
};

/// Throws option_error naming the field when micro_batch or capacity is 0, or B x capacity
/// exceeds max_batch_tokens (2^31 - 1, cu_seqlens being int32). O(1).
inline void validate(const batch_layout& layout) {
  if (layout.micro_batch == 0) throw option_error("batch_layout: micro_batch must be at least 1 row");
  if (layout.capacity == 0) throw option_error("batch_layout: capacity must be at least 1 token");
  const std::uint64_t tokens = std::uint64_t{layout.micro_batch} * layout.capacity;
  if (tokens > max_batch_tokens)
    throw option_error("batch_layout: micro_batch x capacity = " + std::to_string(layout.micro_batch) + " x " +
                       std::to_string(layout.capacity) + " = " + std::to_string(tokens) +
                       " tokens; at most 2^31 - 1 fit FlashAttention's int32 cu_seqlens");
}

/// One micro-batch as collate writes it: five non-owning spans over caller-owned memory (a
/// batch_buffers, or pinned memory carved with batch_view::over_bytes) and what collate found.
/// The spans must be at least as long as `layout` says and must not overlap. A plain value:
/// copying it copies the spans, not the memory.
namespace detail {
/// Copies what collate writes besides the arrays (rows, row_length, segments, max_seqlen,
/// padding_rows, real_tokens, loss_tokens) from one view of a batch to another: a batch_view,
/// or the `cuda/` layer's device_batch_view of a copy of it. O(1), never throws.
template <class To, class From>
void copy_batch_results(To& to, const From& from) noexcept {
  to.rows = from.rows;
  to.row_length = from.row_length;
  to.segments = from.segments;
  to.max_seqlen = from.max_seqlen;
  to.padding_rows = from.padding_rows;
  to.real_tokens = from.real_tokens;
  to.loss_tokens = from.loss_tokens;
}
}  // namespace detail

template <batch_token T = std::int32_t>
struct batch_view {
  using token_type = T;

  batch_layout layout;  ///< the shape the spans were sized for

  // --- arrays: [rows, row_length] row-major in the first rows x row_length elements -------
  std::span<T> input_ids;             ///< >= layout.tokens() elements
  std::span<T> labels;                ///< >= layout.tokens() elements
  std::span<T> position_ids;          ///< >= layout.tokens() elements
  std::span<T> sequence_ids;          ///< >= layout.tokens() elements
  std::span<std::int32_t> cu_seqlens; ///< >= layout.cu_seqlens_size() elements

  // --- results, written by collate (all 0 before the first and after a failed one) --------
  std::uint32_t rows = 0;          ///< B, the rows of the batch (padding rows included)
  std::uint32_t row_length = 0;    ///< tokens a row, padding included (second dimension)
  std::uint32_t segments = 0;      ///< pieces + padding segments: cu_seqlens holds segments + 1 values
  std::uint32_t max_seqlen = 0;    ///< the longest segment (FlashAttention's max_seqlen)
  std::uint32_t padding_rows = 0;  ///< rows with no pieces
  std::uint64_t real_tokens = 0;   ///< tokens of pieces (not padding)
  std::uint64_t loss_tokens = 0;   ///< tokens whose label is not the ignore index

  /// Elements used in each token array: rows x row_length (== cu_seqlens[segments]). O(1).
  [[nodiscard]] std::size_t flat_length() const noexcept { return std::size_t{rows} * row_length; }
  /// Bytes of the used parts of the five arrays: what a copy of this batch has to move.
  [[nodiscard]] std::uint64_t used_bytes() const noexcept {
    return 4 * std::uint64_t{flat_length()} * sizeof(T) + std::uint64_t{used_cu_seqlens().size()} * sizeof(std::int32_t);
  }
  /// The used part of each array. O(1), never throws.
  [[nodiscard]] std::span<T> used_input_ids() const noexcept { return input_ids.first(flat_length()); }
  [[nodiscard]] std::span<T> used_labels() const noexcept { return labels.first(flat_length()); }
  [[nodiscard]] std::span<T> used_position_ids() const noexcept { return position_ids.first(flat_length()); }
  [[nodiscard]] std::span<T> used_sequence_ids() const noexcept { return sequence_ids.first(flat_length()); }
  [[nodiscard]] std::span<std::int32_t> used_cu_seqlens() const noexcept {
    return cu_seqlens.first(rows == 0 ? 0 : std::size_t{segments} + 1);
  }

  /// Takes `from`'s results (rows, row_length, segments, max_seqlen, padding_rows,
  /// real_tokens, loss_tokens), not its spans: for a copy of the batch's arrays elsewhere (the
  /// device). O(1), never throws.
  void copy_results_from(const batch_view& from) noexcept { detail::copy_batch_results(*this, from); }

  /// A view over one block of raw memory (pinned host memory, say) of at least
  /// layout.bytes<T>() bytes, aligned to alignof(T): input_ids, labels, position_ids,
  /// sequence_ids, then cu_seqlens, back to back (each array's byte size is a multiple of the
  /// next one's alignment, so there is no gap). One block means one host-to-device copy.
  /// Throws option_error for an invalid layout, a block too small or misaligned. O(1).
  [[nodiscard]] static batch_view over_bytes(const batch_layout& layout, std::span<std::byte> block) {
    validate(layout);
    if (block.size() < layout.bytes<T>())
      throw option_error("batch_view: a block of " + std::to_string(block.size()) + " bytes is too small for the layout's " +
                         std::to_string(layout.bytes<T>()) + " bytes");
    if (reinterpret_cast<std::uintptr_t>(block.data()) % alignof(T) != 0)
      throw option_error("batch_view: the block is not aligned to " + std::to_string(alignof(T)) + " bytes");
    const std::size_t n = layout.tokens();
    T* tokens = reinterpret_cast<T*>(block.data());
    batch_view view;
    view.layout = layout;
    view.input_ids = {tokens, n};
    view.labels = {tokens + n, n};
    view.position_ids = {tokens + 2 * n, n};
    view.sequence_ids = {tokens + 3 * n, n};
    view.cu_seqlens = {reinterpret_cast<std::int32_t*>(tokens + 4 * n), layout.cu_seqlens_size()};
    return view;
  }
};

/// Host memory for one micro-batch of a layout: five std::vectors sized from it (for tests,
/// CPU trainers, and as the model of what a pinned pool provides). Not thread-safe to mutate;
/// views of it stay valid until it is destroyed (moving it keeps them valid too).
template <batch_token T = std::int32_t>
class batch_buffers {
 public:
  /// Allocates layout.bytes<T>() bytes, zero-filled. Throws option_error for an invalid
  /// layout (validate), std::bad_alloc. O(layout.tokens()).
  explicit batch_buffers(const batch_layout& layout) : layout_((validate(layout), layout)) {
    input_ids_.resize(layout_.tokens());
    labels_.resize(layout_.tokens());
    position_ids_.resize(layout_.tokens());
    sequence_ids_.resize(layout_.tokens());
    cu_seqlens_.resize(layout_.cu_seqlens_size());
  }

  [[nodiscard]] const batch_layout& layout() const noexcept { return layout_; }

  /// A view over these buffers, with no results yet. O(1), never throws.
  [[nodiscard]] batch_view<T> view() noexcept {
    batch_view<T> v;
    v.layout = layout_;
    v.input_ids = input_ids_;
    v.labels = labels_;
    v.position_ids = position_ids_;
    v.sequence_ids = sequence_ids_;
    v.cu_seqlens = cu_seqlens_;
    return v;
  }

 private:
  batch_layout layout_;
  std::vector<T> input_ids_;
  std::vector<T> labels_;
  std::vector<T> position_ids_;
  std::vector<T> sequence_ids_;
  std::vector<std::int32_t> cu_seqlens_;
};

}  // namespace multipack
