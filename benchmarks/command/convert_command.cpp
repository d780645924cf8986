// multipack-bench convert: see convert_command.hpp.

#include "command/convert_command.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
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

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command/common.hpp"
#include "multipack/core/error.hpp"
#include "multipack/data/dtype.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"
#include "multipack/data/prompt_lengths_writer.hpp"

namespace multipack::bench {

namespace detail {

/// What a line's sample carries besides its tokens.
enum class companion : std::uint8_t { none, prompt_lengths, labels };

inline const char* companion_name(companion c) {
  switch (c) {
    case companion::prompt_lengths: return "prompt lengths";
    case companion::labels: return "labels";
    case companion::none: break;
  }
  return "no loss mask";
}

/// The converter: one sample a line into the writers.
class jsonl_converter {
 public:
  jsonl_converter(const convert_command_options& o, token_dtype dtype) : o_(o), tokens_(o.output, dtype) {}

  /// Converts one line (1-based `line`, starting at byte `offset`). Blank lines are skipped.
  void add(const std::string& text, std::uint64_t line, std::uint64_t offset) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) {
      ++blank_;
      return;
    }
    const auto where = [&] { return fmt::format("{}: line {} (byte {})", o_.input, line, offset); };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw format_error(fmt::format("{}: not JSON: {}", where(), e.what()));
    }
    if (!j.is_object()) throw format_error(fmt::format("{}: expected a JSON object, found {}", where(), j.type_name()));
    const auto ids = j.find(o_.tokens_field);
    if (ids == j.end()) throw format_error(fmt::format("{}: no \"{}\" field", where(), o_.tokens_field));
    integers(*ids, o_.tokens_field, where, ids_);

    const bool has_prompt = j.contains(o_.prompt_field);
    const bool has_labels = j.contains(o_.labels_field);
    // A field the user named that a line lacks is a typo or a wrong file, not "no mask".
    for (const auto& [required, present, flag, field] :
         {std::tuple{o_.prompt_field_required, has_prompt, "--prompt-field", &o_.prompt_field},
          std::tuple{o_.labels_field_required, has_labels, "--labels-field", &o_.labels_field}})
      if (required && !present)
        throw format_error(fmt::format("{}: no \"{}\" field, which {} names{}", where(), *field, flag,
                                       samples_ == 0 ? " (is the field's name right?)" : ""));
    if (has_prompt && has_labels)
      throw format_error(fmt::format("{}: both \"{}\" and \"{}\": give one kind of loss mask", where(), o_.prompt_field,
                                     o_.labels_field));
    const companion kind = has_prompt ? companion::prompt_lengths : has_labels ? companion::labels : companion::none;
    if (!kind_) {
      open_companion(kind);
    } else if (*kind_ != kind) {
      throw format_error(fmt::format("{}: this sample has {}, the first sample (line {}) has {}: every sample needs the same",
                                     where(), companion_name(kind), first_line_, companion_name(*kind_)));
    }
    if (first_line_ == 0) first_line_ = line;

    std::uint32_t prompt = 0;
    if (kind == companion::prompt_lengths) {
      const nlohmann::json& p = j[o_.prompt_field];
      if (!p.is_number_integer() || p.get<std::int64_t>() < 0 ||
          static_cast<std::uint64_t>(p.get<std::int64_t>()) > ids_.size())
        throw format_error(fmt::format("{}: \"{}\" must be an integer from 0 to the sample's {} tokens, found {}", where(),
                                       o_.prompt_field, ids_.size(), p.dump()));
      prompt = static_cast<std::uint32_t>(p.get<std::int64_t>());
    } else if (kind == companion::labels) {
      integers(j[o_.labels_field], o_.labels_field, where, labels_);
      if (labels_.size() != ids_.size())
        throw format_error(fmt::format("{}: {} labels for {} tokens: one label a token", where(), labels_.size(), ids_.size()));
      mask_.resize(labels_.size());
      for (std::size_t k = 0; k < labels_.size(); ++k) mask_[k] = labels_[k] == o_.ignore_index ? 0 : 1;
    }

