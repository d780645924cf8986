// multipack::torch's tensors: shapes and dtypes follow the batch (int32 and int64), they are
// the batch's own memory (no copy), and they own it: a batch kept as tensors stays out of the
// pool until its last tensor dies, the pool's bound holds, and tensors that outlive the
// loader still read their batch (AddressSanitizer watches).

#include "support/torch_doctest.hpp"  // first: libtorch, then doctest

#include <cstdint>
#include <memory>
#include <ranges>
#include <thread>
#include <vector>

#include "multipack/pack/pack.hpp"
#include "multipack/schedule/plan.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/torch/tensors.hpp"
#include "multipack/torch/views.hpp"
#include "support/alpaca.hpp"
#include "support/expect.hpp"

namespace test = multipack::test;

namespace {

std::shared_ptr<const multipack::epoch_plan> alpaca_plan() {
  const auto& d = test::alpaca();
  std::vector<std::uint32_t> lengths(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) lengths[i] = static_cast<std::uint32_t>(d.length(i));
  return std::make_shared<const multipack::epoch_plan>(
      multipack::plan_epoch(lengths, {.capacity = 1024}, {.world_size = 1, .micro_batch = 4, .seed = 3}));
}

std::shared_ptr<const multipack::indexed_dataset> alpaca_shared() {
  return std::make_shared<const multipack::indexed_dataset>(test::alpaca_prefix());
}

template <class T>
void check_tensors_are_the_batch(const multipack::torch::batch_tensors& t, const multipack::batch_view<T>& view) {
  const auto type = sizeof(T) == 8 ? at::kLong : at::kInt;
  for (const at::Tensor* array : {&t.input_ids, &t.labels, &t.position_ids, &t.sequence_ids}) {
    CHECK((array->scalar_type() == type));
    CHECK((array->sizes() == at::IntArrayRef({view.rows, view.row_length})));
    CHECK(array->device().is_cpu());
  }
  CHECK((t.cu_seqlens.scalar_type() == at::kInt));
  CHECK(t.cu_seqlens.numel() == static_cast<std::int64_t>(view.used_cu_seqlens().size()));
  CHECK(t.input_ids.data_ptr() == view.input_ids.data());  // no copy
  CHECK(t.labels.data_ptr() == view.labels.data());
  CHECK(t.position_ids.data_ptr() == view.position_ids.data());
  CHECK(t.sequence_ids.data_ptr() == view.sequence_ids.data());
  CHECK(t.cu_seqlens.data_ptr() == view.cu_seqlens.data());
  CHECK(t.cu_seqlens[-1].template item<std::int64_t>() == std::int64_t{view.rows} * view.row_length);
  CHECK(t.labels.ne(-100).sum().template item<std::int64_t>() == t.loss_tokens);
  CHECK(t.sequence_ids.ne(0).sum().template item<std::int64_t>() == t.real_tokens);
  CHECK(t.max_seqlen == view.max_seqlen);
}

/// The arrays of a batch, flattened and concatenated, from its tensors and from its view.
std::vector<std::int64_t> arrays_of(const multipack::torch::batch_tensors& t) {
  std::vector<std::int64_t> all;
  for (const at::Tensor& array : {t.input_ids, t.labels, t.position_ids, t.sequence_ids, t.cu_seqlens}) {
    const at::Tensor flat = array.to(at::kLong).contiguous().view({-1});
    all.insert(all.end(), flat.data_ptr<std::int64_t>(), flat.data_ptr<std::int64_t>() + flat.numel());
  }
  all.push_back(t.loss_tokens);
  return all;
}
template <class T>
std::vector<std::int64_t> arrays_of(const multipack::batch_view<T>& b) {
  std::vector<std::int64_t> all;
  for (const auto span : {b.used_input_ids(), b.used_labels(), b.used_position_ids(), b.used_sequence_ids()})
    all.insert(all.end(), span.begin(), span.end());
  all.insert(all.end(), b.used_cu_seqlens().begin(), b.used_cu_seqlens().end());
  all.push_back(static_cast<std::int64_t>(b.loss_tokens));
  return all;
}

}  // namespace

