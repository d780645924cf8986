#pragma once
// The first pass shared by every packer: what each sample becomes under the overlong policy
// (its items: pieces of at most one row), the histogram of item lengths, and the report's
// per-cause counts. And how the histogram-based packers hand each slot of a given length, in
// the order the slots are created, to the samples of that length in a given sample order.

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "multipack/core/detail/thread_name.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/packed_rows.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/core/random.hpp"
#include "multipack/pack/options.hpp"
#include "multipack/pack/report.hpp"

namespace multipack::detail {

inline constexpr std::uint32_t no_slot = UINT32_MAX;

/// Runs work(part) for every part in [0, parts): parts 1, 2, ... on threads of their own, part
/// 0 on the calling thread; returns when all are done. `work` must not throw. A part whose
/// thread cannot be started runs on the calling thread: nothing depends on where a part runs.
template <class Work>
void run_parts(std::size_t parts, const Work& work) noexcept {
  std::vector<std::thread> threads;
  for (std::size_t part = 1; part < parts; ++part) {
    try {
      threads.emplace_back([&work, part] {
        name_this_thread(pack_thread_name);
        work(part);
      });
    } catch (...) {  // std::system_error (no thread), std::bad_alloc
      work(part);
    }
  }
  work(0);
  for (std::thread& thread : threads) thread.join();
}

/// The order in which the samples of one length are handed to the slots of that length, cut
/// into consecutive parts that threads classify and bucket side by side: blocks of 256
/// consecutive samples, in index order, or in a seeded random order of the blocks
/// (randomized_exact_fit: random across the dataset, sequential, so fast, within a block).
/// Part p holds blocks [p * blocks / parts, (p + 1) * blocks / parts) of that order.
class sample_order {
 public:
  static constexpr std::size_t block = 256;
  /// Samples a part should have at least, so that a thread's start (tens of microseconds)
  /// stays small beside its work.
  static constexpr std::size_t min_part_samples = std::size_t{1} << 14;

  /// options.threads parts at most, and as many as give each part min_part_samples and
  /// more samples than a part's histogram has counters (capacity + 1); at least one.
  sample_order(std::size_t samples, const pack_options& options, bool shuffled, std::uint64_t seed)
      : samples_(samples),
        blocks_((samples + block - 1) / block),
        permutation_(shuffled ? blocks_ : 0, seed),
        shuffled_(shuffled) {
    const std::size_t part_samples = std::max<std::size_t>(min_part_samples, options.capacity + std::size_t{1});
    parts_ = std::max<std::size_t>(1, std::min<std::size_t>(options.threads, samples / part_samples));
  }

  [[nodiscard]] std::size_t parts() const noexcept { return parts_; }

  /// Calls visit_run(begin, end) for every run of consecutive sample indices [begin, end) of
  /// `part`, in order: one run in index order, one a block when shuffled. The caller loops
  /// over a run itself, so that its loop body is compiled inline. O(its samples).
  template <class VisitRun>
  void for_each_run_in_part(std::size_t part, VisitRun&& visit_run) const {
    const std::size_t first = part * blocks_ / parts_;
    const std::size_t last = (part + 1) * blocks_ / parts_;
    if (!shuffled_) {
      visit_run(first * block, std::min(last * block, samples_));
      return;
    }
    for (std::size_t b = first; b < last; ++b) {
      const std::size_t start = permutation_(b) * block;
      visit_run(start, std::min(start + block, samples_));
    }
  }

 private:
  std::size_t samples_;
  std::size_t blocks_;
  feistel_permutation permutation_;
  bool shuffled_;
  std::size_t parts_ = 1;
};

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
  /// With several parts of the sample order, part_count[p][l]: the items of length l in part
  /// p (where the part's samples start in each length's bucket). Empty with one part.
  std::vector<std::vector<std::uint32_t>> part_count;
};

