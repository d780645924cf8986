#pragma once
// What a `load` run starts from (the options checked, the data opened, the first epoch
// planned) and what it measures (load_totals), shared by the host run, the device run and the
// report.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <malloc.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command/batch_dump.hpp"
#include "command/common.hpp"
#include "command/inputs.hpp"
#include "command/load_command.hpp"
#include "multipack/batch/collate.hpp"
#include "multipack/batch/layout.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack::bench {

namespace detail {

inline std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace detail

/// The loss mask of --prompt-lengths: one file for the whole input (the form of one prefix),
/// or one a prefix or one a --data entry, in their order, concatenated; one a prefix, named
/// PREFIX.prompt_lengths, in any order (prompt_length_files_in_prefix_order). Throws
/// option_error for a blend (its samples are drawn, not laid out as the files are) and for a
/// count of files that matches neither; format_error for a file whose count is not its part's.
inline loss_mask prompt_mask(std::vector<std::string> files, const input_dataset& data) {
  if (data.blended())
    throw option_error("--prompt-lengths: a blend (weighted --data) with prompt lengths is not supported yet");
  if (files.size() == 1) return loss_mask::open_prompt_lengths(files.front());
  std::vector<std::uint64_t> starts{0};
  if (files.size() == data.shards()) {
    std::vector<std::filesystem::path> prefixes;
    for (const corpus_summary& c : data.corpora()) prefixes.insert(prefixes.end(), c.prefixes.begin(), c.prefixes.end());
    const std::vector<std::filesystem::path> ordered =
        prompt_length_files_in_prefix_order({files.begin(), files.end()}, prefixes);
    files.assign(ordered.begin(), ordered.end());
    for (std::size_t k = 1; k <= data.shards(); ++k) starts.push_back(data.first_sample(k));
  } else if (files.size() == data.corpora().size()) {
    for (const corpus_summary& c : data.corpora()) starts.push_back(starts.back() + c.samples);
  } else {
    throw option_error(fmt::format("--prompt-lengths: {} files for {} prefixes in {} --data entries: give one a prefix "
                                   "or one an entry, in the same order",
                                   files.size(), data.shards(), data.corpora().size()));
  }
  std::vector<std::uint32_t> all;
  all.reserve(static_cast<std::size_t>(starts.back()));
  for (std::size_t k = 0; k < files.size(); ++k) {
    const loss_mask part = loss_mask::open_prompt_lengths(files[k]);
    const std::uint64_t expected = starts[k + 1] - starts[k];
    if (part.size() != expected)
      throw format_error(fmt::format("{}: {} prompt lengths, but its part of --data (number {} of {}) has {} samples",
                                     files[k], part.size(), k + 1, files.size(), expected));
    for (std::size_t i = 0; i < part.size(); ++i) all.push_back(part.prompt_length(i));
  }
  return loss_mask::from_prompt_lengths(std::move(all), fmt::format("{}", fmt::join(files, " ")));
}

/// What one run measured.
struct load_totals {
  std::uint64_t batches = 0;
  std::uint64_t tokens = 0;       // B x row_length, summed
  std::uint64_t real_tokens = 0;  // tokens of pieces
  std::uint64_t loss_tokens = 0;
  std::uint64_t padding_rows = 0;
  std::uint64_t output_bytes = 0;  // used parts of the five arrays
  std::uint64_t dumped = 0;
  double seconds = 0;
  double wait_seconds = 0;
  double busy_seconds = 0;
  double ready_sum = 0;  // mean_ready x batches, summed over the epochs
  std::size_t max_ready = 0;
  double dump_seconds = 0;
  double first_plan_seconds = 0;
  double startup_seconds = 0;  // the first loader's construction, inside `seconds`
  double later_plan_seconds = 0;
  double close_seconds = 0;  // stopping the loader after the run (joining its threads), outside `seconds`
  // The trainer's time at the epoch boundaries, beyond a step: the wait for each later epoch's
  // first batch (one epoch_loader), or stopping a pipeline, planning, starting the next (views).
  double epoch_switch_seconds = 0;
  double max_epoch_switch_seconds = 0;  // the longest boundary (one epoch_loader only)
  double max_step_wait_seconds = 0;     // the longest wait for any other batch (one epoch_loader only)
  std::uint64_t rss_before_first_batch_bytes = 0;  // the pipeline built, its loader started

