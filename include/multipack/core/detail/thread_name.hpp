#pragma once
// Names for the threads multipack starts, so that an operator can tell them from the
// trainer's: top -H, gdb, perf and py-spy show them, as /proc/<pid>/task/<tid>/comm does.

#if defined(__linux__)
#include <pthread.h>
#endif

namespace multipack::detail {

// Every name starts with "multipack-": the threads of a process that are multipack's.

/// A prefetcher's workers, which build the batches.
inline constexpr char batch_thread_name[] = "multipack-batch";
/// An epoch loader's thread, which plans the later epochs.
inline constexpr char plan_thread_name[] = "multipack-plan";
/// pack()'s threads for its passes over the samples and its two halves (pack_options::threads).
inline constexpr char pack_thread_name[] = "multipack-pack";

/// Names the calling thread `name` (at most 15 characters: Linux's limit). O(1). Nothing
/// depends on it: where the name cannot be set (another system, a failure), the thread keeps
/// the one it has. Never throws.
inline void name_this_thread(const char* name) noexcept {
#if defined(__linux__)
  (void)pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

}  // namespace multipack::detail