/// What pass one counts over some samples.
struct sample_tally {
  std::uint64_t items = 0;
  std::uint64_t tokens = 0;
  std::uint64_t packed_tokens = 0;
  std::uint64_t packed_samples = 0;
  std::uint64_t empty = 0;
  std::uint64_t dropped = 0;
  std::uint64_t dropped_tokens = 0;
  std::uint64_t truncated = 0;
  std::uint64_t truncated_tokens = 0;
  std::uint64_t split = 0;
  std::size_t first_overlong = SIZE_MAX;  ///< the lowest overlong sample, under overlong_policy::error
};

/// Pass one over samples [begin, end): adds their items to `count` and the rest to `tally`.
/// The tally is copied into locals for the loop: kept in memory (the counts' stores could
/// alias it) it made the loop half as fast.
inline void classify_run(std::span<const std::uint32_t> lengths, std::size_t begin, std::size_t end,
                         const pack_options& options, std::uint32_t* count, sample_tally& tally) noexcept {
  const std::uint32_t capacity = options.capacity;
  const overlong_policy overlong = options.overlong;
  sample_tally t = tally;
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint32_t length = lengths[i];
    t.tokens += length;
    if (length == 0) {
      ++t.empty;
      continue;
    }
    if (length <= capacity) {
      ++count[length];
      ++t.items;
      t.packed_tokens += length;
      ++t.packed_samples;
      continue;
    }
    switch (overlong) {
      case overlong_policy::drop:
        ++t.dropped;
        t.dropped_tokens += length;
        continue;
      case overlong_policy::error:
        t.first_overlong = std::min(t.first_overlong, i);
        continue;
      case overlong_policy::truncate:
        ++t.truncated;
        t.truncated_tokens += length - capacity;
        break;
      case overlong_policy::split:
        ++t.split;
        break;
    }
    const sample_items pieces = items_of(length, capacity, overlong);
    count[capacity] += pieces.full_pieces;
    count[pieces.tail] += pieces.tail != 0 ? 1 : 0;
    t.items += pieces.full_pieces + (pieces.tail != 0 ? 1 : 0);
    t.packed_tokens += std::uint64_t{pieces.full_pieces} * capacity + pieces.tail;
    ++t.packed_samples;
  }
  tally = t;
}

/// No packing of items with these counts of each length (`count[l]`, l in [0, capacity]) has
/// fewer rows. The largest of:
///  - the items over max_per_row items a row;
///  - Martello and Toth's L2 bound (1990), for every k in [1, capacity / 2]: the items over
///    capacity - k each need a row no item of at least k shares, the other items over half a
///    row need a row each too, and the items in [k, capacity / 2] fill what those others leave
///    before they need rows of their own. k = 1 gives the larger of the tokens' bound and the
///    items over half a row. Where long items leave gaps the short ones cannot fill (lengths
///    near the capacity), L2 is the optimum more often than the tokens are;
///  - Fekete and Schepers' bound with their dual feasible function u^(2) (2001): a row holds at
///    most two items over a third of it, and one over two thirds shares with no such item, so
///    weighing those items a half and a whole row (exactly a third: a third, exactly two
///    thirds: two thirds), and the others nothing, no row holds more than one. With rows of
///    about two samples, L2 misses this: Alpaca at 192 tokens, 1.012 x L2, and exact_fit's
///    rows within 0.2 % of it.
/// O(capacity).
[[nodiscard]] inline std::uint64_t rows_lower_bound(std::span<const std::uint32_t> count, const pack_options& options) {
  const std::uint32_t capacity = options.capacity;
  const std::uint32_t half = capacity / 2;  // two items over `half` never share a row
  // k = 1: J1 the items of `capacity`, J2 the others over half a row, J3 the rest.
  std::uint64_t j1 = count[capacity], j2 = 0, j2_tokens = 0, j3_tokens = 0, items = j1;
  for (std::uint32_t l = 1; l < capacity; ++l) {
    items += count[l];
    if (l > half) {
      j2 += count[l];
      j2_tokens += std::uint64_t{l} * count[l];
    } else {
      j3_tokens += std::uint64_t{l} * count[l];
    }
  }
  std::uint64_t bound = j1 + j2;  // all the items when capacity is 1: no k
  for (std::uint32_t k = 1; k <= half; ++k) {
    const std::uint64_t room = j2 * capacity - j2_tokens;  // left by the J2 items' rows
    const std::uint64_t extra = j3_tokens > room ? (j3_tokens - room + capacity - 1) / capacity : 0;
    bound = std::max(bound, j1 + j2 + extra);
    // k + 1: length capacity - k (over half a row while k < half) moves to J1; k leaves J3.
    const std::uint32_t to_j1 = capacity - k;
    if (to_j1 > half) {
      j1 += count[to_j1];
      j2 -= count[to_j1];
      j2_tokens -= std::uint64_t{to_j1} * count[to_j1];
    }
    j3_tokens -= std::uint64_t{k} * count[k];
  }
  // u^(2) in sixths of a row: 3l < capacity weighs 0, 3l == capacity 2 (a third), then up to
  // 3l < 2 capacity 3 (a half), 3l == 2 capacity 4, above 6 (a whole row).
  const std::uint64_t two_thirds = 2 * std::uint64_t{capacity};  // of 3l
  std::uint64_t sixths = 0;
  for (std::uint32_t l = (capacity + 2) / 3; l <= capacity; ++l) {  // the first l with 3l >= capacity
    const std::uint64_t thirds = 3 * std::uint64_t{l};
    const std::uint64_t weight = thirds == capacity ? 2 : thirds < two_thirds ? 3 : thirds == two_thirds ? 4 : 6;
    sixths += weight * count[l];
  }
  bound = std::max(bound, (sixths + 5) / 6);
  if (options.max_per_row != 0) bound = std::max(bound, (items + options.max_per_row - 1) / options.max_per_row);
  return bound;
}

