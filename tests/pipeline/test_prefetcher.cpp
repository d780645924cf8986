// The prefetcher: batches in step order whatever the threads; never more than depth batches
// ahead of the consumer; a worker's exception at its own step, after every earlier batch;
// early stops that return, 1,000 times; no allocation per batch once warm. Run under
// ThreadSanitizer too (MULTIPACK_SANITIZE=thread scripts/test).

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "multipack/core/random.hpp"
#include "multipack/pipeline/prefetcher.hpp"
#include "support/expect.hpp"

using namespace multipack;

// Every allocation of the process, counted, for the steady-state check (the prefetcher's
// queues allocate through operator new too). GCC takes malloc inside a replaced operator new
// for a mismatch with the free inside operator delete; they match.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<std::uint64_t> allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}

namespace {

/// A batch buffer: the step it was built for and a payload derived from it.
struct buffer {
  std::uint64_t step = UINT64_MAX;
  std::vector<std::uint64_t> payload = std::vector<std::uint64_t>(64);
};

/// Work of a step-dependent length, so that threads finish out of order.
void spin(std::uint64_t step) {
  volatile std::uint64_t sink = 0;
  const std::uint64_t rounds = detail::mix64(step) % 20000;
  for (std::uint64_t i = 0; i < rounds; ++i) sink = sink + i;
}

void fill(std::uint64_t step, buffer& b) {
  spin(step);
  b.step = step;
  for (std::size_t i = 0; i < b.payload.size(); ++i) b.payload[i] = step * 1000 + i;
}

std::function<buffer()> make_buffer() {
  return [] { return buffer{}; };
}

}  // namespace

TEST_CASE("open-ended: steps until the build says the sequence ended, each once, in order") {
  for (const unsigned threads : {1U, 2U, 4U}) {
    for (const std::size_t depth : {std::size_t{1}, std::size_t{3}}) {
      for (const std::uint64_t end : {std::uint64_t{3}, std::uint64_t{3 + 57}}) {
        CAPTURE(threads);
        CAPTURE(depth);
        CAPTURE(end);
        std::atomic<std::uint64_t> asked_past_end{0};
        prefetcher<buffer> p({threads, depth}, 3, make_buffer(), [&](std::uint64_t step, buffer& b) {
          if (step >= end) {
            asked_past_end.fetch_add(1);
            return false;
          }
          fill(step, b);
          return true;
        });
        std::uint64_t expected = 3;
        while (auto batch = p.next()) {
          REQUIRE((*batch)->step == expected);
          ++expected;
        }
        CHECK(expected == end);
        CHECK_FALSE(p.next().has_value());
        CHECK(p.statistics().batches == end - 3);
        // Once one worker found the end, the others stop claiming steps.
        CHECK(asked_past_end.load() <= threads);
      }
    }
  }
}

TEST_CASE("batches arrive in step order, each once, and never more than depth ahead") {
  for (const unsigned threads : {1U, 2U, 4U, 8U}) {
    for (const std::size_t depth : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{8}}) {
      CAPTURE(threads);
      CAPTURE(depth);
      std::atomic<std::uint64_t> released{0};
      std::atomic<bool> too_far{false};
      const std::uint64_t first = 5;
      const std::uint64_t end = 205;
      prefetcher<buffer> p({threads, depth}, first, end, make_buffer(), [&](std::uint64_t step, buffer& b) {
        // Building step s needs a free buffer: the batches from the oldest unreleased one to
        // s each hold one, so s - (first + released) < depth.
        if (step - first >= released.load() + depth) too_far = true;
        fill(step, b);
      });
      std::uint64_t expected = first;
      while (auto batch = p.next()) {
        REQUIRE(batch->step() == expected);
        REQUIRE((*batch)->step == expected);
        REQUIRE((*batch)->payload[63] == expected * 1000 + 63);
        ++expected;
        released.fetch_add(1);
        batch->release();
      }
      CHECK(expected == end);
      CHECK(!p.next().has_value());
      CHECK(!too_far);
      const prefetch_statistics s = p.statistics();
      CHECK(s.batches == end - first);
      CHECK(s.max_ready <= depth);
      CHECK(s.producer_busy_seconds > 0);
      CHECK(s.consumer_wait_seconds >= 0);
    }
  }
}

TEST_CASE("the consumer may hold several batches, up to depth - 1, and is told when it holds all") {
  prefetcher<buffer> p({2, 3}, 0, 10, make_buffer(), fill);
  std::optional<prefetcher<buffer>::lease> a = p.next();
  std::optional<prefetcher<buffer>::lease> b = p.next();
  std::optional<prefetcher<buffer>::lease> c = p.next();
  REQUIRE((a && b && c));
  CHECK((*a)->step == 0);
  CHECK((*b)->step == 1);
  CHECK((*c)->step == 2);
  CHECK(test::contains(test::message_of<option_error>([&] { (void)p.next(); }), "holds all 3 buffers"));
  a.reset();
  auto d = p.next();
  REQUIRE(d);
  CHECK((*d)->step == 3);
}

