// Device batches as tensors (torch/device_tensors.hpp), against the CUDA runtime simulated on
// the host (tests/cuda/simulated_runtime.cpp), and against the real one where libtorch has CUDA. Debian's libtorch has no CUDA: there a device
// batch's tensors throw libtorch's error, and the batch must go back all the same; with a
// CUDA libtorch (on a GPU machine) they are CUDA tensors over the device buffers. On the
// loader's host fallback they are CPU tensors over the host batch.

#include "support/torch_doctest.hpp"  // first: libtorch, then doctest

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "multipack/cuda/batch_stager.hpp"
#include "multipack/cuda/device_loader.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/schedule/plan.hpp"
#include "multipack/torch/device_tensors.hpp"
#include "support/paths.hpp"

namespace test = multipack::test;

namespace {

struct alpaca_loading {
  std::shared_ptr<const multipack::indexed_dataset> dataset =
      std::make_shared<const multipack::indexed_dataset>(test::alpaca_prefix());
  std::shared_ptr<const multipack::epoch_plan> plan = std::make_shared<const multipack::epoch_plan>(
      multipack::plan_epoch(multipack::read_length_list(test::source_dir() / "data/alpaca/lengths.txt"),
                            {.capacity = 2048}, {.world_size = 1, .micro_batch = 4, .seed = 5}));
};

}  // namespace

TEST_SUITE("device") {
  TEST_CASE("a device batch's tensors: CUDA tensors over its buffers, or libtorch's error and the batch back") {
    const alpaca_loading data;
    multipack::cuda::stream trainer;
    multipack::cuda::device_loader<multipack::indexed_dataset, std::int64_t> loader(data.dataset, data.plan, 0, {},
                                                                                    {.threads = 2, .depth = 2},
                                                                                    {.batches_in_flight = 2});
    if (::torch::cuda::is_available()) {
      auto batch = loader.next();
      REQUIRE(batch);
      const auto* ids = batch->view().input_ids.get();
      const std::uint32_t rows = batch->view().rows, length = batch->view().row_length;
      const auto t = multipack::torch::to_tensors(std::move(*batch), trainer.get());
      CHECK(t.input_ids.is_cuda());
      CHECK(t.input_ids.data_ptr() == ids);
      CHECK((t.input_ids.sizes() == at::IntArrayRef({rows, length})));
      CHECK((t.input_ids.scalar_type() == at::kLong));
      CHECK(t.cu_seqlens.is_cuda());
#ifdef MULTIPACK_TEST_REAL_CUDA_RUNTIME  // the simulated runtime's device memory is host memory
      // libtorch reads what the loader built: every tensor, read back, is the host loader's
      // batch of the same step (the CPU tensors of batch_loader over the same plan).
      multipack::batch_loader<multipack::indexed_dataset, std::int64_t> host(data.dataset, data.plan, 0, {},
                                                                             {.threads = 1, .depth = 1});
      auto lease = host.next();
      REQUIRE(lease);
      const auto expected = multipack::torch::to_tensors(std::move(*lease));
      trainer.synchronize();  // the tensors' reads below are on libtorch's stream, not `trainer`
      CHECK(::torch::equal(t.input_ids.cpu(), expected.input_ids));
      CHECK(::torch::equal(t.labels.cpu(), expected.labels));
      CHECK(::torch::equal(t.position_ids.cpu(), expected.position_ids));
      CHECK(::torch::equal(t.sequence_ids.cpu(), expected.sequence_ids));
      CHECK(::torch::equal(t.cu_seqlens.cpu(), expected.cu_seqlens));
      CHECK(t.loss_tokens == expected.loss_tokens);
#endif
    } else {
      // Each failed conversion gives its batch back: more failures than device buffers, and
      // the loader still goes on.
      for (int i = 0; i < 4; ++i) {
        auto batch = loader.next();
        REQUIRE(batch);
        CHECK_THROWS_AS((void)multipack::torch::to_tensors(std::move(*batch), trainer.get()), c10::Error);
      }
    }
    CHECK(loader.next().has_value());
  }
}

