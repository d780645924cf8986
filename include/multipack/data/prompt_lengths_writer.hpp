#pragma once
// Writes prompt lengths in the binary form that loss_mask::open_prompt_lengths maps (the
// layout is at the top of loss_mask.hpp): a 24-byte header, then one u32 a sample. The
// binary form opens in O(1) however many samples there are, where the text form is parsed.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>

#include "multipack/core/error.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"  // detail::buffered_file_writer
#include "multipack/data/loss_mask.hpp"                // the format's constants

namespace multipack {

/// Writes `prompt_lengths` in the binary form to `path`. The bytes go to "<path>.tmp", which
/// is then renamed onto `path`: a reader sees the old file or the whole new one, never a
/// half-written one, and a failed write leaves no temporary behind. Throws io_error naming
/// the file when it cannot be created, written, closed or renamed. O(samples) written through
/// a 1 MiB buffer. Thread-safe for different paths (two writers of one path race on the
/// temporary name).
inline void write_prompt_lengths(const std::filesystem::path& path,
                                 std::span<const std::uint32_t> prompt_lengths) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  try {
    detail::buffered_file_writer out(tmp);
    out.write(detail::prompt_lengths_magic, sizeof detail::prompt_lengths_magic);
    out.write_value(detail::prompt_lengths_version);
    out.write_value(std::uint32_t{0});  // reserved
    out.write_value(static_cast<std::uint64_t>(prompt_lengths.size()));
    if (!prompt_lengths.empty())  // little-endian host: the array as it is in memory
      out.write(prompt_lengths.data(), prompt_lengths.size_bytes());
    out.close();
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec)
      throw io_error(tmp.string() + ": cannot rename to " + path.string() + ": " + ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

}  // namespace multipack
