#pragma once
// Quoting untrusted text (a line of a file, an environment variable) or bytes inside an error
// message.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace multipack::detail {

/// `s` in single quotes, at most 40 characters (then "..."), with control bytes, non-ASCII
/// bytes, quotes and backslashes written as \xNN: a binary file or a stray value gives a short,
/// readable message rather than a megabyte of garbage. O(40), throws only std::bad_alloc.
[[nodiscard]] inline std::string quote(std::string_view s) {
  constexpr std::size_t max_chars = 40;
  static constexpr char digits[] = "0123456789abcdef";
  std::string q = "'";
  for (std::size_t k = 0; k < s.size() && k < max_chars; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      q += "\\x";
      q += digits[c >> 4];
      q += digits[c & 15];
    } else {
      q += static_cast<char>(c);
    }
  }
  q += s.size() > max_chars ? "'..." : "'";
  return q;
}

/// `n` bytes as space-separated hex pairs ("4d 4d 49 44"), for messages about binary headers.
/// O(n), throws only std::bad_alloc.
[[nodiscard]] inline std::string hex_bytes(const std::byte* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t k = 0; k < n; ++k) {
    const auto b = static_cast<unsigned>(p[k]);
    if (k) s += ' ';
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

}  // namespace multipack::detail