/// Pass one: classifies every sample (the parts of `order` side by side, one a thread), fills
/// the report's counts, returns the histogram. Throws sample_error for an overlong sample
/// under overlong_policy::error (the lowest index, whatever the parts).
[[nodiscard]] inline item_histogram classify(std::span<const std::uint32_t> lengths,
                                             const pack_options& options, const sample_order& order,
                                             pack_report& report) {
  const std::uint32_t capacity = options.capacity;
  const std::size_t parts = order.parts();
  std::vector<std::vector<std::uint32_t>> counts(parts, std::vector<std::uint32_t>(std::size_t{capacity} + 1, 0));
  std::vector<sample_tally> tallies(parts);
  run_parts(parts, [&](std::size_t part) {
    // One part needs no part counts: its samples in index order, sequential even when shuffled.
    if (parts == 1) return classify_run(lengths, 0, lengths.size(), options, counts[0].data(), tallies[0]);
    order.for_each_run_in_part(part, [&](std::size_t begin, std::size_t end) {
      classify_run(lengths, begin, end, options, counts[part].data(), tallies[part]);
    });
  });

  sample_tally all;
  for (const sample_tally& t : tallies) {
    all.items += t.items;
    all.tokens += t.tokens;
    all.packed_tokens += t.packed_tokens;
    all.packed_samples += t.packed_samples;
    all.empty += t.empty;
    all.dropped += t.dropped;
    all.dropped_tokens += t.dropped_tokens;
    all.truncated += t.truncated;
    all.truncated_tokens += t.truncated_tokens;
    all.split += t.split;
    all.first_overlong = std::min(all.first_overlong, t.first_overlong);
  }
  if (all.first_overlong != SIZE_MAX)
    throw sample_error("sample " + std::to_string(all.first_overlong) + " has " +
                       std::to_string(lengths[all.first_overlong]) + " tokens, more than the row capacity " +
                       std::to_string(capacity) + " (choose overlong policy drop, truncate or split)");
  report = pack_report{};
  report.capacity = capacity;
  report.samples = lengths.size();
  report.tokens = all.tokens;
  report.packed_tokens = all.packed_tokens;
  report.packed_samples = all.packed_samples;
  report.empty_samples = all.empty;
  report.dropped_samples = all.dropped;
  report.dropped_tokens = all.dropped_tokens;
  report.truncated_samples = all.truncated;
  report.truncated_tokens = all.truncated_tokens;
  report.split_samples = all.split;
  item_histogram histogram;
  histogram.items = all.items;
  if (parts == 1) {
    histogram.count = std::move(counts.front());
  } else {
    histogram.count.assign(std::size_t{capacity} + 1, 0);
    for (const std::vector<std::uint32_t>& count : counts)
      for (std::size_t l = 0; l <= capacity; ++l) histogram.count[l] += count[l];
    histogram.part_count = std::move(counts);
  }
  if (histogram.items >= no_slot)
    throw option_error("pack: " + std::to_string(histogram.items) + " pieces to pack" +
                       (all.split != 0 ? " (" + std::to_string(all.split) + " samples split at capacity " +
                                             std::to_string(capacity) + ")"
                                       : std::string()) +
                       "; at most 2^32 - 2 are supported" +
                       (all.split != 0 ? ": a larger capacity, or overlong policy drop or truncate, makes fewer" : ""));
  report.pieces = histogram.items;
  for (std::uint32_t l = 1; l <= capacity; ++l)
    if (histogram.count[l] != 0) {
      if (histogram.shortest == 0) histogram.shortest = l;
      histogram.longest = l;
    }
  report.lower_bound = rows_lower_bound(histogram.count, options);
  return histogram;
}

