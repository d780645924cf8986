#pragma once
// The loss-mask companion of a token dataset: which tokens of each sample carry loss (the
// model is trained to predict them) and which do not (the prompt of an instruction sample).
// The collator asks it, per piece of a sample, which labels to set to the ignore index.
//
// Three sources, one class:
//  - none (the default): every token carries loss (pre-training data);
//  - prompt lengths: tokens [0, prompt_lengths[i]) of sample i carry no loss, the rest do
//    (instruction data, where the prompt always comes first). 4 bytes a sample, from memory,
//    from a text file (one integer per line, as data/alpaca/prompt_lengths.txt) or from the
//    binary form below;
//  - token mask: one mask value per token, stored as a Megatron indexed dataset PREFIX.idx/.bin
//    of any integer dtype; nonzero = carries loss (multi-turn chats, where several spans of a
//    sample are masked).
//
// The binary prompt-length form (write_prompt_lengths in prompt_lengths_writer.hpp writes it),
// little-endian, no padding:
//
//   byte 0    magic "MPPROMPT"                       8 bytes
//   byte 8    version, u32 = 1
//   byte 12   reserved, u32 = 0 (keeps the count and the array aligned; must be 0 in v1)
//   byte 16   count n, u64                           samples described
//   byte 24   prompt lengths, u32[n]
//   the file ends at byte 24 + 4n exactly.
//
// It is memory-mapped (nothing copied, shared by every rank on the machine through the page
// cache) and validated in full at open. A text file is parsed into memory (4 bytes a sample).
// The two are told apart by the magic: a file that starts like it ("MPPR") is binary; text
// lists hold only digits and blanks, so no valid text list can start that way.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "multipack/core/detail/quote.hpp"
#include "multipack/core/error.hpp"
#include "multipack/data/detail/mapped_file.hpp"
#include "multipack/data/dtype.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"

namespace multipack {

/// The name of a token dataset's per-token loss mask: PREFIX.loss_mask(.idx/.bin) beside
/// PREFIX(.idx/.bin), as `multipack-bench convert --labels-field` writes it. indexed_prefixes
/// leaves such a companion out of a directory's or pattern's shards.
inline constexpr std::string_view token_mask_suffix = ".loss_mask";
/// The name of a token dataset's prompt lengths: PREFIX.prompt_lengths beside PREFIX(.idx/.bin),
/// as `multipack-bench convert --prompt-field` writes it.
inline constexpr std::string_view prompt_lengths_suffix = ".prompt_lengths";

namespace detail {

inline constexpr char prompt_lengths_magic[8] = {'M', 'P', 'P', 'R', 'O', 'M', 'P', 'T'};
inline constexpr std::uint32_t prompt_lengths_version = 1;
inline constexpr std::uint64_t prompt_lengths_header_size = 24;
// How many leading bytes of the magic make a file "binary" (see the top of this file).
inline constexpr std::size_t prompt_lengths_sniff = 4;

inline std::uint32_t prompt_mask_load_u32(const std::byte* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Validates a mapped binary prompt-length file in full; returns its count. Throws
// format_error "<path>: byte <offset>: <what was expected, what was found>".
inline std::size_t validate_prompt_lengths(const mapped_file& file) {
  const std::string name = file.path().string();
  const std::byte* data = file.data();
  const std::uint64_t size = file.size();
  auto fail = [&](std::uint64_t offset, const std::string& what) {
    throw format_error(name + ": byte " + std::to_string(offset) + ": " + what);
  };
  auto need = [&](std::uint64_t offset, std::uint64_t n, const char* field) {
    if (size < offset + n)
      fail(offset, std::string("truncated ") + field + ": expected " + std::to_string(n) +
                       " bytes, the file has " + std::to_string(size - offset) +
                       " (it ends at byte " + std::to_string(size) + ")");
  };

  // The magic first, even on a short file: another format is reported as such, not as
  // truncated.
  const std::size_t seen = static_cast<std::size_t>(std::min<std::uint64_t>(size, 8));
  if (std::memcmp(data, prompt_lengths_magic, seen) != 0)
    fail(0, "bad magic: expected 4d 50 50 52 4f 4d 50 54 (\"MPPROMPT\", multipack binary "
            "prompt lengths), found " + hex_bytes(data, seen));
  need(0, 8, "magic");
  need(8, 4, "version");
  const std::uint32_t version = prompt_mask_load_u32(data + 8);
  if (version != prompt_lengths_version)
    fail(8, "version is " + std::to_string(version) + ", expected 1");
  need(12, 4, "reserved field");
  const std::uint32_t reserved = prompt_mask_load_u32(data + 12);
  if (reserved != 0)
    fail(12, "reserved field is " + std::to_string(reserved) + ", expected 0 in version 1");
  need(16, 8, "count");
  std::uint64_t n;
  std::memcpy(&n, data + 16, sizeof n);

  // Overflow-safe: compare against what is left rather than computing 24 + 4n.
  const std::uint64_t after_header = size - prompt_lengths_header_size;
  if (n > after_header / 4)
    fail(prompt_lengths_header_size,
         "truncated prompt lengths: count " + std::to_string(n) + " (byte 16) needs " +
             (n <= (std::numeric_limits<std::uint64_t>::max() - 24) / 4
                  ? std::to_string(24 + 4 * n)
                  : std::string("more than 2^64")) +
             " bytes, the file has " + std::to_string(size) + " (truncated at byte " +
             std::to_string(size) + ", or the count is wrong)");
  if (after_header != 4 * n)
    fail(prompt_lengths_header_size + 4 * n,
         std::to_string(after_header - 4 * n) + " trailing bytes: count " + std::to_string(n) +
             " (byte 16) says the file ends at byte " + std::to_string(24 + 4 * n) +
             ", it has " + std::to_string(size));
  if (n > std::numeric_limits<std::size_t>::max())
    fail(16, "count " + std::to_string(n) + " exceeds this platform's size_t");
  return static_cast<std::size_t>(n);
}

// Whether a text prompt-length file holds a NUL byte early on: then it is binary data of
// some other format, and saying so beats "line 1: '...' is not a non-negative integer".
inline bool prompt_mask_looks_binary(const mapped_file& file) noexcept {
  const std::size_t n = std::min<std::size_t>(file.size(), 64);
  for (std::size_t k = 0; k < n; ++k)
    if (file.data()[k] == std::byte{0}) return true;
  return false;
}

}  // namespace detail

/// Which tokens of each sample carry loss. A small value (a pointer, a count, a name and a
/// shared handle on the storage): copies are O(1) (O(name) for the string) and share the
/// mapped files or the parsed lengths, which are immutable; every const member may be called
/// from any number of threads at once. The files must not be modified while any copy is
/// alive (mmap).
class loss_mask {
 public:
  /// Every token carries loss (no mask). Never throws.
  loss_mask() = default;

