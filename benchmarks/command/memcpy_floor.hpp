#pragma once
// The floor of `load`, measured in the same run: a memcpy of the same bytes in batch-sized
// blocks, from memory (not the cache), on one thread and on the loader's threads.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <latch>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "command/common.hpp"
#include "multipack/core/detail/huge_page_allocator.hpp"

namespace multipack::bench {

namespace detail {

/// The last-level cache in bytes as the C library reports it, 32 MiB where it reports none.
inline std::uint64_t last_level_cache_bytes() {
  for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long size = ::sysconf(name);
    if (size > 0) return static_cast<std::uint64_t>(size);
  }
  return std::uint64_t{32} << 20;
}

/// Two buffers larger than the last-level cache, touched once, between which the floor copies.
class memcpy_floor {
 public:
  /// Each buffer: twice the last-level cache the C library reports, within [64 MiB, 256 MiB]
  /// (a virtual machine may report the whole socket's L3, of which one core sees a part), and
  /// at least `threads` x `block` bytes.
  /// `requested`: the size of each buffer instead (0: the rule above), still at least
  /// `threads` x `block` bytes.
  memcpy_floor(std::size_t block, unsigned threads, std::uint64_t requested)
      : block_(std::max<std::size_t>(block, 64)),
        size_(buffer_size(block_, threads, requested)),
        source_(size_, std::byte{0x5a}),
        target_(size_) {}

  [[nodiscard]] std::size_t buffer_bytes() const noexcept { return size_; }

  /// Bytes a second of copying `bytes` bytes (at least one pass over the buffer, for a stable
  /// figure) in blocks of `block` bytes, split over `threads` threads, each on its own part of
  /// the buffers, cycling through it so that every block comes from memory, not the cache.
  double bytes_per_second(std::uint64_t bytes, unsigned threads) {
    bytes = std::max<std::uint64_t>(bytes, size_);
    const std::size_t region = size_ / threads / 64 * 64;
    const std::size_t block = std::min(block_, region);
    const std::uint64_t each = (bytes + threads - 1) / threads;
    std::latch ready(threads);
    std::latch go(1);
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (unsigned t = 0; t < threads; ++t)
      workers.emplace_back([&, t] {
        std::byte* const from = source_.data() + t * region;
        std::byte* const to = target_.data() + t * region;
        ready.count_down();
        go.wait();
        std::size_t at = 0;
        for (std::uint64_t done = 0; done < each;) {
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block, each - done));
          if (at + n > region) at = 0;
          std::memcpy(to + at, from + at, n);
          do_not_optimize(to[at]);
          at += n;
          done += n;
        }
      });
    ready.wait();
    const auto start = clock::now();
    go.count_down();
    for (std::thread& w : workers) w.join();
    const double seconds = seconds_since(start);
    return seconds > 0 ? static_cast<double>(each * threads) / seconds : 0.0;
  }

 private:
  static std::size_t buffer_size(std::size_t block, unsigned threads, std::uint64_t requested) {
    constexpr std::uint64_t mib = std::uint64_t{1} << 20;
    const std::uint64_t size =
        requested != 0 ? requested : std::clamp<std::uint64_t>(2 * last_level_cache_bytes(), 64 * mib, 256 * mib);
    return static_cast<std::size_t>(std::max<std::uint64_t>(size, std::uint64_t{threads} * block));
  }

  std::size_t block_;
  std::size_t size_;
  // Huge pages where the system has them: first touch is far cheaper in 2 MiB pages,
  // especially in a virtual machine. Both are filled (touched) when made.
  multipack::detail::large_vector<std::byte> source_;
  multipack::detail::large_vector<std::byte> target_;
};

}  // namespace detail

/// What the floor measured.
struct memcpy_figures {
  double bytes_per_second = 0;             // on the loader's threads
  double bytes_per_second_one_thread = 0;
  std::size_t buffer_bytes = 0;
};

/// Copies `bytes` bytes in blocks of bytes / batches (the mean batch), on one thread and on
/// `threads`. Bounded: two buffers of at most 256 MiB (or `buffer_mib`) or a batch a thread.
inline memcpy_figures measure_memcpy_floor(std::uint64_t bytes, std::uint64_t batches, unsigned threads,
                                           std::uint64_t buffer_mib) {
  const std::size_t block = static_cast<std::size_t>(bytes / std::max<std::uint64_t>(batches, 1));
  detail::memcpy_floor floor(block, threads, buffer_mib << 20);
  memcpy_figures f;
  f.buffer_bytes = floor.buffer_bytes();
  progress p(fmt::format("copying {} bytes for the memcpy floor", bytes));
  f.bytes_per_second_one_thread = floor.bytes_per_second(bytes, 1);
  f.bytes_per_second = threads == 1 ? f.bytes_per_second_one_thread : floor.bytes_per_second(bytes, threads);
  return f;
}

}  // namespace multipack::bench
