#pragma once
// A batch in device memory as the trainer sees it: device arrays that the host cannot
// dereference by mistake (not std::span: no operator[], no iterators, no data()), each
// convertible to the raw pointer a kernel or a copy takes, and the counts, readable on the
// host. On the loader's host fallback the same view holds host memory: host() gives it back
// as a batch_view.
//
// Nothing here includes range-v3: a .cu translation unit may include this header.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "multipack/batch/layout.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"

namespace multipack::cuda {

/// `size()` elements of T in device memory. get() (or static_cast<T*>) is the pointer for
/// kernels, cudaMemcpyAsync and frameworks' tensors; there is no host access. Trivially
/// copyable; never owns.
template <class T>
class device_array {
 public:
  constexpr device_array() noexcept = default;
  constexpr device_array(T* data, std::size_t size) noexcept : data_(data), size_(size) {}

  /// The device pointer. O(1).
  [[nodiscard]] constexpr T* get() const noexcept { return data_; }
  /// The device pointer, said explicitly (an implicit conversion would let *array compile).
  [[nodiscard]] constexpr explicit operator T*() const noexcept { return data_; }
  [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
  [[nodiscard]] constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] constexpr bool empty() const noexcept { return size_ == 0; }
  /// The first n elements. Throws option_error when n > size(). O(1).
  [[nodiscard]] constexpr device_array first(std::size_t n) const {
    if (n > size_) throw option_error("device_array::first: " + std::to_string(n) + " of " + std::to_string(size_));
    return {data_, n};
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// One micro-batch in device memory: the arrays of batch_view<T> (same shapes and
/// conventions: see the README's table) as device_arrays, and its counts.
template <batch_token T = std::int32_t>
struct device_batch_view {
  using token_type = T;

  batch_layout layout;
  device_array<T> input_ids;              ///< [rows, row_length] in the first rows x row_length elements
  device_array<T> labels;
  device_array<T> position_ids;
  device_array<T> sequence_ids;
  device_array<std::int32_t> cu_seqlens;  ///< segments + 1 used values
  bool on_device = true;                  ///< false on the loader's host fallback: host memory

  std::uint32_t rows = 0;
  std::uint32_t row_length = 0;
  std::uint32_t segments = 0;
  std::uint32_t max_seqlen = 0;
  std::uint32_t padding_rows = 0;
  std::uint64_t real_tokens = 0;
  std::uint64_t loss_tokens = 0;

  /// The view over `arrays` (spans of device memory, or host memory when !on_device) with
  /// their counts. O(1).
  [[nodiscard]] static device_batch_view over(const batch_view<T>& arrays, bool device) noexcept {
    device_batch_view v;
    v.layout = arrays.layout;
    v.input_ids = {arrays.input_ids.data(), arrays.input_ids.size()};
    v.labels = {arrays.labels.data(), arrays.labels.size()};
    v.position_ids = {arrays.position_ids.data(), arrays.position_ids.size()};
    v.sequence_ids = {arrays.sequence_ids.data(), arrays.sequence_ids.size()};
    v.cu_seqlens = {arrays.cu_seqlens.data(), arrays.cu_seqlens.size()};
    v.on_device = device;
    multipack::detail::copy_batch_results(v, arrays);
    return v;
  }

  /// Elements used in each token array: rows x row_length. O(1).
  [[nodiscard]] std::size_t flat_length() const noexcept { return std::size_t{rows} * row_length; }
  /// Bytes of the used parts of the five arrays. O(1).
  [[nodiscard]] std::uint64_t used_bytes() const noexcept {
    return 4 * std::uint64_t{flat_length()} * sizeof(T) + std::uint64_t{used_cu_seqlens().size()} * sizeof(std::int32_t);
  }
  /// The used part of each array. O(1), never throws.
  [[nodiscard]] device_array<T> used_input_ids() const noexcept { return {input_ids.get(), flat_length()}; }
  [[nodiscard]] device_array<T> used_labels() const noexcept { return {labels.get(), flat_length()}; }
  [[nodiscard]] device_array<T> used_position_ids() const noexcept { return {position_ids.get(), flat_length()}; }
  [[nodiscard]] device_array<T> used_sequence_ids() const noexcept { return {sequence_ids.get(), flat_length()}; }
  [[nodiscard]] device_array<std::int32_t> used_cu_seqlens() const noexcept {
    return {cu_seqlens.get(), rows == 0 ? 0 : std::size_t{segments} + 1};
  }

  /// The batch as a host batch_view, on the host fallback. Throws option_error when the
  /// arrays are in device memory. O(1).
  [[nodiscard]] batch_view<T> host() const {
    if (on_device)
      throw option_error("device_batch_view::host: the batch is in device memory (copy it, or read it on the device)");
    batch_view<T> v;
    v.layout = layout;
    v.input_ids = {input_ids.get(), input_ids.size()};
    v.labels = {labels.get(), labels.size()};
    v.position_ids = {position_ids.get(), position_ids.size()};
    v.sequence_ids = {sequence_ids.get(), sequence_ids.size()};
    v.cu_seqlens = {cu_seqlens.get(), cu_seqlens.size()};
    multipack::detail::copy_batch_results(v, *this);
    return v;
  }
};

}  // namespace multipack::cuda
