#pragma once
// JSON fields that several subcommands' reports share.

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command/inputs.hpp"
#include "multipack/pack/pack.hpp"

namespace multipack::bench {

/// Prints a --json report, one line. A path need not be UTF-8 (a Latin-1 file name): its
/// invalid bytes print as U+FFFD, where nlohmann's default throws, failing a finished run.
inline void print_json(const nlohmann::ordered_json& report) {
  fmt::print("{}\n", report.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

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
      {"pack_threads", options.threads},
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

/// What opening the input cost, and each corpus's samples and tokens (--data only).
inline void add_input_json(nlohmann::ordered_json& out, const opened_input& in) {
  out["open_seconds"] = in.open_seconds;
  out["open_rss_bytes"] = in.open_rss_bytes;
  if (!in.dataset) return;
  nlohmann::ordered_json corpora = nlohmann::ordered_json::array();
  for (const corpus_summary& c : in.dataset->corpora()) {
    nlohmann::ordered_json entry{{"prefixes", c.prefixes},
                                 {"weight", c.weight ? nlohmann::ordered_json(*c.weight) : nlohmann::ordered_json(nullptr)},
                                 {"samples", c.samples},
                                 {"tokens", c.tokens}};
    if (c.blend) {
      entry["available"] = c.blend->available;
      entry["taken"] = c.blend->taken;
      entry["whole_passes"] = c.blend->whole_passes;
      entry["subset"] = c.blend->subset;
    }
    corpora.push_back(std::move(entry));
  }
  out["corpora"] = std::move(corpora);
}

/// One line a corpus, when the input is more than one prefix (one prefix prints nothing: its
/// samples and tokens are the report's own).
inline void print_corpora(const opened_input& in) {
  if (!in.dataset) return;
  const auto& corpora = in.dataset->corpora();
  if (corpora.size() == 1 && corpora.front().prefixes.size() == 1 && !corpora.front().weight) return;
  for (const corpus_summary& c : corpora) {
    std::string what = c.prefixes.size() == 1 ? c.prefixes.front()
                                              : fmt::format("{} prefixes from {}", c.prefixes.size(), c.prefixes.front());
    if (c.blend)
      what += fmt::format(", weight {} ({:.4f}): {} whole pass(es) over {:L} samples + {:L}", *c.weight,
                          c.blend->weight, c.blend->whole_passes, c.blend->available, c.blend->subset);
    fmt::print("  corpus         {:>14L}   samples, {:L} tokens: {}\n", c.samples, c.tokens, what);
  }
}

}  // namespace multipack::bench
