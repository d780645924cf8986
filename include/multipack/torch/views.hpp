#pragma once
// The pipeline's batches as libtorch tensors: a last stage after views::prefetch.
//
//   for (const multipack::torch::batch_tensors& b : dataset
//          | multipack::views::pack({.capacity = 4096})
//          | multipack::views::shard({.world_size = env.world_size, .micro_batch = 16}, env.rank)
//          | multipack::views::prefetch_as<std::int64_t>({.threads = 2})
//          | multipack::torch::views::to_tensors())
//     train(b.input_ids, b.labels, b.position_ids, b.sequence_ids);
//
// After a prefetch view the tensors are the loader's buffers themselves (no copy) and own
// them: a trainer may keep a batch's tensors past the step (for gradient accumulation, a
// logger), and the buffer returns to the pool when the last of them dies (see
// torch/tensors.hpp). Its loader is built from the prefetch view's own steps and options
// (whatever views were put before it), as views::to_device's is. After any other input range
// of batch_view<T> (`prefetch | std::views::take(n)`, a trainer's own batches), each batch is
// copied into tensors of its own, since the source reuses its memory; a batch_view knows no
// step or rank, so those tensors' `step` and `rank` are 0 (take or drop the steps before
// prefetch instead, `steps | std::views::take(n) | prefetch`, to keep them).
//
// An input view, like views::prefetch: the threads start at begin() (once) and stop when the
// view is destroyed.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <utility>

#include "multipack/core/error.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/torch/tensors.hpp"
#include "multipack/views.hpp"

namespace multipack::torch::views {

/// The batches of a prefetch_view as tensors over the loader's buffers, each owning its
/// buffer: an input view of batch_tensors.
template <std::ranges::view Steps, batch_token T = std::int32_t>
class tensor_view : public std::ranges::view_interface<tensor_view<Steps, T>> {
  using samples_type = multipack::detail::samples_of_t<Steps>;
  struct state {
    multipack::views::prefetch_view<Steps, T> source;
    multipack::detail::single_pass pass;
    std::optional<batch_loader<samples_type, T>> loader;
    std::optional<batch_tensors> current;  // the view's reference to the current batch

    [[nodiscard]] const batch_tensors& batch() const { return *current; }
    [[nodiscard]] bool has_batch() const noexcept { return current.has_value(); }
    void advance() {
      current.reset();  // the buffer goes back unless the trainer kept tensors of it
      if (auto lease = loader->next()) current = to_tensors(std::move(*lease));
    }
  };

 public:
  using iterator = multipack::detail::batch_iterator<state, batch_tensors>;

  /// An empty view: no batches (size() 0, begin() == end()).
  tensor_view() = default;
  explicit tensor_view(multipack::views::prefetch_view<Steps, T> source) : state_(std::make_shared<state>()) {
    state_->source = std::move(source);
  }

  /// Starts the workers (once) and waits for the first batch. Throws what batch_loader's
  /// constructor (for steps) and next() throw; called again, the first call's failure, or
  /// option_error (an input view: make a new one from the steps for another pass).
  [[nodiscard]] iterator begin() {
    if (!state_) return iterator();  // default-constructed: no batches
    return state_->pass.begin("torch::views::to_tensors", [this] {
      const auto& source = state_->source;
      if (source.size() == 0) return iterator(state_.get());  // no steps (or a default source), no batches, no threads
      state_->loader.emplace(multipack::detail::samples_finder<Steps>::get(source.base()),
                             std::ranges::ref_view<const Steps>(source.base()), source.batch(), source.prefetch());
      state_->advance();
      return iterator(state_.get());
    });
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
  /// Batches the view yields: one a step. O(1).
  [[nodiscard]] std::size_t size() const noexcept { return state_ ? state_->source.size() : 0; }

  /// The loader's statistics so far (zeros before begin()).
  [[nodiscard]] prefetch_statistics statistics() const {
    return state_ && state_->loader ? state_->loader->statistics() : prefetch_statistics{};
  }

 private:
  std::shared_ptr<state> state_;
};

/// Any other input range of batch_view<T>, each batch copied into tensors of its own.
template <std::ranges::view Source, batch_token T = std::int32_t>
class copied_tensor_view : public std::ranges::view_interface<copied_tensor_view<Source, T>> {
  struct state {
    Source source;
    std::optional<std::ranges::iterator_t<Source>> position;
    std::optional<batch_tensors> current;
    multipack::detail::single_pass pass;

    [[nodiscard]] const batch_tensors& batch() const { return *current; }
    [[nodiscard]] bool has_batch() const noexcept { return current.has_value(); }
    void take() {
      if (*position == std::ranges::end(source)) current.reset();
      else current = copy_tensors(static_cast<const batch_view<T>&>(**position));
    }
    void advance() {
      ++*position;
      take();
    }
  };

 public:
  using iterator = multipack::detail::batch_iterator<state, batch_tensors>;

  /// An empty view: no batches (begin() == end()).
  copied_tensor_view() = default;
  explicit copied_tensor_view(Source source) : state_(std::make_shared<state>(state{std::move(source), {}, {}, {}})) {}

  /// Takes the source's first batch (once: an input view). Throws what the source and
  /// copy_tensors throw; called again, the first call's failure, or option_error.
  [[nodiscard]] iterator begin() {
    if (!state_) return iterator();  // default-constructed: no batches
    return state_->pass.begin("torch::views::to_tensors", [this] {
      state_->position.emplace(std::ranges::begin(state_->source));
      state_->take();
      return iterator(state_.get());
    });
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
  /// Batches the view yields, where the source knows its size: one a source batch. O(1).
  [[nodiscard]] auto size() const
    requires std::ranges::sized_range<Source>
  {
    return state_ ? std::ranges::size(state_->source) : std::ranges::range_size_t<Source>{0};
  }

 private:
  std::shared_ptr<state> state_;
};

inline constexpr struct to_tensors_fn {
  /// batches | torch::views::to_tensors(): the batches as CPU tensors (see the header): the
  /// loader's own buffers after a prefetch view, a copy of each batch after anything else.
  [[nodiscard]] auto operator()() const {
    return multipack::detail::pipe_closure{[]<class R>(R&& source)
                                             requires std::ranges::input_range<std::remove_cvref_t<R>> &&
                                                      requires { typename multipack::detail::batch_token_of<std::ranges::range_value_t<R>>::type; }
                                           { return make(std::forward<R>(source)); }};
  }
  /// torch::views::to_tensors(batches): the same.
  template <class R>
    requires std::ranges::input_range<std::remove_cvref_t<R>> &&
             requires { typename multipack::detail::batch_token_of<std::ranges::range_value_t<R>>::type; }
  [[nodiscard]] auto operator()(R&& source) const {
    return make(std::forward<R>(source));
  }

 private:
  template <class R>
  static auto make(R&& source) {
    using S = std::remove_cvref_t<R>;
    using T = typename multipack::detail::batch_token_of<std::ranges::range_value_t<S>>::type;
    if constexpr (multipack::detail::is_prefetch_view<S>)
      return tensor_view<std::remove_cvref_t<decltype(source.base())>, T>(source);
    else
      return copied_tensor_view<std::views::all_t<R>, T>(std::views::all(std::forward<R>(source)));
  }
} to_tensors;

}  // namespace multipack::torch::views