  /// Tokens [0, prompt_lengths[i]) of sample i carry no loss, the rest do. `name` is what
  /// messages call the mask. O(1) (the vector is moved); throws std::bad_alloc only.
  /// Nothing is checked against a dataset here: check_matches does that.
  [[nodiscard]] static loss_mask from_prompt_lengths(std::vector<std::uint32_t> prompt_lengths,
                                                     std::string name = "prompt lengths") {
    auto owned = std::make_shared<const std::vector<std::uint32_t>>(std::move(prompt_lengths));
    loss_mask m;
    m.kind_ = kind::prompt;
    m.name_ = std::move(name);
    m.size_ = owned->size();
    m.prompts_ = reinterpret_cast<const std::byte*>(owned->data());
    m.keep_ = std::move(owned);
    return m;
  }
  /// A name of 0 or nullptr would compile, as a null const char* to std::string, and throw
  /// std::logic_error; refused here.
  static loss_mask from_prompt_lengths(std::vector<std::uint32_t> prompt_lengths, std::nullptr_t name) = delete;

  /// Opens a prompt-length file, text or binary (see the top of this file), told apart by the
  /// binary form's magic. The binary form is mapped and validated in full (O(1): the header
  /// and the size); the text form is parsed into memory (O(file), ~20 ns a line).
  /// Throws io_error naming the path when it cannot be opened or mapped, and format_error
  /// naming the path for: an empty file (a failed write, far more often than a list of no
  /// samples; the binary form of 0 samples is 24 bytes), a binary file with a bad magic,
  /// version or reserved field, truncated or with trailing bytes ("<path>: byte <offset>:
  /// ..."), a text file with a bad line ("<path>: line <n>: ...", as parse_length_list) or
  /// binary bytes that are not this format. Thread-safe (opens its own mapping).
  template <path_like Path>
  [[nodiscard]] static loss_mask open_prompt_lengths(const Path& path_like_value) {
    const std::filesystem::path path(path_like_value);
    auto file = std::make_shared<const detail::mapped_file>(path);
    const std::string name = path.string();
    if (file->size() == 0)
      throw format_error(name + ": byte 0: empty file, expected prompt lengths (one integer "
                                "a line, or the binary form starting with \"MPPROMPT\")");
    const std::size_t sniff = std::min(file->size(), detail::prompt_lengths_sniff);
    if (std::memcmp(file->data(), detail::prompt_lengths_magic, sniff) == 0) {
      loss_mask m;
      m.kind_ = kind::prompt;
      m.name_ = name;
      m.size_ = detail::validate_prompt_lengths(*file);
      m.prompts_ = file->data() + detail::prompt_lengths_header_size;
      m.mapped_ = file;
      m.keep_ = std::move(file);
      return m;
    }
    if (detail::prompt_mask_looks_binary(*file))
      throw format_error(name + ": byte 0: not a prompt-length file: expected the magic "
                                "\"MPPROMPT\" (binary form) or one decimal integer a line "
                                "(text form), found " +
                         detail::hex_bytes(file->data(), std::min<std::size_t>(file->size(), 8)));
    const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
    return from_prompt_lengths(parse_length_list(text, name), name);
  }

