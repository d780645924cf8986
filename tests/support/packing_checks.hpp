#pragma once
// The properties every packing must have, checked against the input lengths alone:
// every sample is in the rows exactly once (its pieces tile the tokens the policy keeps) or is
// counted under one cause; no row is over capacity or over max_per_row; the report adds up.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "multipack/pack/pack.hpp"

namespace multipack::test {

/// Tokens of sample `length` that the policy keeps in rows (0: none).
inline std::uint64_t kept_tokens(std::uint32_t length, const pack_options& options) {
  if (length <= options.capacity) return length;
  switch (options.overlong) {
    case overlong_policy::truncate: return options.capacity;
    case overlong_policy::split: return length;
    default: return 0;
  }
}

/// The report's bound, recomputed from the definition for every k at once, not incrementally:
/// Martello and Toth's L2 (at k = 1 the larger of the tokens' bound and the items over half a
/// row), Fekete and Schepers' bound with u^(2), and the items over max_per_row items a row. L2
/// can only grow between two lengths of items, so the k worth trying are 1 and those lengths.
inline std::uint64_t rows_lower_bound(const std::vector<std::uint32_t>& items, const pack_options& options) {
  const std::uint64_t capacity = options.capacity;
  std::map<std::uint64_t, std::uint64_t> count;  // length -> items
  for (const std::uint32_t l : items) ++count[l];
  std::vector<std::uint64_t> ks{1};
  for (const auto& [l, n] : count)
    if (2 * l <= capacity) ks.push_back(l);
  std::uint64_t bound = 0;
  for (const std::uint64_t k : ks) {
    std::uint64_t own_rows = 0, room = 0, small_tokens = 0;  // J1 and J2, what J2 leaves, J3
    for (const auto& [l, n] : count) {
      if (2 * l > capacity) {
        own_rows += n;
        if (l <= capacity - k) room += n * (capacity - l);
      } else if (l >= k) {
        small_tokens += n * l;
      }
    }
    const std::uint64_t extra = small_tokens > room ? (small_tokens - room + capacity - 1) / capacity : 0;
    bound = std::max(bound, own_rows + extra);
  }
  // Fekete and Schepers' u^(k)(x) = x where (k + 1) x is whole, else floor((k + 1) x) / k, with
  // k = 2, x = l / capacity, in units of 1 / (2 capacity): no row's items sum past one.
  std::uint64_t weights = 0;
  for (const auto& [l, n] : count) weights += n * (3 * l % capacity == 0 ? 2 * l : 3 * l / capacity * capacity);
  bound = std::max(bound, (weights + 2 * capacity - 1) / (2 * capacity));
  if (options.max_per_row != 0)
    bound = std::max<std::uint64_t>(bound, (items.size() + options.max_per_row - 1) / options.max_per_row);
  return bound;
}

inline void check_packing(std::span<const std::uint32_t> lengths, const pack_options& options,
                          const packing& result) {
  const packed_rows& rows = result.rows;
  const pack_report& report = result.report;
  REQUIRE(rows.size() == report.rows);
  // One assertion per property, not per piece (FAIL at the first piece that breaks it): with
  // millions of pieces, doctest's bookkeeping per assertion is most of the test's time, and
  // ThreadSanitizer's more so.
  std::vector<piece> by_sample;
  by_sample.reserve(rows.pieces().size());
  std::uint64_t packed_tokens = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto row = rows[r];
    if (row.empty()) FAIL("row " << r << " is empty");
    if (rows.tokens(r) > options.capacity) FAIL("row " << r << " is over capacity");
    if (options.max_per_row != 0 && row.size() > options.max_per_row)
      FAIL("row " << r << " has " << row.size() << " pieces, over max_per_row");
    for (const piece& p : row) {
      if (p.sample >= lengths.size()) FAIL("row " << r << " has sample " << p.sample << ", past the last");
      if (p.begin >= p.end || p.end > lengths[p.sample])
        FAIL("row " << r << " has tokens [" << p.begin << ", " << p.end << ") of sample " << p.sample << " (length "
                    << lengths[p.sample] << ")");
      by_sample.push_back(p);
      packed_tokens += p.length();
    }
  }
  std::ranges::sort(by_sample, [](const piece& a, const piece& b) {
    return a.sample != b.sample ? a.sample < b.sample : a.begin < b.begin;
  });
  std::uint64_t empty = 0;
  std::uint64_t unpacked_overlong = 0;
  auto next = by_sample.begin();
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    std::uint64_t covered = 0;
    for (; next != by_sample.end() && next->sample == i; ++next) {
      if (next->begin != covered) FAIL("sample " << i << " has a gap or an overlap at token " << covered);
      covered = next->end;
    }
    if (covered != kept_tokens(lengths[i], options)) FAIL("sample " << i << " is not packed exactly once");
    if (lengths[i] == 0) ++empty;
    if (lengths[i] > options.capacity && covered == 0) ++unpacked_overlong;
  }
  CHECK(report.samples == lengths.size());
  CHECK(report.packed_tokens == packed_tokens);
  CHECK(report.empty_samples == empty);
  CHECK(report.dropped_samples == unpacked_overlong);
  CHECK(report.packed_samples + report.empty_samples + report.dropped_samples == report.samples);
  std::vector<std::uint32_t> piece_lengths;
  for (const piece& p : rows.pieces()) piece_lengths.push_back(p.length());
  CHECK(report.lower_bound == rows_lower_bound(piece_lengths, options));
  CHECK(report.rows >= report.lower_bound);
  CHECK(report.pieces == rows.pieces().size());
}

}  // namespace multipack::test
