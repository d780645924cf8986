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
// --dump-batches DIR writes the first --dump-count batches of the run as NumPy .npy files:
//   DIR/step{S:06}_rank{R}_{array}.npy                  (--epochs 1)
//   DIR/epoch{E}_step{S:06}_rank{R}_{array}.npy         (--epochs > 1: the first K batches
//                                                        may reach into later epochs)
// where S is the plan's step number and array is input_ids, labels, position_ids,
// sequence_ids (int32 or, with --int64, int64, shape [B, row_length]), cu_seqlens (int32,
// [segments + 1]) and max_seqlen (int32, a 0-d array: int(numpy.load(...)) reads it).

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <latch>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command/common.hpp"
#include "command/npy.hpp"
#include "command/pack_command.hpp"
#include "multipack/batch/collate.hpp"
#include "multipack/batch/layout.hpp"
#include "multipack/core/detail/huge_page_allocator.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack::bench {

struct load_command_options {
  pack_command_options packing;  // --data, --capacity, --algorithm, --overlong, --max-per-row, --seed
  std::string prompt_lengths;
  std::uint32_t world_size = 1;
  std::uint32_t rank = 0;
  std::uint32_t micro_batch = 16;
  std::uint64_t epoch = 0;
  std::uint64_t epochs = 1;
  std::string remainder = std::string(to_string(remainder_policy::pad));
  bool no_balance = false;
  std::uint64_t start_step = 0;
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
  bool device = false;                 // --device: through cuda::device_loader to the GPU
  std::size_t batches_in_flight = 3;   // --batches-in-flight: device buffers
};

/// Accepts digits only, from 1 to 2^64 - 1.
inline const CLI::Validator positive_integer(
    [](std::string& text) -> std::string {
      std::string copy = text;
      if (!non_negative_integer(copy).empty() || text.find_first_not_of('0') == std::string::npos)
        return "expected an integer from 1 to 18446744073709551615, got '" + text + "'";
      return {};
    },
    "UINT>0");

/// The longest simulated step: a day (longer ones overflow nothing, but are surely a typo).
inline constexpr double max_step_ms = 86'400'000.0;

inline const CLI::Validator step_milliseconds(
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

namespace detail {

/// Writes the six arrays of one batch as DIR/STEM_{array}.npy.
template <batch_token T>
void dump_batch(const std::filesystem::path& dir, const std::string& stem, const batch_view<T>& v) {
  const std::vector<std::uint64_t> shape{v.rows, v.row_length};
  const auto path = [&](const char* array) { return (dir / (stem + "_" + array + ".npy")).string(); };
  write_npy<T>(path("input_ids"), v.used_input_ids(), shape);
  write_npy<T>(path("labels"), v.used_labels(), shape);
  write_npy<T>(path("position_ids"), v.used_position_ids(), shape);
  write_npy<T>(path("sequence_ids"), v.used_sequence_ids(), shape);
  write_npy<std::int32_t>(path("cu_seqlens"), v.used_cu_seqlens(), {v.used_cu_seqlens().size()});
  const auto max_seqlen = static_cast<std::int32_t>(v.max_seqlen);
  write_npy<std::int32_t>(path("max_seqlen"), std::span<const std::int32_t>(&max_seqlen, 1), {});
}

inline void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw io_error(fmt::format("{}: cannot create the directory: {}", dir, ec.message()));
  if (!std::filesystem::is_directory(dir, ec)) throw io_error(fmt::format("{}: not a directory", dir));
}

/// The last-level cache in bytes as the C library reports it, 32 MiB where it reports none.
inline std::uint64_t last_level_cache_bytes() {
  for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long size = ::sysconf(name);
    if (size > 0) return static_cast<std::uint64_t>(size);
  }
  return std::uint64_t{32} << 20;
}

inline std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

/// Two buffers larger than the last-level cache, touched once, between which the floor copies.
class memcpy_floor {
 public:
  /// Each buffer: twice the last-level cache the C library reports, within [64 MiB, 256 MiB]
  /// (a virtual machine may report the whole socket's L3, of which one core sees a part), and
  /// at least `threads` x `block` bytes.
  /// `requested`: the size of each buffer instead (0: the rule above), still at least
  /// `threads` x `block` bytes.
  memcpy_floor(std::size_t block, unsigned threads, std::uint64_t requested)
      : block_(std::max<std::size_t>(block, 64)),
        size_(buffer_size(block_, threads, requested)),
        source_(size_, std::byte{0x5a}),
        target_(size_) {}

