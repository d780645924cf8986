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
/// so that whatever replaces or counts the program's allocations sees the queue's too.
struct queue_traits : moodycamel::ConcurrentQueueDefaultTraits {
  static void* malloc(std::size_t size) noexcept { return ::operator new(size, std::nothrow); }
  static void free(void* pointer) noexcept { ::operator delete(pointer); }
};

template <class T>
using blocking_queue = moodycamel::BlockingConcurrentQueue<T, queue_traits>;

}  // namespace multipack::detail
