#pragma once
// Where tests find the embedded data and where they may write.

#include <filesystem>
#include <string>

namespace multipack::test {

/// The project's source directory (for data/).
inline std::filesystem::path source_dir() { return MULTIPACK_SOURCE_DIR; }

/// data/alpaca/alpaca_llama: the embedded real dataset's prefix.
inline std::filesystem::path alpaca_prefix() { return source_dir() / "data/alpaca/alpaca_llama"; }

/// A fresh, empty directory for this test executable's files, named after `name`.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(MULTIPACK_TEST_TMPDIR) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace multipack::test
