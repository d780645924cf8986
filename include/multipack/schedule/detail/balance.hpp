#pragma once
// Spreading the rows of one global step over the ranks: longest processing time first with a
// limit of micro_batch rows a rank (Graham's LPT rule, made to fill every rank exactly).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace multipack::detail {

/// (cost of the costliest rank) / (mean cost of a rank); 1 for a step that costs nothing.
[[nodiscard]] inline double step_balance(std::span<const std::uint64_t> rank_costs) noexcept {
  std::uint64_t total = 0;
  std::uint64_t largest = 0;
  for (const std::uint64_t c : rank_costs) {
    total += c;
    largest = std::max(largest, c);
  }
  if (total == 0) return 1.0;
  return static_cast<double>(largest) * static_cast<double>(rank_costs.size()) / static_cast<double>(total);
}

/// Keeps its scratch memory between steps, so that a schedule allocates once.
class step_balancer {
 public:
  /// Gives each of the world x micro_batch rows of a step (their costs in `costs`) a rank in
  /// `rank_of`, costliest row first (ties: the earlier row), each to the rank with the least
  /// cost so far among those holding fewer than micro_batch rows (ties: the lowest rank); the
  /// ranks' totals go to `rank_costs`. Every comparison is a total order, so the result is the
  /// same with every standard library. O(G log G) for G = world x micro_batch.
  void assign(std::span<const std::uint64_t> costs, std::uint32_t micro_batch,
              std::span<std::uint32_t> rank_of, std::span<std::uint64_t> rank_costs) {
    const auto world = static_cast<std::uint32_t>(rank_costs.size());
    order_.resize(costs.size());
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    std::sort(order_.begin(), order_.end(), [&](std::uint32_t a, std::uint32_t b) {
      return costs[a] != costs[b] ? costs[a] > costs[b] : a < b;
    });
    // A min-heap of (cost so far, rank) over the ranks with room left.
    heap_.clear();
    for (std::uint32_t r = 0; r < world; ++r) heap_.emplace_back(0, r);
    taken_.assign(world, 0);
    const auto later = std::greater<>{};
    for (const std::uint32_t row : order_) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      auto& [cost, rank] = heap_.back();
      rank_of[row] = rank;
      cost += costs[row];
      if (++taken_[rank] < micro_batch)
        std::push_heap(heap_.begin(), heap_.end(), later);
      else
        heap_.pop_back();
    }
    std::fill(rank_costs.begin(), rank_costs.end(), 0);
    for (std::size_t row = 0; row < costs.size(); ++row) rank_costs[rank_of[row]] += costs[row];
  }

 private:
  std::vector<std::uint32_t> order_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> heap_;
  std::vector<std::uint32_t> taken_;
};

}  // namespace multipack::detail
