#pragma once
// The range adaptors that chain the layers:
//
//   auto batches = dataset                                                   // any sample_range
//                | multipack::views::pack({.capacity = 4096})                // rows of pieces
//                | multipack::views::shard({.world_size = 8, .micro_batch = 16}, rank)
//                | multipack::views::prefetch({.threads = 2, .depth = 8});   // batches
//   for (const multipack::batch_view<>& batch : batches) train(batch);
//
// Each adaptor takes any range that models its input concept (core/concepts.hpp), so a view of
// the user's own fits between any two stages, and has both call forms, as the standard's and
// range-v3's adaptors do:
//  - views::pack(options): a sample_range (a dataset, a std::vector<std::vector<int>>,
//    `dataset | std::views::filter(f)`) to a random-access view of its rows (std::span<const
//    piece> each). Pieces name samples by their position in the range given (a filter's
//    positions are recorded once, when packed).
//  - views::shard(schedule, rank): a row_range (the rows, `| std::views::take(n)`, a user's
//    own rows) to a random-access view of this rank's steps (rows_of_step: micro_batch rows,
//    padding rows empty).
//  - views::prefetch(prefetch, batch): a step_range (the steps, `| std::views::drop(k)` to
//    resume at step k, `| std::views::take(n)`) to an input view of batches (batch_view<T>),
//    built by worker threads, batch i from step i, by index; the threads start at begin()
//    and stop when the view (or its last copy) is destroyed, wherever the loop broke off.
//  - Closures compose before they see a range:
//      auto pipeline = views::pack(o) | views::shard(s, rank) | views::prefetch(p);
//      for (const auto& batch : dataset | pipeline) ...
//
// Ownership: a range given as an lvalue (a dataset, a vector) is referred to and must outlive
// the views (std::views::all's rule), unchanged: the pack view keeps iterators into it, which a
// vector's growth (push_back, reserve) invalidates. One given as an rvalue is moved into the
// pipeline. The packing and the schedule are shared, never copied, between a view, its copies
// and the stages after it: views are cheap to copy.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "multipack/batch/layout.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/detail/position_iterator.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/data/indexed_samples.hpp"
#include "multipack/pack/pack.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "multipack/schedule/epoch_schedule.hpp"

namespace multipack {

/// The rows one rank trains on in one step: a random-access range of micro_batch rows
/// (std::span<const piece> each; empty: a padding row). Refers to the shard view's rows and
/// schedule: valid as long as the shard view (or a copy of it, or a view over it) is.
template <class Rows>
class rows_of_step {
  struct row_at {
    std::span<const piece> operator()(const rows_of_step& step, std::size_t slot) const { return step[slot]; }
  };

 public:
  using iterator = detail::position_iterator<rows_of_step, row_at>;

  rows_of_step() = default;
  rows_of_step(const Rows* rows, std::span<const std::uint32_t> slots, std::uint64_t step, std::uint32_t rank) noexcept
      : rows_(rows), slots_(slots), step_(step), rank_(rank) {}

  /// The step's number in the epoch, and the rank it belongs to. O(1).
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
  /// micro_batch. O(1).
  [[nodiscard]] std::size_t size() const noexcept { return slots_.size(); }
  /// The pieces of slot `slot` (< size(), the caller's duty); empty for a padding row. O(1).
  [[nodiscard]] std::span<const piece> operator[](std::size_t slot) const {
    const std::uint32_t row = slots_[slot];
    if (row == epoch_schedule::padding_row) return {};
    return std::span<const piece>(std::ranges::begin(*rows_)[static_cast<std::ranges::range_difference_t<const Rows>>(row)]);
  }
  [[nodiscard]] iterator begin() const noexcept { return {this, 0}; }
  [[nodiscard]] iterator end() const noexcept { return {this, size()}; }

 private:
  const Rows* rows_ = nullptr;
  std::span<const std::uint32_t> slots_;  // indices into *rows_, or padding_row
  std::uint64_t step_ = 0;
  std::uint32_t rank_ = 0;
};

namespace detail {

template <class T>
inline constexpr bool is_pipe_closure = false;

/// An adaptor with its arguments bound, waiting for the range on the left of `|`. Composes
/// with another closure (ours or the standard library's) into one that applies both.
/// `Apply` must be constrained on its range, so that `|` sees what it accepts; the left of
/// `|` is a range (applied) or a closure (composed).
template <class Apply>
struct pipe_closure {
  Apply apply;

