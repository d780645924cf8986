#pragma once
// The device loader: one rank's batches of an epoch plan, collated by the prefetcher's worker
// threads straight into pinned host memory, copied to the GPU on a side stream while the
// trainer computes, and handed over as device memory in step order.
//
//   multipack::cuda::device_loader<indexed_dataset> loader(dataset, plan, rank, {}, {.threads = 2});
//   while (auto batch = loader.next()) {
//     batch->wait(stream);            // the trainer's stream waits for the copy; the host does not
//     train(batch->view(), stream);   // device pointers: input_ids, labels, ..., cu_seqlens
//   }                                 // destroying the batch records its release on `stream`
//
// device_epoch_loader does the same for several epochs as one stream, over an epoch_loader
// (a planner, an epoch_range): the buffers, the copy stream and the threads below serve every
// epoch, so crossing an epoch boundary allocates nothing, on the host or the device.
//
// How memory moves, and what is never done per batch:
// - Pinned host buffers: prefetch.depth + batches_in_flight blocks of layout.bytes<T>(),
//   allocated once (cudaHostAlloc). Workers collate into them: no extra host copy.
// - Device buffers: batches_in_flight blocks, allocated once (cudaMalloc).
// - One non-blocking copy stream. For each batch: cudaMemcpyAsync of the used part of the
//   arrays (one call when the rows are full length), then an event the consumer's stream
//   waits on with cudaStreamWaitEvent: no host synchronization anywhere on the way.
// - A pinned buffer goes back to the workers once its copy has run: next() gives back those
//   whose copy event has passed (no host callback, which would stall the copy stream), and
//   waits for the oldest only when every pinned buffer is waiting for its copy.
// - A device buffer is overwritten only after the consumer released its batch and the work
//   queued on the consumer's stream before the release has passed: release records an event
//   on that stream, and the copy stream waits for it before the next copy into that buffer.
// So after construction there is no cudaHostAlloc, cudaMalloc or synchronous copy.
//
// Without a device: the constructor throws cuda_error saying why, unless
// device_options::host_fallback asks for the host batches instead (pageable memory; wait()
// and release do nothing), so one trainer loop runs with and without a GPU.
//
// Nothing here includes range-v3: a .cu translation unit may include this header.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "multipack/batch/layout.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/cuda/device_batch_view.hpp"
#include "multipack/cuda/error.hpp"
#include "multipack/cuda/resources.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack::cuda {

struct device_options {
  /// Device buffers: batches the consumer holds plus copies queued ahead of it. Also the
  /// pinned buffers added to prefetch.depth for copies in flight (on the host fallback, host
  /// buffers, so that a loop may hold as many batches there). 3: one batch training, one
  /// copied, one queued.
  std::size_t batches_in_flight = 3;
  /// Without a usable device: false (the default) throws cuda_error; true hands out the host
  /// batches instead (on_device() false), so the same loop runs on a machine with no GPU.
  bool host_fallback = false;
  /// Times every copy with events (device_statistics::copy_seconds). Costs two timed events
  /// a batch and, at a buffer's reuse, waiting for the copy made into it batches_in_flight
  /// batches before (long done in steady state). Off by default.
  bool time_copies = false;
};

/// Throws option_error for no buffer in flight or more than 1024. O(1).
inline void validate(const device_options& options) {
  if (options.batches_in_flight == 0)
    throw option_error("device_options: batches_in_flight must be at least 1 device buffer");
  if (options.batches_in_flight > 1024)
    throw option_error("device_options: " + std::to_string(options.batches_in_flight) +
                       " batches in flight; at most 1024 are supported");
}

/// What the device loader measured so far.
struct device_statistics {
  prefetch_statistics host;       ///< the workers and the host queue (see prefetcher)
  bool on_device = false;         ///< false: host fallback, nothing copied
  std::uint64_t copies = 0;       ///< batches queued for copying
  std::uint64_t bytes_copied = 0; ///< their bytes
  std::uint64_t timed_copies = 0; ///< copies timed so far (time_copies; each once its buffer is reused)
  double copy_seconds = 0;        ///< their summed duration on the copy stream
  std::uint64_t timed_bytes = 0;  ///< their bytes: timed_bytes / copy_seconds is the copy rate
};