/// Hands samples to the slots the packers create: the k-th slot created of length l gets the
/// k-th item of length l in the sample order given to the constructor. Three passes, none at
/// random places of the pieces:
///  1. the constructor writes every item's sample index into the `begin` fields of the pieces,
///     bucketed by length (one bucket a length, at the histogram's prefix sums) in sample
///     order: one sequential stream a length; the order's parts side by side, each from where
///     the parts before it end in every bucket;
///  2. add() gives a new slot the next index of its length's bucket (`sample`) and its length
///     (`end`), and clears the bucket entry it read (every entry is read once, so every
///     `begin` is 0 once every slot was added: no pass of its own to clear them, 5-10 ms for
///     10 M pieces);
///  3. finish() sets where each split sample's piece starts (`begin`, `end`).
/// With hand_out::gathered, step 2 only notes the bucket entry in the slot's `sample`, and
/// gather() reads the entries of a range of slots in one pass (see hand_out).
/// Memory: O(capacity) cursors, and with split a bit a sample and 8 bytes for each piece that
/// does not start its sample; nothing a piece beyond the pieces themselves. The linked lists this
/// replaced handed the samples out in a last pass at random places of the pieces.
class slot_assignment {
 public:
  /// When a slot reads its sample from the bucket entry: in add() (at_add), or in a pass of
  /// gather() over the slots once they are added (gathered). The rows and the samples are
  /// the same. Gathering pays where the fill reads its buckets at random: randomized_exact_fit
  /// opens rows with items of random lengths, and with many lengths (each a bucket, a cache
  /// line at a random place) or a large row (the draws' own tables miss the L2 cache) the
  /// fill waited on those reads; the gather's reads are independent of each other and
  /// overlap. 10 M lengths, one thread, best of 5: `long-tail` at 65,536 0.358 to 0.302 s,
  /// `alpaca` at 65,536 0.287 to 0.241 s, `near-capacity` 3-6 %; at 2,048 and 4,096 on
  /// `alpaca` (333 lengths, their buckets' lines stay in the L1 cache) 2-5 % slower, so
  /// not there.
  enum class hand_out { at_add, gathered };

  /// The faster hand_out for this packing, by the measurements above: gathered for
  /// randomized_exact_fit with over 512 lengths or over 8,192 tokens a row.
  [[nodiscard]] static hand_out hand_out_for(const item_histogram& histogram, const pack_options& options) noexcept {
    if (options.algorithm != packing_algorithm::randomized_exact_fit) return hand_out::at_add;
    if (options.capacity > 8192) return hand_out::gathered;
    std::size_t lengths = 0;
    for (const std::uint32_t n : histogram.count) lengths += n != 0 ? 1 : 0;
    return lengths > 512 ? hand_out::gathered : hand_out::at_add;
  }

