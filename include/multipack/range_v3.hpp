#pragma once
// The rows and the steps as range-v3 views, for a program that puts range-v3's adaptors after
// those stages: `dataset | views::pack(o) | ranges::views::take(n)`, or a closure such as
// `views::pack(o) | ranges::views::stride(2) | views::shard(s, rank)`. (The batches of
// views::prefetch are a C++20 input range, with a move-only iterator, which range-v3 0.12 does
// not take at all: cap or drop the steps before it instead.)
//
// range-v3 takes a temporary only if it is one of its views, and it knows a view by its base
// class (ranges::view_base) or by ranges::enable_view, never by the standard's enable_view.
// Without this header it takes a named multipack view by reference, and no temporary. The
// specialisations live here, not in views.hpp, because multipack's other headers do not
// include range-v3 (nvcc cannot parse it, and a consumer may not have it).
//
// Include it in every file of a program that applies range-v3's adaptors to multipack's
// views, before the first such use, or in none: the same adaptor instantiated with and
// without it is two definitions of one function (the linker keeps one: wrong rows or a crash
// in the other file). In one file, a use before the include does not compile.

#include <type_traits>

#include <range/v3/range/concepts.hpp>

#include "multipack/views.hpp"

namespace ranges {

/// Each holds its state through a shared pointer, so copying one is O(1), as a range-v3 view
/// must be.
template <class V>
inline constexpr bool enable_view<multipack::views::packed_view<V>> = true;
template <class Rows>
inline constexpr bool enable_view<multipack::views::shard_view<Rows>> = true;

}  // namespace ranges