namespace detail {

/// After a failed call that left no event to order what comes next: blocks until the work
/// queued on `stream` is done (a copy out of a pinned buffer, the consumer's reads of a device
/// one), so that the buffer can be written again, and clears the runtime's last error (the
/// failure is reported by its own path). Never throws.
inline void wait_out_after_failure(cudaStream_t stream) noexcept {
  static_cast<void>(cudaStreamSynchronize(stream));
  static_cast<void>(cudaGetLastError());
}

/// One device buffer and the events that order its use.
struct device_slot {
  device_memory memory;
  event copied;                      ///< recorded on the copy stream after the copy into memory
  event released;                    ///< recorded on the consumer's stream at release
  std::optional<event> copy_started; ///< time_copies: recorded before the copy
  bool release_recorded = false;     ///< the next copy into memory must wait for `released`
  bool timing_pending = false;       ///< copy_started..copied not yet added to the statistics
  std::uint64_t bytes = 0;           ///< bytes of the last copy
  cudaError_t release_error = cudaSuccess;  ///< a release whose event could not be recorded
};

/// time_copies: adds the slot's last copy (copy_started to copied) to `statistics`, first
/// waiting for it (the copy of batches_in_flight batches ago: done in steady state). Throws
/// cuda_error.
inline void add_copy_timing(device_slot& slot, device_statistics& statistics) {
  slot.copied.synchronize();
  statistics.copy_seconds += static_cast<double>(event::elapsed_ms(*slot.copy_started, slot.copied)) * 1e-3;
  statistics.timed_bytes += slot.bytes;
  ++statistics.timed_copies;
  slot.timing_pending = false;
}

/// The device buffers and which of them the consumer may have next. give_back() may be
/// called from any thread (a batch may be released anywhere); the rest is for the consumer.
class device_ring {
 public:
  device_ring(std::size_t slots, std::size_t bytes, bool timing) : device_(current_device()) {
    slots_.reserve(slots);
    free_.resize(slots);
    for (std::size_t i = 0; i < slots; ++i) {
      device_slot s{device_memory(bytes), event(timing), event(false), std::nullopt};
      if (timing) s.copy_started.emplace(true);
      slots_.push_back(std::move(s));
      free_[i] = i;  // slot 0 first
    }
    free_count_ = slots;
  }

  device_ring(const device_ring&) = delete;
  device_ring& operator=(const device_ring&) = delete;
  /// Waits for the consumer work before every recorded release, then frees the buffers.
  /// Shared by the loader and its batches: the last of them to go frees it. Never throws.
  ~device_ring() {
    const device_scope on(device_);
    wait_for_releases();
  }

  [[nodiscard]] std::size_t size() const noexcept { return slots_.size(); }
  [[nodiscard]] device_slot& operator[](std::size_t i) noexcept { return slots_[i]; }

  /// The slot given back longest ago, or none when the consumer holds them all. O(1).
  /// Oldest first, not last: the copy into a slot waits for the consumer's work before its
  /// release, so the slot just released (the step the trainer is on) would make the next
  /// copy wait for that step, and the trainer's stream then wait for the copy.
  [[nodiscard]] std::optional<std::size_t> acquire() {
    const std::lock_guard lock(mutex_);
    if (free_count_ == 0) return std::nullopt;
    const std::size_t i = free_[free_head_];
    free_head_ = (free_head_ + 1) % free_.size();
    --free_count_;
    return i;
  }

  /// Returns slot i; with a stream, first records the release on it, so that the next copy
  /// into the slot waits for the work queued there. Never throws: a failed record is kept in
  /// the slot and reported when the slot is next taken; without its event, the work queued on
  /// the stream is waited for here (only then blocking), so that the next copy cannot overwrite
  /// the buffer under it. O(1).
  cudaError_t give_back(std::size_t i, std::optional<cudaStream_t> consumer) noexcept {
    device_slot& s = slots_[i];
    cudaError_t result = cudaSuccess;
    if (consumer) {
      const device_scope on(device_);
      result = cudaEventRecord(s.released.get(), *consumer);
      s.release_recorded = result == cudaSuccess;
      s.release_error = result;
      if (result != cudaSuccess) wait_out_after_failure(*consumer);  // reported at the slot's reuse
    }
    const std::lock_guard lock(mutex_);
    free_[(free_head_ + free_count_) % free_.size()] = i;
    ++free_count_;
    return result;
  }

