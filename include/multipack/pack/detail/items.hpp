#pragma once
// The first pass shared by every packer: what each sample becomes under the overlong policy
// (its items: pieces of at most one row), the histogram of item lengths, and the report's
// per-cause counts. And how the histogram-based packers hand each slot of a given length, in
// the order the slots are created, to the samples of that length in a given sample order.

#include <algorithm>
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
  // Two bounds on rows, both exact for some inputs: the tokens, and the pieces over half a
  // row (no two of them share one).
  std::uint64_t over_half = 0;
  for (std::uint32_t l = 1; l <= capacity; ++l)
    if (histogram.count[l] != 0) {
      if (histogram.shortest == 0) histogram.shortest = l;
      histogram.longest = l;
      if (l > capacity / 2) over_half += histogram.count[l];
    }
  report.lower_bound = std::max<std::uint64_t>((report.packed_tokens + capacity - 1) / capacity, over_half);
  return histogram;
}

/// Hands samples to the slots the packers create: the k-th slot created of length l gets the
/// k-th item of length l in the sample order given to the constructor. Three passes, none at
/// random places of the pieces:
///  1. the constructor writes every item's sample index into the `begin` fields of the pieces,
///     bucketed by length (one bucket a length, at the histogram's prefix sums) in sample
///     order: one sequential stream a length;
///  2. add() gives a new slot the next index of its length's bucket (`sample`) and its length
///     (`end`); the `begin` fields, which still hold the buckets, are only read;
///  3. finish() sets every `begin` (0, or where a split sample's piece starts) and `end`.
/// Memory: O(capacity) cursors and 16 bytes for each piece that does not start its sample
/// (split samples only); nothing a piece beyond the pieces themselves. The linked lists this
/// replaced handed the samples out in a last pass at random places of the pieces.
class slot_assignment {
 public:
  /// `pieces` holds exactly the histogram's items; `count` is the histogram's counts;
  /// for_each_sample(visit) calls visit(i) once for every sample index, in the order samples
  /// of one length are handed out.
  template <class ForEachSample>
  slot_assignment(piece_vector& pieces, const std::vector<std::uint32_t>& count,
                  std::span<const std::uint32_t> lengths, const pack_options& options,
                  ForEachSample&& for_each_sample)
      : cursor_(count.size()), lengths_(lengths), capacity_(options.capacity),
        split_(options.overlong == overlong_policy::split) {
    rewind(count);
    std::uint64_t offset_pieces = 0;  // pieces that do not start their sample
    for_each_sample([&](std::size_t i) {
      const std::uint32_t length = lengths[i];
      const auto sample = static_cast<std::uint32_t>(i);
      if (length <= capacity_) {
        if (length != 0) pieces[cursor_[length]++].begin = sample;
        return;
      }
      const sample_items items = items_of(length, capacity_, options.overlong);
      for (std::uint32_t k = 0; k < items.full_pieces; ++k) pieces[cursor_[capacity_]++].begin = sample;
      if (items.tail != 0) pieces[cursor_[items.tail]++].begin = sample;
      if (split_) offset_pieces += items.full_pieces - 1 + (items.tail != 0 ? 1 : 0);
    });
    rewind(count);
    offsets_.reserve(offset_pieces);
  }

  /// Makes pieces[position] (not yet given a sample) the next slot of `length`.
  void add(piece_vector& pieces, std::size_t position, std::uint32_t length) noexcept {
    const std::uint32_t sample = pieces[cursor_[length]++].begin;
    piece& slot = pieces[position];
    slot.sample = sample;
    slot.end = length;
    if (!split_) return;
    // A split sample's full pieces sit side by side in the bucket of `capacity`, so they are
    // handed out one after another: count them to know where each starts.
    std::uint32_t begin = 0;
    if (length == capacity_) {
      if (sample == last_full_) {
        begin = ++full_index_ * capacity_;
      } else {
        last_full_ = sample;
        full_index_ = 0;
      }
    } else if (lengths_[sample] > capacity_) {
      begin = lengths_[sample] - length;  // the tail
    }
    if (begin != 0) offsets_.push_back({position, begin});
  }

  /// Last pass, once every slot was added: every piece's `begin` and `end`.
  void finish(piece_vector& pieces) noexcept {
    for (piece& p : pieces) p.begin = 0;
    for (const auto& [position, begin] : offsets_) {
      piece& p = pieces[position];
      p.begin = begin;
      p.end += begin;
    }
  }

 private:
  void rewind(const std::vector<std::uint32_t>& count) noexcept {
    std::uint32_t start = 0;
    for (std::size_t l = 0; l < count.size(); ++l) {
      cursor_[l] = start;
      start += count[l];
    }
  }

  struct offset_piece {
    std::size_t position;
    std::uint32_t begin;
  };

  std::vector<std::uint32_t> cursor_;  ///< per length: the next bucket entry
  std::span<const std::uint32_t> lengths_;
  std::uint32_t capacity_;
  bool split_;
  std::uint32_t last_full_ = no_slot;
  std::uint32_t full_index_ = 0;
  std::vector<offset_piece> offsets_;
};

}  // namespace multipack::detail