  /// range | closure: applies the closure. Constrained on being a range only, so that a range
  /// the stage does not take fails inside, with the stage's own constraint in the message.
  template <class R>
    requires std::ranges::range<std::remove_cvref_t<R>>
  friend auto operator|(R&& range, const pipe_closure& closure) {
    return closure.apply(std::forward<R>(range));
  }

  /// closure | closure: applies this one, then `next`.
  template <class Next>
    requires(!std::ranges::range<std::remove_cvref_t<Next>>)
  friend auto operator|(pipe_closure closure, Next next) {
    auto both = [closure = std::move(closure), next = std::move(next)]<class R>(R&& range) {
      return std::forward<R>(range) | closure | next;
    };
    return pipe_closure<decltype(both)>{std::move(both)};
  }

  /// A standard closure | closure (std::views::filter(f) | views::pack(o)): applies `first`,
  /// then this one.
  template <class First>
    requires(!std::ranges::range<std::remove_cvref_t<First>>) && (!is_pipe_closure<std::remove_cvref_t<First>>)
  friend auto operator|(First first, pipe_closure closure) {
    auto both = [first = std::move(first), closure = std::move(closure)]<class R>(R&& range) {
      return std::forward<R>(range) | first | closure;
    };
    return pipe_closure<decltype(both)>{std::move(both)};
  }
};

// pipe_closure{lambda}: spelled out for compilers without class template argument deduction
// for aggregates (Clang before 17).
template <class Apply>
pipe_closure(Apply) -> pipe_closure<Apply>;

template <class Apply>
inline constexpr bool is_pipe_closure<pipe_closure<Apply>> = true;

/// The begin() of an input view of batches, which may run once: the first call runs `start`;
/// a later one rethrows what the first one threw (a trainer retrying after a failed start
/// hears of that failure, not of a second call), or throws option_error naming the view.
/// Not thread-safe, as the views are not.
class single_pass {
 public:
  template <class Start>
  auto begin(const char* view, Start&& start) {
    if (started_) {
      if (failure_) std::rethrow_exception(failure_);
      throw option_error(std::string(view) +
                         ": begin() called twice on an input view (make a new view from the steps for another pass)");
    }
    started_ = true;
    try {
      return std::forward<Start>(start)();
    } catch (...) {
      failure_ = std::current_exception();
      throw;
    }
  }

 private:
  bool started_ = false;
  std::exception_ptr failure_;
};

/// The iterator of the input views of batches (views::prefetch, views::to_device,
/// torch::views::to_tensors): a pointer to the view's shared state, which holds the current
/// batch, a Batch (a batch_view<T>, batch tensors). State has batch() (the current one),
/// advance() (give it back, take the next) and has_batch().
template <class State, class Batch>
class batch_iterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using iterator_concept = std::input_iterator_tag;

  batch_iterator() = default;
  explicit batch_iterator(State* s) noexcept : state_(s) {}
  batch_iterator(batch_iterator&&) noexcept = default;
  batch_iterator& operator=(batch_iterator&&) noexcept = default;

  /// The current batch; valid until the iterator advances.
  const Batch& operator*() const { return state_->batch(); }
  /// Gives the current batch back and waits for the next.
  batch_iterator& operator++() {
    state_->advance();
    return *this;
  }
  void operator++(int) { ++*this; }
  /// At the end also for a default-constructed view's iterator (no state).
  friend bool operator==(const batch_iterator& it, std::default_sentinel_t) noexcept {
    return it.state_ == nullptr || !it.state_->has_batch();
  }

 private:
  State* state_ = nullptr;
};

/// The samples type of a std::shared_ptr of samples found through a range's base() chain.
template <class R>
using samples_of_t = std::remove_cvref_t<decltype(*samples_finder<R>::get(std::declval<const R&>()))>;

/// What views::prefetch takes: a step_range that knows its samples (resolves_samples).
template <class R>
concept prefetchable = std::ranges::viewable_range<R> && step_range<std::views::all_t<R>> &&
                       resolves_samples<std::views::all_t<R>>;
/// ... and whose samples read as T (views::prefetch_as<T>).
template <class R, class T>
concept prefetchable_as = prefetchable<R> && dataset_reads_as<samples_of_t<std::views::all_t<R>>, T>;

}  // namespace detail