  /// Counts one batch handed to the trainer (a batch_view, or a device_batch_view).
  template <class View>
  void add_batch(const View& v) {
    ++batches;
    tokens += v.flat_length();
    real_tokens += v.real_tokens;
    loss_tokens += v.loss_tokens;
    padding_rows += v.padding_rows;
    output_bytes += v.used_bytes();
  }
  /// Adds one loader's prefetcher figures (at the end of its epoch).
  void add_prefetch(const prefetch_statistics& s) {
    busy_seconds += s.producer_busy_seconds;
    ready_sum += s.mean_ready * static_cast<double>(s.batches);
    max_ready = std::max(max_ready, s.max_ready);
  }
  /// Takes the figures of the run's one epoch_loader (at the end of the run): its prefetcher's,
  /// the later epochs' planning, and the waits at the epoch boundaries.
  void add_epoch_loader(const epoch_loader_statistics& s) {
    add_prefetch(s.prefetch);
    later_plan_seconds = s.planning_seconds;
    epoch_switch_seconds = s.boundary_wait_seconds;
    max_epoch_switch_seconds = s.max_boundary_wait_seconds;
    max_step_wait_seconds = s.max_step_wait_seconds;
  }
};

/// Resident memory once the pipeline is built and its loader started: what the pipeline holds
/// (freed memory given back first, so that what was built and dropped before does not count).
inline std::uint64_t pipeline_rss_bytes() {
  ::malloc_trim(0);
  return rss_bytes();
}

[[nodiscard]] inline schedule_options with_epoch(schedule_options options, std::uint64_t epoch) {
  options.epoch = epoch;
  return options;
}

/// What every load run starts from: the dataset, the batch options, the first epoch's plan.
struct load_inputs {
  using dataset_type = repeated_dataset<input_dataset>;
  opened_input opened;  // --data as opened, with its cost
  std::shared_ptr<const dataset_type> dataset;
  std::vector<std::uint32_t> lengths;  // as `plan` reads them
  batch_options batching;
  pack_options packing;
  schedule_options first_schedule;
  prefetch_options prefetch;
  std::shared_ptr<const epoch_plan> first_plan;
  double first_plan_seconds = 0;
  std::uint64_t first_steps = 0;
  batch_layout first_layout;

  /// Epoch e's plan: the first's options with epoch e.
  [[nodiscard]] std::shared_ptr<const epoch_plan> plan_for(std::uint64_t epoch) const {
    return std::make_shared<const epoch_plan>(plan_epoch(lengths, packing, with_epoch(first_schedule, epoch)));
  }

