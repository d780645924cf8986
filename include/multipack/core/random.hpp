#pragma once
// Specified pseudo-random generation, so that a plan is the same on every rank, compiler and
// standard library: std::shuffle and std::uniform_int_distribution are unspecified, these are
// not. splitmix64 (Steele, Lea, Flood 2014) for numbers, Lemire's multiply-shift with rejection
// for bounded draws, Fisher-Yates from the back for shuffles, and a Feistel network for a
// permutation of [0, n) that needs no memory.

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace multipack {

namespace detail {
__extension__ using uint128 = unsigned __int128;

/// The splitmix64 finalizer: a bijective 64-bit mix.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31U);
}
}  // namespace detail

/// The seed of one epoch: a pure function of (seed, epoch), different for every epoch. The
/// randomized packer and the schedule's order of rows both draw from it. Never throws; the
/// same on every platform.
[[nodiscard]] constexpr std::uint64_t epoch_seed(std::uint64_t seed, std::uint64_t epoch) noexcept {
  return detail::mix64(seed ^ detail::mix64(epoch + 0x9e3779b97f4a7c15ULL));
}

/// splitmix64: 64 bits of state, every seed valid. Not thread-safe; copy it per thread.
class splitmix64 {
 public:
  constexpr explicit splitmix64(std::uint64_t seed) noexcept : state_(seed) {}

  /// The next 64 random bits. O(1).
  constexpr std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;
    return detail::mix64(state_);
  }

  /// A uniform integer in [0, bound); bound must be > 0. O(1) expected (Lemire 2019).
  constexpr std::uint64_t below(std::uint64_t bound) noexcept {
    detail::uint128 m = detail::uint128{next()} * bound;
    auto low = static_cast<std::uint64_t>(m);
    if (low < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = detail::uint128{next()} * bound;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64U);
  }

 private:
  std::uint64_t state_;
};

/// Shuffles `items` with Fisher-Yates from the back, drawing from `rng`. O(n). The result is
/// a function of the input order and the generator's state only.
template <class T>
constexpr void shuffle(std::span<T> items, splitmix64& rng) noexcept {
  for (std::size_t i = items.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i));
    using std::swap;
    swap(items[i - 1], items[j]);
  }
}

/// A seeded bijection of [0, n) onto itself, computed on demand in O(1) expected time with no
/// memory: a 4-round Feistel network over the smallest even number of bits covering n, with
/// cycle-walking back into [0, n). Thread-safe (const).
class feistel_permutation {
 public:
  constexpr feistel_permutation(std::uint64_t n, std::uint64_t seed) noexcept : n_(n) {
    unsigned bits = 2;
    while (bits < 64 && (std::uint64_t{1} << bits) < n) bits += 2;
    half_bits_ = bits / 2;
    half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
    splitmix64 keys(seed);
    for (auto& key : keys_) key = keys.next();
  }

  [[nodiscard]] constexpr std::uint64_t size() const noexcept { return n_; }

  /// The image of i (i < size()).
  [[nodiscard]] constexpr std::uint64_t operator()(std::uint64_t i) const noexcept {
    do i = encrypt(i);
    while (i >= n_);
    return i;
  }

 private:
  [[nodiscard]] constexpr std::uint64_t encrypt(std::uint64_t x) const noexcept {
    std::uint64_t left = x >> half_bits_;
    std::uint64_t right = x & half_mask_;
    for (const std::uint64_t key : keys_) {
      const std::uint64_t next = left ^ (detail::mix64(right ^ key) & half_mask_);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  std::uint64_t n_;
  unsigned half_bits_ = 1;
  std::uint64_t half_mask_ = 1;
  std::uint64_t keys_[4] = {};
};

}  // namespace multipack