TEST_CASE("torch::views::to_tensors: an input view of batch_tensors, both call forms") {
  const auto& d = test::alpaca();
  auto steps = d | multipack::views::pack({.capacity = 2048}) | multipack::views::shard({.micro_batch = 4, .seed = 1}, 0);
  using tensors_of_prefetch = decltype(steps | multipack::views::prefetch() | multipack::torch::views::to_tensors());
  static_assert(std::ranges::input_range<tensors_of_prefetch>);
  static_assert(std::ranges::view<tensors_of_prefetch>);
  static_assert(!std::ranges::forward_range<tensors_of_prefetch>);
  static_assert(std::ranges::sized_range<tensors_of_prefetch>);
  static_assert(std::same_as<std::ranges::range_value_t<tensors_of_prefetch>, multipack::torch::batch_tensors>);
  using tensors_of_taken = decltype(steps | multipack::views::prefetch() | std::views::take(2) |
                                    multipack::torch::views::to_tensors());
  static_assert(std::ranges::input_range<tensors_of_taken>);
  static_assert(std::ranges::sized_range<tensors_of_taken>);  // take's size carries through the copies

  // The reference: the batches of the same steps as views::prefetch gives them.
  multipack::batch_options options;
  options.mask = test::alpaca_prompts();
  std::vector<std::vector<std::int64_t>> expected;
  for (const auto& b : steps | multipack::views::prefetch_as<std::int64_t>({}, options)) expected.push_back(arrays_of(b));
  REQUIRE(expected.size() == steps.size());

  SUBCASE("after a prefetch view: the loader's buffers, kept past their step") {
    auto batches = steps | multipack::views::prefetch_as<std::int64_t>({.threads = 2, .depth = 3}, options) |
                   multipack::torch::views::to_tensors();
    CHECK(batches.size() == expected.size());
    std::vector<multipack::torch::batch_tensors> kept;  // every other batch, kept to the end
    std::size_t i = 0;
    for (const multipack::torch::batch_tensors& b : batches) {
      CHECK((b.input_ids.scalar_type() == at::kLong));
      CHECK(arrays_of(b) == expected[i]);
      CHECK(b.step == i);
      if (i % 2 == 0 && kept.size() < 2) kept.push_back(b);  // two of three buffers held: the loop goes on
      ++i;
    }
    CHECK(i == expected.size());
    for (std::size_t k = 0; k < kept.size(); ++k) CHECK(arrays_of(kept[k]) == expected[2 * k]);
    CHECK(test::contains(test::message_of<multipack::option_error>([&] { (void)batches.begin(); }), "begin() called twice"));
  }
  SUBCASE("after any other range of batches: a copy of each, the call form") {
    auto taken = steps | multipack::views::prefetch_as<std::int64_t>({}, options) | std::views::take(3);
    std::size_t i = 0;
    auto copies = multipack::torch::views::to_tensors(taken);
    CHECK(copies.size() == 3);
    for (const auto& b : copies) CHECK(arrays_of(b) == expected[i++]);
    CHECK(i == 3);
  }
  SUBCASE("a default-constructed view: no batches") {
    decltype(steps | multipack::views::prefetch() | multipack::torch::views::to_tensors()) unset;
    CHECK(unset.size() == 0);
    CHECK(unset.begin() == unset.end());
    CHECK(unset.statistics().batches == 0);
    decltype(steps | multipack::views::prefetch() | std::views::take(2) | multipack::torch::views::to_tensors()) unset_copies;
    CHECK(unset_copies.size() == 0);
    CHECK(unset_copies.begin() == unset_copies.end());
    // A view made from a default-constructed prefetch view.
    auto of_unset = multipack::torch::views::to_tensors(decltype(steps | multipack::views::prefetch()){});
    CHECK(of_unset.size() == 0);
    CHECK(of_unset.begin() == of_unset.end());
  }
  SUBCASE("no steps, no batches") {
    std::size_t n = 0;
    for (const auto& b : steps | std::views::drop(steps.size()) | multipack::views::prefetch() |
                             multipack::torch::views::to_tensors())
      n += static_cast<std::size_t>(b.input_ids.size(0) > 0);
    CHECK(n == 0);
  }
}