namespace views {

/// The rows of a packing of a sample_range: a random-access view of std::span<const piece>,
/// whose pieces name samples by their position in the range packed.
template <std::ranges::view V>
  requires sample_range<V>
class packed_view : public std::ranges::view_interface<packed_view<V>> {
  struct state : std::enable_shared_from_this<state> {
    indexed_samples<V> samples_;
    packing packed;
    pack_options options;

    state(V base, const pack_options& o) : samples_(std::move(base)), options(o) {
      const indexed_samples<V>& s = samples_;
      packed = multipack::pack(std::views::iota(std::size_t{0}, s.size()) |
                                   std::views::transform([&s](std::size_t i) { return s.length(i); }),
                               o);
    }
    // The iterators reach these two through the state (see position_iterator).
    [[nodiscard]] std::shared_ptr<const indexed_samples<V>> samples() const { return {this->shared_from_this(), &samples_}; }
    [[nodiscard]] const pack_options& packing_options() const noexcept { return options; }
  };
  struct row_at {
    std::span<const piece> operator()(const state& s, std::size_t r) const noexcept { return s.packed.rows[r]; }
  };

 public:
  using iterator = detail::position_iterator<state, row_at>;

  packed_view() = default;
  /// Packs the samples' lengths. Throws what pack throws, and what walking or measuring the
  /// samples throws. Cost: pack's, plus one pass over the range to record positions when it
  /// is not sized and random-access (see indexed_samples).
  packed_view(V base, const pack_options& options) : state_(std::make_shared<const state>(std::move(base), options)) {}

  [[nodiscard]] iterator begin() const noexcept { return {state_.get(), 0}; }
  [[nodiscard]] iterator end() const noexcept { return {state_.get(), size()}; }
  /// Rows. O(1).
  [[nodiscard]] std::size_t size() const noexcept { return state_ ? state_->packed.rows.size() : 0; }

  /// The packing: rows and report. O(1).
  [[nodiscard]] const packing& packed() const noexcept { return state_->packed; }
  [[nodiscard]] const pack_report& report() const noexcept { return state_->packed.report; }
  /// What the packer was given. O(1).
  [[nodiscard]] const pack_options& packing_options() const noexcept { return state_->options; }
  /// The samples the pieces name, shared with the view. O(1).
  [[nodiscard]] std::shared_ptr<const indexed_samples<V>> samples() const noexcept {
    return state_->samples();
  }

 private:
  std::shared_ptr<const state> state_;
};

/// One rank's steps of an epoch schedule of rows: a random-access view of rows_of_step.
template <std::ranges::view Rows>
  requires row_range<Rows>
class shard_view : public std::ranges::view_interface<shard_view<Rows>> {
  struct state {
    Rows rows;
    epoch_schedule schedule;
    std::uint32_t rank = 0;
    // (the iterators reach the samples through the state: see position_iterator)
    [[nodiscard]] auto samples() const
      requires resolves_samples<Rows>
    {
      return detail::samples_finder<Rows>::get(rows);
    }
    // The capacity of the rows' packing, for the batches' row length: a range of these
    // iterators (range-v3's drop of the steps) finds it as the steps do.
    [[nodiscard]] auto packing_options() const
      requires detail::packing_options_finder<Rows>::found
    {
      return detail::packing_options_finder<Rows>::get(rows);
    }
  };
  struct step_at {
    rows_of_step<Rows> operator()(const state& s, std::size_t step) const {
      return {&s.rows, s.schedule.rows(step, s.rank), step, s.rank};
    }
  };

 public:
  using iterator = detail::position_iterator<state, step_at>;

  shard_view() = default;
  /// Schedules the rows for `options` and keeps `rank`'s steps. Throws option_error for a
  /// rank outside the world, and for rows packed by randomized_exact_fit for another (seed,
  /// epoch) than the schedule's (the epoch is one: see pack_options::epoch); what
  /// epoch_schedule throws. Cost: the schedule's (8 bytes a row, 4 a slot); the rows are not
  /// copied.
  shard_view(Rows rows, const schedule_options& options, std::uint32_t rank) {
    validate(options);  // a world of 0 ranks is that, not "rank 0 is outside the world of 0 ranks"
    detail::check_rank_in_world(rank, options.world_size, "views::shard");
    if constexpr (detail::packing_options_finder<Rows>::found) {
      const pack_options packing = detail::packing_options_finder<Rows>::get(rows);
      if (packing.algorithm == packing_algorithm::randomized_exact_fit &&
          (packing.seed != options.seed || packing.epoch != options.epoch))
        throw option_error("views::shard: the rows were packed by randomized-exact-fit for seed " +
                           std::to_string(packing.seed) + ", epoch " + std::to_string(packing.epoch) +
                           ", the schedule is for seed " + std::to_string(options.seed) + ", epoch " +
                           std::to_string(options.epoch) +
                           ": give views::pack the schedule's .seed and .epoch (a packing and an order of rows make "
                           "one epoch)");
    }
    epoch_schedule schedule(rows, options);
    state_ = std::make_shared<const state>(state{std::move(rows), std::move(schedule), rank});
  }

