#pragma once
// The prefetcher: worker threads build the batches of steps [first, end) ahead of the
// consumer, into a fixed pool of reusable buffers, and hand them over in step order.
//
// - Order: the consumer receives step s before step s + 1, whatever the number of threads.
//   Workers claim steps in order, each when it holds a free buffer, so at most `depth`
//   batches exist ahead of the consumer and memory is bounded by depth buffers.
// - Blocking, not polling: workers wait on the queue of free buffers, the consumer on the
//   queue of built ones (moodycamel's blocking queues, on semaphores), after polling a few
//   microseconds (detail/blocking_queue.hpp says why).
// - No allocation per batch once every buffer and queue block has been used once.
// - A worker's exception reaches the consumer at the step where it was thrown; the batches
//   before it are delivered first; the other workers stop claiming steps.
// - Stopping early: the destructor tells the workers to stop, wakes those waiting for a
//   buffer, and joins them; a worker building a batch finishes that batch first, so the
//   destructor returns within one batch's build time.
// - Open-ended: a prefetcher may also run with no known end (an epoch_loader's steps span
//   epochs whose lengths are known only once planned): its build function says, by returning
//   false, that a step is past the end, and next() then returns std::nullopt.
// - A batch may outlive the prefetcher: the pool of buffers is shared by the prefetcher and
//   every lease (libtorch tensors over a batch keep theirs until the last tensor dies), and
//   goes when the last of them does.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "multipack/core/detail/thread_name.hpp"
#include "multipack/core/error.hpp"
#include "multipack/pipeline/detail/blocking_queue.hpp"
#include "multipack/pipeline/detail/consumer_figure.hpp"

namespace multipack {

struct prefetch_options {
  unsigned threads = 1;   ///< worker threads building batches
  std::size_t depth = 4;  ///< buffers, hence batches that may exist ahead of the consumer
};

/// Throws option_error for 0 threads, a depth of 0, more than 1024 threads or more than
/// 65,536 buffers (a negative depth through an int wraps to a huge one). O(1).
inline void validate(const prefetch_options& options) {
  if (options.threads == 0) throw option_error("prefetch_options: threads must be at least 1");
  if (options.threads > 1024)
    throw option_error("prefetch_options: " + std::to_string(options.threads) + " threads; at most 1024 are supported");
  if (options.depth == 0) throw option_error("prefetch_options: depth must be at least 1 buffer");
  if (options.depth > 65536)
    throw option_error("prefetch_options: depth " + std::to_string(options.depth) +
                       "; at most 65536 buffers are supported");
}

/// What the prefetcher measured so far.
struct prefetch_statistics {
  std::uint64_t batches = 0;             ///< batches handed to the consumer
  double consumer_wait_seconds = 0;      ///< time next() blocked, after the first batch
  double producer_busy_seconds = 0;      ///< time spent building, summed over the workers
  double elapsed_seconds = 0;            ///< since construction
  std::size_t max_ready = 0;             ///< most batches found built ahead of the consumer at a next()
  double mean_ready = 0;                 ///< their mean over the next() calls
  double max_wait_seconds = 0;           ///< the longest single wait of next(), after the first batch
};

template <class Buffer>
class prefetcher {
  struct built {
    std::uint64_t step = 0;
    Buffer* buffer = nullptr;
    std::exception_ptr error;
    bool past_end = false;  // the build said the sequence has no such step
  };
  /// The buffers and the queue of free ones: shared by the prefetcher and its leases.
  struct pool {
    explicit pool(std::size_t capacity) : free(capacity) {}
    std::vector<std::unique_ptr<Buffer>> buffers;
    detail::blocking_queue<Buffer*> free;
    std::atomic<std::size_t> held{0};  // leases not yet released (a lease may be released on any thread)

    void give_back(Buffer* buffer) noexcept {
      held.fetch_sub(1, std::memory_order_acq_rel);
      detail::enqueue_or_abort(free, buffer);
    }
  };

