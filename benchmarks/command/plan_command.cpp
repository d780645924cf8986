// multipack-bench plan: see plan_command.hpp.

#include "command/plan_command.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command/common.hpp"
#include "command/inputs.hpp"
#include "command/reports.hpp"
#include "multipack/core/random.hpp"
#include "multipack/schedule/epoch_schedule.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack::bench {
namespace {

/// For every rank, one line a row in step order from start_step: `epoch step rank slot`, then
/// the row's pieces as append_pieces writes them; a padding row has no pieces.
void write_plan(const std::string& path, const epoch_plan& plan, std::uint64_t start_step,
                       const std::vector<std::uint32_t>& lengths) {
  text_file file(path);
  const epoch_schedule& s = plan.schedule;
  const std::uint64_t epoch = s.options().epoch;
  for (std::uint32_t rank = 0; rank < s.world_size(); ++rank)
    for (std::uint64_t step = start_step; step < s.steps(); ++step)
      for (std::uint32_t slot = 0; slot < s.micro_batch(); ++slot) {
        fmt::memory_buffer& out = file.buffer();
        fmt::format_to(std::back_inserter(out), "{} {} {} {}", epoch, step, rank, slot);
        const auto pieces = plan.pieces(step, rank, slot);
        if (!pieces.empty()) out.push_back(' ');
        append_pieces(out, pieces, lengths);
        out.push_back('\n');
        file.maybe_flush();
      }
  file.close();
}

int run_plan_command(const plan_command_options& o) {
  const schedule_options options = to_schedule_options(o.schedule, o.packing.seed, o.consumed_rows);
  validate(options);
  if (!o.dump_plan.empty()) check_output_path(o.dump_plan, "--dump-plan");
  pack_options packing_options = to_pack_options(o.packing);
  packing_options.epoch = options.epoch;  // the seed is --seed, the epoch --epoch: one pair for both
  validate(packing_options);
  const opened_input input = load_lengths(o.packing.source, o.packing.seed, o.schedule.epoch);
  const std::vector<std::uint32_t>& lengths = input.lengths;

  epoch_plan plan;
  double pack_seconds = 0;
  {
    progress p(fmt::format("packing {} samples ({})", lengths.size(), o.packing.algorithm));
    const auto start = clock::now();
    plan.packed = pack(lengths, packing_options);
    pack_seconds = seconds_since(start);
  }
  // The schedule alone: its time (best of --repeat) and its peak memory beyond the packing.
  const bool peak_reset = reset_peak_rss();
  const std::uint64_t rss_before = rss_bytes();
  const double plan_seconds = best_seconds(o.repeat, [&] {
    progress p(fmt::format("scheduling {} rows over {} ranks", plan.packed.rows.size(), o.schedule.world_size));
    plan.schedule = epoch_schedule{};
    const auto start = clock::now();
    plan.schedule = epoch_schedule(plan.packed.rows, options);
    return seconds_since(start);
  });
  const std::uint64_t peak = peak_rss_bytes();
  const std::uint64_t plan_peak = peak > rss_before ? peak - rss_before : 0;
  // The floor, in the same run: one pass over the pieces, adding up what every row costs,
  // which any scheduler that weighs rows by their cost must do; best of as many runs.
  const double floor_seconds = best_seconds(o.repeat, [&] {
    const auto floor_start = clock::now();
    std::uint64_t total_cost = 0;
    for (std::size_t row = 0; row < plan.packed.rows.size(); ++row) total_cost += row_cost(plan.packed.rows[row]);
    const double seconds = seconds_since(floor_start);
    do_not_optimize(total_cost);
    return seconds;
  });
  const epoch_schedule& s = plan.schedule;
  check_start_step(o.schedule.start_step, s.steps());
  if (!o.dump_plan.empty()) {
    progress p("writing " + o.dump_plan);
    write_plan(o.dump_plan, plan, o.schedule.start_step, lengths);
  }

  const pack_report& packed = plan.packed.report;
  const schedule_report& r = s.report();
  const double per_sample = lengths.empty() ? 0.0 : static_cast<double>(plan_peak) / static_cast<double>(lengths.size());
  if (o.json) {
    nlohmann::ordered_json out = report_json(packed, packing_options);
    // dropped_* count every cause; the packer's and the remainder's are given apart.
    out["overlong_dropped_samples"] = packed.dropped_samples;
    out["overlong_dropped_tokens"] = packed.dropped_tokens;
    out["remainder_dropped_samples"] = r.dropped_samples;
    out["remainder_dropped_tokens"] = r.dropped_tokens;
    out["dropped_samples"] = packed.dropped_samples + r.dropped_samples;
    out["dropped_tokens"] = packed.dropped_tokens + r.dropped_tokens;
    out["seed"] = o.packing.seed;
    out["epoch_seed"] = epoch_seed(packing_options.seed, packing_options.epoch);  // what the epoch's draws start from
    out["input"] = o.packing.source.describe();
    add_input_json(out, input);
    out["world_size"] = r.world_size;
    out["micro_batch"] = r.micro_batch;
    out["epoch"] = o.schedule.epoch;
    out["remainder"] = o.schedule.remainder;
    out["balance"] = !o.schedule.no_balance;
    out["steps"] = r.steps;
    out["start_step"] = o.schedule.start_step;
    out["consumed_rows"] = r.consumed_rows;
    out["scheduled_rows"] = r.scheduled_rows;
    out["padded_rows"] = r.padded_rows;
    out["padding_only_ranks"] = r.padding_only_ranks;
    out["dropped_rows"] = r.dropped_rows;
    out["pack_seconds"] = pack_seconds;
    out["plan_seconds"] = plan_seconds;
    out["cost_pass_seconds"] = floor_seconds;
    out["plan_over_cost_pass"] = floor_seconds > 0 ? plan_seconds / floor_seconds : 0.0;
    out["repeat"] = std::max(1U, o.repeat);
    out["plan_peak_bytes"] = plan_peak;
    out["plan_peak_bytes_per_sample"] = per_sample;
    out["plan_peak_measured_alone"] = peak_reset;
    out["balance_mean"] = r.balance_mean;
    out["balance_worst"] = r.balance_worst;
    out["balance_mean_unbalanced"] = r.balance_mean_unbalanced;
    out["balance_worst_unbalanced"] = r.balance_worst_unbalanced;
    print_json(out);
    return 0;
  }
  fmt::print("multipack-bench plan: {}\n", o.packing.source.describe());
  fmt::print("  samples        {:>14L}   tokens {:L}\n", packed.samples, packed.tokens);
  print_corpora(input);
  fmt::print("  packing        {:>14}   capacity {}, {:L} rows (lower bound {:L}), {:.3f}% full, {:.4f} s\n",
             o.packing.algorithm, packed.capacity, packed.rows, packed.lower_bound, 100 * packed.efficiency(), pack_seconds);
  fmt::print("  epoch          {:>14}   seed {}, {} ranks x {} rows a step, remainder {}, {}\n", o.schedule.epoch,
             o.packing.seed, r.world_size, r.micro_batch, o.schedule.remainder, o.schedule.no_balance ? "not balanced" : "balanced");
  fmt::print("  steps          {:>14L}   on every rank{}\n", r.steps,
             o.schedule.start_step == 0 ? std::string() : fmt::format("; resuming at step {}: {} left", o.schedule.start_step, r.steps - o.schedule.start_step));
  if (r.consumed_rows != 0) fmt::print("  consumed       {:>14L}   rows trained on before this run\n", r.consumed_rows);
  fmt::print("  padded         {:>14L}   rows (no pieces, no loss){}\n", r.padded_rows,
             r.padding_only_ranks == 0 ? std::string()
                                       : fmt::format("; {} ranks with only padding in the last step", r.padding_only_ranks));
  fmt::print("  dropped        {:>14L}   rows of the remainder: {:L} samples, {:L} tokens; {:L} samples longer than a row\n",
             r.dropped_rows, r.dropped_samples, r.dropped_tokens, packed.dropped_samples);
  fmt::print("  balance        {:>14.4f}   costliest rank / mean, mean of the steps (worst {:.4f})\n", r.balance_mean, r.balance_worst);
  fmt::print("  unbalanced     {:>14.4f}   same, consecutive rows a rank (worst {:.4f})\n", r.balance_mean_unbalanced,
             r.balance_worst_unbalanced);
  fmt::print("  schedule time  {:>12.4f} s   beyond packing, best of {}; one pass adding up the rows' costs {:.4f} s (x {:.2f})\n",
             plan_seconds, std::max(1U, o.repeat), floor_seconds, floor_seconds > 0 ? plan_seconds / floor_seconds : 0.0);
  fmt::print("  schedule memory{:>14L}   bytes peak ({:.2f} bytes a sample)\n", plan_peak, per_sample);
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, plan_command_options& o, std::function<int()>& action) {
  CLI::App* command = app.add_subcommand(
      "plan", "pack one epoch and schedule its rows over the ranks: steps, remainder, balance, time");
  add_packing_flags(*command, o.packing);
  add_schedule_flags(*command, o.schedule, schedule_flags_form::required);
  command->add_option("--consumed-rows", o.consumed_rows,
                      "rows of this epoch already trained on (by a run with any world size): start after them")
      ->capture_default_str()
      ->transform(non_negative_integer);
  command->add_option("--repeat", o.repeat, "schedule R times; report the fastest")
      ->capture_default_str()
      ->transform(positive_integer_of<unsigned>());
  command->add_flag("--json", o.json, "print one JSON object on standard output");
  command->add_option("--dump-plan", o.dump_plan, "write the plan to FILE: `epoch step rank slot pieces...` a row")
      ->check(non_empty_path);
  command->callback([&] { action = [&] { return run_plan_command(o); }; });
}

}  // namespace multipack::bench