  [[nodiscard]] iterator begin() const noexcept { return {state_.get(), 0}; }
  [[nodiscard]] iterator end() const noexcept { return {state_.get(), size()}; }
  /// Steps of the epoch: the same on every rank. O(1).
  [[nodiscard]] std::size_t size() const noexcept {
    return state_ ? static_cast<std::size_t>(state_->schedule.steps()) : 0;
  }

  [[nodiscard]] const epoch_schedule& schedule() const noexcept { return state_->schedule; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return state_->rank; }
  /// The rows scheduled. O(1).
  [[nodiscard]] const Rows& base() const noexcept { return state_->rows; }
  /// The samples the pieces name, where the rows know them. O(1).
  [[nodiscard]] auto samples() const
    requires resolves_samples<Rows>
  {
    return detail::samples_finder<Rows>::get(state_->rows);
  }

 private:
  std::shared_ptr<const state> state_;
};

/// This rank's batches, built ahead by worker threads from a step_range that knows its
/// samples: an input view of batch_view<T>.
template <std::ranges::view Steps, batch_token T = std::int32_t>
  requires step_range<Steps> && resolves_samples<Steps> && dataset_reads_as<detail::samples_of_t<Steps>, T>
class prefetch_view : public std::ranges::view_interface<prefetch_view<Steps, T>> {
  using samples_type = detail::samples_of_t<Steps>;
  using loader_type = batch_loader<samples_type, T>;
  struct state {
    state(Steps s, const prefetch_options& p, batch_options b) : steps(std::move(s)), prefetch(p), options(std::move(b)) {}
    Steps steps;
    prefetch_options prefetch;
    batch_options options;
    detail::single_pass pass;
    std::optional<loader_type> loader;
    std::optional<typename loader_type::lease> current;

    [[nodiscard]] const batch_view<T>& batch() const { return (*current)->view; }
    [[nodiscard]] bool has_batch() const noexcept { return current.has_value(); }
    void advance() {
      current.reset();  // the buffer goes back before the next is waited for
      current = loader->next();
    }
  };

 public:
  using iterator = detail::batch_iterator<state, batch_view<T>>;

  /// An empty view: no steps, no batches (size() 0, begin() == end()); base(), prefetch() and
  /// batch() need a view made from steps.
  prefetch_view() = default;
  /// Keeps the steps (a view: shared, not copied) and the options; starts nothing. Throws
  /// option_error for bad prefetch options.
  prefetch_view(Steps steps, const prefetch_options& prefetch, batch_options batch) {
    validate(prefetch);
    state_ = std::make_shared<state>(std::move(steps), prefetch, std::move(batch));
  }

