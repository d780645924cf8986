#pragma once
// multipack-bench pack: packs the lengths of a dataset and reports rows against the lower
// bound, time against a sort of the same lengths (measured in the same run), and memory.

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "command/options.hpp"

namespace multipack::bench {

struct pack_command_options {
  packing_flags packing;
  unsigned repeat = 1;
  unsigned idle_before = 0;  ///< seconds to wait before the first packing, the packing into its memory and the first touch timed
  bool json = false;
  std::string dump_rows;
};

/// Adds `pack`; when it is the subcommand given, sets `action` to run it.
void add_pack_command(CLI::App& app, pack_command_options& o, std::function<int()>& action);

}  // namespace multipack::bench
