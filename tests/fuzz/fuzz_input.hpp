#pragma once
// What the fuzz targets share: the parsers open files by path, so each input is written to a
// file in memory-backed storage first (/dev/shm where there is one), unique to the process.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace multipack::fuzz {

/// A scratch path for this process: /dev/shm/multipack-fuzz-<pid>-<name> (or under /tmp).
inline std::filesystem::path scratch(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  return dir / ("multipack-fuzz-" + std::to_string(::getpid()) + "-" + name);
}

/// Writes the bytes to `path`, replacing it. Aborts (a harness failure, not a finding) when
/// the file cannot be written.
inline void write_file(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size != 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
}

}  // namespace multipack::fuzz