TEST_CASE("tensors over a batch: the batch's shapes, dtype and memory, int32 and int64") {
  auto dataset = alpaca_shared();
  auto plan = alpaca_plan();
  multipack::batch_options options;
  options.mask = test::alpaca_prompts();
  {
    multipack::batch_loader<multipack::indexed_dataset> loader(dataset, plan, 0, options, {.threads = 2, .depth = 3});
    auto lease = loader.next();
    REQUIRE(lease);
    const multipack::batch_view<> view = (*lease)->view;
    const std::uint64_t step = (*lease)->step;
    check_tensors_are_the_batch(multipack::torch::borrow_tensors(view, step), view);
    const auto owned = multipack::torch::to_tensors(std::move(*lease));
    check_tensors_are_the_batch(owned, view);
    CHECK(owned.step == step);
  }
  multipack::batch_loader<multipack::indexed_dataset, std::int64_t> loader(dataset, plan, 0, options, {.threads = 2, .depth = 3});
  auto lease = loader.next();
  REQUIRE(lease);
  const multipack::batch_view<std::int64_t> view = (*lease)->view;
  check_tensors_are_the_batch(multipack::torch::to_tensors(std::move(*lease)), view);
}

TEST_CASE("tensors say their batch's step, epoch and rank") {
  const auto& d = test::alpaca();
  std::vector<std::uint32_t> lengths(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) lengths[i] = static_cast<std::uint32_t>(d.length(i));
  const auto plan = std::make_shared<const multipack::epoch_plan>(multipack::plan_epoch(
      lengths, {.capacity = 1024}, {.world_size = 2, .micro_batch = 4, .seed = 3, .epoch = 5}));
  multipack::batch_loader<multipack::indexed_dataset> loader(alpaca_shared(), plan, 1, {}, {.threads = 1, .depth = 2});
  for (std::uint64_t step = 0; step < 2; ++step) {
    auto lease = loader.next();
    REQUIRE(lease);
    REQUIRE((*lease)->epoch == 5);
    const auto t = multipack::torch::to_tensors(std::move(*lease));
    CHECK(t.step == step);
    CHECK(t.epoch == 5);
    CHECK(t.rank == 1);
  }
}

TEST_CASE("a batch kept as tensors stays out of the pool until its last tensor dies") {
  auto dataset = alpaca_shared();
  auto plan = alpaca_plan();
  REQUIRE(plan->schedule.steps() >= 8);
  std::vector<at::Tensor> kept;  // one tensor of each batch: a slice, which shares the storage
  std::vector<at::Tensor> copies;
  {
    multipack::batch_loader<multipack::indexed_dataset, std::int64_t> loader(dataset, plan, 0, {}, {.threads = 2, .depth = 3});
    for (int i = 0; i < 2; ++i) {
      auto lease = loader.next();
      REQUIRE(lease);
      const auto t = multipack::torch::to_tensors(std::move(*lease));
      kept.push_back(t.input_ids.slice(0, 1, 3));
      copies.push_back(t.input_ids.slice(0, 1, 3).clone());
    }
    // Two of three buffers are held by tensors alone: the third batch comes, the fourth
    // cannot (nothing could build it) and says so.
    auto third = loader.next();
    REQUIRE(third);
    CHECK(test::contains(test::message_of<multipack::option_error>([&] { (void)loader.next(); }), "holds all 3 buffers"));
    // One batch's last tensor dies, on another thread: its buffer is back, the next batch comes.
    std::thread([&kept] { kept.erase(kept.begin()); }).join();
    copies.erase(copies.begin());
    third.reset();
    auto fourth = loader.next();
    REQUIRE(fourth);
    CHECK((*fourth)->step == 3);
  }
  // The loader is gone; the kept tensor still reads its batch, unchanged.
  REQUIRE(kept.size() == 1);
  CHECK(at::equal(kept[0], copies[0]));
  kept.clear();
}