  /// A slot taken for the next copy; it goes back as it was (no event) unless keep() is
  /// called once the copy is queued.
  class claim {
   public:
    claim(device_ring* ring, std::size_t index) noexcept : ring_(ring), index_(index) {}
    claim(claim&& other) noexcept : ring_(std::exchange(other.ring_, nullptr)), index_(other.index_) {}
    claim(const claim&) = delete;
    claim& operator=(const claim&) = delete;
    claim& operator=(claim&&) = delete;
    ~claim() {
      if (ring_ != nullptr) static_cast<void>(ring_->give_back(index_, std::nullopt));
    }
    [[nodiscard]] std::size_t index() const noexcept { return index_; }
    [[nodiscard]] device_slot& slot() const noexcept { return (*ring_)[index_]; }
    void keep() noexcept { ring_ = nullptr; }

   private:
    device_ring* ring_;
    std::size_t index_;
  };

  /// A free slot for the next copy. Throws option_error naming `who` when the consumer holds
  /// every slot, cuda_error for a release of the slot whose event could not be recorded.
  [[nodiscard]] claim claim_slot(const char* who) {
    const std::optional<std::size_t> taken = acquire();
    if (!taken)
      throw option_error(std::string(who) + ": the consumer holds all " + std::to_string(size()) +
                         " device buffers (device_options::batches_in_flight); release a batch before asking for the next");
    claim claimed(this, *taken);
    device_slot& slot = claimed.slot();
    if (slot.release_error != cudaSuccess) {
      const cudaError_t error = std::exchange(slot.release_error, cudaSuccess);
      multipack::detail::check_cuda(error, "cudaEventRecord(release of a device batch)", __FILE__, __LINE__);
    }
    return claimed;
  }

  /// Blocks until the consumer work before every recorded release has passed (before the
  /// memory is freed). Never throws.
  void wait_for_releases() noexcept {
    for (device_slot& s : slots_)
      if (s.release_recorded)
        multipack::detail::note_destructor_result(cudaEventSynchronize(s.released.get()), "cudaEventSynchronize");
  }

 private:
  int device_;  // current at construction; the slots' memory and events are on it
  std::vector<device_slot> slots_;
  std::mutex mutex_;
  std::vector<std::size_t> free_;  ///< a ring: free_count_ slots from free_head_, oldest first
  std::size_t free_head_ = 0;
  std::size_t free_count_ = 0;
};

/// Queues the copy of the used part of every array; returns the bytes. Full-length rows
/// make the used parts one contiguous run (the arrays lie back to back): one call.
template <batch_token T>
std::uint64_t enqueue_batch_copies(const batch_view<T>& from, const batch_view<T>& to, cudaStream_t copy) {
  const std::size_t used = from.flat_length();
  const std::size_t cu_bytes = from.used_cu_seqlens().size_bytes();
  if (used == from.layout.tokens()) {
    const std::size_t bytes = 4 * used * sizeof(T) + cu_bytes;
    MULTIPACK_CUDA_CHECK(cudaMemcpyAsync(to.input_ids.data(), from.input_ids.data(), bytes, cudaMemcpyHostToDevice, copy));
    return bytes;
  }
  const std::span<T> sources[] = {from.input_ids, from.labels, from.position_ids, from.sequence_ids};
  const std::span<T> targets[] = {to.input_ids, to.labels, to.position_ids, to.sequence_ids};
  for (std::size_t a = 0; a < 4; ++a)
    if (used > 0)
      MULTIPACK_CUDA_CHECK(
          cudaMemcpyAsync(targets[a].data(), sources[a].data(), used * sizeof(T), cudaMemcpyHostToDevice, copy));
  if (cu_bytes > 0)
    MULTIPACK_CUDA_CHECK(
        cudaMemcpyAsync(to.cu_seqlens.data(), from.cu_seqlens.data(), cu_bytes, cudaMemcpyHostToDevice, copy));
  return 4 * std::uint64_t{used} * sizeof(T) + cu_bytes;
}

}  // namespace detail

