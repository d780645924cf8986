// multipack-bench pack: see pack_command.hpp.

#include "command/pack_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command/common.hpp"
#include "command/inputs.hpp"
#include "command/reports.hpp"
#include "multipack/pack/pack.hpp"

namespace multipack::bench {
namespace {

/// Seconds to allocate blocks of `pieces` pieces and `rows` + 1 row offsets as pack() does and
/// write one byte in every 4 KiB page of them (the pieces zero-filled, the offsets
/// value-initialized): what the kernel, and a virtual machine's host, charge for as much fresh
/// memory as a result, the part of a first run that no packing writing its result into fresh
/// memory avoids.
double first_touch_seconds(std::size_t pieces, std::size_t rows) {
  const auto start = clock::now();
  piece_vector block{multipack::detail::huge_page_allocator<piece>(multipack::detail::zero_filled)};
  block.resize(pieces);
  auto* bytes = reinterpret_cast<unsigned char*>(block.data());
  for (std::size_t at = 0; at < pieces * sizeof(piece); at += 4096) bytes[at] = 1;
  std::vector<std::uint64_t> offsets(rows + 1);
  const double seconds = seconds_since(start);
  // Reading them back keeps the writes (the vector's could be elided with it); no pieces: no data.
  if ((pieces != 0 && bytes[0] != 1) || offsets.back() != 0) std::abort();
  return seconds;
}

/// Waits `seconds` (0: not at all), so that memory freed before goes back to the system: a
/// virtual machine's guest reports free pages to its host after about 2 s, and a page the host
/// took back costs a fault on the host at the next touch (about 1 ms a MB on the VM of the
/// README's tables, 10x the guest's own fault).
void idle(unsigned seconds) {
  if (seconds == 0) return;
  progress p(fmt::format("idle for {} s", seconds));
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
}

/// One line a row, the pieces as append_pieces writes them.
void write_rows(const std::string& path, const packed_rows& rows, const std::vector<std::uint32_t>& lengths) {
  text_file file(path);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    append_pieces(file.buffer(), rows[r], lengths);
    file.buffer().push_back('\n');
    file.maybe_flush();
  }
  file.close();
}

int run_pack_command(const pack_command_options& o) {
  const pack_options options = to_pack_options(o.packing);
  validate(options);
  if (!o.dump_rows.empty()) check_output_path(o.dump_rows, "--dump-rows");
  const opened_input input = load_lengths(o.packing.source, o.packing.seed, 0);
  const std::vector<std::uint32_t>& lengths = input.lengths;

  // Peak memory of the packing alone: reset the peak once the input is loaded.
  const bool peak_reset = reset_peak_rss();
  const std::uint64_t rss_before = rss_bytes();
  // The first run pays for the operating system's first touch of the result's memory; later
  // runs (later epochs of a trainer) do not. Both are reported.
  packing result;
  double first_seconds = 0;
  double pack_seconds = 0;
  idle(o.idle_before);
  for (unsigned run = 0; run < std::max(1U, o.repeat); ++run) {
    progress p(fmt::format("packing {} samples ({})", lengths.size(), o.packing.algorithm));
    result = packing{};
    const auto start = clock::now();
    result = pack(lengths, options);
    const double seconds = seconds_since(start);
    if (run == 0) first_seconds = pack_seconds = seconds;
    pack_seconds = std::min(pack_seconds, seconds);
  }
  const std::uint64_t peak = peak_rss_bytes();
  const std::uint64_t pack_peak = peak > rss_before ? peak - rss_before : 0;

  // A trainer's later epoch: packing into the last packing's blocks (pack's storage argument),
  // after the same wait. Those pages stayed the process's, so they cost no fault. The same
  // options: the same rows, so the report below holds for it too.
  idle(o.idle_before);
  double reusing_seconds = 0;
  {
    progress p("packing into the last packing's memory");
    const auto start = clock::now();
    result = pack(lengths, options, std::move(result));
    reusing_seconds = seconds_since(start);
  }

  // What as much fresh memory as the result costs, after the same wait. The result is still
  // held, so these are pages this process never had (a first run may get some that the
  // guest had not yet given back).
  idle(o.idle_before);
  double touch_seconds = 0;
  double sort_seconds = 0;
  {
    progress p("measuring the floors: first touch, sort");  // seconds at 10^8 samples
    touch_seconds = first_touch_seconds(result.rows.pieces().size(), result.rows.size());

    // The floor, in the same run: sorting a copy of the same lengths, best of as many runs as
    // the steady packing's (a best of several against one run would flatter the ratio).
    sort_seconds = best_seconds(o.repeat, [&] {
      std::vector<std::uint32_t> copy = lengths;
      const auto sort_start = clock::now();
      std::sort(copy.begin(), copy.end());
      const double seconds = seconds_since(sort_start);
      do_not_optimize(copy.data());
      return seconds;
    });
  }

  if (!o.dump_rows.empty()) {
    progress p("writing " + o.dump_rows);
    write_rows(o.dump_rows, result.rows, lengths);
  }

  const pack_report& r = result.report;
  const double per_sample = lengths.empty() ? 0.0 : static_cast<double>(pack_peak) / static_cast<double>(lengths.size());
  if (o.json) {
    nlohmann::ordered_json out = report_json(r, options);
    out["input"] = o.packing.source.describe();
    add_input_json(out, input);
    out["pack_seconds"] = pack_seconds;
    out["pack_seconds_first_run"] = first_seconds;
    out["repeat"] = std::max(1U, o.repeat);
    out["pack_seconds_reusing_memory"] = reusing_seconds;
    out["idle_before_seconds"] = o.idle_before;
    out["first_touch_seconds"] = touch_seconds;
    out["sort_seconds"] = sort_seconds;
    out["pack_over_sort"] = sort_seconds > 0 ? pack_seconds / sort_seconds : 0.0;
    out["peak_rss_bytes"] = peak_rss_bytes();
    out["pack_peak_bytes"] = pack_peak;
    out["pack_peak_bytes_per_sample"] = per_sample;
    out["pack_peak_measured_alone"] = peak_reset;
    print_json(out);
    return 0;
  }
  fmt::print("multipack-bench pack: {}\n", o.packing.source.describe());
  fmt::print("  samples        {:>14L}   tokens {:L}\n", r.samples, r.tokens);
  print_corpora(input);
  fmt::print("  algorithm      {:>14}   capacity {}, overlong {}, max per row {}\n", o.packing.algorithm, r.capacity,
             o.packing.overlong, o.packing.max_per_row == 0 ? std::string("unlimited") : std::to_string(o.packing.max_per_row));
  fmt::print("  rows           {:>14L}   lower bound {:L} (x {:.5f})\n", r.rows, r.lower_bound, r.rows_over_lower_bound());
  fmt::print("  efficiency     {:>13.3f}%   packed tokens / (rows x capacity)\n", 100 * r.efficiency());
  fmt::print("  pack time      {:>12.4f} s   best of {}; first run {:.4f} s; sort of the same lengths {:.4f} s (x {:.2f})\n",
             pack_seconds, std::max(1U, o.repeat), first_seconds, sort_seconds,
             sort_seconds > 0 ? pack_seconds / sort_seconds : 0.0);
  fmt::print("  reusing memory {:>12.4f} s   packing into the last packing's memory, as a later epoch does (x {:.2f} the sort){}\n",
             reusing_seconds, sort_seconds > 0 ? reusing_seconds / sort_seconds : 0.0,
             o.idle_before == 0 ? std::string() : fmt::format(", after {} s idle", o.idle_before));
  fmt::print("  first touch    {:>12.4f} s   of as much fresh memory as the result{}\n",
             touch_seconds, o.idle_before == 0 ? std::string() : fmt::format(", each after {} s idle", o.idle_before));
  fmt::print("  dropped        {:>14L}   samples, {:L} tokens (longer than a row)\n", r.dropped_samples, r.dropped_tokens);
  fmt::print("  truncated      {:>14L}   samples, {:L} tokens cut\n", r.truncated_samples, r.truncated_tokens);
  fmt::print("  split          {:>14L}   samples\n", r.split_samples);
  fmt::print("  empty          {:>14L}   samples (length 0, not packed)\n", r.empty_samples);
  fmt::print("  packing memory {:>14L}   bytes peak ({:.1f} bytes a sample)\n", pack_peak, per_sample);
  return 0;
}

}  // namespace

void add_pack_command(CLI::App& app, pack_command_options& o, std::function<int()>& action) {
  CLI::App* command = app.add_subcommand("pack", "pack sample lengths into rows and report how well and how fast");
  add_packing_flags(*command, o.packing);
  command->add_option("--repeat", o.repeat, "pack R times; report the fastest and the first")
      ->capture_default_str()
      ->transform(positive_integer_of<unsigned>());
  command->add_option("--idle-before", o.idle_before,
                      "wait SECONDS before the first packing, before packing into its memory and before timing the first "
                      "touch of fresh memory, "
                      "so that memory freed before goes back to the system (a virtual machine's host), as a "
                      "trainer's previous epoch's has")
      ->capture_default_str()
      ->transform(non_negative_integer_of<unsigned>());
  command->add_flag("--json", o.json, "print one JSON object on standard output");
  command->add_option("--dump-rows", o.dump_rows, "write the rows to FILE, one line a row")->check(non_empty_path);
  command->callback([&] { action = [&] { return run_pack_command(o); }; });
}

}  // namespace multipack::bench
