#pragma once
// The concepts that connect the stages of the pipeline (DESIGN: "The data path"):
//
//   dataset ──▶ pack ──▶ shard ──▶ prefetch
//   sample_range   row_range   step_range   (batches)
//
// Each stage accepts any range that models the concept on its left, so a user can put a view
// of their own (std::views::filter, take, drop, a range-v3 view, their own type) between any
// two stages. This header holds only concepts; the functions that read a sample whatever its
// form are in core/sample.hpp.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>

#include "multipack/core/piece.hpp"

namespace multipack {

/// The integer types a batch's token arrays can have: int32 (the default, half the bytes to
/// copy) or int64 (what PyTorch embedding and loss layers take without a cast).
template <class T>
concept batch_token = std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

namespace detail {
/// The character types and bool: integral, but neither tokens nor counts.
template <class T>
constexpr bool is_character_v =
    std::is_same_v<T, char> || std::is_same_v<T, wchar_t> || std::is_same_v<T, char8_t> ||
    std::is_same_v<T, char16_t> || std::is_same_v<T, char32_t> || std::is_same_v<T, bool>;
}  // namespace detail

/// An integer type that is not a character type or bool: what token values, lengths, ranks
/// and token ids can be passed as (std::in_range, which the range checks use, accepts exactly
/// these). A function taking an integer it range-checks is a template on it, so that a bool,
/// a char or a floating-point value does not convert silently (llmc_dataset(path, true) does
/// not compile), and a negative one is reported as itself, not as 4294967295.
template <class T>
concept plain_integral = std::integral<T> && !detail::is_character_v<std::remove_cv_t<T>>;

/// What every function that takes a file's path accepts: a path, a string, a char array.
/// Those functions are templates on it so that a call with two values in braces, f({a, b}),
/// does not compile: a std::filesystem::path parameter would take it as the path of the
/// iterator pair (a, b) and fail at run time.
template <class P>
concept path_like = std::convertible_to<const P&, std::filesystem::path>;

// ---------------------------------------------------------------------------------------------
// Samples

namespace detail {

template <class S, class T>
concept sample_member_reads_as = requires(const S& s, std::uint64_t first, std::span<T> out) {
  s.read_tokens(first, out);
};

/// The member form: s.length() and s.read_tokens(first, out) for int32 or int64 `out`.
template <class S>
concept member_token_sample = requires(const S& s) {
  { s.length() } -> std::convertible_to<std::uint64_t>;
} && (sample_member_reads_as<S, std::int32_t> || sample_member_reads_as<S, std::int64_t>);

/// The plain form: a contiguous, sized range of integers (std::vector<int>, std::span<const
/// std::uint16_t>, ...). Not bool (std::vector<bool> is not contiguous) nor a character type
/// (a std::string, std::u8string or std::wstring is text, not tokens): plain_integral.
template <class S>
concept integer_range_sample =
    std::ranges::contiguous_range<const S> && std::ranges::sized_range<const S> &&
    plain_integral<std::ranges::range_value_t<const S>>;

}  // namespace detail

/// A sample: a sequence of tokens that has a length and can be read into an int32 or int64
/// span. Either
///  - an object with `s.length()` (tokens in the sample) and `s.read_tokens(first, out)`
///    (writes tokens [first, first + out.size()) into `out`, converted; throws
///    multipack::error when the range is outside the sample or a value does not fit), for
///    `out` a std::span<std::int32_t> or std::span<std::int64_t>: a store read as one type
///    needs only that one; or
///  - a contiguous sized range of integers (std::vector<int>, std::span<const std::uint16_t>).
/// `S` may be a reference type (a range's reference type is tested as it is).
template <class S>
concept token_sample =
    detail::member_token_sample<std::remove_cvref_t<S>> || detail::integer_range_sample<std::remove_cvref_t<S>>;

/// A token_sample that can be read into a batch of T tokens (int32 or int64).
template <class S, class T>
concept sample_reads_as = token_sample<S> && batch_token<T> &&
                          (detail::sample_member_reads_as<std::remove_cvref_t<S>, T> ||
                           detail::integer_range_sample<std::remove_cvref_t<S>>);

/// A sample that can be asked to bring tokens into the cache ahead of a read:
/// s.prefetch_tokens(first, count), a hint that never throws. Optional.
template <class S>
concept prefetching_sample = requires(const std::remove_cvref_t<S>& s, std::uint64_t first, std::uint64_t count) {
  { s.prefetch_tokens(first, count) } noexcept;
};

/// What views::pack takes: a range of samples that can be walked more than once (the
/// samples are read again when batches are built). Sized and random-access ranges (a
/// dataset, std::vector<std::vector<int>>, `| std::views::take(n)`) are read by position;
/// others (`| std::views::filter(f)`) have their positions recorded once, when packed.
template <class R>
concept sample_range = std::ranges::forward_range<R> && token_sample<std::ranges::range_reference_t<R>>;

// ---------------------------------------------------------------------------------------------
// Datasets: samples by index

template <class D, class T>
concept dataset_reads_as = requires(const D& d, std::size_t i, std::uint64_t first, std::span<T> out) {
  d.read_tokens(i, first, out);
};

/// Token storage by index (the interface the collator reads through; multipack's datasets and
/// any store a user plugs in), indexed 0 .. size()-1:
///  - size(): number of samples;
///  - length(i): tokens in sample i;
///  - read_tokens(i, first, out): writes tokens [first, first + out.size()) of sample i into
///    `out`, converted to the output's integer type, for int32 or int64 `out` (one of the two
///    is enough: batches of the other type are then refused at compile time); throws
///    multipack::error when the range is outside the sample or the read fails.
/// Every member must be safe to call from several threads at once on a const dataset.
/// multipack's own datasets are also sample ranges (begin()/end() over dataset_sample).
template <class D>
concept token_dataset = requires(const D& d, std::size_t i) {
  { d.size() } -> std::convertible_to<std::size_t>;
  { d.length(i) } -> std::convertible_to<std::uint64_t>;
} && (dataset_reads_as<D, std::int32_t> || dataset_reads_as<D, std::int64_t>);

/// Optional: a dataset that can be asked to bring tokens into the cache ahead of a read:
/// prefetch_tokens(i, first, count), a hint that never throws. The collator asks for the next
/// row's tokens while it writes this one.
template <class D>
concept prefetching_dataset = requires(const D& d, std::size_t i, std::uint64_t first, std::uint64_t count) {
  { d.prefetch_tokens(i, first, count) } noexcept;
};

/// Optional: a dataset backed by files that can say whether they changed since it opened them:
/// check_unchanged() throws io_error naming the file. The loader calls it before every batch
/// (or, for a part_checked_dataset, checks the parts the batch reads), so that a shard
/// rewritten while training fails the batch instead of reading a shrunk map.
template <class D>
concept change_checked_dataset = requires(const D& d) { d.check_unchanged(); };

/// Optional, for a change_checked_dataset made of many files (shards, corpora): the loader
/// then checks before each batch only the files that the batch reads, each once, so that the
/// check costs the same whatever the number of shards (check_unchanged() is two fstat calls
/// a shard). Its files are grouped in parts numbered 0 .. file_parts() - 1 (a shard's .idx
/// and .bin are one part):
///  - file_part_of(i): the part whose files hold sample i (i < size(), the caller's duty);
///  - check_part_unchanged(k): check_unchanged() of part k's files only (k < file_parts(),
///    the caller's duty): throws io_error naming the file.
/// A dataset without them is checked whole, by check_unchanged().
template <class D>
concept part_checked_dataset = change_checked_dataset<D> && requires(const D& d, std::size_t i) {
  { d.file_parts() } -> std::convertible_to<std::size_t>;
  { d.file_part_of(i) } -> std::convertible_to<std::size_t>;
  d.check_part_unchanged(i);
};

/// Optional: a dataset whose samples are samples of another dataset (a filter of it, say):
/// source() is that dataset, source_index(i) sample i's index in it. Loss masks, which
/// describe the source's samples, are checked against the source and applied by that index.
template <class D>
concept has_source_dataset = requires(const D& d, std::size_t i) {
  d.source();
  { d.source_index(i) } -> std::convertible_to<std::size_t>;
};

// ---------------------------------------------------------------------------------------------
// Rows and steps

/// A row of a packing: a contiguous range of pieces that outlives the expression that names
/// it (an lvalue, or a borrowed range such as std::span<const piece>), so that a step can keep
/// a std::span<const piece> of it.
template <class R>
concept packed_row = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                     std::same_as<std::ranges::range_value_t<R>, piece> &&
                     (std::is_lvalue_reference_v<R> || std::ranges::borrowed_range<R>);

/// What views::shard takes: a sized random-access range of rows (views::pack's rows, `|
/// std::views::take(n)`, `| std::views::drop(n)`, a user's own rows). Const-iterable: the
/// schedule reads rows from several threads.
template <class R>
concept row_range = std::ranges::random_access_range<const R> && std::ranges::sized_range<const R> &&
                    packed_row<std::ranges::range_reference_t<const R>>;

/// A step: the micro_batch rows one rank trains on in one step, as a sized random-access range
/// of rows (an empty row is a padding row). A step given by value (a view's temporary) may own
/// its rows: the loader collates each batch while its step lives.
template <class S>
concept step_of_rows = std::ranges::random_access_range<std::remove_reference_t<S>> &&
                       std::ranges::sized_range<std::remove_reference_t<S>> &&
                       packed_row<std::ranges::range_reference_t<std::remove_reference_t<S>>>;

/// What views::prefetch takes: a sized random-access range of steps (views::shard's steps,
/// `| std::views::drop(k)` to resume at step k, `| std::views::take(n)`), built by index from
/// several worker threads, hence const-iterable.
template <class R>
concept step_range = std::ranges::random_access_range<const R> && std::ranges::sized_range<const R> &&
                     step_of_rows<std::ranges::range_reference_t<const R>>;

// ---------------------------------------------------------------------------------------------
// Where rows and steps find their samples

namespace detail {

template <class R>
struct samples_finder {
  static constexpr bool found = false;
};
/// A range that knows its samples: r.samples() returns a std::shared_ptr to a token_dataset.
template <class R>
  requires requires(const R& r) { r.samples(); }
struct samples_finder<R> {
  static constexpr bool found = true;
  static auto get(const R& r) { return r.samples(); }
};
/// A view over one that does (std::views::take, drop, ref_view, range-v3's views): its base().
template <class R>
  requires(!requires(const R& r) { r.samples(); }) && requires(const R& r) { r.base(); }
struct samples_finder<R> : samples_finder<std::remove_cvref_t<decltype(std::declval<const R&>().base())>> {
  using base_finder = samples_finder<std::remove_cvref_t<decltype(std::declval<const R&>().base())>>;
  static auto get(const R& r)
    requires base_finder::found
  {
    return base_finder::get(r.base());
  }
};

/// The same walk for the options views::pack was given: r.packing_options().
template <class R>
struct packing_options_finder {
  static constexpr bool found = false;
};
template <class R>
  requires requires(const R& r) { r.packing_options(); }
struct packing_options_finder<R> {
  static constexpr bool found = true;
  static auto get(const R& r) { return r.packing_options(); }
};
template <class R>
  requires(!requires(const R& r) { r.packing_options(); }) && requires(const R& r) { r.base(); }
struct packing_options_finder<R>
    : packing_options_finder<std::remove_cvref_t<decltype(std::declval<const R&>().base())>> {
  using base_finder = packing_options_finder<std::remove_cvref_t<decltype(std::declval<const R&>().base())>>;
  static auto get(const R& r)
    requires base_finder::found
  {
    return base_finder::get(r.base());
  }
};

/// A subrange of one's iterators (range-v3's drop and take of an lvalue give one): the
/// iterators' samples().
template <class R>
  requires(!requires(const R& r) { r.samples(); }) && (!requires(const R& r) { r.base(); }) &&
          requires(const R& r) { std::ranges::begin(r).samples(); }
struct samples_finder<R> {
  static constexpr bool found = true;
  static auto get(const R& r) { return std::ranges::begin(r).samples(); }
};
template <class R>
  requires(!requires(const R& r) { r.packing_options(); }) && (!requires(const R& r) { r.base(); }) &&
          requires(const R& r) { std::ranges::begin(r).packing_options(); }
struct packing_options_finder<R> {
  static constexpr bool found = true;
  static auto get(const R& r) { return std::ranges::begin(r).packing_options(); }
};

}  // namespace detail

/// A range of rows or steps that can say which samples its pieces name: it has a member
/// samples() (a std::shared_ptr<const D> for a token_dataset D), or is a view whose base()
/// chain leads to one (views::pack's rows under std::views::take, drop, ...), or a subrange
/// of iterators that have samples() (range-v3's drop of an lvalue). views::pack and
/// views::shard provide it, and their iterators; a user's own rows provide samples().
template <class R>
concept resolves_samples = detail::samples_finder<std::remove_cvref_t<R>>::found;

}  // namespace multipack