  [[nodiscard]] std::size_t buffer_bytes() const noexcept { return size_; }

  /// Bytes a second of copying `bytes` bytes (at least one pass over the buffer, for a stable
  /// figure) in blocks of `block` bytes, split over `threads` threads, each on its own part of
  /// the buffers, cycling through it so that every block comes from memory, not the cache.
  double bytes_per_second(std::uint64_t bytes, unsigned threads) {
    bytes = std::max<std::uint64_t>(bytes, size_);
    const std::size_t region = size_ / threads / 64 * 64;
    const std::size_t block = std::min(block_, region);
    const std::uint64_t each = (bytes + threads - 1) / threads;
    std::latch ready(threads);
    std::latch go(1);
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (unsigned t = 0; t < threads; ++t)
      workers.emplace_back([&, t] {
        std::byte* const from = source_.data() + t * region;
        std::byte* const to = target_.data() + t * region;
        ready.count_down();
        go.wait();
        std::size_t at = 0;
        for (std::uint64_t done = 0; done < each;) {
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block, each - done));
          if (at + n > region) at = 0;
          std::memcpy(to + at, from + at, n);
          do_not_optimize(to[at]);
          at += n;
          done += n;
        }
      });
    ready.wait();
    const auto start = clock::now();
    go.count_down();
    for (std::thread& w : workers) w.join();
    const double seconds = seconds_since(start);
    return seconds > 0 ? static_cast<double>(each * threads) / seconds : 0.0;
  }

 private:
  static std::size_t buffer_size(std::size_t block, unsigned threads, std::uint64_t requested) {
    constexpr std::uint64_t mib = std::uint64_t{1} << 20;
    const std::uint64_t size =
        requested != 0 ? requested : std::clamp<std::uint64_t>(2 * last_level_cache_bytes(), 64 * mib, 256 * mib);
    return static_cast<std::size_t>(std::max<std::uint64_t>(size, std::uint64_t{threads} * block));
  }

  std::size_t block_;
  std::size_t size_;
  // Huge pages where the system has them: first touch is far cheaper in 2 MiB pages,
  // especially in a virtual machine. Both are filled (touched) when made.
  multipack::detail::large_vector<std::byte> source_;
  multipack::detail::large_vector<std::byte> target_;
};

}  // namespace detail

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
  double epoch_switch_seconds = 0;  // stopping a loader, planning the next epoch, starting its loader

  /// Counts one batch handed to the trainer.
  template <batch_token T>
  void add_batch(const batch_view<T>& v) {
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
};

/// What every load run starts from: the dataset, the batch options, the first epoch's plan.
struct load_inputs {
  std::shared_ptr<const repeated_dataset<indexed_dataset>> dataset;
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
    schedule_options options = first_schedule;
    options.epoch = epoch;
    return std::make_shared<const epoch_plan>(plan_epoch(lengths, packing, options));
  }
};

/// Checks the options, opens the data and plans the first epoch, with progress lines.
/// `buffers`: the batch buffers the run allocates up front (refused beyond the machine's memory).
template <batch_token T>
load_inputs prepare_load(const load_command_options& o, std::uint64_t buffers) {
  load_inputs in;
  in.first_schedule = {o.world_size,        o.micro_batch, o.packing.seed, o.epoch,
                       parse_remainder_policy(o.remainder), !o.no_balance, 0};
  validate(in.first_schedule);
  in.packing = to_pack_options(o.packing);
  validate(in.packing);
  in.prefetch = {o.threads, o.depth};
  validate(in.prefetch);
  if (o.epochs > std::numeric_limits<std::uint64_t>::max() - o.epoch)
    throw option_error(fmt::format("--epoch {} --epochs {}: the last epoch is past 2^64 - 1", o.epoch, o.epochs));

  // The dataset, opened once and shared by every epoch's loader; its lengths as `plan` reads them.
  {
    progress p("reading " + o.packing.source.data);
    in.dataset = std::make_shared<const repeated_dataset<indexed_dataset>>(
        std::make_shared<const indexed_dataset>(o.packing.source.data), o.repeat_data);
    in.lengths = lengths_of(*in.dataset, o.packing.source.data);
  }
  in.batching.pad_to_multiple = o.pad_to_multiple;
  in.batching.collate.train_on_inputs = o.train_on_inputs;
  if (!o.prompt_lengths.empty()) {
    in.batching.mask = loss_mask::open_prompt_lengths(o.prompt_lengths);
    in.batching.mask.check_matches(in.dataset->original());
    if (o.repeat_data > 1) {
      std::vector<std::uint32_t> prompts(in.dataset->size());
      for (std::size_t i = 0; i < prompts.size(); ++i)
        prompts[i] = in.batching.mask.prompt_length(i % in.dataset->original().size());
      in.batching.mask = loss_mask::from_prompt_lengths(std::move(prompts), o.prompt_lengths);
    }
  }
  {
    progress p(fmt::format("planning epoch {} of {} samples", o.epoch, in.lengths.size()));
    const auto start = clock::now();
    in.first_plan = in.plan_for(o.epoch);
    in.first_plan_seconds = seconds_since(start);
  }
  in.first_steps = in.first_plan->schedule.steps();
  check_start_step(o.start_step, in.first_steps);
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
  }
  if (!o.dump_batches.empty() && o.dump_count != 0) detail::make_directory(o.dump_batches);
  return in;
}

}  // namespace multipack::bench

