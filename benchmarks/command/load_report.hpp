#pragma once
// The report of `load`: one JSON object (--json) or the text a person reads.

#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "command/load_command.hpp"
#include "command/load_inputs.hpp"
#include "command/memcpy_floor.hpp"
#include "command/reports.hpp"

#if MULTIPACK_BENCH_CUDA
#include "command/device_load.hpp"
#endif

namespace multipack::bench {

#if !MULTIPACK_BENCH_CUDA
struct device_totals {};  // never made: --device is refused without CUDA
#endif

/// Prints the run's report on standard output. `device` is unused without CUDA (the sanitized builds).
template <batch_token T>
void print_load_report(const load_command_options& o, const load_inputs& in, const load_totals& t,
                       [[maybe_unused]] const std::optional<device_totals>& device, const memcpy_figures& floor,
                       std::uint64_t peak) {
  const std::uint64_t first_steps = in.first_steps;
  const auto& packing_options = in.packing;
  const std::uint64_t batch_bytes = in.first_layout.bytes<T>();
  const double memcpy_threads = floor.bytes_per_second;
  const double memcpy_one = floor.bytes_per_second_one_thread;
  const std::size_t floor_buffer = floor.buffer_bytes;
  const auto rate = [&](double amount) { return t.seconds > 0 ? amount / t.seconds : 0.0; };
  const double output_rate = rate(static_cast<double>(t.output_bytes));
  const double wait_fraction = t.seconds > 0 ? t.wait_seconds / t.seconds : 0.0;
  // The workers keep building while the trainer's thread dumps, so their time is the whole
  // wall span: the run's seconds and the dumping left out of them.
  const double wall_seconds = t.seconds + t.dump_seconds;
  const double busy_fraction = wall_seconds > 0 ? t.busy_seconds / (o.threads * wall_seconds) : 0.0;
  const double mean_ready = t.batches == 0 ? 0.0 : t.ready_sum / static_cast<double>(t.batches);
  const char* token_type = sizeof(T) == 4 ? "int32" : "int64";
  if (o.json) {
    nlohmann::ordered_json out;
    out["input"] = o.packing.source.describe_input();
    add_input_json(out, in.opened);
    out["repeat_data"] = o.repeat_data;  // the steps and rates below are of the data seen this many times
    // One file: its name, as before several were accepted.
    out["prompt_lengths"] = o.prompt_lengths.empty()       ? nlohmann::ordered_json(nullptr)
                            : o.prompt_lengths.size() == 1 ? nlohmann::ordered_json(o.prompt_lengths.front())
                                                           : nlohmann::ordered_json(o.prompt_lengths);
    out["loss_mask"] = o.loss_mask.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.loss_mask);
    out["train_on_inputs"] = o.train_on_inputs;
    out["world_size"] = o.schedule.world_size;
    out["rank"] = o.rank;
    out["micro_batch"] = o.schedule.micro_batch;
    out["capacity"] = o.packing.capacity;
    out["algorithm"] = to_string(packing_options.algorithm);
    out["overlong"] = to_string(packing_options.overlong);
    out["max_per_row"] = o.packing.max_per_row;
    out["seed"] = o.packing.seed;
    out["epoch"] = o.schedule.epoch;
    out["epochs"] = o.epochs;
    out["remainder"] = o.schedule.remainder;
    out["balance"] = !o.schedule.no_balance;
    out["steps"] = first_steps;
    out["start_step"] = o.schedule.start_step;
    out["max_steps"] = o.max_steps == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.max_steps);
    out["token_type"] = token_type;
    out["pad_to_multiple"] = o.pad_to_multiple;
    out["threads"] = o.threads;
    out["depth"] = o.depth;
    out["step_ms"] = o.step_ms;
    out["batches"] = t.batches;
    out["tokens"] = t.tokens;
    out["real_tokens"] = t.real_tokens;
    out["loss_tokens"] = t.loss_tokens;
    out["padding_rows"] = t.padding_rows;
    out["output_bytes"] = t.output_bytes;
    out["seconds"] = t.seconds;
    out["tokens_per_second"] = rate(static_cast<double>(t.tokens));
    out["real_tokens_per_second"] = rate(static_cast<double>(t.real_tokens));
    out["output_bytes_per_second"] = output_rate;
    out["memcpy_bytes_per_second"] = memcpy_threads;
    out["memcpy_bytes_per_second_one_thread"] = memcpy_one;
    out["output_over_memcpy"] = memcpy_threads > 0 ? output_rate / memcpy_threads : 0.0;
    out["memcpy_buffer_bytes"] = floor_buffer;
    out["consumer_wait_seconds"] = t.wait_seconds;
    out["consumer_wait_fraction"] = wait_fraction;
    out["producer_busy_seconds"] = t.busy_seconds;
    out["producer_busy_fraction"] = busy_fraction;
    out["mean_ready"] = mean_ready;
    out["max_ready"] = t.max_ready;
    out["batch_bytes"] = batch_bytes;
    out["peak_rss_bytes"] = peak;
    out["plan_seconds"] = t.first_plan_seconds;
    out["startup_seconds"] = t.startup_seconds;
    out["later_plan_seconds"] = t.later_plan_seconds;
    out["close_seconds"] = t.close_seconds;
    out["epoch_switch_seconds"] = t.epoch_switch_seconds;
    out["max_epoch_switch_seconds"] = t.max_epoch_switch_seconds;
    out["max_step_wait_seconds"] = t.max_step_wait_seconds;
    out["dumped_batches"] = t.dumped;
    out["dump_seconds"] = t.dump_seconds;
    out["device"] = o.device;
    out["pipeline"] = o.pipeline;
    out["rss_before_first_batch_bytes"] = t.rss_before_first_batch_bytes;
#if MULTIPACK_BENCH_CUDA
    if (device) {
      out["batches_in_flight"] = device->batches_in_flight;
      out["copies"] = device->copies;
      out["device_bytes_copied"] = device->bytes_copied;
      out["h2d_bytes_per_second"] = device->h2d_bytes_per_second();
      out["pinned_peak_bytes_per_second"] = device->pinned_peak_bytes_per_second;
      out["pageable_bytes_per_second"] = device->pageable_bytes_per_second;
      out["h2d_over_pinned_peak"] = device->pinned_peak_bytes_per_second > 0
                                        ? device->h2d_bytes_per_second() / device->pinned_peak_bytes_per_second
                                        : 0.0;
      out["trainer_stream_wait_seconds"] = device->trainer_wait_seconds;
      out["trainer_stream_seconds"] = device->trainer_span_seconds;
      out["trainer_stream_wait_fraction"] = device->trainer_wait_fraction();
      out["pinned_allocations_after_start"] = device->pinned_allocations_after_start;
    }
#endif
    print_json(out);
    return;
  }
  constexpr double gb = 1e9;
  const char* prompts_are = o.train_on_inputs ? " (trained on)" : " (no loss)";
  fmt::print("multipack-bench load: {}{}{}{}\n", o.packing.source.describe_input(),
             o.repeat_data == 1 ? std::string() : fmt::format(", seen {} times (--repeat-data)", o.repeat_data),
             o.prompt_lengths.empty() ? std::string()
                                      : fmt::format(", prompts from {}{}", fmt::join(o.prompt_lengths, " "), prompts_are),
             o.loss_mask.empty() ? std::string() : fmt::format(", token mask {}{}", o.loss_mask, prompts_are));
  print_corpora(in.opened);
  fmt::print("  schedule       {:>14}   capacity {}, rank {} of {}, {} rows a step, seed {}, remainder {}, {}\n",
             o.packing.algorithm, o.packing.capacity, o.rank, o.schedule.world_size, o.schedule.micro_batch, o.packing.seed, o.schedule.remainder,
             o.schedule.no_balance ? "not balanced" : "balanced");
  fmt::print("  epochs         {:>14L}   from epoch {}; {} steps in the first{}\n", o.epochs, o.schedule.epoch, first_steps,
             o.schedule.start_step == 0 ? std::string() : fmt::format(", from step {}", o.schedule.start_step));
  fmt::print("  batches        {:>14L}   {} tokens a batch element, {}{}\n", t.batches, token_type,
             o.pad_to_multiple == 0 ? std::string("rows of the capacity") : fmt::format("rows padded to a multiple of {}", o.pad_to_multiple),
             o.max_steps == 0 || t.batches < o.max_steps ? std::string()
                                                          : fmt::format(", stopped after {} (--max-steps)", o.max_steps));
  fmt::print("  tokens         {:>14L}   {:L} real ({:.2f}%), {:L} carry loss; {} padding rows\n", t.tokens, t.real_tokens,
             t.tokens == 0 ? 0.0 : 100.0 * static_cast<double>(t.real_tokens) / static_cast<double>(t.tokens),
             t.loss_tokens, t.padding_rows);
  fmt::print("  time           {:>12.4f} s   {} thread(s), depth {}, trainer step {} ms; of it the loader's start {:.4f} s "
             "(before it: plan {:.4f} s; after it: closing the loader {:.4f} s)\n",
             t.seconds, o.threads, o.depth, o.step_ms, t.startup_seconds, t.first_plan_seconds, t.close_seconds);
  fmt::print("  throughput     {:>14.4g}   tokens/s; {:.3f} GB/s of output\n", rate(static_cast<double>(t.tokens)),
             output_rate / gb);
  fmt::print("  memcpy floor   {:>10.3f} GB/s   {} thread(s) ({:.3f} GB/s one thread): output at x {:.3f} of it\n",
             memcpy_threads / gb, o.threads, memcpy_one / gb, memcpy_threads > 0 ? output_rate / memcpy_threads : 0.0);
  fmt::print("  trainer waited {:>12.4f} s   {:.2f}% of the time (after the first batch){}\n", t.wait_seconds,
             100 * wait_fraction,
             o.epochs == 1           ? std::string()
             : o.pipeline == "plan" ? fmt::format("; at the epoch boundaries {:.6f} s, the longest {:.6f} s (any other "
                                                  "step's longest {:.6f} s)",
                                                  t.epoch_switch_seconds, t.max_epoch_switch_seconds,
                                                  t.max_step_wait_seconds)
                                    : fmt::format("; {:.4f} s between epochs (next pipeline, plan)", t.epoch_switch_seconds));
  fmt::print("  workers busy   {:>12.4f} s   {:.2f}% of threads x time\n", t.busy_seconds, 100 * busy_fraction);
  fmt::print("  ready ahead    {:>14.2f}   batches, mean at a next(); most {}\n", mean_ready, t.max_ready);
  fmt::print("  memory         {:>14L}   bytes a buffer; peak resident {:L} bytes\n", batch_bytes, peak);
  fmt::print("  pipeline       {:>14}   {:L} bytes resident before the first batch (pipeline built, loader started)\n",
             o.pipeline, t.rss_before_first_batch_bytes);
  if (t.dumped != 0) fmt::print("  dumped         {:>14L}   batches to {}\n", t.dumped, o.dump_batches);
#if MULTIPACK_BENCH_CUDA
  if (device) {
    const double h2d = device->h2d_bytes_per_second();
    fmt::print("  device copies  {:>14L}   {:L} bytes, {} buffers in flight; pinned allocations after start: {}\n",
               device->copies, device->bytes_copied, device->batches_in_flight, device->pinned_allocations_after_start);
    fmt::print("  h2d            {:>10.3f} GB/s   pinned peak {:.3f} GB/s (x {:.3f} of it), pageable {:.3f} GB/s\n",
               h2d / gb, device->pinned_peak_bytes_per_second / gb,
               device->pinned_peak_bytes_per_second > 0 ? h2d / device->pinned_peak_bytes_per_second : 0.0,
               device->pageable_bytes_per_second / gb);
    fmt::print("  trainer stream {:>12.4f} s   waited for copies, {:.3f}% of {:.4f} s (step kernel {} ms)\n",
               device->trainer_wait_seconds, 100 * device->trainer_wait_fraction(), device->trainer_span_seconds,
               o.step_ms);
  }
#endif
}

}  // namespace multipack::bench
