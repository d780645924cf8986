// Packing into an earlier packing's memory (pack's storage argument, what plan_each_epoch does
// from a loader's third epoch on): the same rows as into fresh memory, written into the same
// blocks; refused input loses nothing. A file of its own so that ctest runs it beside
// tests/pack/test_pack.cpp (both run threads, the longest of the ThreadSanitizer run).

#include <doctest/doctest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "multipack/core/packed_rows.hpp"
#include "multipack/core/random.hpp"
#include "multipack/pack/pack.hpp"
#include "support/packing_inputs.hpp"

using namespace multipack;

namespace {

/// An earlier packing's memory, as pack's storage argument: a pieces block of `pieces` (in
/// the zero-filled mode pack's own blocks have, so that nothing but the packer writes them)
/// and an offsets block of `offsets`, both full of bytes no packing writes.
packing garbage_storage(std::size_t pieces, std::size_t offsets) {
  piece_vector block{detail::huge_page_allocator<piece>(detail::zero_filled)};
  block.assign(pieces, piece{0xA5A5A5A5, 0xA5A5A5A5, 0xA5A5A5A5});
  std::vector<std::uint64_t> ends(offsets, 0xA5A5A5A5A5A5A5A5);
  ends.resize(2);  // the capacity keeps the garbage
  ends[0] = 0;
  ends[1] = pieces;
  return packing{packed_rows(std::move(block), std::move(ends)), {}};
}

}  // namespace

TEST_CASE("packing into an earlier packing's memory: the same rows, in the same blocks") {
  // Every algorithm and policy, small generated lengths and large ones (in halves, on two
  // threads): the blocks are reused when large enough, and every byte of them is rewritten.
  const std::vector<std::uint32_t> alpaca = test::alpaca_lengths();
  splitmix64 rng(31);
  std::vector<std::uint32_t> large(1'100'000);
  for (auto& length : large)
    length = static_cast<std::uint32_t>(rng.below(8) == 0 ? rng.below(5 * 2048) : alpaca[rng.below(alpaca.size())]);
  std::vector<std::vector<std::uint32_t>> shapes{large};
  for (std::uint64_t seed = 0; seed < 12; ++seed) shapes.push_back(test::generated_lengths(seed, 2048));
  for (const std::vector<std::uint32_t>& lengths : shapes)
    for (const packing_algorithm algorithm : test::all_algorithms)
      for (const overlong_policy policy : test::tolerant_policies) {
        pack_options options{2048, algorithm, policy, 0, 5};
        options.threads = 2;
        CAPTURE(lengths.size());
        CAPTURE(to_string(algorithm));
        CAPTURE(to_string(policy));
        const packing fresh = pack(lengths, options);
        const std::size_t items = fresh.report.pieces;

        packing storage = garbage_storage(items + 3, 2 * items + 4);
        const piece* const pieces_block = storage.rows.pieces().data();
        const std::uint64_t* const offsets_block = storage.rows.row_offsets().data();
        const packing reused = pack(lengths, options, std::move(storage));
        CHECK(reused.rows == fresh.rows);
        CHECK(reused.report == fresh.report);
        CHECK(reused.rows.pieces().data() == pieces_block);
        CHECK(reused.rows.row_offsets().data() == offsets_block);
        CHECK(storage.rows.empty());  // NOLINT(bugprone-use-after-move): left with no rows, as documented
        CHECK(storage.report == pack_report{});

        // Blocks too small: replaced, with the same rows.
        if (items < 2) continue;
        const packing replaced = pack(lengths, options, garbage_storage(items - 1, 1));
        CHECK(replaced.rows == fresh.rows);
        CHECK(replaced.report == fresh.report);
      }
}

TEST_CASE("packing into an earlier packing's memory: epoch after epoch, and on a throw") {
  const std::vector<std::uint32_t> alpaca = test::alpaca_lengths();
  // randomized_exact_fit repacks every epoch: each epoch's rows, in the last epoch's blocks,
  // are the rows of that epoch packed into fresh memory.
  pack_options options{1024, packing_algorithm::randomized_exact_fit, overlong_policy::split, 0, 7};
  packing last = pack(alpaca, options);
  const piece* const block = last.rows.pieces().data();
  for (std::uint64_t epoch = 1; epoch < 4; ++epoch) {
    CAPTURE(epoch);
    options.epoch = epoch;
    const packing fresh = pack(alpaca, options);
    last = pack(alpaca, options, std::move(last));
    CHECK(last.rows == fresh.rows);
    CHECK(last.report == fresh.report);
    CHECK(last.rows.pieces().data() == block);
  }
  // Refused input (an overlong sample under policy error, bad options) loses nothing: the
  // storage keeps its rows and report.
  const packing before = last;
  options.overlong = overlong_policy::error;
  options.capacity = 128;  // under Alpaca's longest sample
  CHECK_THROWS_AS((void)pack(alpaca, options, std::move(last)), sample_error);
  CHECK(last.rows == before.rows);  // NOLINT(bugprone-use-after-move)
  CHECK(last.report == before.report);
  options.capacity = 0;
  CHECK_THROWS_AS((void)pack(alpaca, options, std::move(last)), option_error);
  CHECK(last.rows == before.rows);
  // Any range of lengths takes a storage too.
  const std::vector<int> small{3, 900, 20, 500};
  const pack_options plain{1024};
  CHECK(pack(small, plain, pack(small, plain)).rows == pack(small, plain).rows);
}