#if MULTIPACK_BENCH_CUDA
// The --device run: it needs load_command_options, load_inputs and load_totals above.
#include "command/device_load.hpp"
#endif

namespace multipack::bench {

#if MULTIPACK_BENCH_CUDA
inline constexpr bool built_with_cuda = true;
#else
inline constexpr bool built_with_cuda = false;
struct device_totals {};  // never made: --device is refused without CUDA
#endif

template <batch_token T>
int run_load(const load_command_options& o) {
  const load_inputs in = prepare_load<T>(o, o.device ? o.depth + o.batches_in_flight : o.depth);
  const auto& dataset = in.dataset;
  const auto& batching = in.batching;
  const auto& prefetch = in.prefetch;
  const auto& first_plan = in.first_plan;
  const std::uint64_t first_steps = in.first_steps;
  const auto& packing_options = in.packing;
  const std::uint64_t batch_bytes = in.first_layout.bytes<T>();
  load_totals t;
  t.first_plan_seconds = in.first_plan_seconds;

  // The trainer: takes a batch, holds it for --step-ms (sleeping until the step's deadline),
  // gives it back, asks for the next. The deadline advances by the time next() took and the
  // step, so an oversleep is not added to the run; dumping is left out of every time.
  // Between epochs the trainer waits while the last epoch's loader stops, the next epoch is
  // planned and its loader starts (its buffers allocated): counted as waiting, and apart as
  // epoch_switch_seconds.
  using loader_type = batch_loader<repeated_dataset<indexed_dataset>, T>;
  const auto step = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::milli>(o.step_ms));
  const std::uint64_t limit = o.max_steps == 0 ? std::numeric_limits<std::uint64_t>::max() : o.max_steps;
  std::optional<device_totals> device;
#if MULTIPACK_BENCH_CUDA
  if (o.device) device = run_device_epochs<T>(o, in, t);
#endif
  if (!o.device) {
    {
      progress p(fmt::format("loading rank {}'s batches of {} epoch(s) ({} thread(s), depth {})", o.rank, o.epochs,
                             o.threads, o.depth));
      // The clock starts before the first loader is made (its buffers allocated, its workers
      // started; startup_seconds of the run, as every later epoch's loader is inside it): the
      // workers may build batches before the constructor returns to this thread (a machine with
      // fewer cores than threads + 1), and all their work must be inside `seconds`.
      const clock::time_point start = clock::now();
      auto loader = std::make_unique<loader_type>(dataset, first_plan, o.rank, batching, prefetch, o.start_step);
      t.startup_seconds = seconds_since(start);
      clock::time_point end = start;
      clock::time_point deadline = clock::now();
      bool first_call = true;
      for (std::uint64_t e = o.epoch;; ++e) {
        while (t.batches < limit) {
          const auto asked = clock::now();
          auto lease = loader->next();
          const auto got = clock::now();
          // The first batch of the run is the cold start, left out as the prefetcher does.
          if (!first_call) t.wait_seconds += std::chrono::duration<double>(got - asked).count();
          if (!lease) break;
          first_call = false;
          const batch_view<T>& v = (*lease)->view;
          t.add_batch(v);
          deadline += got - asked;
          if (t.dumped < o.dump_count && !o.dump_batches.empty()) {
            const auto dump_start = clock::now();
            const std::string stem = o.epochs > 1 ? fmt::format("epoch{}_step{:06}_rank{}", e, lease->step(), o.rank)
                                                  : fmt::format("step{:06}_rank{}", lease->step(), o.rank);
            detail::dump_batch(o.dump_batches, stem, v);
            ++t.dumped;
            const auto dump_time = clock::now() - dump_start;
            t.dump_seconds += std::chrono::duration<double>(dump_time).count();
            deadline += dump_time;
          }
          if (o.step_ms > 0) {
            deadline += step;
            std::this_thread::sleep_until(deadline);
          }
        }
        end = clock::now();
        t.add_prefetch(loader->statistics());
        if (e - o.epoch + 1 == o.epochs || t.batches == limit) break;  // the last loader stops below, mid-epoch or not

        const auto switch_start = clock::now();
        loader.reset();
        const auto plan_start = clock::now();
        std::shared_ptr<const epoch_plan> plan = in.plan_for(e + 1);
        t.later_plan_seconds += seconds_since(plan_start);
        loader = std::make_unique<loader_type>(dataset, std::move(plan), o.rank, batching, prefetch, 0);
        const auto switched = clock::now() - switch_start;
        t.epoch_switch_seconds += std::chrono::duration<double>(switched).count();
        t.wait_seconds += std::chrono::duration<double>(switched).count();
        deadline += switched;
      }
      t.seconds = std::max(0.0, std::chrono::duration<double>(end - start).count() - t.dump_seconds);
      loader.reset();  // stopped mid-epoch with --max-steps: its workers finish their batch and join
    }
  }
  const std::uint64_t peak = peak_rss_bytes();

