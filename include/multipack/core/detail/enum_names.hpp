#pragma once
// Names of option enums, for the command line and reports: one table per enum, read both ways.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "multipack/core/error.hpp"

namespace multipack::detail {

/// The name of `value` in `names`, or "unknown". O(N), never throws.
template <class Enum, std::size_t N>
[[nodiscard]] constexpr std::string_view name_of(
    const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value) noexcept {
  for (const auto& [v, name] : names)
    if (v == value) return name;
  return "unknown";
}

/// The names of `names`, ", " between them, for messages. O(N).
template <class Enum, std::size_t N>
[[nodiscard]] std::string known_names(const std::array<std::pair<Enum, std::string_view>, N>& names) {
  std::string known;
  for (const auto& [v, name] : names) {
    known += known.empty() ? "" : ", ";
    known += name;
  }
  return known;
}

/// The value named `text`; throws option_error naming `what` and listing the known names.
template <class Enum, std::size_t N>
[[nodiscard]] Enum parse_name(const std::array<std::pair<Enum, std::string_view>, N>& names,
                              std::string_view text, std::string_view what) {
  for (const auto& [v, name] : names)
    if (name == text) return v;
  throw option_error("unknown " + std::string(what) + " '" + std::string(text) + "' (known: " + known_names(names) +
                     ")");
}

/// Throws option_error "<who>: <what> <number> is none of <names>" unless `value` is in
/// `names`: an enum read as an integer (a config file, a binding) can hold any value, and a
/// switch over it would silently take none of its cases. O(N).
template <class Enum, std::size_t N>
void require_named(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value, std::string_view who,
                   std::string_view what) {
  for (const auto& [v, name] : names)
    if (v == value) return;
  throw option_error(std::string(who) + ": " + std::string(what) + " " +
                     std::to_string(static_cast<long long>(value)) + " is none of " + known_names(names));
}

}  // namespace multipack::detail
