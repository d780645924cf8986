#pragma once
// NumPy's .npy format, version 1.0, for dumping batches that anyone can load with
// numpy.load: the magic, a Python-literal header padded to 64 bytes, then the array in
// C order, little-endian.

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "command/common.hpp"
#include "multipack/core/error.hpp"

namespace multipack::bench {

namespace detail {
template <class T>
constexpr const char* npy_type() {
  if constexpr (std::is_same_v<T, std::int32_t>) return "<i4";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "<i8";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "|u1";
  else static_assert(sizeof(T) == 0, "no .npy type for this element type");
}
}  // namespace detail

/// Writes `values` as an array of `shape` (whose product must be values.size()) to `path`.
/// Throws io_error naming the file, option_error for a shape that does not match.
template <class T>
void write_npy(const std::string& path, std::span<const T> values, const std::vector<std::uint64_t>& shape) {
  static_assert(std::endian::native == std::endian::little, ".npy dumps are written on little-endian machines");
  std::uint64_t count = 1;
  std::string dims;  // as Python writes a tuple: (16, 4096), (7,), () for a 0-d array
  for (const std::uint64_t d : shape) {
    count *= d;
    dims += fmt::format("{}{}", dims.empty() ? "" : ", ", d);
  }
  if (shape.size() == 1) dims += ",";
  if (count != values.size())
    throw option_error(fmt::format("{}: {} values do not make an array of shape ({})", path, values.size(), dims));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", detail::npy_type<T>(), dims);
  // magic (6) + version (2) + header length (2) + header + '\n', padded to a multiple of 64.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  text_file file(path);
  fmt::memory_buffer& out = file.buffer();
  const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.append(magic, magic + sizeof magic);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out.append(header.data(), header.data() + header.size());
  const auto* bytes = reinterpret_cast<const char*>(values.data());
  out.append(bytes, bytes + values.size_bytes());
  file.close();
}

}  // namespace multipack::bench
