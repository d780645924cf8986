#pragma once
// The flags that several subcommands share, declared once: the input (--data, --lengths,
// --resample), the packing (--capacity, --algorithm, ...) and the schedule (--world-size,
// --micro-batch, --epoch, --remainder, --no-balance, --start-step), with the validators they use.

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "multipack/pack/pack.hpp"
#include "multipack/schedule/epoch_schedule.hpp"

namespace multipack::bench {

// The integer validators are transforms (Option::transform, not check): each rewrites the
// decimal text it accepts without leading zeros, since CLI11 converts integers with strtoull's
// base 0, which reads "010" as octal 8 and "0x10" as 16.

/// Accepts digits only, from `least` to `most`: CLI11 would otherwise read "-1" into an
/// unsigned option as its largest value and saturate larger numbers (or say only "Could not
/// convert" past a narrower type's range), and its NonNegativeNumber message prints the range
/// of a double. Each option gives its own range, so that the message states it.
inline CLI::Validator integer_in(std::uint64_t least, std::uint64_t most) {
  const std::string range = fmt::format("{} to {}", least, most);
  return CLI::Validator(
      [least, most, range](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto parsed = std::from_chars(text.data(), end, value);
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || parsed.ptr != end ||
            parsed.ec != std::errc{} || value < least || value > most)
          return "expected an integer from " + range + ", got '" + text + "'";
        text = std::to_string(value);
        return {};
      },
      fmt::format("[{}, {}]", least, most));
}

/// Digits only, from 0 (or 1) to the largest value of the option's type T.
template <class T>
[[nodiscard]] CLI::Validator non_negative_integer_of() {
  return integer_in(0, std::numeric_limits<T>::max());
}
template <class T>
[[nodiscard]] CLI::Validator positive_integer_of() {
  return integer_in(1, std::numeric_limits<T>::max());
}
inline const CLI::Validator non_negative_integer = non_negative_integer_of<std::uint64_t>();
inline const CLI::Validator positive_integer = positive_integer_of<std::uint64_t>();

/// Refuses an empty value: a path given as "" (an unset shell variable) read as not given, and
/// the run went on without it: no loss mask, the default data, no dump.
inline const CLI::Validator non_empty_path(
    [](const std::string& text) -> std::string { return text.empty() ? "expected a path, got an empty value" : ""; },
    "PATH");

/// Accepts an optional minus sign and digits, within a 64-bit signed integer.
inline const CLI::Validator signed_integer(
    [](std::string& text) -> std::string {
      std::int64_t value = 0;
      const char* end = text.data() + text.size();
      const auto parsed = std::from_chars(text.data(), end, value);
      const std::size_t digits = !text.empty() && text.front() == '-' ? 1 : 0;
      if (text.size() == digits || text.find_first_not_of("0123456789", digits) != std::string::npos ||
          parsed.ptr != end || parsed.ec != std::errc{})
        return "expected an integer from -9223372036854775808 to 9223372036854775807, got '" + text + "'";
      text = std::to_string(value);
      return {};
    },
    "INT");

/// Where the samples come from: Megatron indexed datasets (--data: prefixes, directories or
/// patterns, or Megatron-LM's weights and prefixes interleaved for a blend) or a text list of
/// lengths (--lengths), optionally resampled with replacement to N samples (--resample, a
/// fixed seed) for scale benchmarks.
struct input_flags {
  std::vector<std::string> data;
  std::string lengths_file;
  std::uint64_t resample = 0;
  std::uint64_t resample_seed = 1;
  std::uint64_t blend_samples = 0;  // 0: the corpora's samples in all

  /// The input as given: the --data values, or the --lengths file.
  [[nodiscard]] std::string describe_input() const {
    return lengths_file.empty() ? fmt::format("{}", fmt::join(data, " ")) : lengths_file;
  }
  [[nodiscard]] std::string describe() const {
    std::string what = describe_input();
    if (resample != 0) what += fmt::format(" resampled to {} (seed {})", resample, resample_seed);
    return what;
  }
};

/// The input and how it is packed: what `pack`, `plan` and `load` share.
struct packing_flags {
  input_flags source;
  std::uint32_t capacity = 4096;
  std::string algorithm = std::string(to_string(packing_algorithm::exact_fit));
  std::string overlong = std::string(to_string(overlong_policy::drop));
  std::uint32_t max_per_row = 0;
  std::uint64_t seed = 0;
  std::uint32_t threads = 1;
};

[[nodiscard]] inline pack_options to_pack_options(const packing_flags& o) {
  pack_options options{o.capacity, parse_packing_algorithm(o.algorithm), parse_overlong_policy(o.overlong),
                       o.max_per_row, o.seed};
  options.threads = o.threads;
  return options;
}