TEST_CASE("a batch outlives its prefetcher, and is released on another thread, intact") {
  // A trainer's tensors may keep a batch after the loader is gone (ASan and TSan watch this).
  std::vector<prefetcher<buffer>::lease> kept;
  {
    prefetcher<buffer> p({2, 4}, 0, 10, make_buffer(), fill);
    for (int i = 0; i < 3; ++i) {
      auto lease = p.next();
      REQUIRE(lease);
      kept.push_back(std::move(*lease));
    }
  }
  for (std::uint64_t step = 0; step < kept.size(); ++step) {
    CHECK(kept[step]->step == step);
    CHECK(kept[step]->payload[63] == step * 1000 + 63);
  }
  std::thread([&kept] { kept.clear(); }).join();
  CHECK(kept.empty());
}

TEST_CASE("a worker's exception reaches the consumer at its step, after every earlier batch") {
  for (const unsigned threads : {1U, 3U, 8U}) {
    for (const std::uint64_t failing : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{17}, std::uint64_t{99}}) {
      CAPTURE(threads);
      CAPTURE(failing);
      prefetcher<buffer> p({threads, 4}, 0, 100, make_buffer(), [&](std::uint64_t step, buffer& b) {
        if (step == failing) throw std::runtime_error("cannot read sample " + std::to_string(step));
        fill(step, b);
      });
      std::uint64_t expected = 0;
      std::string message;
      try {
        while (auto batch = p.next()) {
          REQUIRE((*batch)->step == expected);
          ++expected;
        }
      } catch (const std::runtime_error& e) {
        message = e.what();
      }
      CHECK(expected == failing);
      CHECK(message == "cannot read sample " + std::to_string(failing));
      // Again at every later call.
      CHECK(test::message_of<std::runtime_error>([&] { (void)p.next(); }) == message);
    }
  }
}

TEST_CASE("stopping early returns, whatever the workers are doing: 1,000 create/stop cycles") {
  splitmix64 rng(2024);
  for (int cycle = 0; cycle < 1000; ++cycle) {
    const auto threads = static_cast<unsigned>(1 + rng.below(6));
    const std::size_t depth = 1 + rng.below(5);
    const std::uint64_t stop_after = rng.below(12);
    const bool fail = rng.below(4) == 0;
    const std::uint64_t failing = rng.below(10);
    prefetcher<buffer> p({threads, depth}, 0, 1'000'000, make_buffer(), [&](std::uint64_t step, buffer& b) {
      if (fail && step == failing) throw std::runtime_error("failed");
      b.step = step;
    });
    try {
      for (std::uint64_t taken = 0; taken < stop_after; ++taken) {
        auto batch = p.next();
        REQUIRE(batch);
        REQUIRE((*batch)->step == taken);
      }
    } catch (const std::runtime_error&) {
      CHECK(fail);
    }
    // The destructor runs here with the queue full and workers blocked on free buffers.
  }
}

TEST_CASE("no allocation per batch once every buffer has been used") {
  for (const unsigned threads : {1U, 2U, 4U}) {
    CAPTURE(threads);
    const std::size_t depth = 4;
    prefetcher<buffer> p({threads, depth}, 0, 10'000, make_buffer(), fill);
    for (int warm = 0; warm < 200; ++warm) REQUIRE(p.next());
    const std::uint64_t before = allocations.load();
    for (int i = 0; i < 2000; ++i) {
      auto batch = p.next();
      REQUIRE(batch);
    }
    CHECK(allocations.load() - before == 0);
  }
}

TEST_CASE("an empty range and bad options") {
  prefetcher<buffer> empty({2, 2}, 7, 7, make_buffer(), fill);
  CHECK(!empty.next().has_value());
  auto make = [](prefetch_options o, std::uint64_t first, std::uint64_t end) {
    return test::message_of<option_error>([&] { prefetcher<buffer> p(o, first, end, make_buffer(), fill); });
  };
  CHECK(test::contains(make({0, 2}, 0, 1), "threads"));
  CHECK(test::contains(make({1, 0}, 0, 1), "depth"));
  // A negative depth through an int: an option_error, before any queue is sized by it.
  const int negative = -1;
  CHECK(test::contains(make({1, static_cast<std::size_t>(negative)}, 0, 1), "depth 18446744073709551615"));
  CHECK(test::contains(make({1, 1}, 5, 4), "first step 5"));
  CHECK(test::contains(test::message_of<option_error>([] { prefetcher<buffer> p({1, 1}, 0, 1, make_buffer(), {}); }),
                       "no build function"));
}
