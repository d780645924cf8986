#pragma once
// moodycamel's blocking concurrent queue, wherever it is installed: upstream and Conan put it
// under <moodycamel/...> (or the include root), Debian and vcpkg under <concurrentqueue/...>,
// upstream's `make install` under <concurrentqueue/moodycamel/...> of the include root.
// Checked in this order: the concurrentqueue::concurrentqueue target's copy (upstream's, Conan's) wins
// over a Debian copy in /usr/include, which a program including <moodycamel/...> itself would
// otherwise get twice (two files, two definitions of the queue).

#if __has_include(<moodycamel/blockingconcurrentqueue.h>)
#include <moodycamel/blockingconcurrentqueue.h>
#elif __has_include(<blockingconcurrentqueue.h>)
#include <blockingconcurrentqueue.h>
#elif __has_include(<concurrentqueue/blockingconcurrentqueue.h>)
#include <concurrentqueue/blockingconcurrentqueue.h>
#elif __has_include(<concurrentqueue/moodycamel/blockingconcurrentqueue.h>)
#include <concurrentqueue/moodycamel/blockingconcurrentqueue.h>
#else
#error "multipack: moodycamel's concurrentqueue is not on the include path"
#endif

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <utility>

namespace multipack::detail {

/// The queue's memory comes from operator new (nothrow: the queue reports failure itself),
/// so that whatever replaces or counts the program's allocations sees the queue's too. A wait
/// polls 2,000 times (a few microseconds) before it sleeps: a futex wake-up on each side of a
/// hand-off made a batch that needs no building cost 5.7 us at depth 4, 4.0 us with the short
/// spin (multipack-microbench --benchmark_filter=prefetch), with the loader's throughput
/// unchanged on two cores. moodycamel's default, 10,000, took a core from the workers that
/// build batches (two workers on two cores went from 1.57x to 1.35x one worker).
struct queue_traits : moodycamel::ConcurrentQueueDefaultTraits {
  static constexpr int MAX_SEMA_SPINS = 2000;
  static void* malloc(std::size_t size) noexcept { return ::operator new(size, std::nothrow); }
  static void free(void* pointer) noexcept { ::operator delete(pointer); }
};

template <class T>
using blocking_queue = moodycamel::BlockingConcurrentQueue<T, queue_traits>;

/// Enqueues where a failure cannot be reported: a lease released in a destructor, a worker
/// handing over a batch, a wake-up at shutdown. The queue fails only when it cannot allocate a
/// producer (a thread's first enqueue) or a block, and the lost item would leave its waiter
/// blocked forever; the process stops with a message instead.
template <class Queue, class... Item>
void enqueue_or_abort(Queue& queue, Item&&... item) noexcept {
  if (queue.enqueue(std::forward<Item>(item)...)) return;
  std::fputs("multipack: out of memory in a prefetch queue; aborting rather than waiting forever\n", stderr);
  std::abort();
}

}  // namespace multipack::detail
