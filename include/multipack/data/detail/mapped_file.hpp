#pragma once
// A whole file mapped read-only into memory (POSIX). The datasets read tokens straight from
// the page cache: no copy, no read() per sample, and the kernel shares the pages between
// every process (every rank) that maps the same file.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <utility>

#include "multipack/core/error.hpp"

namespace multipack::detail {

class mapped_file {
 public:
  /// Maps nothing (size 0). Never throws.
  mapped_file() noexcept = default;

  /// Maps all of `path` read-only. An empty file is allowed (data() is then null).
  /// Throws io_error "<path>: <what failed>: <strerror>" when the file cannot be opened,
  /// is not a regular file, or cannot be mapped. Cost: open + fstat + mmap; no read.
  /// The file must not shrink while mapped: touching a page past its new end raises SIGBUS
  /// (true of every mmap reader). The descriptor stays open so that check_unchanged() can
  /// tell, between reads, that it did. Deleting or renaming the file is harmless: the
  /// mapping keeps the old contents.
  explicit mapped_file(std::filesystem::path path) : path_(std::move(path)) {
    int fd;
    do {
      // O_NONBLOCK: open() of a named pipe would wait for a writer; this way it returns and
      // fstat refuses it. Reads of a regular file (and its mapping) ignore the flag.
      fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) fail("cannot open", errno);

    struct ::stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      fail("cannot stat", e);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw io_error(path_.string() + ": not a regular file");
    }
    if (st.st_size < 0 ||
        static_cast<std::uint64_t>(st.st_size) > std::numeric_limits<std::size_t>::max()) {
      ::close(fd);
      throw io_error(path_.string() + ": file too large to map in this address space");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        size_ = 0;
        fail("cannot mmap", e);
      }
      data_ = static_cast<const std::byte*>(p);
    }
    fd_ = fd;  // kept for check_unchanged(); the mapping alone keeps the contents alive
    modified_ = st.st_mtim;
  }

  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  /// Takes the mapping; `other` is left empty. Never throws.
  mapped_file(mapped_file&& other) noexcept
      : path_(std::move(other.path_)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        fd_(std::exchange(other.fd_, -1)),
        modified_(other.modified_) {}

  /// Unmaps ours, takes `other`'s. Never throws.
  mapped_file& operator=(mapped_file&& other) noexcept {
    if (this != &other) {
      unmap();
      path_ = std::move(other.path_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      fd_ = std::exchange(other.fd_, -1);
      modified_ = other.modified_;
    }
    return *this;
  }

  ~mapped_file() { unmap(); }

  /// First byte of the file; null when the file is empty. O(1), thread-safe.
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  /// Bytes in the file when it was mapped. O(1), thread-safe.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The whole file. O(1), thread-safe.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  /// The path it was opened with. O(1), thread-safe.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Throws io_error when the file opened (the same inode, wherever its name now points) has
  /// changed size or been written since it was mapped: "<path>: changed since it was opened
  /// (N bytes then, M now): rewritten while in use?". A shrunk file would raise SIGBUS at the
  /// first read past its new end; a rewritten one would give other tokens than the ones
  /// validated. One fstat, thread-safe. Nothing to check for an empty mapping.
  void check_unchanged() const {
    if (fd_ < 0) return;
    struct ::stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat", errno);
    const bool same_time = st.st_mtim.tv_sec == modified_.tv_sec && st.st_mtim.tv_nsec == modified_.tv_nsec;
    if (static_cast<std::uint64_t>(st.st_size) != size_ || !same_time)
      throw io_error(path_.string() + ": changed since it was opened (" + std::to_string(size_) + " bytes then, " +
                     std::to_string(st.st_size) + " now" + (same_time ? "" : ", written since") +
                     "): rewritten while in use? Reopen the dataset");
  }

 private:
  [[noreturn]] void fail(const char* what, int e) const {
    throw io_error(path_.string() + ": " + what + ": " + std::strerror(e));
  }

  void unmap() noexcept {
    // munmap can fail only for an invalid range, which we never pass.
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
    data_ = nullptr;
    size_ = 0;
    fd_ = -1;
  }

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
  struct ::timespec modified_ {};
};

}  // namespace multipack::detail