  // The floor, in the same run: a memcpy of the same bytes, in batch-sized blocks.
  const std::size_t block = static_cast<std::size_t>(t.output_bytes / std::max<std::uint64_t>(t.batches, 1));
  double memcpy_threads = 0;
  double memcpy_one = 0;
  std::size_t floor_buffer = 0;
  {
    // Bounded: two buffers of at most 256 MiB (or --memcpy-buffer-mib) or a batch a thread.
    detail::memcpy_floor floor(block, o.threads, o.memcpy_buffer_mib << 20);
    floor_buffer = floor.buffer_bytes();
    progress p(fmt::format("copying {} bytes for the memcpy floor", t.output_bytes));
    memcpy_one = floor.bytes_per_second(t.output_bytes, 1);
    memcpy_threads = o.threads == 1 ? memcpy_one : floor.bytes_per_second(t.output_bytes, o.threads);
  }

  const auto rate = [&](double amount) { return t.seconds > 0 ? amount / t.seconds : 0.0; };
  const double output_rate = rate(static_cast<double>(t.output_bytes));
  const double wait_fraction = t.seconds > 0 ? t.wait_seconds / t.seconds : 0.0;
  const double busy_fraction = t.seconds > 0 ? t.busy_seconds / (o.threads * t.seconds) : 0.0;
  const double mean_ready = t.batches == 0 ? 0.0 : t.ready_sum / static_cast<double>(t.batches);
  const char* token_type = sizeof(T) == 4 ? "int32" : "int64";
  if (o.json) {
    nlohmann::ordered_json out;
    out["input"] = o.packing.source.data;
    out["prompt_lengths"] = o.prompt_lengths.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.prompt_lengths);
    out["train_on_inputs"] = o.train_on_inputs;
    out["world_size"] = o.world_size;
    out["rank"] = o.rank;
    out["micro_batch"] = o.micro_batch;
    out["capacity"] = o.packing.capacity;
    out["algorithm"] = to_string(packing_options.algorithm);
    out["overlong"] = to_string(packing_options.overlong);
    out["max_per_row"] = o.packing.max_per_row;
    out["seed"] = o.packing.seed;
    out["epoch"] = o.epoch;
    out["epochs"] = o.epochs;
    out["remainder"] = o.remainder;
    out["balance"] = !o.no_balance;
    out["steps"] = first_steps;
    out["start_step"] = o.start_step;
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
    out["epoch_switch_seconds"] = t.epoch_switch_seconds;
    out["dumped_batches"] = t.dumped;
    out["device"] = o.device;
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
    fmt::print("{}\n", out.dump());
    return 0;
  }
  constexpr double gb = 1e9;
  fmt::print("multipack-bench load: {}{}\n", o.packing.source.data,
             o.prompt_lengths.empty() ? std::string()
                                      : fmt::format(", prompts from {}{}", o.prompt_lengths,
                                                    o.train_on_inputs ? " (trained on)" : " (no loss)"));
  fmt::print("  schedule       {:>14}   capacity {}, rank {} of {}, {} rows a step, seed {}, remainder {}, {}\n",
             o.packing.algorithm, o.packing.capacity, o.rank, o.world_size, o.micro_batch, o.packing.seed, o.remainder,
             o.no_balance ? "not balanced" : "balanced");
  fmt::print("  epochs         {:>14L}   from epoch {}; {} steps in the first{}\n", o.epochs, o.epoch, first_steps,
             o.start_step == 0 ? std::string() : fmt::format(", from step {}", o.start_step));
  fmt::print("  batches        {:>14L}   {} tokens a batch element, {}{}\n", t.batches, token_type,
             o.pad_to_multiple == 0 ? std::string("rows of the capacity") : fmt::format("rows padded to a multiple of {}", o.pad_to_multiple),
             o.max_steps == 0 ? std::string() : fmt::format(", stopped after {} (--max-steps)", o.max_steps));
  fmt::print("  tokens         {:>14L}   {:L} real ({:.2f}%), {:L} carry loss; {} padding rows\n", t.tokens, t.real_tokens,
             t.tokens == 0 ? 0.0 : 100.0 * static_cast<double>(t.real_tokens) / static_cast<double>(t.tokens),
             t.loss_tokens, t.padding_rows);
  fmt::print("  time           {:>12.4f} s   {} thread(s), depth {}, trainer step {} ms; of it the loader's start {:.4f} s "
             "(before it: plan {:.4f} s)\n",
             t.seconds, o.threads, o.depth, o.step_ms, t.startup_seconds, t.first_plan_seconds);
  fmt::print("  throughput     {:>14.4g}   tokens/s; {:.3f} GB/s of output\n", rate(static_cast<double>(t.tokens)),
             output_rate / gb);
  fmt::print("  memcpy floor   {:>10.3f} GB/s   {} thread(s) ({:.3f} GB/s one thread): output at x {:.3f} of it\n",
             memcpy_threads / gb, o.threads, memcpy_one / gb, memcpy_threads > 0 ? output_rate / memcpy_threads : 0.0);
  fmt::print("  trainer waited {:>12.4f} s   {:.2f}% of the time (after the first batch){}\n", t.wait_seconds,
             100 * wait_fraction,
             o.epochs == 1 ? std::string()
                           : fmt::format("; {:.4f} s between epochs (next loader, plan)", t.epoch_switch_seconds));
  fmt::print("  workers busy   {:>12.4f} s   {:.2f}% of threads x time\n", t.busy_seconds, 100 * busy_fraction);
  fmt::print("  ready ahead    {:>14.2f}   batches, mean at a next(); most {}\n", mean_ready, t.max_ready);
  fmt::print("  memory         {:>14L}   bytes a buffer; peak resident {:L} bytes\n", batch_bytes, peak);
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
  return 0;
}

