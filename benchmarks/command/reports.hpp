#pragma once
// JSON fields that several subcommands' reports share.

#include <nlohmann/json.hpp>

#include "multipack/pack/pack.hpp"

namespace multipack::bench {

/// A packing's report and the options it was made with, as `pack --json` and `plan --json` give.
inline nlohmann::ordered_json report_json(const pack_report& report, const pack_options& options) {
  return {
      {"samples", report.samples},
      {"tokens", report.tokens},
      {"capacity", report.capacity},
      {"algorithm", to_string(options.algorithm)},
      {"overlong", to_string(options.overlong)},
      {"max_per_row", options.max_per_row},
      {"seed", options.seed},
      {"rows", report.rows},
      {"lower_bound", report.lower_bound},
      {"rows_over_lower_bound", report.rows_over_lower_bound()},
      {"efficiency", report.efficiency()},
      {"pieces", report.pieces},
      {"packed_samples", report.packed_samples},
      {"packed_tokens", report.packed_tokens},
      {"empty_samples", report.empty_samples},
      {"dropped_samples", report.dropped_samples},
      {"dropped_tokens", report.dropped_tokens},
      {"truncated_samples", report.truncated_samples},
      {"truncated_tokens", report.truncated_tokens},
      {"split_samples", report.split_samples},
  };
}

}  // namespace multipack::bench
