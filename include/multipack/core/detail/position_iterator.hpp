#pragma once
// A random-access iterator over positions [0, n) of a source, yielding Access{}(source, i):
// the iterator of every range in multipack that is "element i of something" (a dataset's
// samples, a packing's rows, a schedule's steps). 16 bytes: a pointer and a position.

#include <compare>
#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

namespace multipack::detail {

template <class Source, class Access>
class position_iterator {
 public:
  using reference = decltype(Access{}(std::declval<const Source&>(), std::size_t{}));
  using value_type = std::remove_cvref_t<reference>;
  using difference_type = std::ptrdiff_t;
  using iterator_concept = std::random_access_iterator_tag;
  using iterator_category = std::input_iterator_tag;  // elements are values (C++17 iterators need references)

  position_iterator() = default;
  position_iterator(const Source* source, std::size_t i) noexcept : source_(source), i_(i) {}

  reference operator*() const { return Access{}(*source_, i_); }
  reference operator[](difference_type n) const {
    return Access{}(*source_, static_cast<std::size_t>(static_cast<difference_type>(i_) + n));
  }
  position_iterator& operator++() noexcept { ++i_; return *this; }
  position_iterator operator++(int) noexcept { auto copy = *this; ++i_; return copy; }
  position_iterator& operator--() noexcept { --i_; return *this; }
  position_iterator operator--(int) noexcept { auto copy = *this; --i_; return copy; }
  position_iterator& operator+=(difference_type n) noexcept {
    i_ = static_cast<std::size_t>(static_cast<difference_type>(i_) + n);
    return *this;
  }
  position_iterator& operator-=(difference_type n) noexcept { return *this += -n; }
  friend position_iterator operator+(position_iterator it, difference_type n) noexcept { return it += n; }
  friend position_iterator operator+(difference_type n, position_iterator it) noexcept { return it += n; }
  friend position_iterator operator-(position_iterator it, difference_type n) noexcept { return it -= n; }
  friend difference_type operator-(const position_iterator& a, const position_iterator& b) noexcept {
    return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
  }
  friend bool operator==(const position_iterator& a, const position_iterator& b) noexcept { return a.i_ == b.i_; }
  friend std::strong_ordering operator<=>(const position_iterator& a, const position_iterator& b) noexcept {
    return a.i_ <=> b.i_;
  }

  /// The position. O(1).
  [[nodiscard]] std::size_t position() const noexcept { return i_; }

  /// What the source knows of its samples and packing, where it does, so that a subrange of
  /// these iterators still leads to them (see resolves_samples). O(1).
  [[nodiscard]] auto samples() const
    requires requires(const Source& s) { s.samples(); }
  {
    return source_->samples();
  }
  [[nodiscard]] auto packing_options() const
    requires requires(const Source& s) { s.packing_options(); }
  {
    return source_->packing_options();
  }

 private:
  const Source* source_ = nullptr;
  std::size_t i_ = 0;
};

}  // namespace multipack::detail
