#pragma once
// Shards that count their changed-file checks (they have no files), for the tests that count
// which shards the loader checks before each batch, and how many times.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "multipack/core/piece.hpp"

namespace multipack::test {

/// A shard of in-memory samples whose check_unchanged() counts its calls; its copies share
/// the count. Sample i of shard k has 1 + (7k + i) % 50 tokens, every one of them k.
struct counted_shard {
  std::size_t number = 0;
  std::size_t samples = 0;
  std::shared_ptr<std::atomic<std::uint64_t>> checks = std::make_shared<std::atomic<std::uint64_t>>(0);

  [[nodiscard]] std::size_t size() const noexcept { return samples; }
  [[nodiscard]] std::uint64_t length(std::size_t i) const noexcept { return 1 + (7 * number + i) % 50; }
  void read_tokens(std::size_t, std::uint64_t, std::span<std::int32_t> out) const {
    std::fill(out.begin(), out.end(), static_cast<std::int32_t>(number));
  }
  void check_unchanged() const { checks->fetch_add(1, std::memory_order_relaxed); }
};

/// `count` shards of `samples` samples each.
inline std::vector<counted_shard> counted_shards(std::size_t count, std::size_t samples) {
  std::vector<counted_shard> shards(count);
  for (std::size_t k = 0; k < count; ++k) {
    shards[k].number = k;
    shards[k].samples = samples;
  }
  return shards;
}

/// The checks each shard has had, in order.
inline std::vector<std::uint64_t> checks_of(std::span<const counted_shard> shards) {
  std::vector<std::uint64_t> checks;
  for (const counted_shard& shard : shards) checks.push_back(shard.checks->load());
  return checks;
}

/// How many of the `steps` (each a range of rows of pieces) read each of `shards` shards, a
/// step counting once however many of its pieces the shard holds: the checks the loader is
/// to make. `shard_of(sample)` is the shard that holds a sample the pieces name.
template <class Steps, class ShardOf>
std::vector<std::uint64_t> steps_reading(const Steps& steps, std::size_t shards, const ShardOf& shard_of) {
  std::vector<std::uint64_t> reading(shards);
  for (auto&& step : steps) {
    std::vector<bool> read(shards);
    for (auto&& row : step)
      for (const piece& p : row) read[shard_of(p.sample)] = true;
    for (std::size_t k = 0; k < shards; ++k) reading[k] += read[k] ? 1 : 0;
  }
  return reading;
}

}  // namespace multipack::test