  /// A per-token mask stored as a Megatron indexed dataset (PREFIX.idx/.bin, any integer
  /// dtype; nonzero = carries loss), one mask sample per token sample. Keeps both files
  /// mapped. Cost: indexed_dataset's validation (O(samples) over the .idx; the .bin is mapped,
  /// not read). Throws what indexed_dataset's constructor throws (io_error, format_error,
  /// naming the file), and format_error for a float dtype (a mask is 0/1 integers; a float
  /// file is more likely the wrong file); option_error for a prompt-length file given as
  /// the prefix (a file PREFIX itself, with no PREFIX.idx), which says where it goes.
  /// Thread-safe.
  template <path_like Path>
  [[nodiscard]] static loss_mask open_token_mask(const Path& prefix) {
    const std::filesystem::path named(prefix);
    std::error_code error;
    if (std::filesystem::is_regular_file(named, error) &&
        !std::filesystem::exists(detail::with_suffix(named, ".idx"), error))
      throw option_error(named.string() + ": a file, not the prefix of a token mask (PREFIX.idx and PREFIX.bin, as "
                         "convert --labels-field writes): prompt lengths are given as prompt lengths "
                         "(--prompt-lengths, prompt_lengths=, loss_mask::open_prompt_lengths)");
    auto ds = std::make_shared<const indexed_dataset>(prefix);
    if (!dtype_is_integral(ds->dtype()))
      throw format_error(ds->idx_path().string() + ": byte 17: dtype " +
                         std::string(dtype_name(ds->dtype())) +
                         ", expected an integer dtype for a token loss mask");
    loss_mask m;
    m.kind_ = kind::token;
    m.name_ = ds->idx_path().string();
    m.size_ = ds->size();
    m.tokens_ = std::move(ds);
    return m;
  }

  /// No mask: every token carries loss. O(1), never throws, thread-safe.
  [[nodiscard]] bool empty() const noexcept { return kind_ == kind::none; }

  /// Throws io_error naming the file when a file the mask reads in place (a binary
  /// prompt-length file, a token mask's .idx and .bin) changed since it was opened, as
  /// mapped_file::check_unchanged says: a mask rewritten while training would raise SIGBUS
  /// past its new end, or give other samples' masks. Nothing to check for a mask in memory
  /// (the text form, from_prompt_lengths, no mask). One or two fstat calls, thread-safe.
  void check_unchanged() const {
    if (mapped_ != nullptr) mapped_->check_unchanged();
    if (tokens_ != nullptr) tokens_->check_unchanged();
  }
  /// Samples described (0 when empty; also 0 for a mask of no samples, which is not empty).
  /// O(1), never throws, thread-safe.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// What messages call the mask: the file name (the .idx for a token mask), the name given
  /// to from_prompt_lengths, or "no loss mask". O(1), never throws, thread-safe.
  [[nodiscard]] const std::string& name() const noexcept {
    static const std::string none = "no loss mask";  // short: no allocation, cannot throw
    return kind_ == kind::none ? none : name_;
  }
  /// Whether the mask is per token (open_token_mask) rather than prompt lengths. O(1), never
  /// throws, thread-safe.
  [[nodiscard]] bool is_token_mask() const noexcept { return kind_ == kind::token; }

  /// Prompt length of sample i (prompt form only). Throws option_error when the mask is not
  /// of the prompt form or i >= size(). O(1), thread-safe.
  [[nodiscard]] std::uint32_t prompt_length(std::size_t i) const {
    if (kind_ != kind::prompt)
      throw option_error(name() + ": prompt_length: the mask is not of prompt lengths");
    check_sample(i, "prompt_length");
    return raw_prompt(i);
  }