 public:
  /// Builds `buffer` for `step`. Called from the worker threads, several at once (on
  /// different buffers and steps): it must be safe to call concurrently.
  using build_function = std::function<void(std::uint64_t step, Buffer& buffer)>;
  /// The open-ended form's: builds `buffer` for `step` and returns true, or returns false
  /// when the sequence ended before `step` (then it must return false for every later step).
  /// Called as build_function is.
  using open_build_function = std::function<bool(std::uint64_t step, Buffer& buffer)>;

  /// A built batch, on loan to the consumer until destroyed (or release()d): then its buffer
  /// goes back to the pool. It may outlive the prefetcher (it keeps the pool alive: one
  /// shared-pointer copy a batch). Move-only; may be released on any thread (a copy
  /// engine's callback, a tensor's deleter).
  class lease {
   public:
    lease() = default;
    lease(lease&& other) noexcept
        : owner_(std::move(other.owner_)), buffer_(other.buffer_), step_(other.step_) {}
    lease& operator=(lease&& other) noexcept {
      if (this != &other) {
        release();
        owner_ = std::move(other.owner_);
        buffer_ = other.buffer_;
        step_ = other.step_;
      }
      return *this;
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { release(); }

    [[nodiscard]] Buffer& operator*() const noexcept { return *buffer_; }
    [[nodiscard]] Buffer* operator->() const noexcept { return buffer_; }
    [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
    [[nodiscard]] explicit operator bool() const noexcept { return owner_ != nullptr; }

    /// Gives the buffer back now. O(1), never throws; idempotent. The first release on a
    /// thread allocates that thread's place in the queue (a few hundred bytes): if even that
    /// fails, the process aborts with a message rather than lose the buffer and hang next().
    void release() noexcept {
      if (owner_ != nullptr) std::exchange(owner_, nullptr)->give_back(buffer_);
    }

   private:
    friend class prefetcher;
    lease(std::shared_ptr<pool> owner, Buffer* buffer, std::uint64_t step) noexcept
        : owner_(std::move(owner)), buffer_(buffer), step_(step) {}
    std::shared_ptr<pool> owner_;
    Buffer* buffer_ = nullptr;
    std::uint64_t step_ = 0;
  };

  /// Makes options.depth buffers with make_buffer() and starts options.threads workers on
  /// steps [first_step, end_step). Throws option_error for bad options or first_step >
  /// end_step, whatever make_buffer throws, std::bad_alloc when the queues cannot allocate,
  /// std::system_error when a thread cannot start (the started ones are stopped first).
  /// Cost: depth buffers, threads threads.
  prefetcher(const prefetch_options& options, std::uint64_t first_step, std::uint64_t end_step,
             const std::function<Buffer()>& make_buffer, build_function build)
      : prefetcher(any_build{}, options, first_step, end_step, make_buffer, bounded(std::move(build))) {}

  /// The open-ended form: steps first_step, first_step + 1, ... until `build` returns false
  /// for one (see open_build_function); next() returns std::nullopt at that step. Throws and
  /// costs as the bounded form.
  prefetcher(const prefetch_options& options, std::uint64_t first_step, const std::function<Buffer()>& make_buffer,
             open_build_function build)
      : prefetcher(any_build{}, options, first_step, std::numeric_limits<std::uint64_t>::max(), make_buffer,
                   std::move(build)) {}

  prefetcher(const prefetcher&) = delete;
  prefetcher& operator=(const prefetcher&) = delete;

  /// Stops and joins the workers (see the header); returns within one batch's build time.
  /// Leases still held keep their buffers (and the pool) until released. Never throws.
  ~prefetcher() { stop(); }

  /// The next step's batch, in step order; blocks until it is built. std::nullopt once every
  /// step has been handed out. Rethrows the exception of the worker that failed on this step
  /// (and again at every later call). Throws option_error when every buffer is leased out
  /// (nothing could be built until one comes back): a lease handed to another thread counts
  /// until that thread has released it, and next() does not wait for it, so keep fewer than
  /// `depth` leases out when asking. Consumer thread only: not thread-safe.
  /// Cost: a queue operation; no allocation once warm.
  [[nodiscard]] std::optional<lease> next() {
    if (failure_) std::rethrow_exception(failure_);
    if (expected_ >= end_ || ended_) return std::nullopt;
    if (pool_->held.load(std::memory_order_acquire) == depth_)
      throw option_error("prefetcher: the consumer holds all " + std::to_string(depth_) +
                         " buffers; release a batch before asking for the next");
    built& slot = arrived_[expected_ % depth_];
    const std::size_t ready = arrived_count_ + ready_.size_approx();
    max_ready_.raise_to(ready);
    ready_sum_.add(static_cast<double>(ready));
    next_calls_.add(1);
    while (slot.buffer == nullptr) {
      built item;
      if (delivered_.get() == 0) {
        ready_.wait_dequeue(item);
      } else {
        const auto start = clock::now();
        ready_.wait_dequeue(item);
        const clock::rep waited = (clock::now() - start).count();
        wait_.add(waited);
        max_wait_.raise_to(waited);
      }
      arrived_[item.step % depth_] = std::move(item);
      ++arrived_count_;
    }
    built item = std::exchange(slot, built{});
    --arrived_count_;
    if (item.error) {
      // The buffer of the failed build goes back; the failure stays for later calls.
      detail::enqueue_or_abort(pool_->free, item.buffer);
      failure_ = item.error;
      std::rethrow_exception(failure_);
    }
    if (item.past_end) {
      detail::enqueue_or_abort(pool_->free, item.buffer);
      ended_ = true;
      return std::nullopt;
    }
    ++expected_;
    delivered_.add(1);
    pool_->held.fetch_add(1, std::memory_order_acq_rel);
    return lease(pool_, item.buffer, item.step);
  }

  /// Statistics so far. Thread-safe: any thread may ask while the consumer waits in next()
  /// (each figure is one next() stored; two may come from successive calls). O(1).
  [[nodiscard]] prefetch_statistics statistics() const {
    prefetch_statistics s;
    s.batches = delivered_.get();
    s.consumer_wait_seconds = std::chrono::duration<double>(clock::duration(wait_.get())).count();
    s.producer_busy_seconds = static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9;
    s.elapsed_seconds = std::chrono::duration<double>(clock::now() - start_).count();
    s.max_ready = max_ready_.get();
    const std::uint64_t calls = next_calls_.get();
    s.mean_ready = calls == 0 ? 0.0 : ready_sum_.get() / static_cast<double>(calls);
    s.max_wait_seconds = std::chrono::duration<double>(clock::duration(max_wait_.get())).count();
    return s;
  }

  [[nodiscard]] std::uint64_t end_step() const noexcept { return end_; }
  [[nodiscard]] std::size_t depth() const noexcept { return depth_; }

 private:
  using clock = std::chrono::steady_clock;
  static constexpr std::size_t spare_items = 2 * detail::queue_traits::BLOCK_SIZE;  // two blocks

  struct any_build {};  // selects the constructor both public ones delegate to
  prefetcher(any_build, const prefetch_options& options, std::uint64_t first_step, std::uint64_t end_step,
             const std::function<Buffer()>& make_buffer, open_build_function build)
      : build_((validate(options), std::move(build))),  // first: the queues below are sized by the options
        next_step_(first_step),
        expected_(first_step),
        end_(end_step),
        depth_(options.depth),
        // Each queue gets spare blocks beyond what its items need: a dequeuer preempted between
        // taking a block's last item and handing the block back would otherwise leave the
        // producer no free block, and it would allocate one mid-epoch (seen under load).
        pool_(std::make_shared<pool>(options.depth + options.threads + spare_items)),
        // Blocks for every worker's first enqueue, allocated now rather than at a batch.
        ready_(options.depth + 1 + spare_items, options.threads, 1),
        arrived_(options.depth),
        start_(clock::now()) {
    if (first_step > end_step)
      throw option_error("prefetcher: first step " + std::to_string(first_step) + " is after the end, " +
                         std::to_string(end_step));
    if (!build_) throw option_error("prefetcher: no build function");
    pool_->buffers.reserve(depth_);
    for (std::size_t i = 0; i < depth_; ++i) {
      pool_->buffers.push_back(std::make_unique<Buffer>(make_buffer()));
      if (!pool_->free.enqueue(pool_->buffers.back().get())) throw std::bad_alloc();
    }
    // An explicit producer per worker, made here rather than by the worker: a worker that
    // starts late would otherwise allocate it in the middle of the epoch.
    tokens_.reserve(options.threads);
    for (unsigned t = 0; t < options.threads; ++t) {
      tokens_.emplace_back(ready_);
      if (!tokens_.back().valid()) throw std::bad_alloc();  // moodycamel reports it so
    }
    workers_.reserve(options.threads);
    try {
      for (unsigned t = 0; t < options.threads; ++t)
        workers_.emplace_back([this, t] {
          detail::name_this_thread(detail::batch_thread_name);
          work(tokens_[t]);
        });
    } catch (...) {
      stop();
      throw;
    }
  }

  // The bounded form's build as the open form's; an empty function stays empty (an error).
  static open_build_function bounded(build_function build) {
    if (!build) return {};
    return [build = std::move(build)](std::uint64_t step, Buffer& buffer) {
      build(step, buffer);
      return true;
    };
  }


  void work(moodycamel::ProducerToken& token) noexcept {
    for (;;) {
      Buffer* buffer = nullptr;
      pool_->free.wait_dequeue(buffer);
      if (buffer == nullptr || stopping_.load(std::memory_order_acquire)) return;
      const std::uint64_t step = next_step_.fetch_add(1, std::memory_order_relaxed);
      if (step >= end_) return;
      const auto start = clock::now();
      built item{step, buffer, nullptr};
      try {
        item.past_end = !build_(step, *buffer);
      } catch (...) {
        item.error = std::current_exception();
        // The steps before this one are claimed already and will be delivered; no later one
        // is needed.
        stopping_.store(true, std::memory_order_release);
      }
      busy_ns_.fetch_add(
          static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count()),
          std::memory_order_relaxed);
      // After a failure or the end no later step is needed: the steps before are claimed already.
      const bool last = item.error != nullptr || item.past_end;
      if (item.past_end) stopping_.store(true, std::memory_order_release);
      detail::enqueue_or_abort(ready_, token, std::move(item));
      if (last) return;
    }
  }