/// How the rows are scheduled over the ranks: what `plan` and `load` share.
struct schedule_flags {
  std::uint32_t world_size = 0;
  std::uint32_t micro_batch = 0;
  std::uint64_t epoch = 0;
  std::string remainder = std::string(to_string(remainder_policy::pad));
  bool no_balance = false;
  std::uint64_t start_step = 0;
};

[[nodiscard]] inline schedule_options to_schedule_options(const schedule_flags& o, std::uint64_t seed,
                                                          std::uint64_t consumed_rows = 0) {
  return {o.world_size, o.micro_batch, seed, o.epoch, parse_remainder_policy(o.remainder), !o.no_balance, consumed_rows};
}

/// --data, --lengths (exclusive), --resample, --resample-seed, --blend-samples.
inline void add_input_flags(CLI::App& command, input_flags& o) {
  auto* data = command.add_option("--data", o.data,
                                  "Megatron indexed datasets: PREFIX (PREFIX.idx + PREFIX.bin), a directory of them or a "
                                  "pattern (dir/shard_*), several concatenated in order; or weights and prefixes "
                                  "interleaved for a blend (0.7 corpusA 0.3 corpusB)")
                   ->capture_default_str();
  auto* lengths = command.add_option("--lengths", o.lengths_file, "text file: one sample length per line")
                      ->check(non_empty_path);
  data->excludes(lengths);
  auto* resample = command.add_option("--resample", o.resample, "draw N lengths with replacement from the input (for scale)")
                       ->transform(non_negative_integer);
  command.add_option("--resample-seed", o.resample_seed, "seed of --resample")->capture_default_str()
      ->transform(non_negative_integer)
      ->needs(resample);
  command.add_option("--blend-samples", o.blend_samples,
                     "samples of a blend's epoch (weighted --data); 0: the corpora's samples in all")
      ->capture_default_str()
      ->transform(non_negative_integer);
}

/// The input flags, then --capacity, --algorithm, --overlong, --max-per-row, --seed, --pack-threads.
inline void add_packing_flags(CLI::App& command, packing_flags& o) {
  add_input_flags(command, o.source);
  command.add_option("--capacity", o.capacity, "tokens per row")->capture_default_str()->transform(integer_in(1, max_capacity));
  command.add_option("--algorithm", o.algorithm,
                     "exact-fit | best-fit-decreasing | first-fit-decreasing | next-fit | randomized-exact-fit")
      ->capture_default_str();
  command.add_option("--overlong", o.overlong, "samples longer than a row: drop | truncate | split | error")
      ->capture_default_str();
  command.add_option("--max-per-row", o.max_per_row, "most samples (pieces) in a row; 0 = unlimited")
      ->capture_default_str()
      ->transform(non_negative_integer_of<std::uint32_t>());
  command.add_option("--seed", o.seed, "seed of the randomized algorithm (pack); of every epoch's packing and order (plan)")
      ->capture_default_str()
      ->transform(non_negative_integer);
  command.add_option("--pack-threads", o.threads, "threads for packing's passes over the samples (the same rows for any)")
      ->capture_default_str()
      ->transform(integer_in(1, max_packing_threads));
}

/// How the schedule flags are given: `plan` requires the world and the micro-batch (and leaves
/// their checks to the schedule's own message), `load` has defaults and checks them here.
enum class schedule_flags_form : std::uint8_t { required, defaulted };

/// --world-size, --micro-batch, --epoch, --remainder, --no-balance, --start-step.
inline void add_schedule_flags(CLI::App& command, schedule_flags& o, schedule_flags_form form) {
  auto* world = command.add_option("--world-size", o.world_size, "ranks (data-parallel processes)");
  auto* micro = command.add_option("--micro-batch", o.micro_batch, "rows each rank takes a step (a batch)");
  if (form == schedule_flags_form::required) {
    world->required()->transform(non_negative_integer_of<std::uint32_t>());
    micro->required()->transform(non_negative_integer_of<std::uint32_t>());
  } else {
    world->capture_default_str()->transform(positive_integer_of<std::uint32_t>());
    micro->capture_default_str()->transform(positive_integer_of<std::uint32_t>());
  }
  command.add_option("--epoch", o.epoch, "epoch number (load: the first): with --seed, fixes the packing and the order")
      ->capture_default_str()
      ->transform(non_negative_integer);
  command.add_option("--remainder", o.remainder, "rows that do not fill a last step: pad | drop")->capture_default_str();
  command.add_flag("--no-balance", o.no_balance, "rank r takes the r-th consecutive rows of each step");
  command.add_option("--start-step", o.start_step, "start at this step (resume): plan dumps, load loads from it")
      ->capture_default_str()
      ->transform(non_negative_integer);
}

}  // namespace multipack::bench
