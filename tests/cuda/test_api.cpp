// The `cuda/` layer's API, against the simulated runtime (2 devices): what a trainer cannot
// easily get wrong. A failed call throws and leaves no pending error behind; a failure in a
// destructor is counted (and asserted in debug builds), not dropped; resources make their own
// device current wherever they call CUDA, so a thread with another device current can use and
// free them. The misuses that must not compile are in tests/compile_errors/cuda/.

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_calls.hpp"
#include "multipack/cuda/batch_stager.hpp"
#include "multipack/cuda/device_loader.hpp"
#include "multipack/cuda/resources.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/schedule/plan.hpp"
#include "support/expect.hpp"
#include "support/paths.hpp"

using namespace multipack;

namespace {

std::shared_ptr<const indexed_dataset> alpaca_dataset() {
  return std::make_shared<const indexed_dataset>(test::alpaca_prefix());
}
std::shared_ptr<const epoch_plan> alpaca_plan() {
  return std::make_shared<const epoch_plan>(plan_epoch(read_length_list(test::source_dir() / "data/alpaca/lengths.txt"),
                                                       {.capacity = 2048}, {.world_size = 1, .micro_batch = 4, .seed = 1}));
}

void CUDART_CB sleep_a_while(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

/// Device bytes (host memory in the simulated runtime) and whether a later look found them
/// changed: a host function queued on the consumer's stream after its "training step".
struct device_bytes_probe {
  const void* at;
  std::string expected;
  bool overwritten = false;
  static void CUDART_CB look(void* self) {
    auto* p = static_cast<device_bytes_probe*>(self);
    p->overwritten = std::memcmp(p->at, p->expected.data(), p->expected.size()) != 0;
  }
};

}  // namespace

TEST_SUITE("api") {
  TEST_CASE("a failed call throws cuda_error and leaves no pending error for the next call") {
    REQUIRE(cudaGetLastError() == cudaSuccess);
    // The control: the raw call leaves the error pending, as the real runtime does.
    void* p = nullptr;
    CHECK(cudaMalloc(&p, std::size_t{1} << 41) == cudaErrorMemoryAllocation);
    CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
    // Through multipack: thrown, named, and cleared.
    try {
      cuda::device_memory too_big(std::size_t{1} << 41);
      FAIL("a terabyte was allocated");
    } catch (const cuda_error& e) {
      CHECK(e.code() == cudaErrorMemoryAllocation);
      CHECK(std::string(e.what()).find("cudaMalloc") != std::string::npos);
    }
    CHECK(cudaPeekAtLastError() == cudaSuccess);
  }

  TEST_CASE("a CUDA call failing in a destructor is counted, not dropped") {
#ifdef NDEBUG
    for (int kind = 0; kind < 3; ++kind) {
      CAPTURE(kind);
      const std::uint64_t before = cuda::destructor_errors();
      {
        std::optional<cuda::stream> s;
        std::optional<cuda::event> e;
        std::optional<cuda::device_memory> m;
        if (kind == 0) s.emplace();
        if (kind == 1) e.emplace();
        if (kind == 2) m.emplace(1024);
        test::fail_next_release();
      }
      CHECK(cuda::destructor_errors() == before + 1);
      CHECK(cudaPeekAtLastError() == cudaSuccess);
    }
#else
    MESSAGE("not run in a debug build: a destructor's failure is asserted there");
#endif
  }

  TEST_CASE("resources make their own device current: used and freed from a thread on another device") {
    REQUIRE(cuda::device_count() == 2);
    const std::int64_t violations = test::cuda_violations();
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    std::optional<cuda::stream> s(std::in_place);
    std::optional<cuda::event> e(std::in_place);
    std::optional<cuda::device_memory> m(std::in_place, 4096);
    CHECK(s->device() == 1);
    CHECK(m->device() == 1);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    e->record(*s);
    s->synchronize();
    e->synchronize();
    m.reset();
    e.reset();
    s.reset();
    CHECK(test::cuda_violations() == violations);
    int current = -1;
    REQUIRE(cudaGetDevice(&current) == cudaSuccess);
    CHECK(current == 0);  // and the thread's own device is current again

    // The control: the raw runtime, used across devices, is caught by the simulation.
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    cudaStream_t raw = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    CHECK(cudaStreamDestroy(raw) == cudaSuccess);
    CHECK(test::cuda_violations() == violations + 1);
  }

  TEST_CASE("a device loader made on device 1 is used and destroyed from device 0") {
    const auto dataset = std::make_shared<const indexed_dataset>(test::alpaca_prefix());
    const auto plan = std::make_shared<const epoch_plan>(
        plan_epoch(read_length_list(test::source_dir() / "data/alpaca/lengths.txt"), {.capacity = 2048},
                   {.world_size = 1, .micro_batch = 4, .seed = 1}));
    const std::int64_t violations = test::cuda_violations();
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    std::optional<cuda::stream> trainer(std::in_place);
    std::optional<cuda::device_loader<indexed_dataset>> loader(std::in_place, dataset, plan, 0, batch_options{},
                                                                prefetch_options{.threads = 2, .depth = 2},
                                                                cuda::device_options{.batches_in_flight = 2});
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    for (int i = 0; i < 4; ++i) {
      auto batch = loader->next();
      REQUIRE(batch);
      batch->wait(*trainer);
    }
    loader.reset();
    trainer.reset();
    CHECK(test::cuda_violations() == violations);
  }

  TEST_CASE("a CUDA call failing once a step is taken: its pinned buffer is not rewritten under the copy, "
            "and the loader fails for good") {
    const std::int64_t violations = test::cuda_violations();
    cuda::stream trainer;
    cuda::device_loader<indexed_dataset> loader(alpaca_dataset(), alpaca_plan(), 0, {}, {.threads = 2, .depth = 2},
                                                {.batches_in_flight = 2});
    for (int i = 0; i < 2; ++i) {
      auto batch = loader.next();
      batch->wait(trainer);
      batch->release(trainer);
    }
    // A busy copy stream, so that the next batch's copies are still queued when the record
    // after them fails and the workers are free to refill the pinned buffer.
    REQUIRE(cudaLaunchHostFunc(loader.copy_stream(), &sleep_a_while, nullptr) == cudaSuccess);
    test::fail_call(test::cuda_call::event_record, 1);
    const std::string first = test::message_of<cuda_error>([&] { (void)loader.next(); });
    CHECK(test::contains(first, "cudaEventRecord"));
    CHECK(cudaPeekAtLastError() == cudaSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(cudaStreamSynchronize(loader.copy_stream()) == cudaSuccess);
    CHECK(test::cuda_violations() == violations);  // no queued copy read a rewritten buffer
    // The step was taken: a later call does not go on without it.
    CHECK(test::message_of<cuda_error>([&] { (void)loader.next(); }) == first);
  }

  TEST_CASE("a release whose event cannot be recorded: the buffer is not overwritten under the consumer's work") {
    cuda::stream trainer;
    cuda::device_loader<indexed_dataset> loader(alpaca_dataset(), alpaca_plan(), 0, {}, {.threads = 2, .depth = 2},
                                                {.batches_in_flight = 1});
    std::optional<cuda::device_batch<>> batch = loader.next();
    REQUIRE(cudaEventSynchronize(batch->ready_event()) == cudaSuccess);
    const auto ids = batch->view().input_ids;
    device_bytes_probe probe{ids.get(), std::string(reinterpret_cast<const char*>(ids.get()), ids.size_bytes())};
    batch->wait(trainer);
    REQUIRE(cudaLaunchHostFunc(trainer.get(), &sleep_a_while, nullptr) == cudaSuccess);  // the training step
    REQUIRE(cudaLaunchHostFunc(trainer.get(), &device_bytes_probe::look, &probe) == cudaSuccess);
    test::fail_call(test::cuda_call::event_record, 1);
    CHECK(test::contains(test::message_of<cuda_error>([&] { batch->release(trainer); }),
                         "cudaEventRecord(release of a device batch)"));
    CHECK(cudaPeekAtLastError() == cudaSuccess);
    CHECK(test::contains(test::message_of<cuda_error>([&] { (void)loader.next(); }), "release of a device batch"));
    auto next = loader.next();  // the trainer goes on: the slot is reused
    REQUIRE(next);
    next->wait(trainer);
    trainer.synchronize();
    CHECK_FALSE(probe.overwritten);
  }

  TEST_CASE("a release failing in a batch's destructor is counted, and leaves no pending error") {
#ifdef NDEBUG
    cuda::stream trainer;
    cuda::device_loader<indexed_dataset> loader(alpaca_dataset(), alpaca_plan(), 0, {}, {.threads = 2, .depth = 2},
                                                {.batches_in_flight = 2});
    std::optional<cuda::device_batch<>> batch = loader.next();
    batch->wait(trainer);
    const std::uint64_t before = cuda::destructor_errors();
    test::fail_call(test::cuda_call::event_record, 1);
    batch.reset();
    CHECK(cuda::destructor_errors() == before + 1);
    CHECK(cudaPeekAtLastError() == cudaSuccess);
#else
    MESSAGE("not run in a debug build: a destructor's failure is asserted there");
#endif
  }

  TEST_CASE("batch_stager: its first batch's allocations on its own device, and tried again after a failure") {
    const auto dataset = alpaca_dataset();
    batch_loader<indexed_dataset> host(dataset, alpaca_plan(), 0, {}, {.threads = 1, .depth = 2});
    auto lease = host.next();
    REQUIRE(lease);
    const batch_view<>& view = (*lease)->view;
    const std::int64_t violations = test::cuda_violations();
    const auto before = test::cuda_calls();
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    {
      cuda::batch_stager<> stager({.batches_in_flight = 2});
      REQUIRE(cudaSetDevice(0) == cudaSuccess);  // the trainer's thread on another device
      for (const auto call : {test::cuda_call::malloc, test::cuda_call::host_alloc, test::cuda_call::event_record}) {
        CAPTURE(static_cast<int>(call));
        test::fail_call(call, 2);  // the second of the first batch's allocations (or its copy's record)
        CHECK_THROWS_AS((void)stager.stage(view), cuda_error);
        test::fail_call(call, 0);  // no failure left over for a later test
        CHECK(cudaPeekAtLastError() == cudaSuccess);
      }
      auto staged = stager.stage(view);  // the stager as if nothing had failed
      CHECK(staged.step() == 0);
      staged.wait(cuda::stream_ref::default_stream());
    }
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    const auto after = test::cuda_calls();
    CHECK(after.host_frees - before.host_frees == after.host_allocations - before.host_allocations);
    CHECK(after.device_frees - before.device_frees == after.device_allocations - before.device_allocations);
    CHECK(test::cuda_violations() == violations);
  }
}
