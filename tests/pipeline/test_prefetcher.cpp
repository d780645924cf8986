// The prefetcher: batches in step order whatever the threads; never more than depth batches
// ahead of the consumer; a worker's exception at its own step, after every earlier batch;
// early stops that return, 1,000 times; no allocation per batch once warm; out of memory in
// the queues, a clear failure rather than a hang. Run under
// ThreadSanitizer too (MULTIPACK_SANITIZE=thread scripts/test).

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
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
#include "support/threads.hpp"

using namespace multipack;

// Every allocation of the process, counted, for the steady-state check (the prefetcher's
// queues allocate through operator new too). GCC takes malloc inside a replaced operator new
// for a mismatch with the free inside operator delete; they match.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<std::uint64_t> allocations{0};
// Set to make every nothrow allocation fail: the queues allocate through it (blocks and the
// place of each producing thread), so this is how they run out of memory.
std::atomic<bool> fail_nothrow_allocations{false};
// Counts down at each nothrow allocation; the one that finds it at 0 fails.
std::atomic<std::int64_t> nothrow_allocations_before_failure{-1};
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
  if (fail_nothrow_allocations.load(std::memory_order_relaxed)) return nullptr;
  if (nothrow_allocations_before_failure.fetch_sub(1, std::memory_order_relaxed) == 0) return nullptr;
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
    }
  }
}

TEST_CASE("the workers are named multipack-batch while the prefetcher lives, and all are joined") {
  {
    prefetcher<buffer> p({3, 4}, 0, 1000, make_buffer(), [](std::uint64_t step, buffer& b) { fill(step, b); });
    CHECK(test::threads_named_once(detail::batch_thread_name, 3) == 3);
    const auto batch = p.next();
    REQUIRE(batch);
    CHECK(batch->step() == 0);
  }
  CHECK(test::threads_named_once(detail::batch_thread_name, 0) == 0);
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
  std::thread([&kept] { kept.clear(); }).join();  // the buffers freed there (ASan: no leak, no double free)
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

TEST_CASE("out of memory: the constructor throws; a buffer that cannot go back aborts instead of hanging") {
  // Whichever of the constructor's allocations fails, it throws std::bad_alloc or works.
  int thrown = 0;
  int worked = 0;
  for (std::int64_t failing = 0; failing < 40; ++failing) {
    CAPTURE(failing);
    nothrow_allocations_before_failure = failing;
    try {
      prefetcher<buffer> p({2, 2}, 0, 10, make_buffer(), fill);
      nothrow_allocations_before_failure = -1;
      for (std::uint64_t step = 0; step < 10; ++step) {
        auto batch = p.next();
        REQUIRE(batch);
        CHECK((*batch)->step == step);
      }
      CHECK(!p.next());
      ++worked;
    } catch (const std::bad_alloc&) {
      ++thrown;
    }
    nothrow_allocations_before_failure = -1;
  }
  CHECK(thrown > 0);
  CHECK(worked > 0);

  // A lease released on a thread of its own needs that thread's place in the free queue. If it
  // cannot have one, the buffer is lost: with depth 1, next() would then wait forever. In a
  // child process (forked while this one runs no other thread), which must abort at once with
  // a message.
  int err[2];
  REQUIRE(pipe(err) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(err[1], STDERR_FILENO);
    std::signal(SIGABRT, SIG_DFL);  // not doctest's handler, which would report a crash
    prefetcher<buffer> p({1, 1}, 0, 10, make_buffer(), fill);
    auto lease = p.next();
    fail_nothrow_allocations = true;
    std::thread([&lease] { lease.reset(); }).join();
    fail_nothrow_allocations = false;
    (void)p.next();
    _exit(0);
  }
  close(err[1]);
  int status = 0;
  pid_t done = 0;
  for (int waited_ms = 0; (done = waitpid(child, &status, WNOHANG)) == 0 && waited_ms < 30'000; waited_ms += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (done == 0) {  // hung: the failure this test is for
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  CHECK(done == child);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGABRT);
  std::string message;
  char chunk[256];
  for (ssize_t n; (n = read(err[0], chunk, sizeof chunk)) > 0;) message.append(chunk, static_cast<std::size_t>(n));
  close(err[0]);
  CHECK(test::contains(message, "out of memory in a prefetch queue"));
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