template <token_dataset D, batch_token T = std::int32_t, class Host = batch_loader<D, T>>
  requires dataset_reads_as<D, T>
class device_loader;
template <batch_token T>
class batch_stager;

/// A batch in device memory, on loan to the consumer until released (or destroyed).
/// Move-only. It may outlive its loader: it shares the device buffers (libtorch tensors over
/// it keep it until the last tensor dies), and the last of the loader and its batches to go
/// waits for the recorded releases before the memory is freed.
template <batch_token T = std::int32_t>
class device_batch {
 public:
  using host_lease = typename prefetcher<loaded_batch<T>>::lease;

  device_batch() = default;
  device_batch(device_batch&& other) noexcept { *this = std::move(other); }
  device_batch& operator=(device_batch&& other) noexcept {
    if (this != &other) {
      release();
      ring_ = std::move(other.ring_);
      slot_ = other.slot_;
      view_ = other.view_;
      step_ = other.step_;
      epoch_ = other.epoch_;
      rank_ = other.rank_;
      ready_ = other.ready_;
      waited_on_ = std::exchange(other.waited_on_, std::nullopt);
      host_ = std::move(other.host_);
      staged_host_ = std::exchange(other.staged_host_, false);
    }
    return *this;
  }
  device_batch(const device_batch&) = delete;
  device_batch& operator=(const device_batch&) = delete;
  ~device_batch() { release(); }

  /// The batch: its arrays in device memory as device_arrays (the host cannot dereference
  /// them; get() is the pointer for kernels), and the counts collate found (max_seqlen,
  /// real_tokens...), readable on the host. On the host fallback, view().host() is the host
  /// batch.
  [[nodiscard]] const device_batch_view<T>& view() const noexcept { return view_; }
  /// The batch's step in its epoch, and the epoch: the plan's (device_loader over a plan), the
  /// epoch_range's count (device_epoch_loader), 0 for a loader made from steps.
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
  [[nodiscard]] bool on_device() const noexcept { return ring_ != nullptr; }
  /// Whether it is the caller's host batch, as a stager's host fallback hands it out: it owns
  /// no buffer, and the caller may reuse that memory once stage() returned (copy what must
  /// outlive that, as torch::to_tensors does).
  [[nodiscard]] bool borrowed() const noexcept { return staged_host_; }
  /// Whether it holds a batch: false once released or moved from, and default-constructed.
  [[nodiscard]] explicit operator bool() const noexcept {
    return ring_ != nullptr || static_cast<bool>(host_) || staged_host_;
  }

  /// The event recorded after the batch's copy: for a consumer that orders its streams itself.
  /// Such a consumer must give the batch back with release(stream), naming the stream that
  /// reads it last: without a wait(), release() and the destructor know of no stream, record
  /// nothing, and the buffer may be overwritten while that stream still reads it.
  [[nodiscard]] cudaEvent_t ready_event() const noexcept { return ready_; }

  /// Makes `consumer` wait, on the device, for the batch's copy: queue work that reads
  /// view() on `consumer` after this. The host never blocks. Remembers `consumer` for
  /// release(). A batch is read on one stream: wait() on another stream than an earlier
  /// wait()'s throws option_error, since release() orders the buffer's reuse after one stream
  /// only, and the first stream's reads could meet the next copy (a trainer that reads it on
  /// several streams orders them itself, with ready_event(), and gives it back with
  /// release(stream) naming the last). Throws cuda_error. Cost: one cudaStreamWaitEvent;
  /// nothing on the host fallback.
  void wait(stream_ref consumer) {
    if (ring_ == nullptr) return;
    if (waited_on_ && *waited_on_ != consumer.get())
      throw option_error("device_batch::wait: the batch was waited on another stream already; a batch is read on "
                         "one stream (release() orders the buffer's reuse after that stream's work only)");
    MULTIPACK_CUDA_CHECK(cudaStreamWaitEvent(consumer.get(), ready_, 0));
    waited_on_ = consumer.get();
  }

