#pragma once
// The last stage of the pipeline: batches in device memory, ready on the trainer's stream.
//
//   auto batches = dataset
//                | multipack::views::pack({.capacity = 4096})
//                | multipack::views::shard({.world_size = 8, .micro_batch = 16}, rank)
//                | multipack::views::prefetch({.threads = 2, .depth = 8})
//                | multipack::views::to_device(stream);     // the trainer's cudaStream_t or cuda::stream
//   for (const multipack::cuda::device_batch_view<>& batch : batches)  // device arrays
//     train(batch.input_ids.get(), batch.labels.get(), batch.cu_seqlens.get(), stream);
//
// At each batch, `stream` is made to wait for the batch's copy (on the device; the host does
// not block); advancing the loop releases the batch on `stream` (its buffer is overwritten
// only after the work queued there has passed). An input view, like views::prefetch: the
// threads start at begin() and stop when the view is destroyed.
//
// This header includes <ranges> through views.hpp, not range-v3: nvcc compiles it.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>

#include "multipack/batch/layout.hpp"
#include "multipack/core/error.hpp"
#include "multipack/cuda/batch_stager.hpp"
#include "multipack/cuda/device_loader.hpp"
#include "multipack/views.hpp"

namespace multipack::views {

/// The batches of a prefetch_view, copied to the device: an input view of device_batch_view<T>
/// whose spans are device memory (host memory on the host fallback). Its loader is built from
/// the prefetch view's own steps (whatever views the user put before it) and options, so the
/// workers collate straight into pinned memory: no host copy between the two.
template <std::ranges::view Steps, batch_token T = std::int32_t>
class device_view : public std::ranges::view_interface<device_view<Steps, T>> {
  using samples_type = multipack::detail::samples_of_t<Steps>;
  struct state {
    prefetch_view<Steps, T> source;
    cuda::stream_ref consumer = cuda::stream_ref::default_stream();
    cuda::device_options device;
    multipack::detail::single_pass pass;
    std::optional<cuda::device_loader<samples_type, T>> loader;
    std::optional<cuda::device_batch<T>> current;  // last: released (on `consumer`) before the loader goes

    [[nodiscard]] const cuda::device_batch_view<T>& batch() const { return current->view(); }
    [[nodiscard]] bool has_batch() const noexcept { return current.has_value(); }
    void advance() {
      if (current) current->release(consumer);
      current.reset();
      current = loader->next();
      if (current) current->wait(consumer);
    }
  };

 public:
  using iterator = multipack::detail::batch_iterator<state, cuda::device_batch_view<T>>;

  /// An empty view: no batches (begin() == end()).
  device_view() = default;
  device_view(prefetch_view<Steps, T> source, cuda::stream_ref consumer, const cuda::device_options& device) {
    cuda::validate(device);
    auto s = std::make_shared<state>();
    s->source = std::move(source);
    s->consumer = consumer;
    s->device = device;
    state_ = std::move(s);
  }
  /// Starts the workers and the copies (once) and takes the first batch. Throws what
  /// device_loader's constructor and next() throw. An input range: begin() may be called once
  /// (again, it rethrows the first call's failure, or throws option_error).
  [[nodiscard]] iterator begin() {
    if (!state_) return iterator();  // default-constructed: no batches
    return state_->pass.begin("views::to_device", [this] {
      const auto& source = state_->source;
      if (source.size() == 0) return iterator(state_.get());  // no steps (or a default source), no batches, no threads
      state_->loader.emplace(multipack::detail::samples_finder<Steps>::get(source.base()),
                             std::ranges::ref_view<const Steps>(source.base()), source.batch(), source.prefetch(),
                             state_->device);
      state_->advance();
      return iterator(state_.get());
    });
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
  /// Batches the view yields: one a step. O(1).
  [[nodiscard]] std::size_t size() const noexcept { return state_ ? state_->source.size() : 0; }

  /// The loader's statistics so far (zeros before begin()).
  [[nodiscard]] cuda::device_statistics statistics() const {
    return state_ && state_->loader ? state_->loader->statistics() : cuda::device_statistics{};
  }

 private:
  std::shared_ptr<state> state_;
};

/// Any other input range of host batches (batch_view<T>), copied to the device through a
/// pinned staging pool (see cuda::batch_stager): `prefetch | std::views::take(n)`, a trainer's
/// own batches. Each host batch is copied before the source moves past it.
template <std::ranges::view Source, batch_token T = std::int32_t>
class staged_device_view : public std::ranges::view_interface<staged_device_view<Source, T>> {
  struct state {
    Source source;
    std::optional<std::ranges::iterator_t<Source>> position;
    cuda::stream_ref consumer = cuda::stream_ref::default_stream();
    multipack::detail::single_pass pass;
    std::optional<cuda::batch_stager<T>> stager;
    std::optional<cuda::device_batch<T>> current;  // last: released (on `consumer`) before the stager goes

