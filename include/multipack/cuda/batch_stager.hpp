#pragma once
// Host batches from anywhere, staged to the device: for a range of batch_view<T> that is not a
// prefetch view (`prefetch | std::views::take(n)`, a trainer's own batches), whose memory the
// workers did not build in pinned memory. Each batch is copied once on the host into a pinned
// buffer (its used bytes), then to a device buffer on the copy stream, ordered by events as
// device_loader orders its copies (see device_loader.hpp). A prefetch view needs none of this:
// views::to_device builds a device_loader from it, whose workers collate straight into
// pinned memory.
//
// Nothing here includes range-v3: a .cu translation unit may include this header.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "multipack/batch/layout.hpp"
#include "multipack/core/error.hpp"
#include "multipack/cuda/device_loader.hpp"
#include "multipack/cuda/error.hpp"
#include "multipack/cuda/resources.hpp"

namespace multipack::cuda {

template <batch_token T = std::int32_t>
class batch_stager {
 public:
  /// A copy stream, and nothing else until the first batch (its layout sizes the buffers).
  /// Throws cuda_error when there is no device (unless device.host_fallback), option_error
  /// for bad options.
  explicit batch_stager(const device_options& device = {})
      : options_((validate(device), device)), on_device_(checked_device(device)) {
    if (on_device_) {
      device_ = detail::current_device();
      copy_.emplace(cudaStreamNonBlocking);
    }
  }
  batch_stager(const batch_stager&) = delete;
  batch_stager& operator=(const batch_stager&) = delete;

  /// Waits for the copies still queued, then frees the pinned memory; the device buffers go
  /// once the consumer work before every release has passed, or, while batches are still
  /// held, when the last of them goes. Never throws.
  ~batch_stager() {
    if (!on_device_) return;
    const detail::device_scope on(device_);
    multipack::detail::note_destructor_result(cudaStreamSynchronize(copy_->get()), "cudaStreamSynchronize");
    for (pinned_buffer& b : buffers_) pinned_.deallocate(b.block.data(), b.block.size(), 256);
  }

  /// Stages `host`: copies its used bytes into a pinned buffer (the host is free to reuse
  /// `host` when this returns) and queues their copy to a device buffer. The first batch
  /// allocates batches_in_flight pinned and device buffers of host.layout.bytes<T>() bytes;
  /// later batches must have the same layout. On the host fallback, returns `host` itself.
  /// Blocks only when the pinned buffer to reuse still waits for its copy (queued
  /// batches_in_flight batches ago). Throws option_error for another layout, or when the
  /// consumer holds all batches_in_flight batches; cuda_error. Consumer thread only.
  [[nodiscard]] device_batch<T> stage(const batch_view<T>& host) {
    if (!on_device_) return device_batch<T>(host, staged_++);
    const std::uint64_t step = staged_;  // counted once staged: a failed stage() takes no step
    const detail::device_scope on(device_);  // the first batch's allocations too
    if (!layout_) start(host.layout);
    if (host.layout.micro_batch != layout_->micro_batch || host.layout.capacity != layout_->capacity ||
        host.layout.pad_to_multiple != layout_->pad_to_multiple ||
        host.layout.pieces_per_row() != layout_->pieces_per_row())
      throw option_error("views::to_device: batch " + std::to_string(step) +
                         " has another layout than the first batch's (micro_batch, capacity, pad_to_multiple and "
                         "pieces per row must stay the same: the device buffers are sized by the first)");
    detail::device_ring::claim claimed = ring_->claim_slot("views::to_device");
    detail::device_slot& slot = claimed.slot();

    // The host copy, into the pinned buffer whose copy is the oldest (done in steady state).
    pinned_buffer& buffer = buffers_[next_buffer_];
    next_buffer_ = (next_buffer_ + 1) % buffers_.size();
    if (buffer.pending) buffer.copied.synchronize();
    batch_view<T> staged = batch_view<T>::over_bytes(*layout_, buffer.block);
    const std::span<T> from[] = {host.used_input_ids(), host.used_labels(), host.used_position_ids(),
                                 host.used_sequence_ids()};
    const std::span<T> to[] = {staged.input_ids, staged.labels, staged.position_ids, staged.sequence_ids};
    for (std::size_t a = 0; a < 4; ++a)
      if (!from[a].empty()) std::memcpy(to[a].data(), from[a].data(), from[a].size_bytes());
    const auto cu = host.used_cu_seqlens();
    if (!cu.empty()) std::memcpy(staged.cu_seqlens.data(), cu.data(), cu.size_bytes());
    staged.copy_results_from(host);

    cudaStream_t copy = copy_->get();
    if (slot.timing_pending) detail::add_copy_timing(slot, copies_);
    if (slot.release_recorded) {
      MULTIPACK_CUDA_CHECK(cudaStreamWaitEvent(copy, slot.released.get(), 0));
      slot.release_recorded = false;
    }
    batch_view<T> device = batch_view<T>::over_bytes(*layout_, {slot.memory.data(), slot.memory.size()});
    device.copy_results_from(staged);
    try {
      if (slot.copy_started) slot.copy_started->record(copy);
      slot.bytes = detail::enqueue_batch_copies(staged, device, copy);
      slot.copied.record(copy);
      slot.timing_pending = slot.copy_started.has_value();
      buffer.copied.record(copy);
    } catch (...) {
      // Copies out of the pinned buffer may be queued: done before the next stage() writes it.
      detail::wait_out_after_failure(copy);
      throw;
    }
    buffer.pending = true;
    ++staged_;
    ++copies_.copies;
    copies_.bytes_copied += slot.bytes;
    claimed.keep();
    return device_batch<T>(ring_, claimed.index(), device, step, 0, 0, slot.copied.get());  // epoch 0, rank 0
  }

