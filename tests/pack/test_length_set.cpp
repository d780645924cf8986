// The packers' successor/predecessor sets and the random length sampler, against std::set
// and plain counting, under random operations over universes of several word and summary
// sizes.

#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "multipack/core/random.hpp"
#include "multipack/pack/detail/length_sampler.hpp"
#include "multipack/pack/detail/length_set.hpp"

using multipack::splitmix64;
using multipack::detail::length_sampler;
using multipack::detail::length_set;

TEST_CASE("length_set answers find_prev and find_next as std::set does") {
  for (const std::uint32_t universe : {1U, 2U, 63U, 64U, 65U, 4097U, 65537U}) {
    CAPTURE(universe);
    length_set set(universe);
    std::set<std::uint32_t> reference;
    splitmix64 rng(universe);
    for (int step = 0; step < 4000; ++step) {
      const auto x = static_cast<std::uint32_t>(rng.below(universe));
      if (rng.below(3) == 0) {
        set.erase(x);
        reference.erase(x);
      } else {
        set.insert(x);
        reference.insert(x);
      }
      const auto q = static_cast<std::uint32_t>(rng.below(universe));
      const auto next = reference.lower_bound(q);
      CHECK(set.find_next(q) == (next == reference.end() ? length_set::none : *next));
      auto prev = reference.upper_bound(q);
      CHECK(set.find_prev(q) == (prev == reference.begin() ? length_set::none : *--prev));
      CHECK(set.contains(x) == (reference.count(x) == 1));
    }
  }
}

TEST_CASE("length_sampler finds the k-th unplaced item and follows removals") {
  splitmix64 rng(3);
  std::vector<std::uint32_t> count(1000, 0);
  for (std::size_t l = 1; l < count.size(); ++l) count[l] = static_cast<std::uint32_t>(rng.below(4));
  length_sampler sampler(count);
  for (int step = 0; step < 500; ++step) {
    std::vector<std::uint32_t> expanded;  // the k-th item, lengths ascending
    for (std::uint32_t l = 1; l < count.size(); ++l) expanded.insert(expanded.end(), count[l], l);
    if (expanded.empty()) break;
    const std::uint64_t k = rng.below(expanded.size());
    const std::uint32_t found = sampler.find(k);
    REQUIRE(found == expanded[k]);
    sampler.remove(found);
    --count[found];
  }
}