  /// Throws format_error unless the mask describes exactly `dataset`'s samples: the same
  /// count, and (prompt form) every prompt length <= its sample's length, (token form) every
  /// mask sample's length == its token sample's length. The message names the mask, the
  /// first sample that does not match and both numbers. Call it once, when the two are
  /// opened; mask_labels then never meets a surprise. O(samples); a no-op for an empty mask.
  /// Also throws what dataset.length() throws. Thread-safe.
  template <token_dataset D>
  void check_matches(const D& dataset) const {
    if (kind_ == kind::none) return;
    const std::size_t samples = static_cast<std::size_t>(dataset.size());
    if (size_ != samples) {
      const std::size_t first = std::min(size_, samples);
      throw format_error(
          name_ + ": describes " + std::to_string(size_) + " samples, the dataset has " +
          std::to_string(samples) + " (sample " + std::to_string(first) +
          (size_ < samples ? " has no mask entry)" : " of the mask has no dataset sample)"));
    }
    if (kind_ == kind::prompt) {
      for (std::size_t i = 0; i < size_; ++i) {
        const std::uint64_t prompt = raw_prompt(i);
        const std::uint64_t length = static_cast<std::uint64_t>(dataset.length(i));
        if (prompt > length)
          throw format_error(name_ + ": sample " + std::to_string(i) + ": prompt length " +
                             std::to_string(prompt) + " exceeds the sample's length " +
                             std::to_string(length));
      }
    } else {
      const auto sizes = tokens_->sizes();
      for (std::size_t i = 0; i < size_; ++i) {
        const auto mask_length = static_cast<std::uint64_t>(sizes[i]);
        const std::uint64_t length = static_cast<std::uint64_t>(dataset.length(i));
        if (mask_length != length)
          throw format_error(name_ + ": sample " + std::to_string(i) + ": mask length " +
                             std::to_string(mask_length) + " differs from the sample's length " +
                             std::to_string(length));
      }
    }
  }

  /// Sets labels[k] = ignore for every token first + k of `sample` (k < labels.size()) that
  /// carries no loss; leaves the others untouched. A no-op for an empty mask. O(labels.size())
  /// at most: the prompt form touches only the prompt part (one std::fill), the token form
  /// reads the mapped mask in place. Throws option_error when `sample` >= size(), or when
  /// [first, first + labels.size()) is outside the mask sample (token form) or overflows
  /// (prompt form, which knows no sample lengths: check_matches and the dataset's own range
  /// check guard those); labels are untouched then. Thread-safe (const): several threads may
  /// mask labels of the same mask at once, into different buffers.
  template <class Label>
  void mask_labels(std::size_t sample, std::uint64_t first, std::span<Label> labels,
                   std::type_identity_t<Label> ignore) const {
    if (kind_ == kind::none) return;
    check_sample(sample, "mask_labels");
    const std::uint64_t n = labels.size();
    if (kind_ == kind::prompt) {
      if (n > std::numeric_limits<std::uint64_t>::max() - first)
        throw option_error(name_ + ": mask_labels: tokens [" + std::to_string(first) + ", " +
                           std::to_string(first) + " + " + std::to_string(n) +
                           ") of sample " + std::to_string(sample) + " overflow 64 bits");
      const std::uint64_t prompt = raw_prompt(sample);
      if (first >= prompt) return;
      const auto masked = static_cast<std::size_t>(std::min(prompt - first, n));
      std::fill(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(masked), ignore);
      return;
    }
    const std::uint64_t length = tokens_->length(sample);
    if (first > length || n > length - first)
      throw option_error(name_ + ": mask_labels: tokens [" + std::to_string(first) + ", " +
                         (n > std::numeric_limits<std::uint64_t>::max() - first
                              ? std::to_string(first) + " + " + std::to_string(n)
                              : std::to_string(first + n)) +
                         ") are outside mask sample " + std::to_string(sample) + " of length " +
                         std::to_string(length));
    // In place in the mapped .bin, in its own type: no copy, no conversion check needed
    // (only zero / nonzero matters).
    visit_dtype(tokens_->dtype(), [&]<class T>(std::type_identity<T>) {
      if constexpr (std::is_integral_v<T>) {
        const T* m = tokens_->tokens<T>(sample).data() + first;
        for (std::size_t k = 0; k < labels.size(); ++k)
          if (m[k] == T{0}) labels[k] = ignore;
      }
    });
  }

