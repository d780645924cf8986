// multipack-bench: measures multipack on real data. Subcommands: pack, plan, load, and
// convert (JSON Lines into the indexed format).
// Errors end with one line on standard error and a non-zero exit status. Each subcommand is
// its own translation unit (X_command.cpp); the flags they share are in options.hpp.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command/convert_command.hpp"
#include "command/load_command.hpp"
#include "command/pack_command.hpp"
#include "command/plan_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"multipack-bench: packing, planning and loading benchmarks on real data"};
  app.require_subcommand(1);
  std::function<int()> action;
  multipack::bench::pack_command_options pack_options;
  pack_options.packing.source.data = {MULTIPACK_DEFAULT_DATA};
  multipack::bench::add_pack_command(app, pack_options, action);
  multipack::bench::plan_command_options plan_options;
  plan_options.packing.source.data = {MULTIPACK_DEFAULT_DATA};
  multipack::bench::add_plan_command(app, plan_options, action);
  multipack::bench::load_command_options load_options;
  load_options.packing.source.data = {MULTIPACK_DEFAULT_DATA};
  multipack::bench::add_load_command(app, load_options, action);
  multipack::bench::convert_command_options convert_options;
  multipack::bench::add_convert_command(app, convert_options, action);
  // A mistyped command: CLI11 alone says "A subcommand is required", naming neither.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
      found = found || command->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + command->get_name();
    }
    if (!found) {
      fmt::print(stderr, "multipack-bench: error: unknown command '{}' (the commands: {})\n", argv[1], known);
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "multipack-bench: error: {}\n", e.what());
    return 2;
  }
  try {
    const int status = action();
    // The report on standard output is the result: one that could not be written (a full
    // disk, a closed pipe) fails the command.
    if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
      fmt::print(stderr, "multipack-bench: error: standard output: cannot write the report: {}\n", std::strerror(errno));
      return 1;
    }
    return status;
  } catch (const std::exception& e) {
    fmt::print(stderr, "multipack-bench: error: {}\n", e.what());
    return 1;
  }
}
