#pragma once
// This process's threads and their names, from /proc/self/task (Linux): for the tests that
// check which threads a stage starts, that they carry multipack's names, and that none is
// left once the stage is gone.

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace multipack::test {

/// Threads of this process. A thread just joined may be listed until the kernel reaps it.
inline std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

/// Threads of this process named `name` (pthread_setname_np; a thread not named has its
/// program's name).
inline std::size_t threads_named(std::string_view name) {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(entry.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;  // a thread gone since the listing has no line
  }
  return n;
}

/// The calling thread's kernel id (gettid). Tells threads apart over a test's run, where
/// std::thread::id does not: glibc gives a new thread the id of one joined just before.
inline long kernel_thread_id() { return ::syscall(SYS_gettid); }

/// threads_named(name), once it is `expected` or after 10 s: a thread names itself when it
/// starts, and a joined one is listed until the kernel reaps it. Bounds a wait; times nothing.
inline std::size_t threads_named_once(std::string_view name, std::size_t expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::size_t n = threads_named(name);
  while (n != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = threads_named(name);
  }
  return n;
}

/// Calls f when the scope is left, by its end or by an exception (a failed REQUIRE): for tests
/// whose threads must be let go and joined on every way out, so that a failure fails and
/// never hangs (or terminates on a joinable std::thread).
template <class F>
class on_exit {
 public:
  explicit on_exit(F f) : f_(std::move(f)) {}
  on_exit(const on_exit&) = delete;
  on_exit& operator=(const on_exit&) = delete;
  ~on_exit() { f_(); }

 private:
  F f_;
};

}  // namespace multipack::test
