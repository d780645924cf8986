#pragma once
// Whole files as bytes, for tests that corrupt, truncate or compare binary files.

#include <doctest/doctest.h>

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

}  // namespace multipack::test
