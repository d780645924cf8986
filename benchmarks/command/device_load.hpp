#pragma once
// multipack-bench load --device: the same epochs as the host run, through the device loader
// (pinned buffers, copies on a side stream) to a simulated trainer whose step is a GPU kernel
// that busy-waits --step-ms on the trainer's stream. Measured in the same run:
//  - h2d: the loader's copies, each timed by events on the copy stream (bytes / their time);
//  - pinned peak: the same number of copies of the mean batch's bytes, from pinned memory,
//    back to back; pageable: the same from ordinary memory (for contrast);
//  - the trainer's stream: how long it waited for copies (an event before and one after each
//    batch's cudaStreamWaitEvent; the first batch, the cold start, left out), against the
//    time from the first batch to the last step's end;
//  - pinned allocations made after the loader's start (the goal is none: one loader, over an
//    epoch_loader, serves every epoch).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "command/busy_wait.hpp"
#include "command/common.hpp"
#include "command/load_command.hpp"
#include "command/load_inputs.hpp"
#include "multipack/cuda/device_loader.hpp"
#include "multipack/cuda/error.hpp"
#include "multipack/cuda/resources.hpp"

namespace multipack::bench {

struct device_totals {
  std::uint64_t copies = 0;
  std::uint64_t bytes_copied = 0;
  double copy_seconds = 0;  // timed copies' summed time
  std::uint64_t timed_bytes = 0;
  double trainer_wait_seconds = 0;   // the trainer's stream, waiting for copies
  double trainer_span_seconds = 0;   // the trainer's stream, first batch to the end
  std::uint64_t pinned_allocations_after_start = 0;
  double pinned_peak_bytes_per_second = 0;
  double pageable_bytes_per_second = 0;
  std::size_t batches_in_flight = 0;

  [[nodiscard]] double h2d_bytes_per_second() const {
    return copy_seconds > 0 ? static_cast<double>(timed_bytes) / copy_seconds : 0.0;
  }
  [[nodiscard]] double trainer_wait_fraction() const {
    return trainer_span_seconds > 0 ? trainer_wait_seconds / trainer_span_seconds : 0.0;
  }
};

namespace detail {

/// Timed event pairs around each batch's wait on the trainer's stream, reused in a ring;
/// a pair's time is added when the pair comes round again (long complete by then) or at the end.
class stream_wait_meter {
 public:
  explicit stream_wait_meter(std::size_t pairs) {
    for (std::size_t i = 0; i < pairs; ++i) pairs_.push_back({cuda::event(true), cuda::event(true), false});
  }
  /// Records the pair's first event, before the batch's wait is queued on `stream`.
  void before(cudaStream_t stream) {
    pair& p = pairs_[next_ % pairs_.size()];
    if (p.used) harvest(p);
    p.before.record(stream);
  }
  /// Records the pair's second event, after the wait.
  void after(cudaStream_t stream) {
    pair& p = pairs_[next_ % pairs_.size()];
    p.after.record(stream);
    p.used = true;
    ++next_;
  }
  /// Every pair's time; the stream must have been synchronized.
  double finish() {
    for (pair& p : pairs_)
      if (p.used) harvest(p);
    return seconds_;
  }

