// multipack-bench convert: see convert_command.hpp.

#include "command/convert_command.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <signal.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command/common.hpp"
#include "command/jsonl_converter.hpp"
#include "command/options.hpp"
#include "command/reports.hpp"
#include "multipack/core/error.hpp"
#include "multipack/data/dtype.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"
#include "multipack/data/prompt_lengths_writer.hpp"

namespace multipack::bench {

namespace {

// SIGINT, SIGTERM or SIGHUP while converting: noted, so that the conversion stops at the next
// line (or at the end of its input: a read that waits is not cut short) and the writers'
// destructors remove their temporaries (a conversion killed part way left its PREFIX.*.tmp
// behind, as large as the input); then raised again, for the status a shell expects of a
// command a signal stopped. A second signal ends the process at once (SA_RESETHAND), as it
// would have before. Once the files are being put in place the conversion completes, its
// report is printed, and then the signal is raised.
std::atomic<int> interrupting_signal{0};

void note_interrupting_signal(int signal) { interrupting_signal.store(signal, std::memory_order_relaxed); }

class interrupt_guard {
 public:
  interrupt_guard() {
    struct sigaction action {};
    action.sa_handler = note_interrupting_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_RESETHAND;  // a read goes on; the second signal is the default's
    for (std::size_t k = 0; k < signals.size(); ++k) {
      sigaction(signals[k], nullptr, &previous_[k]);
      // An ignored signal stays ignored (a background job's SIGINT, nohup's SIGHUP).
      if (previous_[k].sa_handler != SIG_IGN) sigaction(signals[k], &action, nullptr);
    }
  }
  interrupt_guard(const interrupt_guard&) = delete;
  interrupt_guard& operator=(const interrupt_guard&) = delete;
  /// Puts the previous handlers back, then raises the signal noted, if any (by then the
  /// converter is gone, and its temporaries with it).
  ~interrupt_guard() {
    for (std::size_t k = 0; k < signals.size(); ++k) sigaction(signals[k], &previous_[k], nullptr);
    if (const int signal = interrupting_signal.exchange(0)) {
      std::fflush(stdout);  // a report printed already (the signal came while committing)
      std::raise(signal);
    }
  }
  /// Throws error once a signal was noted (unwinding to the guard, which raises it again).
  static void check() {
    if (const int signal = interrupting_signal.load(std::memory_order_relaxed))
      throw error(fmt::format("interrupted by signal {} ({})", signal, strsignal(signal)));
  }

