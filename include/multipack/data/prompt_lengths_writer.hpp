#pragma once
// Writes prompt lengths in the binary form that loss_mask::open_prompt_lengths maps (the
// layout is at the top of loss_mask.hpp): a 24-byte header, then one u32 a sample. The
// binary form opens in O(1) however many samples there are, where the text form is parsed.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "multipack/core/concepts.hpp"  // path_like
#include "multipack/core/error.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"  // detail::buffered_file_writer
#include "multipack/data/loss_mask.hpp"                // the format's constants

namespace multipack {

/// Streams prompt lengths, one a sample, into the binary form at `path`: the bytes go to
/// "<path>.tmp" (the count, known at the end, is written into the header by prepare()), which
/// commit() renames onto `path`: a reader sees the old file or the whole new one, and a
/// writer destroyed unfinished leaves no temporary behind. finish() is prepare() then
/// commit(), for a caller that completes several files before it renames any (as
/// indexed_dataset_writer). Memory: a 1 MiB buffer, whatever the count. Not thread-safe;
/// throws io_error naming the file when it cannot be created, written, closed or renamed.
class prompt_lengths_writer {
 public:
  template <path_like Path>
  explicit prompt_lengths_writer(const Path& path) : path_(path), tmp_(path_) {
    tmp_ += ".tmp";
    out_ = detail::buffered_file_writer(tmp_);
    out_.write(detail::prompt_lengths_magic, sizeof detail::prompt_lengths_magic);
    out_.write_value(detail::prompt_lengths_version);
    out_.write_value(std::uint32_t{0});  // reserved
    out_.write_value(std::uint64_t{0});  // the count: finish() writes it
  }
  prompt_lengths_writer(const prompt_lengths_writer&) = delete;
  prompt_lengths_writer& operator=(const prompt_lengths_writer&) = delete;
  ~prompt_lengths_writer() {
    if (state_ == state::finished) return;
    out_.abandon();
    std::error_code ignored;
    std::filesystem::remove(tmp_, ignored);
  }

  /// Appends sample size()'s prompt length: any integer type but bool and the character
  /// types (plain_integral; add(true) or add(2.5) does not compile). Throws option_error for a
  /// length that is negative or above 4294967295, naming it (and writes nothing then), or
  /// after prepare() or finish(); io_error when a write fails (the writer is then unusable:
  /// what it wrote has a gap). O(1) amortised.
  template <plain_integral Length>
  void add(Length prompt_length) {
    require_open("add");
    if (!std::in_range<std::uint32_t>(prompt_length))
      throw option_error(path_.string() + ": prompt length " + std::to_string(prompt_length) + " of sample " +
                         std::to_string(count_) + " is not one of 0 to 4294967295");
    state_ = state::broken;  // until the write completes
    out_.write_value(static_cast<std::uint32_t>(prompt_length));  // little-endian host: as it is in memory
    state_ = state::open;
    ++count_;
  }
  /// Appends many. O(n). Throws as add() above.
  void add(std::span<const std::uint32_t> prompt_lengths) {
    require_open("add");
    state_ = state::broken;
    if (!prompt_lengths.empty()) out_.write(prompt_lengths.data(), prompt_lengths.size_bytes());
    state_ = state::open;
    count_ += prompt_lengths.size();
  }

  /// Writes the count, closes and renames onto the path: prepare() then commit(), throwing as
  /// they do (option_error when called twice). O(1) but the buffer's flush.
  void finish() {
    require_open("finish");
    prepare();
    commit();
  }

  /// The first half of finish(): writes the count and closes "<path>.tmp", everything that
  /// can fail but the rename; `path` is not touched. Throws io_error naming the file (the
  /// writer is then unusable), option_error when called twice. O(1) but the buffer's flush.
  void prepare() {
    require_open("prepare");
    state_ = state::broken;  // until closed
    out_.write_at(16, &count_, sizeof count_);
    out_.close();
    state_ = state::prepared;
  }

  /// The second half of finish(): renames "<path>.tmp" onto the path. Throws option_error
  /// unless prepare() succeeded and commit() was not called yet, io_error when the rename
  /// fails (the old file is then as it was). O(1).
  void commit() {
    if (state_ == state::open)
      throw option_error(path_.string() + ": prompt_lengths_writer::commit() before prepare()");
    if (state_ != state::prepared) require_open("commit");  // finished or broken: throws
    state_ = state::broken;  // until renamed: as indexed_dataset_writer, one try
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) throw io_error(tmp_.string() + ": cannot rename to " + path_.string() + ": " + ec.message());
    state_ = state::finished;
  }

  /// Prompt lengths added so far. O(1), never throws.
  [[nodiscard]] std::uint64_t size() const noexcept { return count_; }

 private:
  enum class state : std::uint8_t { open, prepared, broken, finished };

  void require_open(const char* what) const {
    if (state_ == state::open) return;
    throw option_error(path_.string() + ": prompt_lengths_writer::" + what + "() " +
                       (state_ == state::broken ? "after an earlier write failed"
                        : state_ == state::prepared ? "after prepare()"
                                                    : "after finish()"));
  }

  std::filesystem::path path_;
  std::filesystem::path tmp_;
  detail::buffered_file_writer out_;
  std::uint64_t count_ = 0;
  state state_ = state::open;
};

/// Writes `prompt_lengths` in the binary form to `path` at once (see prompt_lengths_writer).
/// O(samples) written through a 1 MiB buffer. Thread-safe for different paths.
template <path_like Path>
void write_prompt_lengths(const Path& path, std::span<const std::uint32_t> prompt_lengths) {
  prompt_lengths_writer writer(path);
  writer.add(prompt_lengths);
  writer.finish();
}

}  // namespace multipack
