#pragma once
// The range adaptors that chain the rooms:
//
//   auto batches = dataset
//                | multipack::views::pack({.capacity = 4096})                // rows of pieces
//                | multipack::views::shard({.world_size = 8, .micro_batch = 16}, rank)
//                | multipack::views::prefetch({.threads = 2, .depth = 8});   // batches
//   for (const multipack::batch_view<>& batch : batches) train(batch);
//
// Each stage is usable alone and satisfies the standard range concepts:
//  - views::pack(options): a random-access view of the rows (std::span<const piece> each);
//  - views::shard(schedule, rank): a random-access view of this rank's steps (rows_of_step
//    each: the micro_batch rows of one step, padding rows empty);
//  - views::prefetch(prefetch, batch): an input view of batches (batch_view<T>), built by
//    worker threads in step order; the threads start at begin() and stop when the view (or
//    its last copy) is destroyed, wherever the loop broke off.
// The dataset is shared by the stages: a dataset given as an lvalue must outlive them; one
// given as an rvalue is moved into the pipeline. Views are cheap to copy (shared state).
// For a new packing every epoch with randomized_exact_fit, pack with
// epoch_pack_options(options, schedule) (plan_epoch does the same).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>

#include "multipack/batch/layout.hpp"
#include "multipack/core/concepts.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/pack/pack.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "multipack/schedule/epoch_schedule.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack {

/// The rows one rank trains on in one step: micro_batch rows of pieces (empty: padding).
class rows_of_step {
 public:
  rows_of_step() = default;
  rows_of_step(const epoch_plan* plan, std::uint64_t step, std::uint32_t rank) noexcept
      : plan_(plan), step_(step), rank_(rank) {}
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept { return plan_->schedule.micro_batch(); }
  /// The pieces of slot `slot`; empty for a padding row. O(1); throws option_error for a
  /// slot outside the micro-batch.
  [[nodiscard]] std::span<const piece> operator[](std::size_t slot) const {
    return plan_->pieces(step_, rank_, static_cast<std::uint32_t>(slot));
  }

 private:
  const epoch_plan* plan_ = nullptr;
  std::uint64_t step_ = 0;
  std::uint32_t rank_ = 0;
};

namespace detail {

/// A random-access iterator over positions [0, n) of a source, yielding source->at(i).
template <class Source>
class position_iterator {
 public:
  using value_type = decltype(std::declval<const Source&>().at(std::size_t{}));
  using difference_type = std::ptrdiff_t;
  using iterator_concept = std::random_access_iterator_tag;

  position_iterator() = default;
  position_iterator(const Source* source, std::size_t i) noexcept : source_(source), i_(i) {}

  value_type operator*() const { return source_->at(i_); }
  value_type operator[](difference_type n) const { return source_->at(static_cast<std::size_t>(static_cast<difference_type>(i_) + n)); }
  position_iterator& operator++() noexcept { ++i_; return *this; }
  position_iterator operator++(int) noexcept { auto copy = *this; ++i_; return copy; }
  position_iterator& operator--() noexcept { --i_; return *this; }
  position_iterator operator--(int) noexcept { auto copy = *this; --i_; return copy; }
  position_iterator& operator+=(difference_type n) noexcept { i_ = static_cast<std::size_t>(static_cast<difference_type>(i_) + n); return *this; }
  position_iterator& operator-=(difference_type n) noexcept { return *this += -n; }
  friend position_iterator operator+(position_iterator it, difference_type n) noexcept { return it += n; }
  friend position_iterator operator+(difference_type n, position_iterator it) noexcept { return it += n; }
  friend position_iterator operator-(position_iterator it, difference_type n) noexcept { return it -= n; }
  friend difference_type operator-(const position_iterator& a, const position_iterator& b) noexcept {
    return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
  }
  friend bool operator==(const position_iterator& a, const position_iterator& b) noexcept { return a.i_ == b.i_; }
  friend auto operator<=>(const position_iterator& a, const position_iterator& b) noexcept { return a.i_ <=> b.i_; }