  /// An epoch loader's planner from epoch `first` on: the first epoch's plan is made already
  /// (prepare_load), every later one is plan_for(e). Refers to this object.
  [[nodiscard]] epoch_planner planner(std::uint64_t first) const {
    return [this, first](std::uint64_t epoch) { return epoch == first ? first_plan : plan_for(epoch); };
  }
};

/// Checks the options, opens the data and plans the first epoch, with progress lines.
/// `buffers`: the batch buffers the run allocates up front (refused beyond the machine's memory).
template <batch_token T>
load_inputs prepare_load(const load_command_options& o, std::uint64_t buffers) {
  load_inputs in;
  in.first_schedule = to_schedule_options(o.schedule, o.packing.seed);
  validate(in.first_schedule);
  in.packing = to_pack_options(o.packing);
  validate(in.packing);
  in.prefetch = {o.threads, o.depth};
  validate(in.prefetch);
  if (o.epochs - 1 > std::numeric_limits<std::uint64_t>::max() - o.schedule.epoch)  // the last, epoch + epochs - 1
    throw option_error(fmt::format("--epoch {} --epochs {}: the last epoch is past 2^64 - 1", o.schedule.epoch, o.epochs));

  // The dataset, opened once and shared by every epoch's loader; its lengths as `plan` reads them.
  {
    progress p("reading " + o.packing.source.describe_input());
    in.opened = open_data(o.packing.source, o.packing.seed, o.schedule.epoch);
    // A blend's samples are chosen for one epoch; the next epoch's would be another dataset.
    if (in.opened.dataset->blended() && o.epochs > 1)
      throw option_error("--epochs: a blend (weighted --data) is chosen for one epoch; load one epoch at a time "
                         "(--epoch E --epochs 1)");
    in.dataset = std::make_shared<const load_inputs::dataset_type>(in.opened.dataset, o.repeat_data);
    in.lengths = lengths_of(*in.dataset, o.packing.source.describe_input());
  }
  in.batching.pad_to_multiple = o.pad_to_multiple;
  in.batching.collate.train_on_inputs = o.train_on_inputs;
  // The mask describes the data; --repeat-data's copies take it by their source index.
  if (!o.prompt_lengths.empty()) in.batching.mask = prompt_mask(o.prompt_lengths, in.dataset->original());
  if (!o.loss_mask.empty()) {
    // The mask's sample i is the data's, not the blend's i-th draw (corpus after corpus, with
    // repeats): applied by the blend's index, it would mask other samples' tokens.
    if (in.dataset->original().blended())
      throw option_error("--loss-mask: a blend (weighted --data) with a loss mask is not supported yet");
    in.batching.mask = loss_mask::open_token_mask(o.loss_mask);
  }
  in.batching.mask.check_matches(in.dataset->original());
  {
    progress p(fmt::format("planning epoch {} of {} samples", o.schedule.epoch, in.lengths.size()));
    const auto start = clock::now();
    in.first_plan = in.plan_for(o.schedule.epoch);
    in.first_plan_seconds = seconds_since(start);
  }
  in.first_steps = in.first_plan->schedule.steps();
  check_start_step(o.schedule.start_step, in.first_steps);
  in.first_layout = layout_of(*in.first_plan, o.pad_to_multiple);
  validate(in.first_layout);
  const std::uint64_t batch_bytes = in.first_layout.bytes<T>();
  // Every buffer of the pool is allocated and zero-filled up front: refuse a pool larger than
  // the machine's memory rather than being killed while filling it.
  if (const std::uint64_t memory = detail::physical_memory_bytes(); memory != 0) {
    const double pool = static_cast<double>(buffers) * static_cast<double>(batch_bytes);
    if (pool > static_cast<double>(memory))
      throw option_error(fmt::format("--depth {}: {} buffers of {} bytes need {:.3g} GB, more than this machine's {:.3g} GB",
                                     o.depth, buffers, batch_bytes, pool * 1e-9, static_cast<double>(memory) * 1e-9));
    // The memcpy floor's two buffers (--memcpy-buffer-mib, at least a batch a thread), made
    // after the run: refused now, not with std::bad_alloc once every figure was measured.
    const double floor = 2.0 * std::max(static_cast<double>(o.memcpy_buffer_mib) * 1048576.0,
                                        static_cast<double>(o.threads) * static_cast<double>(batch_bytes));
    if (floor > static_cast<double>(memory))
      throw option_error(fmt::format("--memcpy-buffer-mib {} (--threads {}): the memcpy floor's two buffers need {:.3g} GB, "
                                     "more than this machine's {:.3g} GB",
                                     o.memcpy_buffer_mib, o.threads, floor * 1e-9, static_cast<double>(memory) * 1e-9));
  }
  if (!o.dump_batches.empty() && o.dump_count != 0) detail::make_directory(o.dump_batches);
  return in;
}

}  // namespace multipack::bench
