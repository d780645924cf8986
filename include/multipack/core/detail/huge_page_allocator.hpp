#pragma once
// An allocator for the large flat arrays of a packing (hundreds of MB at 100 M samples).
// Large blocks are mapped directly and advised to use transparent huge pages: first touch
// of 4 KiB pages dominated packing time on virtual machines (a fault per 4 KiB), and one
// 2 MiB page replaces 512 of them. Small blocks, and non-Linux systems, use operator new.

#include <cstddef>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace multipack::detail {

template <class T>
struct huge_page_allocator {
  using value_type = T;
  static constexpr std::size_t threshold = std::size_t{4} << 20;
  static constexpr std::size_t huge_page = std::size_t{2} << 20;

  huge_page_allocator() noexcept = default;
  template <class U>
  constexpr huge_page_allocator(const huge_page_allocator<U>&) noexcept {}  // NOLINT: rebind

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
    return static_cast<T*>(::operator new(bytes));
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
  static constexpr std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + huge_page - 1) / huge_page * huge_page;
  }
};

/// A vector for arrays of one element a sample or a piece.
template <class T>
using large_vector = std::vector<T, huge_page_allocator<T>>;

}  // namespace multipack::detail
