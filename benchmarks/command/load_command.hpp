#pragma once
// multipack-bench load: one rank's batches of one or more epochs, collated by the batch
// loader's worker threads, handed to a simulated trainer that spends --step-ms a step. Reports
// the throughput against the floor measured in the same run (a memcpy of the same bytes), how
// long the trainer waited, how busy the workers were, and how far ahead they got.
//
// The schedule is exactly the one `multipack-bench plan` dumps for the same options: for each
// epoch e of [--epoch, --epoch + --epochs), plan_epoch(lengths, packing options,
// {world, micro_batch, seed, e, remainder, balance}), this rank's steps from --start-step in
// the first epoch, from 0 in the later ones.
//
// The parts: load_inputs.hpp (options checked, data opened, first epoch planned), load_run.hpp
// (the trainer's loop), memcpy_floor.hpp (the floor), load_report.hpp (JSON and text),
// batch_dump.hpp (--dump-batches), device_load.hpp (--device).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "command/options.hpp"

namespace multipack::bench {

struct load_command_options {
  packing_flags packing;  // --data, --capacity, --algorithm, --overlong, --max-per-row, --seed
  schedule_flags schedule{.world_size = 1, .micro_batch = 16};
  std::vector<std::string> prompt_lengths;  // one file, or one a prefix or --data entry
  std::string loss_mask;                    // the per-token mask's PREFIX (convert --labels)
  std::uint32_t rank = 0;
  std::uint64_t epochs = 1;
  std::uint64_t max_steps = 0;  // 0: not given, every step
  unsigned threads = 1;
  std::size_t depth = 4;
  double step_ms = 0;
  bool train_on_inputs = false;
  std::uint32_t pad_to_multiple = 0;
  bool int64 = false;
  bool json = false;
  std::string dump_batches;
  std::uint64_t dump_count = 4;
  std::uint64_t memcpy_buffer_mib = 0;  // 0: twice the last-level cache, within [64, 256] MiB
  std::uint64_t repeat_data = 1;
  std::string pipeline = "plan";      // --pipeline: plan (batch_loader over plan_epoch) | views
  bool device = false;                 // --device: through cuda::device_loader to the GPU
  std::size_t batches_in_flight = 3;   // --batches-in-flight: device buffers
};

/// Adds `load`; when it is the subcommand given, sets `action` to run it.
void add_load_command(CLI::App& app, load_command_options& o, std::function<int()>& action);

}  // namespace multipack::bench