 private:
  static constexpr std::array<int, 3> signals{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
};

}  // namespace

inline int run_convert_command(const convert_command_options& o) {
  const token_dtype dtype = detail::parse_token_dtype(o.dtype);
  check_output_path(o.output, "--output", true);
  std::error_code is_dir_error;
  if (std::filesystem::is_directory(o.input, is_dir_error))
    throw option_error("--input " + o.input + ": a directory; convert reads one JSON Lines file");
  std::ifstream in(o.input, std::ios::binary);
  if (!in) throw io_error(o.input + ": cannot open: " + std::strerror(errno));
  std::error_code ec;
  const std::uint64_t input_bytes = std::filesystem::file_size(o.input, ec);
  const bool sized = !ec && input_bytes > 0;

  std::atomic<std::uint64_t> lines{0};
  std::atomic<std::uint64_t> read{0};
  const auto start = clock::now();
  const interrupt_guard interrupts;  // before the converter: gone after it
  detail::jsonl_converter converter(o, dtype);
  {
    progress p(fmt::format("converting {}", o.input), [&] {
      const std::uint64_t done = read.load(std::memory_order_relaxed);
      return fmt::format("{} lines, {:.1f} MB{}", lines.load(std::memory_order_relaxed), static_cast<double>(done) * 1e-6,
                         sized ? fmt::format(" ({:.1f} %)", 100.0 * static_cast<double>(done) / static_cast<double>(input_bytes))
                               : std::string());
    });
    std::string line;
    std::uint64_t offset = 0;
    std::uint64_t number = 0;
    while (std::getline(in, line)) {
      interrupt_guard::check();
      ++number;
      converter.add(line, number, offset);
      offset += line.size() + (in.eof() ? 0 : 1);  // a last line may have no newline
      lines.store(number, std::memory_order_relaxed);
      read.store(offset, std::memory_order_relaxed);
    }
    interrupt_guard::check();  // the input may have ended early because of it
    if (in.bad()) throw io_error(o.input + ": read failed at byte " + std::to_string(offset));
    converter.prepare();       // seconds on a large input (the .idx from the spooled sizes)
    interrupt_guard::check();  // the last point where nothing old has changed
    converter.commit();
  }
  const double seconds = seconds_since(start);
  const std::uint64_t bytes = read.load();
  const std::uint64_t peak = peak_rss_bytes();
  if (o.json) {
    nlohmann::ordered_json out;
    out["input"] = o.input;
    out["output"] = o.output;
    out["dtype"] = o.dtype;
    out["samples"] = converter.samples();
    out["tokens"] = converter.tokens();
    out["longest_sample"] = converter.longest();
    out["blank_lines"] = converter.blank_lines();
    out["loss_mask"] = detail::companion_name(converter.kind());
    out["outputs"] = converter.outputs();
    out["removed"] = converter.removed();
    out["input_bytes"] = bytes;
    out["seconds"] = seconds;
    out["input_bytes_per_second"] = seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
    out["peak_rss_bytes"] = peak;
    print_json(out);
    return 0;
  }
  fmt::print("multipack-bench convert: {} -> {}\n", o.input, o.output);
  fmt::print("  samples        {:>14L}   {:L} tokens ({}), the longest {:L}; {} blank line(s) skipped\n",
             converter.samples(), converter.tokens(), o.dtype, converter.longest(), converter.blank_lines());
  fmt::print("  loss mask      {:>14}\n", detail::companion_name(converter.kind()));
  fmt::print("  time           {:>12.4f} s   {:.1f} MB/s of JSON Lines; peak resident {:L} bytes\n", seconds,
             seconds > 0 ? static_cast<double>(bytes) / seconds * 1e-6 : 0.0, peak);
  for (const std::string& file : converter.outputs()) fmt::print("  wrote          {}\n", file);
  for (const std::string& file : converter.removed()) fmt::print("  removed        {}\n", file);
  return 0;
}

void add_convert_command(CLI::App& app, convert_command_options& o, std::function<int()>& action) {
  CLI::App* command = app.add_subcommand(
      "convert", "JSON Lines of pre-tokenized samples into the indexed format (+ its loss-mask companion), streaming");
  command->add_option("--input", o.input, "JSON Lines: one {\"input_ids\": [...]} object a line")
      ->required()
      ->check(non_empty_path);
  command->add_option("--output", o.output, "output prefix: PREFIX.bin, PREFIX.idx, ...")
      ->required()
      ->check(non_empty_path);
  command->add_option("--dtype", o.dtype, "token type of the .bin: uint8, int8, int16, uint16, int32, int64")
      ->capture_default_str();
  command->add_option("--tokens-field", o.tokens_field, "the field holding the tokens")->capture_default_str();
  auto* prompt = command->add_option("--prompt-field", o.prompt_field,
                                     "the field holding the prompt length; given, every line must have it")
                     ->capture_default_str();
  auto* labels = command->add_option("--labels-field", o.labels_field,
                                     "the field holding per-token labels; given, every line must have it")
                     ->capture_default_str();
  prompt->excludes(labels);
  command->add_option("--ignore-index", o.ignore_index, "a label that carries no loss")
      ->capture_default_str()
      ->transform(signed_integer);
  command->add_flag("--json", o.json, "print one JSON object on standard output");
  command->callback([&o, &action, prompt, labels] {
    o.prompt_field_required = prompt->count() > 0;
    o.labels_field_required = labels->count() > 0;
    action = [&] { return run_convert_command(o); };
  });
}

}  // namespace multipack::bench
