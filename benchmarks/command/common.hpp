#pragma once
// What every subcommand of multipack-bench shares: timing, memory readings, progress on
// standard error, text files written in blocks, the dump form of pieces.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <iterator>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"

namespace multipack::bench {

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point start) {
  return std::chrono::duration<double>(clock::now() - start).count();
}

/// The least of `runs` (at least one) calls of timed(), each returning the seconds of one run
/// it timed itself (leaving out its set-up): a figure or a floor as the best of R.
template <class Timed>
double best_seconds(unsigned runs, Timed timed) {
  double best = timed();
  for (unsigned run = 1; run < runs; ++run) best = std::min(best, timed());
  return best;
}

/// Keeps a computed value alive, so that the compiler cannot skip the work of a floor.
template <class T>
inline void do_not_optimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

/// A field of /proc/self/status in bytes (VmRSS, VmHWM), or 0 where there is none.
inline std::uint64_t proc_status_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size())) * 1024;
  return 0;
}
inline std::uint64_t peak_rss_bytes() { return proc_status_bytes("VmHWM"); }
inline std::uint64_t rss_bytes() { return proc_status_bytes("VmRSS"); }

/// Resets the peak resident memory to the current one (Linux clear_refs 5), so that a later
/// peak_rss_bytes() measures one phase. Returns false where the kernel does not allow it.
inline bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

/// Prints "<what>... N.N s" on standard error every half second while alive, when standard
/// error is a terminal, starting once a phase has run for a second; short phases print nothing.
class progress {
 public:
  /// `status`, when given, is called from the progress thread at each line (it must be
  /// thread-safe: read atomics) and printed after `what`.
  explicit progress(std::string what, std::function<std::string()> status = {})
      : what_(std::move(what)), status_(std::move(status)), thread_([this] { run(); }) {}
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;
  ~progress() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    const auto start = clock::now();
    bool printed = false;
    // Only for a person watching: a log or a test's captured stderr gets no progress lines.
    if (::isatty(STDERR_FILENO) == 0) return;
    if (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return done_; })) {
      do {
        fmt::print(stderr, "\r{}... {}{:.1f} s ", what_, status_ ? status_() + ", " : std::string(),
                   seconds_since(start));
        std::fflush(stderr);
        printed = true;
      } while (!wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return done_; }));
    }
    if (printed) fmt::print(stderr, "\r{} done in {:.1f} s\n", what_, seconds_since(start));
  }

  std::string what_;
  std::function<std::string()> status_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

/// A text file written in large blocks; every failure (open, write, flush) is an io_error
/// naming the file.
class text_file {
 public:
  explicit text_file(std::string path) : path_(std::move(path)), file_(std::fopen(path_.c_str(), "wb"), &std::fclose) {
    if (!file_) throw io_error(fmt::format("{}: cannot open for writing: {}", path_, std::strerror(errno)));
  }

  /// The text to append to; written out once it holds a megabyte, and at close().
  fmt::memory_buffer& buffer() noexcept { return buffer_; }

  /// Writes the buffer out once it is large.
  void maybe_flush() {
    if (buffer_.size() >= (std::size_t{1} << 20)) flush();
  }

  /// Writes everything out and closes the file.
  void close() {
    flush();
    if (std::fclose(file_.release()) != 0) throw io_error(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
  }

 private:
  void flush() {
    if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_.get()) != buffer_.size())
      throw io_error(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
    buffer_.clear();
  }

  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  fmt::memory_buffer buffer_;
};

/// Throws option_error naming `flag` when `path` cannot name what a run writes: it ends in '/'
/// (no file name: convert --output DIR/ wrote the hidden DIR/.bin and DIR/.idx), the directory
/// it would be written in does not exist, or it is a directory itself (unless `is_prefix`: a
/// prefix names PATH.bin, PATH.idx, ... beside it). Checked before the work, since the files
/// are written at the end of a run that may take minutes. O(1).
inline void check_output_path(const std::string& path, const char* flag, bool is_prefix = false) {
  const std::filesystem::path p(path);
  if (!p.has_filename() || p.filename() == "." || p.filename() == "..")
    throw option_error(fmt::format("{} {}: names a directory, not a file{}", flag, path,
                                   is_prefix ? " prefix (PREFIX.bin, PREFIX.idx, ...)" : ""));
  const std::filesystem::path parent = p.parent_path();
  std::error_code error;
  if (!parent.empty() && !std::filesystem::is_directory(parent, error))
    throw option_error(fmt::format("{} {}: the directory {} does not exist", flag, path, parent.string()));
  if (!is_prefix && std::filesystem::is_directory(p, error))
    throw option_error(fmt::format("{} {}: a directory; give a file name", flag, path));
}

/// Appends pieces as the dump files write them: separated by spaces, `i` for all of sample i,
/// `i:b:e` for tokens [b, e) of it.
inline void append_pieces(fmt::memory_buffer& out, std::span<const piece> pieces, const std::vector<std::uint32_t>& lengths) {
  bool first = true;
  for (const piece& p : pieces) {
    if (!first) out.push_back(' ');
    first = false;
    if (p.begin == 0 && p.end == lengths[p.sample])
      fmt::format_to(std::back_inserter(out), "{}", p.sample);
    else
      fmt::format_to(std::back_inserter(out), "{}:{}:{}", p.sample, p.begin, p.end);
  }
}

/// Throws option_error unless `start_step` is a step of an epoch of `steps` steps, or 0 of an
/// epoch with none (a resume after its last row: --consumed-rows of every row).
inline void check_start_step(std::uint64_t start_step, std::uint64_t steps) {
  if (start_step >= steps && (start_step != 0 || steps != 0))
    throw option_error(fmt::format("--start-step {} is past the end of the epoch ({} steps, numbered from 0)",
                                   start_step, steps));
}

}  // namespace multipack::bench