  /// `pieces` holds exactly the histogram's items, which classify counted over `order`.
  /// Samples of one length are handed out in `order`. Uses the histogram's part counts.
  slot_assignment(piece_vector& pieces, item_histogram& histogram, std::span<const std::uint32_t> lengths,
                  const pack_options& options, const sample_order& order, hand_out timing = hand_out::at_add)
      : cursor_(histogram.count.size()), lengths_(lengths), capacity_(options.capacity),
        split_(options.overlong == overlong_policy::split), gathered_(timing == hand_out::gathered) {
    rewind(histogram.count);
    // Each part's cursors: where the part's samples start in every bucket, the bucket's
    // start plus the items of that length in the parts before (one part: cursor_ itself).
    std::vector<std::vector<std::uint32_t>>& part_cursor = histogram.part_count;
    for (std::size_t l = 0; l < cursor_.size() && !part_cursor.empty(); ++l) {
      std::uint32_t start = cursor_[l];
      for (std::vector<std::uint32_t>& cursor : part_cursor) start += std::exchange(cursor[l], start);
    }
    std::vector<std::uint64_t> offset_pieces(order.parts(), 0);  // pieces that do not start their sample
    static_assert(sample_order::block % 64 == 0, "parts of the sample order would share a word of split_bits");
    std::vector<std::uint64_t> split_bits(split_ ? (lengths.size() + 63) / 64 : 0);
    run_parts(order.parts(), [&](std::size_t part) {
      std::uint32_t* const cursor = part_cursor.empty() ? cursor_.data() : part_cursor[part].data();
      order.for_each_run_in_part(part, [&](std::size_t begin, std::size_t end) {
        offset_pieces[part] += bucket_run(pieces, lengths, begin, end, options.overlong, cursor, split_bits.data());
      });
    });
    if (split_) {
      split_samples_ = std::make_shared<const std::vector<std::uint64_t>>(std::move(split_bits));
      split_bits_ = split_samples_->data();
    }
    part_cursor.clear();
    part_cursor.shrink_to_fit();
    rewind(histogram.count);
    std::uint64_t all_offsets = 0;
    for (const std::uint64_t n : offset_pieces) all_offsets += n;
    offsets_.reserve(all_offsets);
  }

  /// Makes pieces[position] (not yet given a sample) the next slot of `length`. Always inlined:
  /// called for every piece, and a second call site in the exact packers' loop made GCC call
  /// it out of line (exact_fit 10-18 % slower).
  /// `may_be_gathered`: whether the caller may hold a gathered hand-out; false compiles the
  /// test out (exact_fit was 5 % slower with it).
  template <bool may_be_gathered = false>
  [[gnu::always_inline]] void add(piece_vector& pieces, std::size_t position, std::uint32_t length) noexcept {
    if constexpr (may_be_gathered) {
      if (gathered_) {  // the entry, read by gather()
        piece& slot = pieces[position];
        slot.sample = cursor_[length]++;
        slot.end = length;
        return;
      }
    }
    assert(!gathered_);
    const std::uint32_t sample = std::exchange(pieces[cursor_[length]++].begin, 0);
    piece& slot = pieces[position];
    slot.sample = sample;
    slot.end = length;
    if (split_) note_start(position, sample, length);
  }

