#pragma once
// load --dump-batches DIR: the first --dump-count batches of the run as NumPy .npy files:
//   DIR/step{S:06}_rank{R}_{array}.npy                  (--epochs 1)
//   DIR/epoch{E}_step{S:06}_rank{R}_{array}.npy         (--epochs > 1: the first K batches
//                                                        may reach into later epochs)
// where S is the plan's step number and array is input_ids, labels, position_ids,
// sequence_ids (int32 or, with --int64, int64, shape [B, row_length]), cu_seqlens (int32,
// [segments + 1]) and max_seqlen (int32, a 0-d array: int(numpy.load(...)) reads it).

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "command/common.hpp"
#include "command/npy.hpp"
#include "multipack/batch/collate.hpp"
#include "multipack/core/error.hpp"

namespace multipack::bench {

namespace detail {

/// Writes the six arrays of one batch as DIR/STEM_{array}.npy.
template <batch_token T>
void dump_batch(const std::filesystem::path& dir, const std::string& stem, const batch_view<T>& v) {
  const std::vector<std::uint64_t> shape{v.rows, v.row_length};
  const auto path = [&](const char* array) { return (dir / (stem + "_" + array + ".npy")).string(); };
  write_npy<T>(path("input_ids"), v.used_input_ids(), shape);
  write_npy<T>(path("labels"), v.used_labels(), shape);
  write_npy<T>(path("position_ids"), v.used_position_ids(), shape);
  write_npy<T>(path("sequence_ids"), v.used_sequence_ids(), shape);
  write_npy<std::int32_t>(path("cu_seqlens"), v.used_cu_seqlens(), {v.used_cu_seqlens().size()});
  const auto max_seqlen = static_cast<std::int32_t>(v.max_seqlen);
  write_npy<std::int32_t>(path("max_seqlen"), std::span<const std::int32_t>(&max_seqlen, 1), {});
}

inline void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw io_error(fmt::format("{}: cannot create the directory: {}", dir, ec.message()));
  if (!std::filesystem::is_directory(dir, ec)) throw io_error(fmt::format("{}: not a directory", dir));
}

}  // namespace detail

/// Writes the first `count` batches it is given to `dir` (nothing when dir is empty), named as
/// above; counts what it wrote and the seconds it took, which the run leaves out of its times.
class batch_dumper {
 public:
  batch_dumper(std::string dir, std::uint64_t count, bool name_epochs, std::uint32_t rank)
      : dir_(std::move(dir)), count_(dir_.empty() ? 0 : count), name_epochs_(name_epochs), rank_(rank) {}

  /// Writes the batch of `step` of `epoch` while fewer than `count` were written.
  template <batch_token T>
  void add(const batch_view<T>& v, std::uint64_t epoch, std::uint64_t step) {
    if (dumped_ >= count_) return;
    const auto start = clock::now();
    const std::string stem = name_epochs_ ? fmt::format("epoch{}_step{:06}_rank{}", epoch, step, rank_)
                                          : fmt::format("step{:06}_rank{}", step, rank_);
    detail::dump_batch(dir_, stem, v);
    ++dumped_;
    seconds_ += seconds_since(start);
  }

  [[nodiscard]] std::uint64_t dumped() const noexcept { return dumped_; }
  [[nodiscard]] double seconds() const noexcept { return seconds_; }

 private:
  std::string dir_;
  std::uint64_t count_;
  bool name_epochs_;
  std::uint32_t rank_;
  std::uint64_t dumped_ = 0;
  double seconds_ = 0;
};

}  // namespace multipack::bench
