#pragma once
// Sample lengths as a text file, one per line (data/alpaca/lengths.txt, prompt_lengths.txt):
// what a user hands the packer when the tokens live elsewhere.
//
// The format, exactly:
//  - one decimal integer in [0, 4294967295] per line, digits only (no sign, no '+', no
//    exponent); leading zeros are allowed;
//  - lines end with "\n" or "\r\n"; the last line may or may not end with one;
//  - spaces and tabs around the number are ignored;
//  - an empty (or blank) line is an error wherever it is: a blank line in a list of lengths
//    is a lost or an extra sample, never padding. Only the single newline ending the last
//    line is not a line of its own. An empty text is an empty list.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "multipack/core/detail/quote.hpp"
#include "multipack/core/concepts.hpp"  // path_like
#include "multipack/core/error.hpp"
#include "multipack/data/detail/mapped_file.hpp"

namespace multipack {

/// Parses `text` (see the format above) into lengths. `name` is what messages call the
/// text (a file name). Throws format_error "<name>: line <n>: <text> <why>" (n 1-based) for
/// a line that is empty, not an integer, negative, or above 4294967295. O(text size), one
/// allocation (lines are counted first); plain lines (digits, newline) take a fast path:
/// about 20 ns a line, 100 M lines in ~2 s (-O2). Thread-safe.
[[nodiscard]] inline std::vector<std::uint32_t> parse_length_list(std::string_view text,
                                                                  std::string_view name) {
  std::vector<std::uint32_t> lengths;
  lengths.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
  auto fail = [&](std::uint64_t line, std::string_view shown, const char* why) {
    throw format_error(std::string(name) + ": line " + std::to_string(line) + ": " +
                       detail::quote(shown) + " " + why);
  };
  auto blank = [](char c) { return c == ' ' || c == '\t'; };

  std::size_t pos = 0;
  std::uint64_t line = 0;
  while (pos < text.size()) {
    ++line;
    // Fast path, the common line: up to 9 digits then "\n" or the end (cannot overflow).
    {
      std::size_t q = pos;
      std::uint32_t v = 0;
      while (q < text.size() && q - pos < 9 && static_cast<unsigned char>(text[q] - '0') < 10)
        v = v * 10 + static_cast<std::uint32_t>(text[q++] - '0');
      if (q > pos && (q == text.size() || text[q] == '\n')) {
        lengths.push_back(v);
        pos = q + 1;
        continue;
      }
    }

    const std::size_t newline = text.find('\n', pos);
    const std::size_t end = newline == std::string_view::npos ? text.size() : newline;
    std::string_view s = text.substr(pos, end - pos);
    pos = newline == std::string_view::npos ? text.size() : newline + 1;

    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    if (s.empty()) fail(line, s, "is an empty line, expected one non-negative integer");

    std::uint32_t value = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec == std::errc::result_out_of_range)
      fail(line, s, "is larger than 4294967295 (lengths are 32-bit)");
    if (ec != std::errc{} || ptr != s.data() + s.size()) {
      const bool negative = s.front() == '-' && s.size() > 1 &&
                            std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; });
      fail(line, s, negative ? "is negative, expected a non-negative integer"
                             : "is not a non-negative integer");
    }
    lengths.push_back(value);
  }
  return lengths;
}
/// A name of 0 or nullptr would compile, as a null const char* to std::string_view, and read
/// through a null pointer; refused here.
std::vector<std::uint32_t> parse_length_list(std::string_view text, std::nullptr_t name) = delete;

/// Reads a length list file (memory-mapped, so a 100 M-line file is not copied). Throws
/// io_error naming the path when it cannot be opened or mapped (or is not a regular file),
/// format_error as parse_length_list, with the path as the name. Thread-safe.
template <path_like Path>
[[nodiscard]] std::vector<std::uint32_t> read_length_list(const Path& path_like_value) {
  const std::filesystem::path path(path_like_value);
  const detail::mapped_file file(path);
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  return parse_length_list(text, path.string());
}

}  // namespace multipack
