// multipack::torch's tensors: shapes and dtypes follow the batch (int32 and int64), they are
// the batch's own memory (no copy), and they own it: a batch kept as tensors stays out of the
// pool until its last tensor dies, the pool's bound holds, and tensors that outlive the
// loader still read their batch (AddressSanitizer watches).

#include "support/torch_doctest.hpp"  // first: libtorch, then doctest

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "multipack/pack/pack.hpp"
#include "multipack/schedule/plan.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/torch/tensors.hpp"
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

}  // namespace

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
