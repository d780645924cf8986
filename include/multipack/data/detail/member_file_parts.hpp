#pragma once
// The file parts (see part_checked_dataset) of a dataset made of member datasets: the shards
// of a concatenation, the corpora of a blend. A member that has parts of its own (a corpus
// that is a concatenation of shards) gives each of them; any other member is one part. Parts
// are numbered member by member, in the members' order.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "multipack/core/concepts.hpp"
#include "multipack/data/detail/part_starts.hpp"

namespace multipack::detail {

/// The parts of members of type D. Holds nothing unless D has parts of its own (then where
/// each member's parts start: 8 bytes a member). check() needs change_checked_dataset<D>.
/// Every const member may be called from several threads at once.
template <class D>
class member_file_parts {
 public:
  /// No member, no part. Never throws.
  member_file_parts() = default;

  /// Numbers the parts of `members`. O(members) when D has parts, else O(1).
  explicit member_file_parts(std::span<const D> members) {
    if constexpr (nested) {
      starts_.reserve(members.size());
      for (const D& member : members) starts_.add(static_cast<std::uint64_t>(member.file_parts()));
    }
  }

  /// Parts of all members. O(1), never throws.
  [[nodiscard]] std::size_t count(std::span<const D> members) const noexcept {
    if constexpr (nested)
      return static_cast<std::size_t>(starts_.total());
    else
      return members.size();
  }

  /// The part of sample `local` of member `m` (both in range: the caller's duty). O(1), plus
  /// the member's file_part_of.
  [[nodiscard]] std::size_t part_of(std::span<const D> members, std::size_t m, std::size_t local) const {
    if constexpr (nested)
      return static_cast<std::size_t>(starts_.first(m)) + static_cast<std::size_t>(members[m].file_part_of(local));
    else
      return m;
  }

  /// Checks part k's files (k < count(): the caller's duty): the member's
  /// check_part_unchanged, found in O(log members), or its check_unchanged. Throws what it
  /// throws (io_error naming the file).
  void check(std::span<const D> members, std::size_t k) const {
    if constexpr (nested) {
      const std::size_t m = starts_.part_of(k);
      members[m].check_part_unchanged(k - static_cast<std::size_t>(starts_.first(m)));
    } else {
      members[k].check_unchanged();
    }
  }

 private:
  static constexpr bool nested = part_checked_dataset<D>;
  struct none {};
  [[no_unique_address]] std::conditional_t<nested, part_starts, none> starts_;  // where each member's parts start
};

}  // namespace multipack::detail