 private:
  struct pair {
    cuda::event before;
    cuda::event after;
    bool used;
  };
  void harvest(pair& p) {
    p.after.synchronize();
    seconds_ += static_cast<double>(cuda::event::elapsed_ms(p.before, p.after)) * 1e-3;
    p.used = false;
  }
  std::vector<pair> pairs_;
  std::size_t next_ = 0;
  double seconds_ = 0;
};

/// Bytes a second of `count` host-to-device copies of `bytes` bytes from `source` into
/// `target`, back to back on `stream`, timed by events around them all.
inline double copy_rate(const void* source, void* target, std::size_t bytes, std::uint64_t count, cudaStream_t stream) {
  if (bytes == 0 || count == 0) return 0.0;
  // One copy first: the first touch of a pageable buffer's pages is not what is measured.
  MULTIPACK_CUDA_CHECK(cudaMemcpyAsync(target, source, bytes, cudaMemcpyHostToDevice, stream));
  const cuda::event start(true);
  const cuda::event end(true);
  start.record(stream);
  for (std::uint64_t i = 0; i < count; ++i)
    MULTIPACK_CUDA_CHECK(cudaMemcpyAsync(target, source, bytes, cudaMemcpyHostToDevice, stream));
  end.record(stream);
  end.synchronize();
  const double seconds = static_cast<double>(cuda::event::elapsed_ms(start, end)) * 1e-3;
  return seconds > 0 ? static_cast<double>(bytes) * static_cast<double>(count) / seconds : 0.0;
}

}  // namespace detail

/// The epochs of the run through one device_epoch_loader, filling the host totals as the host
/// run does (batches, tokens, the time next() blocked, the wait for each later epoch's first
/// batch) and returning the device's. Its pinned and device buffers serve every epoch.
template <batch_token T>
device_totals run_device_epochs(const load_command_options& o, const load_inputs& in, load_totals& t) {
  using loader_type = cuda::device_epoch_loader<typename load_inputs::dataset_type, T>;
  if (!cuda::device_available())
    throw cuda_error(cudaErrorNoDevice, "--device: no CUDA device to load to (" + cuda::no_device_reason() + ")");
  const cuda::device_options device{o.batches_in_flight, false, true};
  device_totals d;
  d.batches_in_flight = o.batches_in_flight;
  const std::uint64_t limit = o.max_steps == 0 ? std::numeric_limits<std::uint64_t>::max() : o.max_steps;
  cuda::stream trainer;
  detail::stream_wait_meter meter(64);
  const cuda::event span_start(true);
  const cuda::event span_end(true);
  bool first_call = true;
  {
    progress p(fmt::format("loading rank {}'s batches of {} epoch(s) to the device ({} thread(s), depth {}, {} in flight)",
                           o.rank, o.epochs, o.threads, o.depth, o.batches_in_flight));
    const clock::time_point start = clock::now();
    auto loader = std::make_unique<loader_type>(in.dataset, in.planner(o.schedule.epoch), o.rank, in.batching,
                                                in.prefetch, device, epoch_range{o.schedule.epoch, o.epochs, o.schedule.start_step});
    t.startup_seconds = seconds_since(start);
    t.rss_before_first_batch_bytes = pipeline_rss_bytes();
    const std::uint64_t pinned_at_start = loader->pinned_memory()->allocations();
    while (t.batches < limit) {
      const auto asked = clock::now();
      auto batch = loader->next();
      if (!first_call) t.wait_seconds += seconds_since(asked);
      if (!batch) break;
      t.add_batch(batch->view());
      if (first_call) {
        batch->wait(trainer.get());
        span_start.record(trainer.get());
        first_call = false;
      } else {
        meter.before(trainer.get());
        batch->wait(trainer.get());
        meter.after(trainer.get());
      }
      if (o.step_ms > 0) launch_busy_wait(trainer.get(), o.step_ms);
      batch->release(trainer.get());
    }
    const cuda::device_statistics s = loader->statistics();
    d.copies = s.copies;
    d.bytes_copied = s.bytes_copied;
    d.copy_seconds = s.copy_seconds;
    d.timed_bytes = s.timed_bytes;
    d.pinned_allocations_after_start = loader->pinned_memory()->allocations() - pinned_at_start;
    t.add_epoch_loader(loader->host_statistics());
    span_end.record(trainer.get());
    trainer.synchronize();
    t.seconds = seconds_since(start);
    const clock::time_point closing = clock::now();
    loader.reset();
    t.close_seconds = seconds_since(closing);
  }
  d.trainer_wait_seconds = meter.finish();
  if (!first_call) d.trainer_span_seconds = static_cast<double>(cuda::event::elapsed_ms(span_start, span_end)) * 1e-3;

  // The peaks, in the same run: copies of the mean batch's bytes, as many as the loader made
  // (at most 1000; pageable at most 100, it is slow).
  const std::size_t bytes = static_cast<std::size_t>(d.bytes_copied / std::max<std::uint64_t>(d.copies, 1));
  if (bytes > 0) {
    progress p(fmt::format("copying {} bytes {} times from pinned and from pageable memory", bytes,
                           std::min<std::uint64_t>(d.copies, 1000)));
    cuda::pinned_memory_resource pinned;
    void* from_pinned = pinned.allocate(bytes, 256);
    std::vector<std::byte> pageable(bytes, std::byte{1});
    cuda::device_memory target(bytes);
    MULTIPACK_CUDA_CHECK(cudaMemsetAsync(target.data(), 0, bytes, trainer.get()));
    std::fill_n(static_cast<std::byte*>(from_pinned), bytes, std::byte{1});
    d.pinned_peak_bytes_per_second =
        detail::copy_rate(from_pinned, target.data(), bytes, std::min<std::uint64_t>(d.copies, 1000), trainer.get());
    d.pageable_bytes_per_second =
        detail::copy_rate(pageable.data(), target.data(), bytes, std::min<std::uint64_t>(d.copies, 100), trainer.get());
    trainer.synchronize();
    pinned.deallocate(from_pinned, bytes, 256);
  }
  return d;
}

}  // namespace multipack::bench
