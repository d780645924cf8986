#pragma once
// The JSON Lines converter of `multipack-bench convert`: one line a call into the indexed
// format and its loss-mask companion. A header of its own so that the fuzz target
// (tests/fuzz/fuzz_jsonl_converter.cpp) drives the same code as the command.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command/common.hpp"
#include "command/convert_command.hpp"
#include "multipack/core/error.hpp"
#include "multipack/data/dtype.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"
#include "multipack/data/loss_mask.hpp"
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

/// `text`, or where it has a lone UTF-16 surrogate escape (a \uD800-\uDBFF not followed by a
/// \uDC00-\uDFFF, or such a low one not after a high one) a copy in `scratch` with each written
/// as \uFFFD, the replacement character. RFC 8259's grammar allows them and Python's
/// json.dumps writes one for a str cut inside an emoji, but nlohmann/json refuses the line;
/// the fields convert reads are integers, so a character of a text field does not matter.
/// O(length); copies only a line that has one.
inline std::string_view without_lone_surrogates(const std::string& text, std::string& scratch) {
  const auto hex4 = [&](std::size_t at, unsigned& value) {
    if (at + 4 > text.size()) return false;
    value = 0;
    for (std::size_t k = at; k < at + 4; ++k) {
      const char c = text[k];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return false;
      value = value * 16 + static_cast<unsigned>(digit);
    }
    return true;
  };
  bool copied = false;
  std::size_t i = text.find('\\');
  while (i != std::string::npos && i + 1 < text.size()) {
    unsigned code = 0;
    if (text[i + 1] != 'u' || !hex4(i + 2, code)) {  // another escape (\\ included): skipped whole
      i = text.find('\\', i + 2);
      continue;
    }
    std::size_t next = i + 6;
    unsigned low = 0;
    const bool high = code >= 0xD800 && code <= 0xDBFF;
    if (high && next + 1 < text.size() && text[next] == '\\' && text[next + 1] == 'u' && hex4(next + 2, low) &&
        low >= 0xDC00 && low <= 0xDFFF) {
      next += 6;  // a pair
    } else if (high || (code >= 0xDC00 && code <= 0xDFFF)) {
      if (!copied) scratch = text;
      copied = true;
      scratch.replace(i + 2, 4, "FFFD");  // the same length: positions stay those of `text`
    }
    i = text.find('\\', next);
  }
  return copied ? std::string_view(scratch) : std::string_view(text);
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
    // nlohmann's parser takes a NUL byte for the end of its input, even within the range it is
    // given: the rest of the line (another sample) was dropped without an error. JSON has no
    // raw NUL anywhere (in a string it is the escape \u0000).
    if (const std::size_t nul = text.find('\0'); nul != std::string::npos)
      throw format_error(fmt::format("{}: not JSON: a NUL byte at column {}", where(), nul + 1));
    nlohmann::json j;
    try {
      const std::string_view json = without_lone_surrogates(text, scratch_);
      j = nlohmann::json::parse(json.begin(), json.end());
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 2e999
      throw format_error(fmt::format("{}: not JSON: {}", where(), e.what()));
    }
    if (!j.is_object()) throw format_error(fmt::format("{}: expected a JSON object, found {}", where(), j.type_name()));
    const auto ids = j.find(o_.tokens_field);
    if (ids == j.end()) throw format_error(fmt::format("{}: no \"{}\" field", where(), o_.tokens_field));
    integers(*ids, o_.tokens_field, where, ids_);

    // A field named by its flag is the mask; the other kind's field is then ignored.
    const bool has_prompt = !o_.labels_field_required && j.contains(o_.prompt_field);
    const bool has_labels = !o_.prompt_field_required && j.contains(o_.labels_field);
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
      for (std::size_t k = 0; k < labels_.size(); ++k) {
        mask_[k] = labels_[k] == o_.ignore_index ? 0 : 1;
        // Only the mask is kept (the loader's labels are the tokens): labels of other values
        // would be lost, and labels shifted by one would mask the token after each one meant.
        if (mask_[k] != 0 && labels_[k] != ids_[k])
          throw format_error(fmt::format(
              "{}: label {} is {}, its token {}: \"{}\" must be the tokens (unshifted, as Hugging Face models take "
              "them) or {}, since convert keeps only which tokens carry loss{}",
              where(), k, labels_[k], ids_[k], o_.labels_field, o_.ignore_index,
              k + 1 < ids_.size() && labels_[k] == ids_[k + 1] ? " (these look shifted by one)" : ""));
      }
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

  /// Puts every output in place, and removes the loss-mask companion of the other kind (or
  /// of either kind, without a mask) that an earlier conversion left at the prefix (removed()
  /// names what was there): prepare() then commit(). Throws format_error for an input with no
  /// sample, io_error when a file cannot be written (every earlier output is then as it was),
  /// removed or renamed.
  void finish() {
    prepare();
    commit();
  }

  /// finish()'s first half: completes every file under its temporary name; no old file
  /// changes. Throws format_error for an input with no sample, io_error when a file cannot be
  /// written (the writers' destructors remove the temporaries).
  void prepare() {
    if (samples_ == 0) throw format_error(o_.input + ": no samples (an empty input, or blank lines only)");
    tokens_.prepare();
    if (prompts_) prompts_->prepare();
    if (mask_writer_) mask_writer_->prepare();
  }

  /// finish()'s second half, after prepare(): the renames and removals. Throws io_error.
  void commit() {
    // The old PREFIX.idx goes first and the new one comes last: while the companions change,
    // the dataset cannot be opened, so it never pairs with another dataset's mask.
    remove_file(o_.output + ".idx");
    const std::string mask = o_.output + std::string(token_mask_suffix);
    for (const auto& [stale, file] : {std::pair{!prompts_, o_.output + std::string(prompt_lengths_suffix)},
                                      std::pair{!mask_writer_, mask + ".idx"}, std::pair{!mask_writer_, mask + ".bin"}})
      if (stale && remove_file(file)) removed_.push_back(file);
    if (prompts_) prompts_->commit();
    if (mask_writer_) mask_writer_->commit();
    tokens_.commit();
  }

  [[nodiscard]] std::uint64_t samples() const noexcept { return samples_; }
  [[nodiscard]] std::uint64_t tokens() const noexcept { return token_count_; }
  [[nodiscard]] std::uint64_t longest() const noexcept { return longest_; }
  [[nodiscard]] std::uint64_t blank_lines() const noexcept { return blank_; }
  [[nodiscard]] companion kind() const noexcept { return kind_.value_or(companion::none); }
  [[nodiscard]] std::vector<std::string> outputs() const {
    std::vector<std::string> out{o_.output + ".bin", o_.output + ".idx"};
    if (prompts_) out.push_back(o_.output + std::string(prompt_lengths_suffix));
    if (mask_writer_) {
      out.push_back(o_.output + std::string(token_mask_suffix) + ".bin");
      out.push_back(o_.output + std::string(token_mask_suffix) + ".idx");
    }
    return out;
  }
  /// The stale companion files finish() removed.
  [[nodiscard]] const std::vector<std::string>& removed() const noexcept { return removed_; }

 private:
  /// Whether `file` was there; io_error when it cannot be removed.
  static bool remove_file(const std::string& file) {
    std::error_code ec;
    const bool was_there = std::filesystem::remove(file, ec);
    if (ec) throw io_error(file + ": cannot remove: " + ec.message());
    return was_there;
  }

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
    if (kind == companion::prompt_lengths)
      prompts_ = std::make_unique<prompt_lengths_writer>(o_.output + std::string(prompt_lengths_suffix));
    if (kind == companion::labels)
      mask_writer_ = std::make_unique<indexed_dataset_writer>(o_.output + std::string(token_mask_suffix), token_dtype::uint8);
  }

  const convert_command_options& o_;
  indexed_dataset_writer tokens_;
  std::unique_ptr<prompt_lengths_writer> prompts_;
  std::unique_ptr<indexed_dataset_writer> mask_writer_;
  std::optional<companion> kind_;
  std::uint64_t first_line_ = 0;
  std::vector<std::int64_t> ids_;
  std::vector<std::int64_t> labels_;
  std::string scratch_;  // a line with its lone surrogates replaced (without_lone_surrogates)
  std::vector<std::int32_t> mask_;  // 0 / 1, stored as uint8
  std::uint64_t samples_ = 0;
  std::uint64_t token_count_ = 0;
  std::uint64_t longest_ = 0;
  std::uint64_t blank_ = 0;
  std::vector<std::string> removed_;
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

}  // namespace multipack::bench