  /// Gives the device buffer back. The work queued on `consumer` so far is taken to be the
  /// last to read it: an event recorded there must pass before the buffer is overwritten.
  /// Never blocks, but when the event cannot be recorded: then it waits for that work, and
  /// throws cuda_error (the buffer is given back all the same, and the loader reports the error
  /// again at its reuse). Idempotent.
  void release(stream_ref consumer) {
    if (ring_ == nullptr) {
      host_.release();
      staged_host_ = false;
      return;
    }
    const auto ring = std::exchange(ring_, nullptr);
    const cudaError_t result = ring->give_back(slot_, consumer.get());
    waited_on_.reset();
    multipack::detail::check_cuda(result, "cudaEventRecord(release of a device batch)", __FILE__, __LINE__);
  }

  /// release(the stream given to the last wait()); when wait() was never called nothing was
  /// queued on the buffer and no event is needed (but see ready_event()). Never throws: a
  /// failed record counts in cuda::destructor_errors(). Idempotent.
  void release() noexcept {
    if (ring_ != nullptr)
      multipack::detail::note_destructor_result(std::exchange(ring_, nullptr)->give_back(slot_, waited_on_),
                                                "cudaEventRecord(release of a device batch)");
    waited_on_.reset();
    host_.release();
    staged_host_ = false;
  }

 private:
  template <token_dataset D, batch_token U, class Host>
    requires dataset_reads_as<D, U>
  friend class device_loader;
  friend class batch_stager<T>;

  device_batch(std::shared_ptr<detail::device_ring> ring, std::size_t slot, const batch_view<T>& view,
               std::uint64_t step, std::uint64_t epoch, std::uint32_t rank, cudaEvent_t ready) noexcept
      : ring_(std::move(ring)),
        slot_(slot),
        view_(device_batch_view<T>::over(view, true)),
        step_(step),
        epoch_(epoch),
        rank_(rank),
        ready_(ready) {}
  explicit device_batch(host_lease host) noexcept
      : view_(device_batch_view<T>::over(host->view, false)),
        step_(host->step),
        epoch_(host->epoch),
        rank_(host->rank),
        host_(std::move(host)) {}
  // The stager's host fallback: the caller's host batch, as it is.
  device_batch(const batch_view<T>& host, std::uint64_t step) noexcept
      : view_(device_batch_view<T>::over(host, false)), step_(step), staged_host_(true) {}

  std::shared_ptr<detail::device_ring> ring_;
  std::size_t slot_ = 0;
  device_batch_view<T> view_;
  std::uint64_t step_ = 0;
  std::uint64_t epoch_ = 0;
  std::uint32_t rank_ = 0;
  cudaEvent_t ready_ = nullptr;
  std::optional<cudaStream_t> waited_on_;
  host_lease host_;  // the host fallback's batch (empty: none)
  bool staged_host_ = false;  // the stager's host fallback: the caller's batch (not owned)
};

/// `Host`: the loader whose workers build the host batches, batch_loader<D, T> (one epoch's
/// plan, or steps) or epoch_loader<D, T> (several epochs as one stream: device_epoch_loader).
template <token_dataset D, batch_token T, class Host>
  requires dataset_reads_as<D, T>
class device_loader {
  static constexpr bool spans_epochs = std::same_as<Host, epoch_loader<D, T>>;
  static_assert(spans_epochs || std::same_as<Host, batch_loader<D, T>>,
                "device_loader: the host loader is batch_loader<D, T> or epoch_loader<D, T>");

 public:
  using batch = device_batch<T>;

