#pragma once
// An allocator for the large flat arrays of a packing (hundreds of MB at 100 M samples).
// Large blocks are mapped directly and advised to use transparent huge pages: first touch
// of 4 KiB pages dominated packing time on virtual machines (a fault per 4 KiB), and one
// 2 MiB page replaces 512 of them. Small blocks, and non-Linux systems, use operator new.
// With `zero_filled`, a vector sized once skips the value-initialization of its elements: its
// blocks are zero already (fresh pages), and a piece's value is zero bytes; writing 12 bytes
// a piece of zeros was 15-20 % of packing time (exact-fit, 10 M samples at 4,096: 0.096-0.116 s
// to 0.083-0.089 s steady, old and new alternating).

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace multipack::detail {

/// Tag for huge_page_allocator's zero-filled mode.
struct zero_filled_t {
  explicit zero_filled_t() = default;
};
inline constexpr zero_filled_t zero_filled{};

template <class T>
struct huge_page_allocator {
  using value_type = T;
  static constexpr std::size_t threshold = std::size_t{4} << 20;
  static constexpr std::size_t huge_page = std::size_t{2} << 20;

  huge_page_allocator() noexcept = default;
  /// Zero-filled mode, for a vector sized once whose T is value-initialized as zero bytes
  /// (piece, arithmetic types): every block is zero when allocated (fresh pages; small blocks
  /// are cleared), and value-initializing an element (resize, the size constructor) writes
  /// nothing. A shrink followed by a growth would leave the old elements' bytes: not for such
  /// vectors. Copies of the vector use the plain mode.
  explicit huge_page_allocator(zero_filled_t) noexcept
    requires std::is_trivially_copyable_v<T>
      : zero_filled_(true) {}
  template <class U>
  constexpr huge_page_allocator(const huge_page_allocator<U>& other) noexcept  // NOLINT: rebind
      : zero_filled_(other.zero_filled_) {}

  [[nodiscard]] huge_page_allocator select_on_container_copy_construction() const noexcept { return {}; }

  /// Value-initializes *p, or writes nothing in zero-filled mode (its bytes are zero).
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    if (!zero_filled_) ::new (static_cast<void*>(p)) U();
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) noexcept(std::is_nothrow_constructible_v<U, Args...>) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__)
    if (bytes >= threshold) {
      void* p = mmap(nullptr, round_up(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      madvise(p, round_up(bytes), MADV_HUGEPAGE);  // advice only: failure is harmless
      return static_cast<T*>(p);
    }
#endif
    void* p = ::operator new(bytes);
    if (zero_filled_) std::memset(p, 0, bytes);
    return static_cast<T*>(p);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__)
    if (bytes >= threshold) {
      munmap(p, round_up(bytes));
      return;
    }
#endif
    ::operator delete(p);
  }

  template <class U>
  friend constexpr bool operator==(const huge_page_allocator&, const huge_page_allocator<U>&) noexcept {
    return true;
  }

 private:
  template <class>
  friend struct huge_page_allocator;

  bool zero_filled_ = false;

  static constexpr std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + huge_page - 1) / huge_page * huge_page;
  }
};

/// A vector for arrays of one element a sample or a piece.
template <class T>
using large_vector = std::vector<T, huge_page_allocator<T>>;

}  // namespace multipack::detail
