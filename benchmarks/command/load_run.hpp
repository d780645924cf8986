#pragma once
// The trainer's loop of `load` on the host: takes a batch, holds it for --step-ms (sleeping
// until the step's deadline), gives it back, asks for the next. The deadline advances by the
// time next() took and the step, so an oversleep is not added to the run; dumping is left out
// of every time. The plan pipeline runs every epoch through one epoch_loader: the trainer's
// wait for each later epoch's first batch is epoch_switch_seconds. The views pipeline builds
// one pipeline an epoch: the trainer waits while the last one stops, the next epoch is planned
// and its pipeline starts (its buffers allocated), counted as waiting and as
// epoch_switch_seconds.

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <ranges>
#include <thread>

#include <fmt/format.h>

#include "command/batch_dump.hpp"
#include "command/common.hpp"
#include "command/load_command.hpp"
#include "command/load_inputs.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/views.hpp"

namespace multipack::bench {

/// The simulated trainer's clock: the time waited for batches (the first batch of the run, the
/// cold start, left out, as the prefetcher does) and the deadline of each step.
class trainer_clock {
 public:
  explicit trainer_clock(double step_ms)
      : step_(std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::milli>(step_ms))),
        deadline_(clock::now()) {}

  /// Takes the next batch through `next` (a callable returning something that converts to
  /// bool: false after the last), timing the wait.
  template <class Next>
  auto take(load_totals& t, Next&& next) {
    const auto asked = clock::now();
    auto batch = next();
    const auto got = clock::now();
    if (!first_) t.wait_seconds += std::chrono::duration<double>(got - asked).count();
    if (batch) {
      first_ = false;
      deadline_ += got - asked;
    }
    return batch;
  }
  /// Moves the deadline by time spent outside the step (dumping, switching epochs).
  void shift(clock::duration d) { deadline_ += d; }
  /// Spends the step: sleeps until its deadline.
  void step() {
    if (step_.count() == 0) return;
    deadline_ += step_;
    std::this_thread::sleep_until(deadline_);
  }

 private:
  clock::duration step_;
  clock::time_point deadline_;
  bool first_ = true;
};

/// Hands one batch to the trainer: counts it, dumps it while --dump-count allows (its time
/// left out of the run) and spends the step.
template <batch_token T>
void train_on(const batch_view<T>& v, std::uint64_t epoch, std::uint64_t step, load_totals& t, batch_dumper& dumper,
              trainer_clock& trainer) {
  t.add_batch(v);
  const double dumped_before = dumper.seconds();
  dumper.add(v, epoch, step);
  trainer.shift(std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(dumper.seconds() - dumped_before)));
  trainer.step();
}

/// Counts the time from `switch_start` (one epoch's loader stopped, the next one's built) as
/// the trainer's wait, and apart as epoch_switch_seconds.
inline void count_epoch_switch(load_totals& t, trainer_clock& trainer, clock::time_point switch_start) {
  const auto switched = clock::now() - switch_start;
  t.epoch_switch_seconds += std::chrono::duration<double>(switched).count();
  t.wait_seconds += std::chrono::duration<double>(switched).count();
  trainer.shift(switched);
}

/// The run's time, `span` less the time spent dumping, and what was dumped.
inline void finish_run(load_totals& t, const batch_dumper& dumper, clock::duration span) {
  t.dumped = dumper.dumped();
  t.dump_seconds = dumper.seconds();
  t.seconds = std::max(0.0, std::chrono::duration<double>(span).count() - t.dump_seconds);
}

