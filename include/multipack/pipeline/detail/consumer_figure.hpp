#pragma once
// A statistic that the consumer thread alone updates and any thread may read: a trainer's
// monitoring thread, or close() called from another thread (which reads the last figures),
// while the consumer waits in next().

#include <algorithm>
#include <atomic>

namespace multipack::detail {

/// One writer (the consumer thread), any readers. Relaxed atomics: the writer's updates are a
/// load and a store, plain moves on x86-64 and AArch64 (no locked instruction), so next()
/// costs what it did with plain fields; a reader sees a value the writer stored, and figures
/// read one after another may come from two successive next() calls.
template <class T>
class consumer_figure {
 public:
  consumer_figure() = default;
  consumer_figure(const consumer_figure&) = delete;
  consumer_figure& operator=(const consumer_figure&) = delete;

  [[nodiscard]] T get() const noexcept { return value_.load(std::memory_order_relaxed); }
  /// Writer only.
  void add(T delta) noexcept { value_.store(get() + delta, std::memory_order_relaxed); }
  /// Writer only: keeps the larger of the figure and `candidate`.
  void raise_to(T candidate) noexcept { value_.store(std::max(get(), candidate), std::memory_order_relaxed); }

 private:
  std::atomic<T> value_{};
};

}  // namespace multipack::detail