    try {
      tokens_.add_sample(ids_);
    } catch (const option_error& e) {  // a token the dtype cannot hold
      throw format_error(fmt::format("{}: {}", where(), e.what()));
    }
    tokens_.end_document();
    if (prompts_) prompts_->add(prompt);
    if (mask_writer_) {
      mask_writer_->add_sample(mask_);
      mask_writer_->end_document();
    }
    ++samples_;
    token_count_ += ids_.size();
    longest_ = std::max<std::uint64_t>(longest_, ids_.size());
  }

  /// Puts every output in place. Throws format_error for an input with no sample.
  void finish() {
    if (samples_ == 0) throw format_error(o_.input + ": no samples (an empty input, or blank lines only)");
    tokens_.finish();
    if (prompts_) prompts_->finish();
    if (mask_writer_) mask_writer_->finish();
  }

  [[nodiscard]] std::uint64_t samples() const noexcept { return samples_; }
  [[nodiscard]] std::uint64_t tokens() const noexcept { return token_count_; }
  [[nodiscard]] std::uint64_t longest() const noexcept { return longest_; }
  [[nodiscard]] std::uint64_t blank_lines() const noexcept { return blank_; }
  [[nodiscard]] companion kind() const noexcept { return kind_.value_or(companion::none); }
  [[nodiscard]] std::vector<std::string> outputs() const {
    std::vector<std::string> out{o_.output + ".bin", o_.output + ".idx"};
    if (prompts_) out.push_back(o_.output + ".prompt_lengths");
    if (mask_writer_) {
      out.push_back(o_.output + ".loss_mask.bin");
      out.push_back(o_.output + ".loss_mask.idx");
    }
    return out;
  }

 private:
  template <class Where>
  static void integers(const nlohmann::json& array, const std::string& field, const Where& where,
                       std::vector<std::int64_t>& out) {
    if (!array.is_array())
      throw format_error(fmt::format("{}: \"{}\" must be an array of integers, found {}", where(), field, array.type_name()));
    out.clear();
    out.reserve(array.size());
    for (std::size_t k = 0; k < array.size(); ++k) {
      const nlohmann::json& v = array[k];
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw format_error(fmt::format("{}: \"{}\"[{}] = {} is past int64", where(), field, k, v.dump()));
      if (!v.is_number_integer())
        throw format_error(fmt::format("{}: \"{}\"[{}] = {} is not an integer", where(), field, k, v.dump()));
      out.push_back(v.get<std::int64_t>());
    }
  }

  void open_companion(companion kind) {
    kind_ = kind;
    if (kind == companion::prompt_lengths) prompts_ = std::make_unique<prompt_lengths_writer>(o_.output + ".prompt_lengths");
    if (kind == companion::labels)
      mask_writer_ = std::make_unique<indexed_dataset_writer>(o_.output + ".loss_mask", token_dtype::uint8);
  }

  const convert_command_options& o_;
  indexed_dataset_writer tokens_;
  std::unique_ptr<prompt_lengths_writer> prompts_;
  std::unique_ptr<indexed_dataset_writer> mask_writer_;
  std::optional<companion> kind_;
  std::uint64_t first_line_ = 0;
  std::vector<std::int64_t> ids_;
  std::vector<std::int64_t> labels_;
  std::vector<std::int32_t> mask_;  // 0 / 1, stored as uint8
  std::uint64_t samples_ = 0;
  std::uint64_t token_count_ = 0;
  std::uint64_t longest_ = 0;
  std::uint64_t blank_ = 0;
};

inline token_dtype parse_token_dtype(const std::string& name) {
  for (std::uint8_t code = 1; is_dtype_code(code); ++code) {
    const auto d = static_cast<token_dtype>(code);
    if (dtype_name(d) == name) {
      if (d == token_dtype::float32 || d == token_dtype::float64)
        throw option_error("--dtype " + name + ": tokens are integers; use uint16, int32 or int64");
      return d;
    }
  }
  throw option_error("--dtype " + name + ": expected uint8, int8, int16, uint16, int32 or int64");
}

}  // namespace detail

inline int run_convert_command(const convert_command_options& o) {
  const token_dtype dtype = detail::parse_token_dtype(o.dtype);
  std::ifstream in(o.input, std::ios::binary);
  if (!in) throw io_error(o.input + ": cannot open: " + std::strerror(errno));
  std::error_code ec;
  const std::uint64_t input_bytes = std::filesystem::file_size(o.input, ec);
  const bool sized = !ec && input_bytes > 0;

  std::atomic<std::uint64_t> lines{0};
  std::atomic<std::uint64_t> read{0};
  const auto start = clock::now();
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
      ++number;
      converter.add(line, number, offset);
      offset += line.size() + 1;
      lines.store(number, std::memory_order_relaxed);
      read.store(offset, std::memory_order_relaxed);
    }
    if (in.bad()) throw io_error(o.input + ": read failed at byte " + std::to_string(offset));
    converter.finish();
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
    out["input_bytes"] = bytes;
    out["seconds"] = seconds;
    out["input_bytes_per_second"] = seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
    out["peak_rss_bytes"] = peak;
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("multipack-bench convert: {} -> {}\n", o.input, o.output);
  fmt::print("  samples        {:>14L}   {:L} tokens ({}), the longest {:L}; {} blank line(s) skipped\n",
             converter.samples(), converter.tokens(), o.dtype, converter.longest(), converter.blank_lines());
  fmt::print("  loss mask      {:>14}\n", detail::companion_name(converter.kind()));
  fmt::print("  time           {:>12.4f} s   {:.1f} MB/s of JSON Lines; peak resident {:L} bytes\n", seconds,
             seconds > 0 ? static_cast<double>(bytes) / seconds * 1e-6 : 0.0, peak);
  for (const std::string& file : converter.outputs()) fmt::print("  wrote          {}\n", file);
  return 0;
}

void add_convert_command(CLI::App& app, convert_command_options& o, std::function<int()>& action) {
  CLI::App* command = app.add_subcommand(
      "convert", "JSON Lines of pre-tokenized samples into the indexed format (+ its loss-mask companion), streaming");
  command->add_option("--input", o.input, "JSON Lines: one {\"input_ids\": [...]} object a line")->required();
  command->add_option("--output", o.output, "output prefix: PREFIX.bin, PREFIX.idx, ...")->required();
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
  command->add_option("--ignore-index", o.ignore_index, "a label that carries no loss")->capture_default_str();
  command->add_flag("--json", o.json, "print one JSON object on standard output");
  command->callback([&o, &action, prompt, labels] {
    o.prompt_field_required = prompt->count() > 0;
    o.labels_field_required = labels->count() > 0;
    action = [&] { return run_convert_command(o); };
  });
}

}  // namespace multipack::bench