    state(Source s, cuda::stream_ref c) : source(std::move(s)), consumer(c) {}
    [[nodiscard]] const cuda::device_batch_view<T>& batch() const { return current->view(); }
    [[nodiscard]] bool has_batch() const noexcept { return current.has_value(); }
    void take() {
      if (*position == std::ranges::end(source)) return;
      current = stager->stage(**position);
      current->wait(consumer);
    }
    void advance() {
      if (current) current->release(consumer);
      current.reset();
      ++*position;
      take();
    }
  };

 public:
  using iterator = multipack::detail::batch_iterator<state, cuda::device_batch_view<T>>;

  /// An empty view: no batches (begin() == end()).
  staged_device_view() = default;
  staged_device_view(Source source, cuda::stream_ref consumer, const cuda::device_options& device) : device_(device) {
    cuda::validate(device);
    state_ = std::make_shared<state>(std::move(source), consumer);
  }
  /// Makes the stager and stages the source's first batch (once). Throws what the source's
  /// begin() and batch_stager throw. An input range: begin() may be called once (again, it
  /// rethrows the first call's failure, or throws option_error).
  [[nodiscard]] iterator begin() {
    if (!state_) return iterator();  // default-constructed: no batches
    return state_->pass.begin("views::to_device", [this] {
      state_->stager.emplace(device_);
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

  /// The copies so far (zeros before begin()).
  [[nodiscard]] cuda::device_statistics statistics() const {
    return state_ && state_->stager ? state_->stager->statistics() : cuda::device_statistics{};
  }

 private:
  cuda::device_options device_;
  std::shared_ptr<state> state_;
};


inline constexpr struct to_device_fn {
  /// batches | views::to_device(stream, device): the batches in device memory, each made
  /// ready on `stream` (the trainer's) and released on it when the loop moves on. A prefetch
  /// view's workers then collate straight into pinned memory (no host copy); any other input
  /// range of batch_view<T> is staged through a pinned pool (one host copy a batch).
  /// The stream is a cuda::stream_ref: a cudaStream_t or a cuda::stream; 0 and nullptr do not
  /// compile (say cuda::stream_ref::default_stream() for the legacy default stream).
  [[nodiscard]] auto operator()(cuda::stream_ref stream, const cuda::device_options& device = {}) const {
    return multipack::detail::pipe_closure{[stream, device]<class R>(R&& source)
                                             requires std::ranges::input_range<std::remove_cvref_t<R>> &&
                                                      requires { typename multipack::detail::batch_token_of<std::ranges::range_value_t<R>>::type; }
                                           {
      using S = std::remove_cvref_t<R>;
      if constexpr (multipack::detail::is_prefetch_view<S>) {
        return device_view<std::remove_cvref_t<decltype(source.base())>,
                           typename multipack::detail::batch_token_of<std::ranges::range_value_t<S>>::type>(source, stream, device);
      } else {
        using T = typename multipack::detail::batch_token_of<std::ranges::range_value_t<R>>::type;
        return staged_device_view<std::views::all_t<R>, T>(std::views::all(std::forward<R>(source)), stream, device);
      }
    }};
  }
} to_device;

}  // namespace multipack::views
