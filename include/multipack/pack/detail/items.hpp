#pragma once
// The first pass shared by every packer: what each sample becomes under the overlong policy
// (its items: pieces of at most one row), the histogram of item lengths, and the report's
// per-cause counts. And the last pass of the histogram-based packers: handing each slot of a
// given length, in placement order, to the samples of that length in index order.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "multipack/core/error.hpp"
#include "multipack/core/packed_rows.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/pack/options.hpp"
#include "multipack/pack/report.hpp"

namespace multipack::detail {

inline constexpr std::uint32_t no_slot = UINT32_MAX;

/// What one sample becomes: `full_pieces` pieces of exactly `capacity` tokens (split only),
/// then one item of `tail` tokens (0: none).
struct sample_items {
  std::uint32_t full_pieces = 0;
  std::uint32_t tail = 0;
};

[[nodiscard]] inline sample_items items_of(std::uint32_t length, std::uint32_t capacity,
                                           overlong_policy policy) noexcept {
  if (length <= capacity) return {0, length};
  switch (policy) {
    case overlong_policy::truncate: return {0, capacity};
    case overlong_policy::split: return {length / capacity, length % capacity};
    default: return {0, 0};
  }
}

/// Calls visit(piece) for each item of sample i, in token order.
template <class Visit>
void for_each_piece_of(std::uint32_t sample, std::uint32_t length, const pack_options& options,
                       Visit&& visit) {
  const sample_items items = items_of(length, options.capacity, options.overlong);
  for (std::uint32_t k = 0; k < items.full_pieces; ++k)
    visit(piece{sample, k * options.capacity, (k + 1) * options.capacity});
  if (items.tail != 0) {
    const std::uint32_t begin = items.full_pieces == 0 ? 0 : length - items.tail;
    visit(piece{sample, begin, begin + items.tail});
  }
}

/// Items of every length, and how many items and samples there are.
struct item_histogram {
  std::vector<std::uint32_t> count;  ///< count[l]: items of length l, l in [1, capacity]
  std::uint64_t items = 0;
  std::uint32_t shortest = 0;        ///< the shortest item's length (0 if none)
  std::uint32_t longest = 0;
};

/// Pass one: classifies every sample, fills the report's counts, returns the histogram.
/// Throws sample_error for an overlong sample under overlong_policy::error.
[[nodiscard]] inline item_histogram classify(std::span<const std::uint32_t> lengths,
                                             const pack_options& options, pack_report& report) {
  const std::uint32_t capacity = options.capacity;
  item_histogram histogram;
  histogram.count.assign(std::size_t{capacity} + 1, 0);
  report = pack_report{};
  report.capacity = capacity;
  report.samples = lengths.size();
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::uint32_t length = lengths[i];
    report.tokens += length;
    if (length == 0) {
      ++report.empty_samples;
      continue;
    }
    if (length > capacity) {
      switch (options.overlong) {
        case overlong_policy::drop:
          ++report.dropped_samples;
          report.dropped_tokens += length;
          continue;
        case overlong_policy::error:
          throw sample_error("sample " + std::to_string(i) + " has " + std::to_string(length) +
                             " tokens, more than the row capacity " + std::to_string(capacity) +
                             " (choose overlong policy drop, truncate or split)");
        case overlong_policy::truncate:
          ++report.truncated_samples;
          report.truncated_tokens += length - capacity;
          break;
        case overlong_policy::split:
          ++report.split_samples;
          break;
      }
    }
    const sample_items items = items_of(length, capacity, options.overlong);
    histogram.count[capacity] += items.full_pieces;
    histogram.count[items.tail] += items.tail != 0 ? 1 : 0;
    histogram.items += items.full_pieces + (items.tail != 0 ? 1 : 0);
    report.packed_tokens += std::uint64_t{items.full_pieces} * capacity + items.tail;
    ++report.packed_samples;
  }
  if (histogram.items >= no_slot)
    throw option_error("pack: " + std::to_string(histogram.items) +
                       " pieces to pack; at most 2^32 - 2 are supported");
  report.pieces = histogram.items;
  report.lower_bound = (report.packed_tokens + capacity - 1) / capacity;
  for (std::uint32_t l = 1; l <= capacity; ++l)
    if (histogram.count[l] != 0) {
      if (histogram.shortest == 0) histogram.shortest = l;
      histogram.longest = l;
    }
  return histogram;
}

/// Slots of each length, linked in the order they were created, through the `sample` field
/// of the slot pieces themselves (no memory per slot beyond the piece).
class slot_lists {
 public:
  explicit slot_lists(std::uint32_t capacity)
      : head_(std::size_t{capacity} + 1, no_slot), tail_(std::size_t{capacity} + 1, no_slot) {}

  /// Makes pieces[position] the next slot of `length`.
  void add(piece_vector& pieces, std::size_t position, std::uint32_t length) noexcept {
    const auto slot = static_cast<std::uint32_t>(position);
    pieces[position] = piece{no_slot, 0, length};
    if (tail_[length] == no_slot)
      head_[length] = slot;
    else
      pieces[tail_[length]].sample = slot;
    tail_[length] = slot;
  }

  /// Last pass: gives every sample the next slot(s) of its items' lengths, samples taken in
  /// the order in which for_each_sample(visit) calls visit(i) (each index once).
  template <class ForEachSample>
  void assign(piece_vector& pieces, std::span<const std::uint32_t> lengths, const pack_options& options,
              ForEachSample&& for_each_sample) noexcept {
    for_each_sample([&](std::size_t i) {
      for_each_piece_of(static_cast<std::uint32_t>(i), lengths[i], options,
                        [&](const piece& p) { take(pieces, p.length()) = p; });
    });
  }

 private:
  piece& take(piece_vector& pieces, std::uint32_t length) noexcept {
    piece& slot = pieces[head_[length]];
    head_[length] = slot.sample;
    return slot;
  }

  std::vector<std::uint32_t> head_;
  std::vector<std::uint32_t> tail_;
};

}  // namespace multipack::detail