 private:
  const Source* source_ = nullptr;
  std::size_t i_ = 0;
};

/// The dataset, owned (moved in) or borrowed (an lvalue the caller keeps alive).
template <class Dataset>
std::shared_ptr<const std::remove_cvref_t<Dataset>> share(Dataset&& dataset) {
  using D = std::remove_cvref_t<Dataset>;
  if constexpr (std::is_lvalue_reference_v<Dataset>)
    return std::shared_ptr<const D>(std::shared_ptr<const D>{}, &dataset);  // aliasing: no ownership
  else
    return std::make_shared<const D>(std::forward<Dataset>(dataset));
}

/// An adaptor with its arguments bound, waiting for the range on the left of `|`.
template <class F>
struct pipe_closure {
  F apply;
  template <class R>
    requires std::invocable<const F&, R>
  friend auto operator|(R&& range, const pipe_closure& closure) {
    return closure.apply(std::forward<R>(range));
  }
};
template <class F>
pipe_closure(F) -> pipe_closure<F>;

}  // namespace detail

namespace views {

/// The rows of a packing of a dataset: a random-access view of std::span<const piece>.
template <token_dataset D>
class packed_view : public std::ranges::view_interface<packed_view<D>> {
  struct state {
    std::shared_ptr<const D> dataset;
    packing packed;
    [[nodiscard]] std::span<const piece> at(std::size_t r) const noexcept { return packed.rows[r]; }
  };

 public:
  packed_view() = default;
  /// Packs the dataset's lengths. Throws what pack throws. Cost: pack's.
  packed_view(std::shared_ptr<const D> dataset, const pack_options& options) {
    auto s = std::make_shared<state>();
    const D& d = *dataset;
    s->packed = multipack::pack(
        std::views::iota(std::size_t{0}, static_cast<std::size_t>(d.size())) |
            std::views::transform([&d](std::size_t i) { return static_cast<std::uint64_t>(d.length(i)); }),
        options);
    s->dataset = std::move(dataset);
    state_ = std::move(s);
  }

  [[nodiscard]] detail::position_iterator<state> begin() const noexcept { return {state_.get(), 0}; }
  [[nodiscard]] detail::position_iterator<state> end() const noexcept {
    return {state_.get(), state_ ? state_->packed.rows.size() : 0};
  }
  [[nodiscard]] const packing& packed() const noexcept { return state_->packed; }
  [[nodiscard]] const std::shared_ptr<const D>& dataset() const noexcept { return state_->dataset; }

 private:
  std::shared_ptr<const state> state_;
};

/// One rank's steps of an epoch schedule of a packing: a random-access view of rows_of_step.
template <token_dataset D>
class shard_view : public std::ranges::view_interface<shard_view<D>> {
  struct state {
    std::shared_ptr<const D> dataset;
    std::shared_ptr<const epoch_plan> plan;
    std::uint32_t rank = 0;
    [[nodiscard]] rows_of_step at(std::size_t step) const noexcept { return {plan.get(), step, rank}; }
  };

 public:
  shard_view() = default;
  /// Schedules the packing for `options` and keeps `rank`'s steps. Throws what
  /// epoch_schedule throws, and option_error for a rank outside the world.
  /// Cost: the schedule's, plus a copy of the packing (12 bytes a piece).
  shard_view(const packed_view<D>& packed, const schedule_options& options, std::uint32_t rank) {
    if (rank >= options.world_size)
      throw option_error("views::shard: rank " + std::to_string(rank) + " is outside the world of " +
                         std::to_string(options.world_size) + " ranks");
    auto plan = std::make_shared<epoch_plan>();
    plan->packed = packed.packed();
    plan->schedule = epoch_schedule(plan->packed.rows, options);
    auto s = std::make_shared<state>();
    s->dataset = packed.dataset();
    s->plan = std::move(plan);
    s->rank = rank;
    state_ = std::move(s);
  }

  [[nodiscard]] detail::position_iterator<state> begin() const noexcept { return {state_.get(), 0}; }
  [[nodiscard]] detail::position_iterator<state> end() const noexcept {
    return {state_.get(), state_ ? static_cast<std::size_t>(state_->plan->schedule.steps()) : 0};
  }
  [[nodiscard]] const epoch_plan& plan() const noexcept { return *state_->plan; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return state_->rank; }
  [[nodiscard]] const std::shared_ptr<const D>& dataset() const noexcept { return state_->dataset; }
  [[nodiscard]] const std::shared_ptr<const epoch_plan>& shared_plan() const noexcept { return state_->plan; }

 private:
  std::shared_ptr<const state> state_;
};

/// This rank's batches, built ahead by worker threads: an input view of batch_view<T>.
template <token_dataset D, batch_token T = std::int32_t>
class prefetch_view : public std::ranges::view_interface<prefetch_view<D, T>> {
  struct state {
    std::shared_ptr<const D> dataset;
    std::shared_ptr<const epoch_plan> plan;
    std::uint32_t rank = 0;
    prefetch_options prefetch;
    batch_options batch;
    std::optional<batch_loader<D, T>> loader;
    std::optional<typename batch_loader<D, T>::lease> current;
  };