  /// A second hand-out from the same buckets, for filling rows in two halves side by side:
  /// of each length l, the items after the first `first_half[l]`, which stay this one's. The
  /// second never hands out full pieces of a split sample (first_half[capacity] must be all
  /// of them): their counting runs in one hand-out. Called before any add(). O(capacity) time
  /// and memory; throws std::bad_alloc.
  [[nodiscard]] slot_assignment second_half(const piece_vector& pieces, const std::vector<std::uint32_t>& first_half) const {
    slot_assignment second(*this);
    second.offsets_.reserve(offsets_.capacity());  // add() may not allocate
    second.half_begin_.resize(cursor_.size());
    second.bucket_end_.resize(cursor_.size());
    for (std::size_t l = 0; l < cursor_.size(); ++l) {
      second.cursor_[l] += first_half[l];
      second.half_begin_[l] = second.cursor_[l];
      second.bucket_end_[l] = l + 1 < cursor_.size() ? cursor_[l + 1] : static_cast<std::uint32_t>(pieces.size());
    }
    return second;
  }

  /// With hand_out::gathered: gives the slots at positions [begin, end), all added, the samples
  /// of the bucket entries they noted, and clears those entries. To be called once for every
  /// slot, in the order of the fills, before take_remaining() moves the entries. Safe beside
  /// add() and gather() on the other half's slot_assignment, as add() is: they write other
  /// fields or other entries. O(end - begin); a no-op with hand_out::at_add.
  void gather(piece_vector& pieces, std::size_t begin, std::size_t end) noexcept {
    if (!gathered_) return;
    piece* const p = pieces.data();
    const auto gather_one = [&](std::size_t i) {
      // Each entry a line at a random place: fetched 16 slots ahead, so that many misses overlap.
      if (i + gather_prefetch_distance < end) __builtin_prefetch(&p[p[i + gather_prefetch_distance].sample]);
      const std::uint32_t sample = std::exchange(p[p[i].sample].begin, 0);
      p[i].sample = sample;
      return sample;
    };
    if (!split_) {
      for (std::size_t i = begin; i < end; ++i) gather_one(i);
      return;
    }
    for (std::size_t i = begin; i < end; ++i) note_start(i, gather_one(i), p[i].end);
  }

  /// Once both halves are done with their rows: this hand-out goes on with what the second
  /// left of each length, after what it left itself (the second's unread bucket entries move
  /// to just after this one's range, and the places they leave are cleared, as read entries
  /// are). O(capacity + entries moved); allocates nothing.
  void take_remaining(slot_assignment& second, piece_vector& pieces) noexcept {
    for (std::size_t l = 0; l < cursor_.size(); ++l) {
      std::uint32_t to = second.half_begin_[l];
      for (std::uint32_t from = second.cursor_[l]; from < second.bucket_end_[l]; ++from)
        pieces[to++].begin = pieces[from].begin;  // to <= from: in order, no entry is overwritten unread
      for (std::uint32_t from = std::max(to, second.cursor_[l]); from < second.bucket_end_[l]; ++from)
        pieces[from].begin = 0;
    }
    offsets_.insert(offsets_.end(), second.offsets_.begin(), second.offsets_.end());  // within the capacity reserved
  }

  /// Once every slot was added: where each piece of a split sample but its first starts.
  /// O(those pieces).
  void finish(piece_vector& pieces) noexcept {
    for (const auto& [position, begin] : offsets_) {
      piece& p = pieces[position];
      // A tail starts where its sample's full pieces end: its length read here, in a loop
      // whose reads overlap, not in the fill, which waited on each (a random place of the
      // lengths a tail).
      const std::uint32_t start = begin != tail_start ? begin : lengths_[p.sample] - p.end;
      p.begin = start;
      p.end += start;
    }
  }

 private:
  /// Split only: notes where the piece at `position` (`length` tokens of `sample`) starts in its
  /// sample, for finish(), unless at 0. A split sample's full pieces sit side by side in the
  /// bucket of `capacity`, so they are handed out one after another: counted here, they must
  /// be noted in that order (add()'s order, and gather()'s, as the fills that take full pieces
  /// lay their rows out upwards).
  void note_start(std::size_t position, std::uint32_t sample, std::uint32_t length) noexcept {
    if (length == capacity_) {
      if (sample == last_full_) {
        offsets_.push_back({static_cast<std::uint32_t>(position), ++full_index_ * capacity_});
      } else {
        last_full_ = sample;
        full_index_ = 0;
      }
    } else if ((split_bits_[sample >> 6] >> (sample & 63)) & 1) {
      offsets_.push_back({static_cast<std::uint32_t>(position), tail_start});  // finish() reads where
    }
  }