  /// Starts loading rank `rank`'s batches of `plan` from `start_step` on, on the device
  /// current on the calling thread; call next() with the same device current.
  ///
  /// Throws cuda_error when there is no device (unless device.host_fallback) or a CUDA call
  /// fails, and what batch_loader's constructor throws (bad rank, start, mask, options).
  /// options.memory is replaced by pinned memory; `rank` as batch_loader takes it (no bool).
  /// Cost: (prefetch.depth + batches_in_flight) pinned and batches_in_flight device buffers
  /// of layout.bytes<T>() bytes, allocated here and only here; prefetch.threads threads.
  template <plain_integral Rank>
    requires(!spans_epochs)
  device_loader(std::shared_ptr<const D> dataset, std::shared_ptr<const epoch_plan> plan, Rank rank,
                batch_options options, prefetch_options prefetch, const device_options& device = {},
                std::uint64_t start_step = 0)
      : options_((validate(prefetch), validate(device), plan ? device : throw option_error("device_loader: no plan"))),
        on_device_(checked_device(device)),
        device_(on_device_ ? detail::current_device() : 0),
        copy_(make_copy_stream()),
        pending_(make_pending(on_device_ ? prefetch.depth + device.batches_in_flight : 0)),
        loader_(std::move(dataset), std::move(plan), rank, with_memory(std::move(options)), with_depth(prefetch),
                start_step),
        ring_(make_ring(loader_.layout())) {}

  /// The same for any step_range (see batch_loader's constructor for steps): batch i is
  /// step i's. Same cost, failure modes and thread safety.
  template <step_range Steps>
    requires(!spans_epochs)
  device_loader(std::shared_ptr<const D> dataset, Steps steps, batch_options options, prefetch_options prefetch,
                const device_options& device = {})
      : options_((validate(prefetch), validate(device), dataset ? device : throw option_error("device_loader: no dataset"))),
        on_device_(checked_device(device)),
        device_(on_device_ ? detail::current_device() : 0),
        copy_(make_copy_stream()),
        pending_(make_pending(on_device_ ? prefetch.depth + device.batches_in_flight : 0)),
        loader_(std::move(dataset), std::move(steps), with_memory(std::move(options)), with_depth(prefetch)),
        ring_(make_ring(loader_.layout())) {}

  /// device_epoch_loader: rank `rank`'s batches of the epochs `epochs`, each planned by
  /// `planner` (see epoch_loader: the first on this thread, every later one on its planning
  /// thread while the epoch before trains), as one stream. The buffers, the copy stream and
  /// the threads are made here and serve every epoch: no cudaHostAlloc, cudaMalloc, thread
  /// start or synchronous copy at an epoch boundary. Throws cuda_error as the constructor
  /// above, and what epoch_loader's constructor throws (bad range, rank, mask, options, the
  /// planner's errors). Cost: that constructor's, plus the buffers and threads above.
  template <plain_integral Rank>
    requires spans_epochs
  device_loader(std::shared_ptr<const D> dataset, epoch_planner planner, Rank rank, batch_options options,
                prefetch_options prefetch, const device_options& device = {}, const epoch_range& epochs = {})
      : options_((validate(prefetch), validate(device), device)),
        on_device_(checked_device(device)),
        device_(on_device_ ? detail::current_device() : 0),
        copy_(make_copy_stream()),
        pending_(make_pending(on_device_ ? prefetch.depth + device.batches_in_flight : 0)),
        loader_(std::move(dataset), std::move(planner), rank, with_memory(std::move(options)), with_depth(prefetch),
                epochs),
        ring_(make_ring(loader_.layout())) {}

  device_loader(const device_loader&) = delete;
  device_loader& operator=(const device_loader&) = delete;

  /// Waits for the copies still queued, then stops the workers and frees the memory: the
  /// device buffers once the consumer work before every release has passed, or, while
  /// batches are still held, when the last of them goes. Never throws.
  ~device_loader() {
    if (!on_device_) return;
    const detail::device_scope on(device_);
    multipack::detail::note_destructor_result(cudaStreamSynchronize(copy_->get()), "cudaStreamSynchronize");
    for (pending_copy& p : pending_) p.lease.reset();
  }