  /// Starts the workers (once) and waits for the first batch. Throws what batch_loader's
  /// constructor (for steps) and next() throw. An input range: begin() may be called once
  /// (again, it rethrows the first call's failure, or throws option_error); for another pass,
  /// make another view from the steps.
  [[nodiscard]] iterator begin() {
    if (!state_) return iterator();  // default-constructed: no steps
    return state_->pass.begin("views::prefetch", [this] {
      if (std::ranges::empty(state_->steps)) return iterator(state_.get());  // no steps, no batches, no threads
      // The loader refers to the steps this view holds (they may be a move-only view).
      state_->loader.emplace(detail::samples_finder<Steps>::get(state_->steps),
                             std::ranges::ref_view<const Steps>(state_->steps), state_->options, state_->prefetch);
      state_->advance();
      return iterator(state_.get());
    });
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

  /// Batches the view yields: one a step. O(1).
  [[nodiscard]] std::size_t size() const noexcept {
    return state_ ? static_cast<std::size_t>(std::ranges::size(state_->steps)) : 0;
  }

  /// What the view was made with (views::to_device builds its loader from these). O(1).
  [[nodiscard]] const Steps& base() const noexcept { return state_->steps; }
  [[nodiscard]] const prefetch_options& prefetch() const noexcept { return state_->prefetch; }
  [[nodiscard]] const batch_options& batch() const noexcept { return state_->options; }

  /// The prefetcher's statistics so far (zeros before begin()).
  [[nodiscard]] prefetch_statistics statistics() const {
    return state_ && state_->loader ? state_->loader->statistics() : prefetch_statistics{};
  }

 private:
  std::shared_ptr<state> state_;
};

}  // namespace views

namespace detail {
/// Whether R is a views::prefetch_view: the stages after it (views::to_device,
/// torch::views::to_tensors) build their loader from its steps and options.
template <class R>
inline constexpr bool is_prefetch_view = false;
template <class Steps, class T>
inline constexpr bool is_prefetch_view<views::prefetch_view<Steps, T>> = true;
/// The token type of a batch_view (none for anything else).
template <class B>
struct batch_token_of {};
template <class T>
struct batch_token_of<batch_view<T>> {
  using type = T;
};
}  // namespace detail

namespace views {

inline constexpr struct pack_fn {
  /// range | views::pack(options): the rows of a packing of the range's samples.
  [[nodiscard]] auto operator()(const pack_options& options) const {
    return detail::pipe_closure{[options]<class R>(R&& range)
                                  requires std::ranges::viewable_range<R> && sample_range<std::views::all_t<R>>
                                { return packed_view<std::views::all_t<R>>(std::views::all(std::forward<R>(range)), options); }};
  }
  /// views::pack(range, options): the same.
  template <class R>
    requires std::ranges::viewable_range<R> && sample_range<std::views::all_t<R>>
  [[nodiscard]] auto operator()(R&& range, const pack_options& options) const {
    return (*this)(options).apply(std::forward<R>(range));
  }
} pack;

inline constexpr struct shard_fn {
  /// rows | views::shard(options, rank): this rank's steps of the epoch's schedule of the rows.
  /// `rank` is any integer type but bool and the character types (plain_integral): a bool or a
  /// floating-point rank does not compile. Throws option_error naming the rank as given (-1,
  /// not 4294967295) when it is outside the world.
  template <plain_integral Rank>
  [[nodiscard]] auto operator()(const schedule_options& options, Rank rank) const {
    return detail::pipe_closure{[options, rank = detail::rank_argument(rank, options.world_size, "views::shard")]<class R>(
                                    R&& rows)
                                  requires std::ranges::viewable_range<R> && row_range<std::views::all_t<R>>
                                { return shard_view<std::views::all_t<R>>(std::views::all(std::forward<R>(rows)), options, rank); }};
  }
  /// views::shard(rows, options, rank): the same.
  template <class R, plain_integral Rank>
    requires std::ranges::viewable_range<R> && row_range<std::views::all_t<R>>
  [[nodiscard]] auto operator()(R&& rows, const schedule_options& options, Rank rank) const {
    return (*this)(options, rank).apply(std::forward<R>(rows));
  }
} shard;

template <batch_token T = std::int32_t>
struct prefetch_fn {

  /// steps | views::prefetch(prefetch, batch): the batches, built by worker threads.
  [[nodiscard]] auto operator()(const prefetch_options& prefetch = {}, batch_options batch = {}) const {
    return detail::pipe_closure{[prefetch, batch]<class R>(R&& steps)
                                  requires detail::prefetchable_as<R, T>
                                { return make(std::forward<R>(steps), prefetch, batch); }};
  }
  /// views::prefetch(steps, prefetch, batch): the same.
  template <class R>
    requires detail::prefetchable_as<R, T>
  [[nodiscard]] auto operator()(R&& steps, const prefetch_options& prefetch = {}, batch_options batch = {}) const {
    return make(std::forward<R>(steps), prefetch, std::move(batch));
  }

 private:
  template <class R>
  static auto make(R&& steps, const prefetch_options& prefetch, batch_options batch) {
    return prefetch_view<std::views::all_t<R>, T>(std::views::all(std::forward<R>(steps)), prefetch, std::move(batch));
  }
};
/// Batches of int32 token arrays; views::prefetch_as<std::int64_t> for int64.
inline constexpr prefetch_fn<std::int32_t> prefetch;
template <batch_token T>
inline constexpr prefetch_fn<T> prefetch_as;

}  // namespace views
}  // namespace multipack
