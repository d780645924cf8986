// multipack-bench load: see load_command.hpp.

#include "command/load_command.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "command/common.hpp"
#include "command/load_inputs.hpp"
#include "command/load_report.hpp"
#include "command/load_run.hpp"
#include "command/memcpy_floor.hpp"

namespace multipack::bench {
namespace {

/// The longest simulated step: a day (longer ones overflow nothing, but are surely a typo).
constexpr double max_step_ms = 86'400'000.0;

const CLI::Validator step_milliseconds(
    [](std::string& text) -> std::string {
      double value = 0;
      const char* end = text.data() + text.size();
      const auto parsed = std::from_chars(text.data(), end, value);
      if (text.empty() || parsed.ec != std::errc{} || parsed.ptr != end || !std::isfinite(value) || value < 0 ||
          value > max_step_ms)
        return "expected milliseconds from 0 to 86400000 (a day), got '" + text + "'";
      return {};
    },
    "MS");

#if MULTIPACK_BENCH_CUDA
constexpr bool built_with_cuda = true;
#else
constexpr bool built_with_cuda = false;
#endif

template <batch_token T>
int run_load(const load_command_options& o) {
  load_inputs in = prepare_load<T>(o, o.device ? o.depth + o.batches_in_flight : o.depth);
  // The views pipeline plans for itself: the first plan (its checks, layout and steps, which
  // the views' are) and the lengths it was made from (4 bytes a sample) are not kept, so that
  // memory figures are the views' own.
  if (o.pipeline == "views") {
    in.first_plan.reset();
    std::vector<std::uint32_t>().swap(in.lengths);
  }
  load_totals t;
  t.first_plan_seconds = in.first_plan_seconds;
  std::optional<device_totals> device;
#if MULTIPACK_BENCH_CUDA
  if (o.device) device = run_device_epochs<T>(o, in, t);
#endif
  if (!o.device) {
    if (o.pipeline == "views")
      run_views_epochs<T>(o, in, t);
    else
      run_host_epochs<T>(o, in, t);
  }
  const std::uint64_t peak = peak_rss_bytes();
  const memcpy_figures floor = measure_memcpy_floor(t.output_bytes, t.batches, o.threads, o.memcpy_buffer_mib);
  print_load_report<T>(o, in, t, device, floor, peak);
  return 0;
}

int run_load_command(const load_command_options& o) {
  return o.int64 ? run_load<std::int64_t>(o) : run_load<std::int32_t>(o);
}

}  // namespace

void add_load_command(CLI::App& app, load_command_options& o, std::function<int()>& action) {
  CLI::App* command = app.add_subcommand(
      "load", "load one rank's batches with the batch loader's threads for a simulated trainer: throughput, waits");
  add_packing_flags(*command, o.packing);
  // Batches need tokens: the inputs of lengths only are hidden from the help and refused.
  std::vector<CLI::Option*> refused;
  for (const char* name : {"--lengths", "--resample", "--resample-seed"})
    refused.push_back(command->get_option(name)->group(""));
  auto* prompts = command->add_option("--prompt-lengths", o.prompt_lengths,
                                      "prompt tokens a sample (text: one a line, or binary): they carry no loss")
                      ->check(non_empty_path);
  command->add_option("--loss-mask", o.loss_mask,
                      "per-token loss mask PREFIX (PREFIX.idx/.bin, nonzero = carries loss; what convert writes "
                      "from labels as OUT.loss_mask)")
      ->excludes(prompts)
      ->check(non_empty_path);
  command->add_flag("--train-on-inputs", o.train_on_inputs, "prompt tokens carry loss too");
  add_schedule_flags(*command, o.schedule, schedule_flags_form::defaulted);
  command->add_option("--rank", o.rank, "the rank whose batches are loaded")->capture_default_str()
      ->transform(non_negative_integer_of<std::uint32_t>());
  command->add_option("--epochs", o.epochs, "epochs to load, one after the other")->capture_default_str()
      ->transform(positive_integer);
  command->add_option("--max-steps", o.max_steps, "stop after N batches in all")->transform(positive_integer);
  command->add_option("--threads", o.threads, "worker threads building batches")->capture_default_str()
      ->transform(integer_in(1, 1024));
  command->add_option("--depth", o.depth, "buffers: batches built ahead of the trainer (at most 65536)")
      ->capture_default_str()
      ->transform(integer_in(1, 65536));
  command->add_option("--step-ms", o.step_ms, "milliseconds the simulated trainer spends a step; 0: none")
      ->capture_default_str()
      ->check(step_milliseconds);
  command->add_option("--pad-to-multiple", o.pad_to_multiple,
                      "0: rows of the capacity; N: the batch's longest row rounded up to a multiple of N, "
                      "at most the capacity")
      ->capture_default_str()
      ->transform(non_negative_integer_of<std::uint32_t>());
  command->add_option("--memcpy-buffer-mib", o.memcpy_buffer_mib,
                      "MiB of each of the memcpy floor's two buffers; 0: twice the last-level cache, within [64, 256]")
      ->capture_default_str()
      ->transform(integer_in(0, std::uint64_t{1} << 20));
  command->add_flag("--int64", o.int64, "int64 token arrays (default int32)");
  command->add_flag("--json", o.json, "print one JSON object on standard output");
  auto* dump = command->add_option("--dump-batches", o.dump_batches,
                      "write the first batches to DIR as .npy: step{S:06}_rank{R}_{array}.npy "
                      "(epoch{E}_step... with --epochs > 1)")
      ->check(non_empty_path);
  command->add_option("--repeat-data", o.repeat_data,
                      "see the data N times over in each epoch (longer epochs for steady-state figures)")
      ->capture_default_str()
      ->transform(positive_integer);
  command->add_option("--dump-count", o.dump_count, "batches --dump-batches writes")->capture_default_str()
      ->transform(non_negative_integer)
      ->needs(dump);
  command->add_option("--pipeline", o.pipeline,
                      "plan: one epoch_loader over every epoch's plan_epoch; views: dataset | views::pack | views::shard "
                      "| std::views::drop(start step) | views::prefetch")
      ->capture_default_str()
      ->check(CLI::IsMember({"plan", "views"}));
  auto* device = command->add_flag("--device", o.device,
                    "copy the batches to the GPU through pinned buffers (multipack::cuda); the simulated step "
                    "is a kernel on the trainer's stream");
  command->add_option("--batches-in-flight", o.batches_in_flight, "with --device: device buffers")
      ->capture_default_str()
      ->transform(integer_in(1, 1024))
      ->needs(device);
  command->callback([&o, &action, refused] {
    for (const CLI::Option* option : refused)
      if (option->count() != 0) {
        const std::string name = "--" + option->get_lnames().front();
        throw CLI::ValidationError(name, "load builds batches of tokens, which " + name +
                                             " does not give: use --data PREFIX (a Megatron indexed dataset)");
      }
    if (o.rank >= o.schedule.world_size)
      throw CLI::ValidationError("--rank", fmt::format("rank {} is outside the world of {} rank{} (--world-size {}): "
                                                       "ranks are 0 to {}",
                                                       o.rank, o.schedule.world_size, o.schedule.world_size == 1 ? "" : "s",
                                                       o.schedule.world_size, o.schedule.world_size - 1));
    if (o.device && !o.dump_batches.empty())
      throw CLI::ValidationError("--dump-batches", "the batches of --device are in device memory; dump without --device");
    if (o.device && o.pipeline != "plan")
      throw CLI::ValidationError("--pipeline", "--device loads through the plan pipeline; drop --pipeline views");
    if (o.device && !built_with_cuda)
      throw CLI::ValidationError("--device", "this multipack-bench was built without CUDA (no CUDA Toolkit, or a "
                                             "sanitizer build): rebuild where /usr/local/cuda is installed");
    action = [&] { return run_load_command(o); };
  });
}

}  // namespace multipack::bench