  void stop() noexcept {
    stopping_.store(true, std::memory_order_release);
    // One wake-up per worker: each returns at the first thing it dequeues once stopping.
    for (std::size_t i = 0; i < workers_.size(); ++i) detail::enqueue_or_abort(pool_->free, nullptr);
    for (std::thread& worker : workers_)
      if (worker.joinable()) worker.join();
  }

  open_build_function build_;
  std::atomic<std::uint64_t> next_step_;
  std::uint64_t expected_;
  std::uint64_t end_;  // max() for the open-ended form
  bool ended_ = false;  // the open-ended form's end was reached (consumer thread only)
  std::size_t depth_;
  std::shared_ptr<pool> pool_;
  detail::blocking_queue<built> ready_;
  std::vector<built> arrived_;  // built batches by step % depth, until their turn
  std::size_t arrived_count_ = 0;  // batches in arrived_: counted, not scanned for (O(1) a next())
  std::atomic<bool> stopping_{false};
  std::exception_ptr failure_;
  // The statistics: next() updates them, statistics() may read them from any thread.
  detail::consumer_figure<std::uint64_t> delivered_;
  std::atomic<std::uint64_t> busy_ns_{0};
  detail::consumer_figure<clock::rep> wait_;
  detail::consumer_figure<clock::rep> max_wait_;
  clock::time_point start_;
  detail::consumer_figure<std::size_t> max_ready_;
  detail::consumer_figure<double> ready_sum_;
  detail::consumer_figure<std::uint64_t> next_calls_;
  std::vector<moodycamel::ProducerToken> tokens_;
  std::vector<std::thread> workers_;
};

}  // namespace multipack