 private:
  enum class kind : std::uint8_t { none, prompt, token };

  std::uint32_t raw_prompt(std::size_t i) const noexcept {
    return detail::prompt_mask_load_u32(prompts_ + 4 * i);
  }

  void check_sample(std::size_t i, const char* what) const {
    if (i >= size_)
      throw option_error(name_ + ": " + what + ": sample " + std::to_string(i) +
                         " out of range (the mask describes " + std::to_string(size_) +
                         " samples)");
  }

  kind kind_ = kind::none;
  std::string name_;
  std::size_t size_ = 0;
  // Prompt form: size_ little-endian u32 at prompts_, owned by keep_ (a vector or a mapping).
  const std::byte* prompts_ = nullptr;
  std::shared_ptr<const void> keep_;
  std::shared_ptr<const detail::mapped_file> mapped_;  // keep_'s file in the binary prompt form
  // Token form.
  std::shared_ptr<const indexed_dataset> tokens_;
};

/// `files`, the prompt lengths of `prefixes` one a prefix (shards concatenated in that order),
/// in the prefixes' order. Where every file is named PREFIX.prompt_lengths for a different one
/// of the prefixes (the name convert gives), each goes with its prefix wherever it stands: a
/// shell pattern lists shard_10 before shard_2, where a directory's shards are in natural
/// order, and prompt lengths that fit another shard's samples would mask the wrong tokens
/// without an error. Otherwise the files keep their positions. Paths are compared after
/// std::filesystem::weakly_canonical. Throws option_error for a count that is not the
/// prefixes', or, where not every file is so named, for a file named for a prefix other than
/// the one at its position (the pairing would be a guess). O(files log files), plus a
/// canonical path a file and a prefix (system calls).
[[nodiscard]] inline std::vector<std::filesystem::path> prompt_length_files_in_prefix_order(
    std::vector<std::filesystem::path> files, std::span<const std::filesystem::path> prefixes) {
  namespace fs = std::filesystem;
  if (files.size() != prefixes.size())
    throw option_error(std::to_string(files.size()) + " prompt-length files for " + std::to_string(prefixes.size()) +
                       " prefixes: give one a prefix");
  const auto canonical = [](const fs::path& p) {
    std::error_code ec;
    fs::path c = fs::weakly_canonical(p, ec);
    return ec ? p.lexically_normal() : c;
  };
  std::vector<std::pair<fs::path, std::size_t>> names;  // PREFIX.prompt_lengths, canonical, and its prefix
  for (std::size_t k = 0; k < prefixes.size(); ++k)
    names.emplace_back(canonical(fs::path(prefixes[k]) += prompt_lengths_suffix), k);
  std::sort(names.begin(), names.end());
  const auto named_for = [&](const fs::path& file) -> std::optional<std::size_t> {
    const fs::path c = canonical(file);
    const auto it = std::lower_bound(names.begin(), names.end(), c, [](const auto& n, const fs::path& v) { return n.first < v; });
    if (it == names.end() || it->first != c) return std::nullopt;
    // A prefix given twice has one name for two positions: not a pairing by name.
    if (std::next(it) != names.end() && std::next(it)->first == c) return std::nullopt;
    return it->second;
  };
  std::vector<std::optional<std::size_t>> prefix_of(files.size());
  std::vector<bool> taken(prefixes.size(), false);
  bool all_named = true;
  for (std::size_t i = 0; i < files.size(); ++i) {
    prefix_of[i] = named_for(files[i]);
    all_named = all_named && prefix_of[i] && !taken[*prefix_of[i]];
    if (prefix_of[i]) taken[*prefix_of[i]] = true;
  }
  if (all_named) {
    std::vector<fs::path> ordered(files.size());
    for (std::size_t i = 0; i < files.size(); ++i) ordered[*prefix_of[i]] = std::move(files[i]);
    return ordered;
  }
  for (std::size_t i = 0; i < files.size(); ++i)
    if (prefix_of[i] && *prefix_of[i] != i)
      throw option_error(files[i].string() + " is named for prefix " + std::to_string(*prefix_of[i] + 1) + " (" +
                         prefixes[*prefix_of[i]].string() + ") but stands at number " + std::to_string(i + 1) +
                         " (" + prefixes[i].string() + "): name every file PREFIX" + std::string(prompt_lengths_suffix) +
                         ", or give them in the prefixes' order");
  return files;
}

}  // namespace multipack
