#pragma once
// The token storage types of Megatron-LM's indexed dataset, under Megatron's own numeric
// codes, so that the byte at offset 17 of any .idx file maps to the same type here as there.

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "multipack/core/concepts.hpp"  // plain_integral
#include "multipack/core/error.hpp"

namespace multipack {

/// Megatron-LM's `DType` codes (megatron/core/datasets/indexed_dataset.py). Note 6 and 7:
/// Megatron core reads 7 as float32; legacy megatron/data and fairseq read it as float64.
/// Tokens are integers in practice; the float codes exist so that such files still open.
enum class token_dtype : std::uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  float32 = 7,
  uint16 = 8,
};

/// Whether `code` is one of the eight codes above. O(1), never throws, thread-safe.
[[nodiscard]] constexpr bool is_dtype_code(std::uint8_t code) noexcept {
  return code >= 1 && code <= 8;
}

/// Bytes per token of `d`; 0 for a value outside the enum. O(1), never throws, thread-safe.
[[nodiscard]] constexpr std::size_t dtype_size(token_dtype d) noexcept {
  switch (d) {
    case token_dtype::uint8:
    case token_dtype::int8: return 1;
    case token_dtype::int16:
    case token_dtype::uint16: return 2;
    case token_dtype::int32:
    case token_dtype::float32: return 4;
    case token_dtype::int64:
    case token_dtype::float64: return 8;
  }
  return 0;
}

/// NumPy's name of `d` ("uint16", ...); "unknown" outside the enum. O(1), never throws.
[[nodiscard]] constexpr std::string_view dtype_name(token_dtype d) noexcept {
  switch (d) {
    case token_dtype::uint8: return "uint8";
    case token_dtype::int8: return "int8";
    case token_dtype::int16: return "int16";
    case token_dtype::int32: return "int32";
    case token_dtype::int64: return "int64";
    case token_dtype::float64: return "float64";
    case token_dtype::float32: return "float32";
    case token_dtype::uint16: return "uint16";
  }
  return "unknown";
}

/// Whether `d` stores integers (everything but float32/float64). O(1), never throws.
[[nodiscard]] constexpr bool dtype_is_integral(token_dtype d) noexcept {
  return d != token_dtype::float32 && d != token_dtype::float64 && dtype_size(d) != 0;
}

/// The dtype of Megatron code `code`. Throws format_error "<context>: unknown dtype code N"
/// for any other byte, where `context` says where the code was read ("x.idx: byte 17").
/// O(1), thread-safe.
[[nodiscard]] inline token_dtype dtype_from_code(std::uint8_t code, std::string_view context) {
  if (!is_dtype_code(code))
    throw format_error(std::string(context) + ": unknown dtype code " + std::to_string(code) +
                       " (expected a Megatron-LM DType code 1..8)");
  return static_cast<token_dtype>(code);
}

namespace detail {
// Maps by size and signedness, so that `long long` and `long` (both 64-bit on LP64) both
// work. Character types and bool are not tokens (detail::is_character_v, core/concepts.hpp).
template <class T>
constexpr token_dtype dtype_for() noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return token_dtype::float32;
  } else if constexpr (std::is_same_v<T, double>) {
    return token_dtype::float64;
  } else if constexpr (std::is_integral_v<T> && !is_character_v<T>) {
    if constexpr (sizeof(T) == 1) return std::is_signed_v<T> ? token_dtype::int8 : token_dtype::uint8;
    if constexpr (sizeof(T) == 2) return std::is_signed_v<T> ? token_dtype::int16 : token_dtype::uint16;
    if constexpr (sizeof(T) == 4 && std::is_signed_v<T>) return token_dtype::int32;
    if constexpr (sizeof(T) == 8 && std::is_signed_v<T>) return token_dtype::int64;
  }
  return token_dtype{};  // 0: no dtype (uint32, uint64, char, bool, long double ...)
}
}  // namespace detail

/// A C++ type that is the storage type of some token_dtype (uint8_t, int8_t, int16_t,
/// uint16_t, int32_t, int64_t or long long, float, double). Megatron has no uint32/uint64.
template <class T>
concept token_type = detail::dtype_for<std::remove_cv_t<T>>() != token_dtype{};

/// The dtype whose storage type is T: dtype_of_v<std::uint16_t> == token_dtype::uint16.
template <token_type T>
inline constexpr token_dtype dtype_of_v = detail::dtype_for<std::remove_cv_t<T>>();