 public:
  class iterator {
   public:
    using value_type = batch_view<T>;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(state* s) noexcept : state_(s) {}
    iterator(iterator&&) noexcept = default;
    iterator& operator=(iterator&&) noexcept = default;

    /// The current batch; valid until the iterator advances.
    const batch_view<T>& operator*() const { return (*state_->current)->view; }
    /// Gives the current batch's buffer back and waits for the next batch.
    iterator& operator++() {
      state_->current.reset();
      state_->current = state_->loader->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept { return !it.state_->current.has_value(); }

   private:
    state* state_ = nullptr;
  };

  prefetch_view() = default;
  prefetch_view(const shard_view<D>& shard, const prefetch_options& prefetch, batch_options batch) {
    validate(prefetch);
    auto s = std::make_shared<state>();
    s->dataset = shard.dataset();
    s->plan = shard.shared_plan();
    s->rank = shard.rank();
    s->prefetch = prefetch;
    s->batch = std::move(batch);
    state_ = std::move(s);
  }

  /// Starts the workers (once) and waits for the first batch. Throws what batch_loader's
  /// constructor and next() throw. An input range: begin() may be called once.
  [[nodiscard]] iterator begin() {
    if (state_->loader) throw option_error("views::prefetch: begin() called twice on an input view");
    state_->loader.emplace(state_->dataset, state_->plan, state_->rank, state_->batch, state_->prefetch);
    state_->current = state_->loader->next();
    return iterator(state_.get());
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
  // What the view was made with, for adaptors that build their own loader (views::to_device).
  [[nodiscard]] const std::shared_ptr<const D>& dataset() const noexcept { return state_->dataset; }
  [[nodiscard]] const std::shared_ptr<const epoch_plan>& shared_plan() const noexcept { return state_->plan; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return state_->rank; }
  [[nodiscard]] const prefetch_options& prefetch() const noexcept { return state_->prefetch; }
  [[nodiscard]] const batch_options& batch() const noexcept { return state_->batch; }

  /// The prefetcher's statistics so far (zeros before begin()).
  [[nodiscard]] prefetch_statistics statistics() const {
    return state_->loader ? state_->loader->statistics() : prefetch_statistics{};
  }

 private:
  std::shared_ptr<state> state_;
};

inline constexpr struct pack_fn {
  /// dataset | views::pack(options): packs the dataset's lengths.
  [[nodiscard]] auto operator()(const pack_options& options) const {
    return detail::pipe_closure{[options]<class Dataset>(Dataset&& dataset)
                                  requires token_dataset<std::remove_cvref_t<Dataset>>
                                {
      return packed_view<std::remove_cvref_t<Dataset>>(detail::share(std::forward<Dataset>(dataset)), options);
    }};
  }
  template <class Dataset>
    requires token_dataset<std::remove_cvref_t<Dataset>>
  [[nodiscard]] auto operator()(Dataset&& dataset, const pack_options& options) const {
    return (*this)(options).apply(std::forward<Dataset>(dataset));
  }
} pack;

inline constexpr struct shard_fn {
  /// packed | views::shard(options, rank): this rank's steps of the epoch's schedule.
  [[nodiscard]] auto operator()(const schedule_options& options, std::uint32_t rank) const {
    return detail::pipe_closure{[options, rank]<class D>(const packed_view<D>& packed) {
      return shard_view<D>(packed, options, rank);
    }};
  }
} shard;

template <batch_token T = std::int32_t>
struct prefetch_fn {
  /// sharded | views::prefetch(prefetch, batch): the batches, built by worker threads.
  [[nodiscard]] auto operator()(const prefetch_options& prefetch = {}, batch_options batch = {}) const {
    return detail::pipe_closure{[prefetch, batch]<class D>(const shard_view<D>& steps) {
      return prefetch_view<D, T>(steps, prefetch, batch);
    }};
  }
};
/// Batches of int32 token arrays; views::prefetch_as<std::int64_t> for int64.
inline constexpr prefetch_fn<std::int32_t> prefetch;
template <batch_token T>
inline constexpr prefetch_fn<T> prefetch_as;

}  // namespace views
}  // namespace multipack