TEST_SUITE("no_device") {
  TEST_CASE("on the host fallback: CPU tensors over the host batch, which they own") {
    const alpaca_loading data;
    std::optional<multipack::torch::batch_tensors> kept;
    {
      multipack::cuda::device_loader<multipack::indexed_dataset, std::int64_t> loader(
          data.dataset, data.plan, 0, {}, {.threads = 2, .depth = 2}, {.host_fallback = true});
      auto batch = loader.next();
      REQUIRE(batch);
      REQUIRE(!batch->on_device());
      const auto* ids = batch->view().input_ids.get();
      kept = multipack::torch::to_tensors(std::move(*batch), multipack::cuda::stream_ref::default_stream());
      CHECK(kept->input_ids.device().is_cpu());
      CHECK(kept->input_ids.data_ptr() == ids);
    }
    // The loader is gone; the tensors still read their batch: the first row starts a piece.
    CHECK(kept->step == 0);
    CHECK(kept->epoch == 0);
    CHECK(kept->position_ids[0][0].item<std::int64_t>() == 0);
    CHECK(kept->sequence_ids[0][0].item<std::int64_t>() == 1);
    CHECK(kept->labels[0][0].item<std::int64_t>() == -100);
  }

  TEST_CASE("device_epoch_loader's batches as tensors say their epoch and step") {
    const alpaca_loading data;
    const std::vector<std::uint32_t> lengths =
        multipack::read_length_list(test::source_dir() / "data/alpaca/lengths.txt");
    const multipack::epoch_planner planner =
        multipack::plan_each_epoch(lengths, {.capacity = 2048}, {.world_size = 1, .micro_batch = 16, .seed = 5});
    multipack::cuda::device_epoch_loader<multipack::indexed_dataset, std::int64_t> loader(
        data.dataset, planner, 0, {}, {.threads = 2, .depth = 2}, {.host_fallback = true}, {.first = 3, .count = 2});
    std::uint64_t batches = 0, second_epoch = 0;
    while (auto batch = loader.next()) {
      const std::uint64_t epoch = batch->epoch(), step = batch->step();
      const auto t = multipack::torch::to_tensors(std::move(*batch), multipack::cuda::stream_ref::default_stream());
      CHECK((epoch == 3 || epoch == 4));
      CHECK(t.epoch == epoch);
      CHECK(t.step == step);
      ++batches;
      second_epoch += epoch == 4;
    }
    CHECK(second_epoch > 0);
    CHECK(second_epoch < batches);
  }

  TEST_CASE("a stager's host-fallback batch: CPU tensors of a copy, since its host buffer is the caller's to reuse") {
    // The fallback batch is the caller's host batch and owns nothing: tensors over it read the
    // next batch collated there, then freed memory, once the loader's buffers went.
    const alpaca_loading data;
    multipack::cuda::batch_stager<std::int64_t> stager({.host_fallback = true});
    std::optional<multipack::torch::batch_tensors> kept;
    std::vector<std::int64_t> staged_ids;
    {
      multipack::batch_loader<multipack::indexed_dataset, std::int64_t> loader(data.dataset, data.plan, 0, {},
                                                                             {.threads = 1, .depth = 2});
      auto lease = loader.next();
      REQUIRE(lease);
      const auto& view = (*lease)->view;
      staged_ids.assign(view.input_ids.begin(), view.input_ids.begin() + view.rows * view.row_length);
      multipack::cuda::device_batch<std::int64_t> staged = stager.stage(view);
      kept = multipack::torch::to_tensors(std::move(staged), multipack::cuda::stream_ref::default_stream());
      CHECK(kept->input_ids.data_ptr() != static_cast<void*>(view.input_ids.data()));
      CHECK_FALSE(static_cast<bool>(staged));  // NOLINT(bugprone-use-after-move): taken, as on every other path
      CHECK_FALSE(staged.borrowed());           // NOLINT(bugprone-use-after-move)
    }  // the lease, the loader and its buffers are gone
    const auto ids = kept->input_ids.contiguous().view({-1});
    REQUIRE(ids.numel() == static_cast<std::int64_t>(staged_ids.size()));
    CHECK(std::equal(staged_ids.begin(), staged_ids.end(), ids.data_ptr<std::int64_t>()));
  }
}
