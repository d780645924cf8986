#pragma once
// multipack-bench plan: packs the lengths for one epoch and schedules the rows over the ranks;
// reports the steps, what padding or dropping the remainder cost, how evenly the work is
// spread with and without balancing, and the schedule's time and memory beyond packing.

#include <cstdint>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "command/options.hpp"

namespace multipack::bench {

struct plan_command_options {
  packing_flags packing;
  schedule_flags schedule;
  std::uint64_t consumed_rows = 0;
  unsigned repeat = 1;
  bool json = false;
  std::string dump_plan;
};

/// Adds `plan`; when it is the subcommand given, sets `action` to run it.
void add_plan_command(CLI::App& app, plan_command_options& o, std::function<int()>& action);

}  // namespace multipack::bench
