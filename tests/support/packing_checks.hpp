#pragma once
// The properties every packing must have, checked against the input lengths alone:
// every sample is in the rows exactly once (its pieces tile the tokens the policy keeps) or is
// counted under one cause; no row is over capacity or over max_per_row; the report adds up.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
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

inline void check_packing(std::span<const std::uint32_t> lengths, const pack_options& options,
                          const packing& result) {
  const packed_rows& rows = result.rows;
  const pack_report& report = result.report;
  REQUIRE(rows.size() == report.rows);
  std::vector<std::vector<piece>> pieces_of(lengths.size());
  std::uint64_t packed_tokens = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto row = rows[r];
    REQUIRE_MESSAGE(!row.empty(), "row " << r << " is empty");
    REQUIRE_MESSAGE(rows.tokens(r) <= options.capacity, "row " << r << " is over capacity");
    if (options.max_per_row != 0) REQUIRE(row.size() <= options.max_per_row);
    for (const piece& p : row) {
      REQUIRE(p.sample < lengths.size());
      REQUIRE(p.begin < p.end);
      REQUIRE(p.end <= lengths[p.sample]);
      pieces_of[p.sample].push_back(p);
      packed_tokens += p.length();
    }
  }
  std::uint64_t empty = 0;
  std::uint64_t unpacked_overlong = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    auto& mine = pieces_of[i];
    std::sort(mine.begin(), mine.end(), [](const piece& a, const piece& b) { return a.begin < b.begin; });
    std::uint64_t covered = 0;
    for (const piece& p : mine) {
      REQUIRE_MESSAGE(p.begin == covered, "sample " << i << " has a gap or an overlap at token " << covered);
      covered = p.end;
    }
    REQUIRE_MESSAGE(covered == kept_tokens(lengths[i], options), "sample " << i << " is not packed exactly once");
    if (lengths[i] == 0) ++empty;
    if (lengths[i] > options.capacity && covered == 0) ++unpacked_overlong;
  }
  CHECK(report.samples == lengths.size());
  CHECK(report.packed_tokens == packed_tokens);
  CHECK(report.empty_samples == empty);
  CHECK(report.dropped_samples == unpacked_overlong);
  CHECK(report.packed_samples + report.empty_samples + report.dropped_samples == report.samples);
  // The bound, recomputed from the rows: the tokens, or the pieces over half a row.
  std::uint64_t over_half = 0;
  for (const piece& p : rows.pieces()) over_half += p.length() > options.capacity / 2 ? 1 : 0;
  CHECK(report.lower_bound ==
        std::max<std::uint64_t>((packed_tokens + options.capacity - 1) / options.capacity, over_half));
  CHECK(report.rows >= report.lower_bound);
  CHECK(report.pieces == rows.pieces().size());
}

}  // namespace multipack::test
