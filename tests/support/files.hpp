#pragma once
// Whole files as bytes, for tests that corrupt, truncate or compare binary files.

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace multipack::test {

using bytes = std::vector<unsigned char>;

inline bytes read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::filesystem::path& p, const bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out);
}

/// Writes a file again with the same bytes, over them (never truncated: a mapping read past
/// a shorter file's end raises SIGBUS, which write_bytes's truncation caused in a worker under
/// ThreadSanitizer), and a modification time 2 s later (distinct whatever the file system's
/// clock granularity): a change that the changed-file checks must see, while the contents
/// stay valid, so that no read of a mapping can fault meanwhile.
inline void rewrite_in_place(const std::filesystem::path& p) {
  const auto opened_at = std::filesystem::last_write_time(p);
  const bytes b = read_bytes(p);
  std::fstream out(p, std::ios::in | std::ios::out | std::ios::binary);  // no std::ios::trunc
  REQUIRE(out);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  out.close();
  REQUIRE(out);
  std::filesystem::last_write_time(p, opened_at + std::chrono::seconds(2));
}

}  // namespace multipack::test
