#pragma once
// moodycamel's blocking concurrent queue, wherever it is installed: upstream, vcpkg and Conan
// put it under <moodycamel/...> (or the include root), Debian under <concurrentqueue/...>.

#if __has_include(<concurrentqueue/blockingconcurrentqueue.h>)
#include <concurrentqueue/blockingconcurrentqueue.h>
#elif __has_include(<moodycamel/blockingconcurrentqueue.h>)
#include <moodycamel/blockingconcurrentqueue.h>
#elif __has_include(<blockingconcurrentqueue.h>)
#include <blockingconcurrentqueue.h>
#else
#error "multipack: moodycamel's concurrentqueue is not on the include path"
#endif

#include <cstddef>
#include <new>

namespace multipack::detail {

/// The queue's memory comes from operator new (nothrow: the queue reports failure itself),
/// so that whatever replaces or counts the program's allocations sees the queue's too. A wait
/// sleeps at once rather than spinning first (moodycamel's default spins 10,000 times): a
/// waiting trainer or idle worker would otherwise take a core from the workers that build
/// batches (two workers on two cores went from 1.35x to 1.57x one worker).
struct queue_traits : moodycamel::ConcurrentQueueDefaultTraits {
  static constexpr int MAX_SEMA_SPINS = 0;
  static void* malloc(std::size_t size) noexcept { return ::operator new(size, std::nothrow); }
  static void free(void* pointer) noexcept { ::operator delete(pointer); }
};

template <class T>
using blocking_queue = moodycamel::BlockingConcurrentQueue<T, queue_traits>;

}  // namespace multipack::detail