/// Calls `f(std::type_identity<T>{})` with T the storage type of `d` (uint8_t, ..., float,
/// double) and returns its result; every branch must return the same type. Throws
/// option_error for a value outside the enum. O(1) plus f.
template <class F>
constexpr decltype(auto) visit_dtype(token_dtype d, F&& f) {
  switch (d) {
    case token_dtype::uint8: return std::forward<F>(f)(std::type_identity<std::uint8_t>{});
    case token_dtype::int8: return std::forward<F>(f)(std::type_identity<std::int8_t>{});
    case token_dtype::int16: return std::forward<F>(f)(std::type_identity<std::int16_t>{});
    case token_dtype::int32: return std::forward<F>(f)(std::type_identity<std::int32_t>{});
    case token_dtype::int64: return std::forward<F>(f)(std::type_identity<std::int64_t>{});
    case token_dtype::float64: return std::forward<F>(f)(std::type_identity<double>{});
    case token_dtype::float32: return std::forward<F>(f)(std::type_identity<float>{});
    case token_dtype::uint16: return std::forward<F>(f)(std::type_identity<std::uint16_t>{});
  }
  throw option_error("visit_dtype: invalid token_dtype value " +
                     std::to_string(static_cast<unsigned>(d)));
}

namespace detail {

template <class F>
constexpr F pow2(int n) noexcept {
  F r = 1;
  while (n-- > 0) r *= 2;
  return r;
}

/// Converts `v` to `To` when `To` holds exactly the same value, else returns false and leaves
/// `out` alone. One side must be integral. Never invokes the undefined float->int conversion
/// of an out-of-range value: the range is checked first (NaN fails every comparison).
template <class To, class From>
constexpr bool exact_convert(From v, To& out) noexcept {
  static_assert(std::is_arithmetic_v<To> && std::is_arithmetic_v<From>);
  static_assert(std::is_integral_v<To> || std::is_integral_v<From>,
                "exact_convert: one side must be integral");
  if constexpr (std::is_integral_v<To> && std::is_integral_v<From>) {
    if (!std::in_range<To>(v)) return false;
    out = static_cast<To>(v);
    return true;
  } else if constexpr (std::is_integral_v<To>) {  // floating -> integer
    constexpr int digits = std::numeric_limits<To>::digits;
    constexpr From hi = pow2<From>(digits);  // exact: a power of two
    constexpr From lo = std::is_signed_v<To> ? -hi : From(0);
    if (!(v >= lo && v < hi)) return false;
    const To t = static_cast<To>(v);
    if (static_cast<From>(t) != v) return false;  // has a fraction
    out = t;
    return true;
  } else {  // integer -> floating
    constexpr int digits = std::numeric_limits<From>::digits;
    constexpr To hi = pow2<To>(digits);
    constexpr To lo = std::is_signed_v<From> ? -hi : To(0);
    const To f = static_cast<To>(v);
    if (!(f >= lo && f < hi) || static_cast<From>(f) != v) return false;  // rounded
    out = f;
    return true;
  }
}

/// Whether every S converts exactly to Out (then a conversion loop needs no check and
/// vectorises).
template <class S, class Out>
constexpr bool always_fits() noexcept {
  if constexpr (std::is_integral_v<S>)
    return std::in_range<Out>(std::numeric_limits<S>::min()) && std::in_range<Out>(std::numeric_limits<S>::max());
  else
    return false;
}

/// Converts n stored tokens to Out: returns n, or the index of the first token that has no
/// exact Out value (out[0, index) are written). O(n), never throws.
template <class S, class Out>
std::size_t convert_exactly(const S* src, Out* out, std::size_t n) noexcept {
  if constexpr (always_fits<S, Out>()) {
    for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<Out>(src[k]);
  } else {
    for (std::size_t k = 0; k < n; ++k)
      if (!exact_convert(src[k], out[k])) return k;
  }
  return n;
}

/// Text of a token value for error messages (shortest exact form for floats: "0.5", "nan").
template <class T>
std::string value_text(T v) {
  if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_signed_v<T>) return std::to_string(static_cast<long long>(v));
    else return std::to_string(static_cast<unsigned long long>(v));
  } else {
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<double>(v));
    return std::string(buffer, result.ptr);
  }
}

/// Name of an arithmetic type for messages: the dtype name where there is one.
template <class T>
constexpr std::string_view type_name() noexcept {
  if constexpr (token_type<T>) return dtype_name(dtype_of_v<T>);
  else if constexpr (std::is_same_v<std::remove_cv_t<T>, std::uint32_t>) return "uint32";
  else if constexpr (std::is_same_v<std::remove_cv_t<T>, std::uint64_t>) return "uint64";
  else return "integer";
}

}  // namespace detail
}  // namespace multipack