  /// The next step's batch, in order, its copy queued; std::nullopt after the last step.
  /// Blocks while the workers have not built the batch, and while every pinned buffer waits
  /// for its copy (a host prefetch.depth + batches_in_flight batches ahead of the copies).
  /// Throws what batch_loader::next throws (a worker's exception at its step), cuda_error
  /// (once a copy of a step failed, at every later call too: that step is not skipped; a
  /// failed release reported on claiming its buffer keeps the step for the next call), and
  /// option_error when the consumer holds all batches_in_flight batches while a step remains
  /// (that step is kept for the call after a release; at the end: nullopt). Consumer
  /// thread only. Cost: a queue operation, 1 to 5 cudaMemcpyAsync, 2 or 3 event records,
  /// a cudaEventQuery a finished copy; no allocation.
  [[nodiscard]] std::optional<batch> next() {
    if (failure_) std::rethrow_exception(failure_);
    if (!on_device_) {
      auto host = loader_.next();
      if (!host) return std::nullopt;
      return batch(std::move(*host));
    }
    const detail::device_scope on(device_);
    // The step before a device buffer: at the end, a consumer that holds every buffer gets
    // std::nullopt, not an error. A step taken while no buffer is free waits in next_host_
    // for the next call, so the error loses no step.
    if (!next_host_) {
      wait_for_a_pinned_buffer();
      next_host_ = loader_.next();
      if (!next_host_) return std::nullopt;
    }
    detail::device_ring::claim claimed = ring_->claim_slot("device_loader");
    detail::device_slot& slot = claimed.slot();
    std::optional<host_lease> host = std::exchange(next_host_, std::nullopt);
    const batch_view<T>& from = (*host)->view;
    const std::uint64_t step = (*host)->step;  // read now: once queued, the lease may go at any time
    const std::uint64_t epoch = (*host)->epoch;
    const std::uint32_t rank = (*host)->rank;

    cudaStream_t copy = copy_->get();
    batch_view<T> to = batch_view<T>::over_bytes(layout(), {slot.memory.data(), slot.memory.size()});
    try {
      if (slot.timing_pending) detail::add_copy_timing(slot, copies_);
      if (slot.release_recorded) {
        MULTIPACK_CUDA_CHECK(cudaStreamWaitEvent(copy, slot.released.get(), 0));
        slot.release_recorded = false;
      }
      to.copy_results_from(from);
      if (slot.copy_started) slot.copy_started->record(copy);
      slot.bytes = detail::enqueue_batch_copies(from, to, copy);
      slot.copied.record(copy);
      slot.timing_pending = slot.copy_started.has_value();
      // The pinned buffer goes back to the workers once this event has passed (seen at a
      // later next()). From here on `host` is not read again.
      pending_copy& pending = pending_[pending_tail_ % pending_.size()];
      pending.copied.record(copy);
      pending.lease = std::move(*host);
      ++pending_tail_;
    } catch (...) {
      // The step is taken from the host loader, and copies out of its pinned buffer may be
      // queued: they finish before the buffer goes back to the workers (with `host`), and the
      // loader fails for good, as after a worker's error, rather than go on without the step.
      detail::wait_out_after_failure(copy);
      failure_ = std::current_exception();
      throw;
    }
    ++copies_.copies;
    copies_.bytes_copied += slot.bytes;

    claimed.keep();
    return batch(ring_, claimed.index(), to, step, epoch, rank, slot.copied.get());
  }

  /// Statistics so far. Consumer thread only. O(1).
  [[nodiscard]] device_statistics statistics() const {
    device_statistics s = copies_;
    if constexpr (spans_epochs)
      s.host = loader_.statistics().prefetch;
    else
      s.host = loader_.statistics();
    s.on_device = on_device_;
    return s;
  }

  /// The host loader's own statistics (epoch_loader_statistics for device_epoch_loader: the
  /// waits at the epoch boundaries). Consumer thread only. O(1).
  [[nodiscard]] auto host_statistics() const { return loader_.statistics(); }

  [[nodiscard]] bool on_device() const noexcept { return on_device_; }
  [[nodiscard]] const batch_layout& layout() const noexcept { return loader_.layout(); }
  [[nodiscard]] const epoch_plan& plan() const
    requires(!spans_epochs)
  {
    return loader_.plan();
  }
  [[nodiscard]] std::uint32_t rank() const noexcept { return loader_.rank(); }
  /// The stream the copies run on (nullptr on the host fallback).
  [[nodiscard]] cudaStream_t copy_stream() const noexcept { return copy_ ? copy_->get() : nullptr; }
  /// The pinned memory the workers collate into (nullptr on the host fallback).
  [[nodiscard]] const pinned_memory_resource* pinned_memory() const noexcept { return pinned_.get(); }

