#pragma once
// The `torch/` layer: a batch as libtorch tensors over the batch's own memory, no copy.
//
//   multipack::batch_loader<multipack::indexed_dataset, std::int64_t> loader(...);
//   while (auto lease = loader.next()) {
//     multipack::torch::batch_tensors b = multipack::torch::to_tensors(std::move(*lease));
//     auto logits = model(b.input_ids, b.position_ids, b.sequence_ids);   // [B, L, vocab]
//   }
//
// - to_tensors(lease): the tensors own the batch. Its buffer stays out of the loader's pool
//   until the last of the tensors (and of every view, slice or reshape of them) is destroyed;
//   the deleter then gives it back, on whatever thread that happens, even after the loader is
//   gone. The pool's bound holds: the workers wait for a free buffer, and the loader's next()
//   fails with a clear error when the trainer keeps every buffer.
// - borrow_tensors(view): tensors over a batch someone else owns, valid while it is (a
//   batch_view from views::prefetch, until the loop advances); copy_tensors(view): tensors
//   over a copy of it, for a batch that will not stay.
// - torch::views::to_tensors (torch/views.hpp): the pipeline's last stage, for loops.
// - dtype: input_ids, labels, position_ids and sequence_ids are the batch's token type (kInt32,
//   or kInt64 for prefetch_as<std::int64_t>, which torch::embedding takes as it is);
//   cu_seqlens is kInt32, as FlashAttention takes it.

#include <torch/types.h>

#include <concepts>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "multipack/batch/layout.hpp"
#include "multipack/core/concepts.hpp"

namespace multipack::torch {

/// One micro-batch as tensors: the arrays of batch_view (see the README's table) with their
/// shapes, and its counts.
struct batch_tensors {
  ::torch::Tensor input_ids;     ///< [rows, row_length], the token type
  ::torch::Tensor labels;        ///< [rows, row_length], unshifted; ignore_index (-100) where no loss
  ::torch::Tensor position_ids;  ///< [rows, row_length], restarting at every piece
  ::torch::Tensor sequence_ids;  ///< [rows, row_length], 1, 2, ... for a row's pieces, 0 for padding
  ::torch::Tensor cu_seqlens;    ///< [segments + 1], int32, over the flattened batch
  std::int64_t max_seqlen = 0;   ///< the longest segment
  std::int64_t real_tokens = 0;  ///< tokens of pieces
  std::int64_t loss_tokens = 0;  ///< labels that are not ignore_index
  std::uint64_t step = 0;        ///< the step the batch belongs to
  std::uint64_t epoch = 0;       ///< its epoch (an epoch loader's batch; 0 for a single epoch's)
  std::uint32_t rank = 0;        ///< the rank whose batch it is
};

namespace detail {

template <batch_token T>
inline constexpr ::torch::ScalarType scalar_type_of = std::is_same_v<T, std::int64_t> ? ::torch::kInt64 : ::torch::kInt32;

/// An array's first element: a span's data(), or a `cuda/` device_array's get().
template <class Array>
[[nodiscard]] void* array_pointer(const Array& array) noexcept {
  if constexpr (requires { array.get(); }) return array.get();
  else return array.data();
}

/// The tensors over `view`'s used arrays on `device` (a batch_view, or the `cuda/` layer's
/// device_batch_view), with its counts; the caller sets step, epoch and rank. Every tensor
/// holds a copy of `owner` (null: nobody's), so the last one to die releases it. O(1), no
/// copy of the arrays.
template <class View, batch_token T = typename View::token_type>
[[nodiscard]] batch_tensors tensors_over(const View& view, const std::shared_ptr<void>& owner, ::torch::Device device) {
  const auto tokens = ::torch::TensorOptions().dtype(scalar_type_of<T>).device(device);
  const auto offsets = ::torch::TensorOptions().dtype(::torch::kInt32).device(device);
  const std::int64_t rows = view.rows;
  const std::int64_t length = view.row_length;
  const auto over = [&owner](void* data, ::torch::IntArrayRef sizes, const ::torch::TensorOptions& options) {
    return ::torch::from_blob(data, sizes, [owner](void*) {}, options);
  };
  batch_tensors t;
  t.input_ids = over(array_pointer(view.input_ids), {rows, length}, tokens);
  t.labels = over(array_pointer(view.labels), {rows, length}, tokens);
  t.position_ids = over(array_pointer(view.position_ids), {rows, length}, tokens);
  t.sequence_ids = over(array_pointer(view.sequence_ids), {rows, length}, tokens);
  t.cu_seqlens = over(array_pointer(view.cu_seqlens), {static_cast<std::int64_t>(view.used_cu_seqlens().size())}, offsets);
  t.max_seqlen = view.max_seqlen;
  t.real_tokens = static_cast<std::int64_t>(view.real_tokens);
  t.loss_tokens = static_cast<std::int64_t>(view.loss_tokens);
  return t;
}

}  // namespace detail

/// CPU tensors over `view`'s arrays, which the caller keeps alive (and unchanged) as long
/// as the tensors are used: for a batch_view of views::prefetch, until the loop advances.
/// O(1), no copy; throws what torch::from_blob throws.
template <batch_token T>
[[nodiscard]] batch_tensors borrow_tensors(const batch_view<T>& view, std::uint64_t step = 0, std::uint32_t rank = 0) {
  batch_tensors t = detail::tensors_over(view, nullptr, ::torch::kCPU);
  t.step = step;
  t.rank = rank;
  return t;
}

/// CPU tensors that own a copy of `view`'s used arrays: for a batch that will not stay (a
/// trainer's own, one of views::prefetch after other views). O(the batch's used bytes), one
/// allocation an array; throws what libtorch's allocation throws.
template <batch_token T>
[[nodiscard]] batch_tensors copy_tensors(const batch_view<T>& view, std::uint64_t step = 0, std::uint32_t rank = 0) {
  batch_tensors t = borrow_tensors(view, step, rank);
  for (::torch::Tensor* array : {&t.input_ids, &t.labels, &t.position_ids, &t.sequence_ids, &t.cu_seqlens})
    *array = array->clone();
  return t;
}

/// CPU tensors that own `batch`, a lease of batch_loader::next() (taken by move): its buffer
/// goes back to the loader's pool when the last tensor over it dies, on any thread, even
/// after the loader is destroyed. O(1) and one allocation (the shared owner); no copy of the
/// arrays. Throws what torch::from_blob throws (the lease is then released).
template <class Lease>
  requires(!std::is_lvalue_reference_v<Lease>) && std::movable<Lease> && requires(const Lease& lease) {
    { (*lease).view.rows } -> std::convertible_to<std::uint32_t>;
    { (*lease).step } -> std::convertible_to<std::uint64_t>;
    { (*lease).epoch } -> std::convertible_to<std::uint64_t>;
    { (*lease).rank } -> std::convertible_to<std::uint32_t>;
  }
[[nodiscard]] batch_tensors to_tensors(Lease&& batch) {
  auto owner = std::make_shared<Lease>(std::move(batch));
  const auto& loaded = **owner;
  batch_tensors t = detail::tensors_over(loaded.view, owner, ::torch::kCPU);
  t.step = loaded.step;
  t.epoch = loaded.epoch;
  t.rank = loaded.rank;
  return t;
}

}  // namespace multipack::torch
