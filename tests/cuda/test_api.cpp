// The `cuda/` layer's API, against the simulated runtime (2 devices): what a trainer cannot
// easily get wrong. A failed call throws and leaves no pending error behind; a failure in a
// destructor is counted (and asserted in debug builds), not dropped; resources make their own
// device current wherever they call CUDA, so a thread with another device current can use and
// free them. The misuses that must not compile are in tests/compile_errors/cuda/.

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "cuda_calls.hpp"
#include "multipack/cuda/device_loader.hpp"
#include "multipack/cuda/resources.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/schedule/plan.hpp"
#include "support/paths.hpp"

using namespace multipack;

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
}