/// The epochs of the run through one epoch_loader over every epoch's plan, filling `t`: the
/// workers and buffers serve every epoch, the next epoch is planned in the background, and
/// the wait for each later epoch's first batch is epoch_switch_seconds.
template <batch_token T>
void run_host_epochs(const load_command_options& o, const load_inputs& in, load_totals& t) {
  using loader_type = epoch_loader<typename load_inputs::dataset_type, T>;
  const std::uint64_t limit = o.max_steps == 0 ? std::numeric_limits<std::uint64_t>::max() : o.max_steps;
  batch_dumper dumper(o.dump_batches, o.dump_count, o.epochs > 1, o.rank);
  progress p(fmt::format("loading rank {}'s batches of {} epoch(s) ({} thread(s), depth {})", o.rank, o.epochs,
                         o.threads, o.depth));
  // The clock starts before the loader is made (its buffers allocated, its workers started:
  // startup_seconds): the workers may build batches before the constructor returns to this
  // thread (a machine with fewer cores than threads + 1), and all their work must be inside
  // `seconds`.
  const clock::time_point start = clock::now();
  const epoch_range epochs{o.schedule.epoch, o.epochs, o.schedule.start_step};
  auto loader = std::make_unique<loader_type>(in.dataset, in.planner(o.schedule.epoch), o.rank, in.batching,
                                              in.prefetch, epochs);
  t.startup_seconds = seconds_since(start);
  t.rss_before_first_batch_bytes = pipeline_rss_bytes();
  trainer_clock trainer(o.step_ms);
  while (t.batches < limit) {
    auto lease = trainer.take(t, [&] { return loader->next(); });
    if (!lease) break;
    train_on((*lease)->view, (*lease)->epoch, (*lease)->step, t, dumper, trainer);
  }
  // Statistics before the clock: a build the workers finish in between is then outside both,
  // and the busy time stays within threads x seconds (producer_busy_fraction <= 1).
  t.add_epoch_loader(loader->statistics());
  const clock::time_point end = clock::now();
  finish_run(t, dumper, end - start);
  const clock::time_point closing = clock::now();
  loader.reset();  // stopped mid-epoch with --max-steps: its workers finish their batch and join
  t.close_seconds = seconds_since(closing);
}

/// The same epochs through the composed views: `dataset | views::pack | views::shard |
/// std::views::drop(start step) | views::prefetch`, one pipeline an epoch, filling `t`. The
/// views' begin() starts the workers and takes the first batch in one call: it is the loader's
/// start here (startup_seconds), and the resident memory is read right after it.
template <batch_token T>
void run_views_epochs(const load_command_options& o, const load_inputs& in, load_totals& t) {
  const auto batches_of = [&](std::uint64_t epoch, std::uint64_t from) {
    const schedule_options schedule = with_epoch(in.first_schedule, epoch);
    pack_options packing = in.packing;
    packing.seed = schedule.seed;  // as plan_epoch: one (seed, epoch) for the packing and the order
    packing.epoch = epoch;
    return *in.dataset | views::pack(packing) | views::shard(schedule, o.rank) |
           std::views::drop(static_cast<std::ptrdiff_t>(from)) | views::prefetch_as<T>(in.prefetch, in.batching);
  };
  using batches_type = decltype(batches_of(0, 0));
  const std::uint64_t limit = o.max_steps == 0 ? std::numeric_limits<std::uint64_t>::max() : o.max_steps;
  batch_dumper dumper(o.dump_batches, o.dump_count, o.epochs > 1, o.rank);
  progress p(fmt::format("loading rank {}'s batches of {} epoch(s) through the views ({} thread(s), depth {})", o.rank,
                         o.epochs, o.threads, o.depth));
  // Packing and scheduling the first epoch (eager, in the views' constructors) stay outside
  // the run, as the plan path's first plan does; the clock starts where its loader is made.
  auto batches = std::make_unique<batches_type>(batches_of(o.schedule.epoch, o.schedule.start_step));
  const clock::time_point start = clock::now();
  std::optional<std::ranges::iterator_t<batches_type>> it(batches->begin());
  t.startup_seconds = seconds_since(start);
  t.rss_before_first_batch_bytes = pipeline_rss_bytes();
  clock::time_point end = start;
  trainer_clock trainer(o.step_ms);
  std::uint64_t step = o.schedule.start_step;
  bool taken = true;  // *it is a batch the trainer has not had yet
  const auto next = [&] {
    if (!taken) ++*it;
    taken = false;
    return *it != batches->end();
  };
  for (std::uint64_t e = o.schedule.epoch;; ++e) {
    while (t.batches < limit) {
      if (!trainer.take(t, next)) break;
      train_on(**it, e, step++, t, dumper, trainer);
    }
    t.add_prefetch(batches->statistics());  // before the clock, as above
    end = clock::now();
    if (e - o.schedule.epoch + 1 == o.epochs || t.batches == limit) break;

    const auto switch_start = clock::now();
    it.reset();
    batches.reset();
    const auto plan_start = clock::now();
    batches = std::make_unique<batches_type>(batches_of(e + 1, 0));
    t.later_plan_seconds += seconds_since(plan_start);
    it.emplace(batches->begin());
    taken = true;
    step = 0;
    count_epoch_switch(t, trainer, switch_start);
  }
  finish_run(t, dumper, end - start);
  const clock::time_point closing = clock::now();
  it.reset();
  batches.reset();  // stopped mid-epoch with --max-steps: its workers finish their batch and join
  t.close_seconds = seconds_since(closing);
}

}  // namespace multipack::bench
