// huge_page_allocator's zero-filled mode: a vector sized once reads as value-initialized
// without the zeros being written, whether its block comes from mmap (4 MiB and more) or from
// operator new (cleared on allocation); copies of it value-initialize as usual.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>

#include "multipack/core/detail/huge_page_allocator.hpp"
#include "multipack/core/piece.hpp"

using multipack::piece;
using multipack::detail::huge_page_allocator;
using multipack::detail::large_vector;
using multipack::detail::zero_filled;

namespace {

bool all_value_initialized(const large_vector<piece>& pieces) {
  return std::all_of(pieces.begin(), pieces.end(), [](const piece& p) { return p == piece{}; });
}

}  // namespace

TEST_CASE("a zero-filled vector sized once holds value-initialized pieces, from the heap or from mmap") {
  // 1,000 pieces (12 KB) come from operator new; 1 M pieces (12 MB) are mapped.
  for (const std::size_t n : {std::size_t{1000}, std::size_t{1} << 20}) {
    CAPTURE(n);
    // A freed block of the same size full of ones: the heap hands it out again.
    void* used = ::operator new(n * sizeof(piece));
    std::memset(used, 0xff, n * sizeof(piece));
    ::operator delete(used);
    large_vector<piece> pieces{huge_page_allocator<piece>(zero_filled)};
    pieces.resize(n);
    REQUIRE(pieces.size() == n);
    CHECK(all_value_initialized(pieces));
  }
}

TEST_CASE("a copy of a zero-filled vector value-initializes what it grows by") {
  large_vector<piece> pieces{huge_page_allocator<piece>(zero_filled)};
  pieces.resize(1000);
  std::fill(pieces.begin(), pieces.end(), piece{1, 2, 3});
  large_vector<piece> copy = pieces;
  CHECK(copy == pieces);
  copy.resize(10);  // the old pieces' bytes stay in the block past the size
  copy.resize(1000);
  CHECK(std::all_of(copy.begin() + 10, copy.end(), [](const piece& p) { return p == piece{}; }));
  large_vector<piece> plain(1000);
  CHECK(all_value_initialized(plain));
}