 private:
  static bool checked_device(const device_options& options) {
    if (device_available()) return true;
    if (options.host_fallback) return false;
    throw cuda_error(detail::no_device_error(), "device_loader: no CUDA device to load batches to (" + no_device_reason() +
                                            "); set device_options::host_fallback for host batches instead");
  }

  std::optional<stream> make_copy_stream() const {
    if (!on_device_) return std::nullopt;
    return stream(cudaStreamNonBlocking);
  }

  std::shared_ptr<detail::device_ring> make_ring(const batch_layout& layout) const {
    if (!on_device_) return nullptr;
    // Made after the host loader, whose constructor runs the caller's planner (which may
    // change the current device): on the loader's device all the same.
    const detail::device_scope on(device_);
    validate(layout);
    return std::make_shared<detail::device_ring>(options_.batches_in_flight, layout.bytes<T>(), options_.time_copies);
  }

  batch_options with_memory(batch_options options) {
    if (on_device_) {
      pinned_ = std::make_unique<pinned_memory_resource>();
      options.memory = pinned_.get();
    }
    return options;
  }

  // On the host fallback too: the consumer may hold batches_in_flight batches on a device,
  // and the same loop must run without one.
  prefetch_options with_depth(prefetch_options prefetch) const {
    prefetch.depth += options_.batches_in_flight;
    return prefetch;
  }

  /// Gives back the pinned buffers whose copies have run, oldest first (copies run in
  /// order). Never blocks. Throws cuda_error if the copy stream failed.
  void release_finished_copies() {
    while (pending_head_ < pending_tail_) {
      pending_copy& oldest = pending_[pending_head_ % pending_.size()];
      const cudaError_t state = cudaEventQuery(oldest.copied.get());
      if (state == cudaErrorNotReady) return;
      MULTIPACK_CUDA_CHECK(state);
      oldest.lease.reset();
      ++pending_head_;
    }
  }

  /// Makes sure a pinned buffer is free or being built before asking the workers for the
  /// next batch: when every one waits for its copy, blocks until the oldest copy has run.
  /// (The copies queued may be waiting for the trainer's stream to release device buffers:
  /// this is where a host that runs ahead of the GPU waits.) Throws cuda_error.
  void wait_for_a_pinned_buffer() {
    release_finished_copies();
    if (pending_tail_ - pending_head_ < pending_.size()) return;
    pending_[pending_head_ % pending_.size()].copied.synchronize();
    release_finished_copies();
  }

  using host_lease = typename Host::lease;
  struct pending_copy {
    std::optional<host_lease> lease;
    event copied;  ///< recorded on the copy stream after the copy from the lease's buffer
  };

  static std::vector<pending_copy> make_pending(std::size_t count) {
    std::vector<pending_copy> pending;
    pending.reserve(count);
    for (std::size_t i = 0; i < count; ++i) pending.push_back({std::nullopt, event(false)});
    return pending;
  }


  device_options options_;
  bool on_device_;
  int device_;  // current at construction: made current again wherever the loader calls CUDA
  std::unique_ptr<pinned_memory_resource> pinned_;  // outlives the loader's buffers
  std::optional<stream> copy_;
  // Pinned buffers whose copy is queued, oldest first, in a ring of one entry per pinned
  // buffer: added at the tail, given back from the head once their event has passed.
  std::vector<pending_copy> pending_;
  std::size_t pending_head_ = 0;
  std::size_t pending_tail_ = 0;
  device_statistics copies_;  // the copy counts; statistics() adds the host side
  std::exception_ptr failure_;  // a CUDA call that failed after a step was taken: rethrown by next()
  Host loader_;  // after pinned_: its workers write into pinned_'s memory
  // After loader_, whose layout (for an epoch_loader, known once it made the first plan) sizes
  // the device buffers. Shared with the batches handed out.
  std::shared_ptr<detail::device_ring> ring_;
  std::optional<host_lease> next_host_;  // a step taken when no device buffer was free (no copy queued)
};

/// A device_loader over an epoch_loader: several epochs as one stream, every buffer made once.
template <token_dataset D, batch_token T = std::int32_t>
  requires dataset_reads_as<D, T>
using device_epoch_loader = device_loader<D, T, epoch_loader<D, T>>;

}  // namespace multipack::cuda