inline int run_load_command(const load_command_options& o) {
  return o.int64 ? run_load<std::int64_t>(o) : run_load<std::int32_t>(o);
}

inline void add_load_command(CLI::App& app, load_command_options& o, std::function<int()>& action) {
  CLI::App* command = app.add_subcommand(
      "load", "load one rank's batches with the batch loader's threads for a simulated trainer: throughput, waits");
  add_packing_flags(*command, o.packing);
  // Batches need tokens: the inputs of lengths only are hidden from the help and refused.
  std::vector<CLI::Option*> refused;
  for (const char* name : {"--lengths", "--resample", "--resample-seed"})
    refused.push_back(command->get_option(name)->group(""));
  command->add_option("--prompt-lengths", o.prompt_lengths,
                      "prompt tokens a sample (text: one a line, or binary): they carry no loss");
  command->add_flag("--train-on-inputs", o.train_on_inputs, "prompt tokens carry loss too");
  command->add_option("--world-size", o.world_size, "ranks (data-parallel processes)")->capture_default_str()
      ->check(positive_integer);
  command->add_option("--rank", o.rank, "the rank whose batches are loaded")->capture_default_str()
      ->check(non_negative_integer);
  command->add_option("--micro-batch", o.micro_batch, "rows a batch")->capture_default_str()->check(positive_integer);
  command->add_option("--epoch", o.epoch, "the first epoch: with --seed, fixes the packing and the order")
      ->capture_default_str()
      ->check(non_negative_integer);
  command->add_option("--epochs", o.epochs, "epochs to load, one after the other")->capture_default_str()
      ->check(positive_integer);
  command->add_option("--remainder", o.remainder, "rows that do not fill a last step: pad | drop")->capture_default_str();
  command->add_flag("--no-balance", o.no_balance, "rank r takes the r-th consecutive rows of each step");
  command->add_option("--start-step", o.start_step, "start the first epoch at this step (resume)")->capture_default_str()
      ->check(non_negative_integer);
  command->add_option("--max-steps", o.max_steps, "stop after N batches in all")->check(positive_integer);
  command->add_option("--threads", o.threads, "worker threads building batches")->capture_default_str()
      ->check(positive_integer);
  command->add_option("--depth", o.depth, "buffers: batches built ahead of the trainer")->capture_default_str()
      ->check(positive_integer);
  command->add_option("--step-ms", o.step_ms, "milliseconds the simulated trainer spends a step; 0: none")
      ->capture_default_str()
      ->check(step_milliseconds);
  command->add_option("--pad-to-multiple", o.pad_to_multiple,
                      "0: rows of the capacity; N: the batch's longest row rounded up to a multiple of N")
      ->capture_default_str()
      ->check(non_negative_integer);
  command->add_option("--memcpy-buffer-mib", o.memcpy_buffer_mib,
                      "MiB of each of the memcpy floor's two buffers; 0: twice the last-level cache, within [64, 256]")
      ->capture_default_str()
      ->check(non_negative_integer)
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 20));
  command->add_flag("--int64", o.int64, "int64 token arrays (default int32)");
  command->add_flag("--json", o.json, "print one JSON object on standard output");
  command->add_option("--dump-batches", o.dump_batches,
                      "write the first batches to DIR as .npy: step{S:06}_rank{R}_{array}.npy "
                      "(epoch{E}_step... with --epochs > 1)");
  command->add_option("--repeat-data", o.repeat_data,
                      "see the data N times over in each epoch (longer epochs for steady-state figures)")
      ->capture_default_str()
      ->check(positive_integer);
  command->add_option("--dump-count", o.dump_count, "batches --dump-batches writes")->capture_default_str()
      ->check(non_negative_integer);
  command->add_flag("--device", o.device,
                    "copy the batches to the GPU through pinned buffers (multipack::cuda); the simulated step "
                    "is a kernel on the trainer's stream");
  command->add_option("--batches-in-flight", o.batches_in_flight, "with --device: device buffers")
      ->capture_default_str()
      ->check(positive_integer)
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  command->callback([&o, &action, refused] {
    for (const CLI::Option* option : refused)
      if (option->count() != 0) {
        const std::string name = "--" + option->get_lnames().front();
        throw CLI::ValidationError(name, "load builds batches of tokens, which " + name +
                                             " does not give: use --data PREFIX (a Megatron indexed dataset)");
      }
    if (o.rank >= o.world_size)
      throw CLI::ValidationError("--rank", fmt::format("rank {} is outside the world of {} rank{} (--world-size {}): "
                                                       "ranks are 0 to {}",
                                                       o.rank, o.world_size, o.world_size == 1 ? "" : "s",
                                                       o.world_size, o.world_size - 1));
    if (o.threads > 1024)
      throw CLI::ValidationError("--threads", fmt::format("{} threads; at most 1024 are supported", o.threads));
    if (o.device && !o.dump_batches.empty())
      throw CLI::ValidationError("--dump-batches", "the batches of --device are in device memory; dump without --device");
    if (o.device && !built_with_cuda)
      throw CLI::ValidationError("--device", "this multipack-bench was built without CUDA (no CUDA Toolkit, or a "
                                             "sanitizer build): rebuild where /usr/local/cuda is installed");
    action = [&] { return run_load_command(o); };
  });
}

}  // namespace multipack::bench