  /// Copies so far (copies, bytes_copied, and with time_copies their timing; no host
  /// statistics). O(1).
  [[nodiscard]] device_statistics statistics() const {
    device_statistics s = copies_;
    s.on_device = on_device_;
    return s;
  }
  [[nodiscard]] bool on_device() const noexcept { return on_device_; }

 private:
  struct pinned_buffer {
    std::span<std::byte> block;
    event copied;       ///< recorded on the copy stream after the copy out of `block`
    bool pending = false;
  };

  static bool checked_device(const device_options& options) {
    if (device_available()) return true;
    if (options.host_fallback) return false;
    throw cuda_error(detail::no_device_error(), "views::to_device: no CUDA device to stage batches to (" + no_device_reason() +
                                            "); set device_options::host_fallback for host batches instead");
  }

  // Everything is made before any member is set: a failed allocation leaves the stager as it
  // was (no first batch yet), and a later stage() tries again.
  void start(const batch_layout& layout) {
    validate(layout);
    const std::size_t bytes = layout.bytes<T>();
    auto ring = std::make_shared<detail::device_ring>(options_.batches_in_flight, bytes, options_.time_copies);
    std::vector<pinned_buffer> buffers;
    buffers.reserve(options_.batches_in_flight);
    try {
      for (std::size_t i = 0; i < options_.batches_in_flight; ++i) {
        event copied(false);
        buffers.push_back({{static_cast<std::byte*>(pinned_.allocate(bytes, 256)), bytes}, std::move(copied), false});
      }
    } catch (...) {
      for (pinned_buffer& b : buffers) pinned_.deallocate(b.block.data(), b.block.size(), 256);
      throw;
    }
    ring_ = std::move(ring);
    buffers_ = std::move(buffers);
    layout_ = layout;
  }

  device_options options_;
  bool on_device_;
  int device_ = 0;  // current at construction: made current again wherever the stager calls CUDA
  pinned_memory_resource pinned_;  // outlives the buffers
  std::optional<stream> copy_;
  std::optional<batch_layout> layout_;
  std::shared_ptr<detail::device_ring> ring_;  // shared with the batches handed out
  std::vector<pinned_buffer> buffers_;
  std::size_t next_buffer_ = 0;
  std::uint64_t staged_ = 0;
  device_statistics copies_;
};

}  // namespace multipack::cuda