  /// In offsets_: a tail, whose start finish() computes (no noted piece starts at 0).
  static constexpr std::uint32_t tail_start = 0;

  static constexpr std::size_t bucket_prefetch_distance = 16;
  static constexpr std::size_t gather_prefetch_distance = 16;

  /// Writes samples [begin, end) into their buckets at `cursor`; returns how many of their
  /// pieces do not start their sample (split only), and sets the bits of the split samples in
  /// `split_bits` (a run starts at a multiple of sample_order::block, so runs of other parts
  /// never share a word). Locals only in the loop, as classify_run.
  std::uint64_t bucket_run(piece_vector& pieces, std::span<const std::uint32_t> lengths, std::size_t begin,
                           std::size_t end, overlong_policy overlong, std::uint32_t* cursor,
                           std::uint64_t* split_bits) const noexcept {
    const std::uint32_t capacity = capacity_;
    const bool split = split_;
    piece* const out = pieces.data();
    std::uint64_t offsets = 0;
    for (std::size_t i = begin; i < end; ++i) {
      const std::uint32_t length = lengths[i];
      const auto sample = static_cast<std::uint32_t>(i);
      // The entry a sample 16 on will write, fetched for writing now: a bucket a length, so
      // thousands of write streams, more than the hardware prefetchers follow, and each new
      // line of a bucket a miss the loop waited on. (Its cursor may move by then: the same
      // line or the next.) At most one past the last piece: a bucket's end.
      if (i + bucket_prefetch_distance < end)
        __builtin_prefetch(&out[cursor[std::min(lengths[i + bucket_prefetch_distance], capacity)]], 1);
      if (length <= capacity) {
        if (length != 0) out[cursor[length]++].begin = sample;
        continue;
      }
      const sample_items items = items_of(length, capacity, overlong);
      for (std::uint32_t k = 0; k < items.full_pieces; ++k) out[cursor[capacity]++].begin = sample;
      if (items.tail != 0) out[cursor[items.tail]++].begin = sample;
      if (split) {
        offsets += items.full_pieces - 1 + (items.tail != 0 ? 1 : 0);
        split_bits[i >> 6] |= std::uint64_t{1} << (i & 63);
      }
    }
    return offsets;
  }

  void rewind(const std::vector<std::uint32_t>& count) noexcept {
    std::uint32_t start = 0;
    for (std::size_t l = 0; l < count.size(); ++l) {
      cursor_[l] = start;
      start += count[l];
    }
  }

  // 8 bytes: a position fits 32 bits (classify refuses 2^32 - 1 pieces or more). At 16 bytes
  // these were a quarter of the fresh memory of exact_fit on split long-tailed samples.
  struct offset_piece {
    std::uint32_t position;
    std::uint32_t begin;
  };

  std::vector<std::uint32_t> cursor_;  ///< per length: the next bucket entry
  std::span<const std::uint32_t> lengths_;
  std::uint32_t capacity_;
  bool split_;
  bool gathered_;
  // Split only: a bit a sample, set where it was split. A tail's start needs its sample's
  // length, and reading the lengths (4 bytes a sample, at random places) for every piece to
  // find the tails was 80 % of exact_fit's fill on split long-tailed samples; the bits are 32x
  // fewer bytes. Shared with the second half's hand-out.
  std::shared_ptr<const std::vector<std::uint64_t>> split_samples_;
  const std::uint64_t* split_bits_ = nullptr;
  std::uint32_t last_full_ = no_slot;
  std::uint32_t full_index_ = 0;
  std::vector<offset_piece> offsets_;
  // A second half only (second_half()): per length, its first bucket entry and its bucket's end.
  std::vector<std::uint32_t> half_begin_;
  std::vector<std::uint32_t> bucket_end_;
};

}  // namespace multipack::detail
