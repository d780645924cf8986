#pragma once
// Writes Megatron-LM's indexed dataset (PREFIX.bin + PREFIX.idx), byte for byte what
// megatron/core/datasets/indexed_dataset.py's IndexedDatasetBuilder + _IndexWriter write:
// tokens back to back in the dtype; pointers = running byte offsets from 0; a document index
// that starts with 0 and gets the current sample count at each end_document().
//
// Both files are written under temporary names (PREFIX.bin.tmp, PREFIX.idx.tmp) and renamed
// by finish(), the old PREFIX.idx moved aside first (and back, if the .bin cannot be put in
// place): a reader never sees a .bin and .idx that disagree, and a writer that dies or is
// destroyed unfinished leaves no new .idx behind.
// finish() is prepare() (everything that can fail but the renames) then commit() (the
// renames): a caller with several writers whose outputs belong together (a dataset and its
// loss mask) prepares them all before it commits any.
// The .idx arrays are spooled to two more temporary files (PREFIX.idx.sizes.tmp,
// PREFIX.idx.documents.tmp) as samples come, so memory does not grow with the dataset.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <ranges>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"  // path_like
#include "multipack/core/error.hpp"
#include "multipack/data/dtype.hpp"
#include "multipack/data/indexed_dataset.hpp"  // the format's constants

namespace multipack {

namespace detail {

// A write-only file with a buffer; write errors become io_error naming the path.
class buffered_file_writer {
 public:
  buffered_file_writer() = default;
  explicit buffered_file_writer(std::filesystem::path path) : path_(std::move(path)) {
    do {
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) fail("cannot create", errno);
    buffer_.reserve(buffer_bytes);
  }
  buffered_file_writer(const buffered_file_writer&) = delete;
  buffered_file_writer& operator=(const buffered_file_writer&) = delete;
  buffered_file_writer(buffered_file_writer&& o) noexcept
      : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), buffer_(std::move(o.buffer_)) {}
  buffered_file_writer& operator=(buffered_file_writer&& o) noexcept {
    if (this != &o) {
      abandon();
      path_ = std::move(o.path_);
      fd_ = std::exchange(o.fd_, -1);
      buffer_ = std::move(o.buffer_);
    }
    return *this;
  }
  ~buffered_file_writer() { abandon(); }

  void write(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    if (buffer_.size() + n > buffer_bytes) flush();
    if (n >= buffer_bytes) return write_all(p, n);
    buffer_.insert(buffer_.end(), p, p + n);
  }

  template <class T>
  void write_value(const T& v) { write(&v, sizeof v); }

  /// Flushes and closes; throws io_error on any failure (a failed close can mean lost data
  /// on NFS, so it is reported too).
  void close() {
    flush();
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("cannot close", errno);
  }

  /// Closes without flushing and without reporting errors (for destructors).
  void abandon() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    buffer_.clear();
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Writes n bytes at byte `offset` of the file (after flushing), leaving the write position
  /// at the end: for a header field known only at the end. Throws io_error.
  void write_at(std::uint64_t offset, const void* data, std::size_t n) {
    flush();
    const auto* p = static_cast<const std::byte*>(data);
    while (n > 0) {
      const ::ssize_t w = ::pwrite(fd_, p, n, static_cast<::off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("write failed", errno);
      }
      p += w;
      n -= static_cast<std::size_t>(w);
      offset += static_cast<std::uint64_t>(w);
    }
  }

  static constexpr std::size_t buffer_bytes = std::size_t{1} << 20;

 private:

  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  void write_all(const std::byte* p, std::size_t n) {
    while (n > 0) {
      const ::ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("write failed", errno);
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }

  [[noreturn]] void fail(const char* what, int e) const {
    throw io_error(path_.string() + ": " + what + ": " + std::strerror(e));
  }

  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<std::byte> buffer_;
};

/// Reads a file written by a buffered_file_writer back in chunks of whole T values and calls
/// `each(std::span<const T>)` for each chunk. Throws io_error naming the file.
template <class T, class F>
void for_each_chunk(const std::filesystem::path& path, F&& each) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw io_error(path.string() + ": cannot open: " + std::strerror(errno));
  std::vector<T> chunk(buffered_file_writer::buffer_bytes / sizeof(T));
  std::size_t held = 0;  // bytes in chunk
  for (;;) {
    const ::ssize_t r = ::read(fd, reinterpret_cast<std::byte*>(chunk.data()) + held, chunk.size() * sizeof(T) - held);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      throw io_error(path.string() + ": read failed: " + std::strerror(e));
    }
    held += static_cast<std::size_t>(r);
    if (r == 0 || held == chunk.size() * sizeof(T)) {
      each(std::span<const T>(chunk.data(), held / sizeof(T)));
      held = 0;
      if (r == 0) break;
    }
  }
  ::close(fd);
}

}  // namespace detail

/// Streams samples into a Megatron indexed dataset at PREFIX. Not thread-safe: one thread
/// at a time per writer. Memory: three 1 MiB write buffers, whatever the dataset's size (the
/// .idx arrays are spooled to temporary files and assembled by finish()).
class indexed_dataset_writer {
 public:
  /// Creates PREFIX.bin.tmp for tokens of type `dtype`. Throws option_error for a dtype value
  /// outside the enum, io_error (naming the path) when the file cannot be created.
  template <path_like Path>
  indexed_dataset_writer(const Path& prefix, token_dtype dtype)
      : prefix_(prefix), dtype_(dtype), item_size_(dtype_size(dtype)) {
    if (item_size_ == 0)
      throw option_error("indexed_dataset_writer: invalid token_dtype value " +
                         std::to_string(static_cast<unsigned>(dtype)));
    bin_ = detail::buffered_file_writer(path_with(".bin.tmp"));
    sizes_ = detail::buffered_file_writer(path_with(".idx.sizes.tmp"));
    documents_ = detail::buffered_file_writer(path_with(".idx.documents.tmp"));
    documents_.write_value(std::int64_t{0});  // the document index starts with 0
  }

  indexed_dataset_writer(const indexed_dataset_writer&) = delete;
  indexed_dataset_writer& operator=(const indexed_dataset_writer&) = delete;
  /// Takes the open file; `other` is left finished (every call on it throws). Never throws.
  indexed_dataset_writer(indexed_dataset_writer&& other) noexcept
      : prefix_(std::move(other.prefix_)),
        dtype_(other.dtype_),
        item_size_(other.item_size_),
        bin_(std::move(other.bin_)),
        sizes_(std::move(other.sizes_)),
        documents_(std::move(other.documents_)),
        samples_(other.samples_),
        document_entries_(other.document_entries_),
        last_document_end_(other.last_document_end_),
        bin_bytes_(other.bin_bytes_),
        state_(std::exchange(other.state_, state::finished)) {}
  indexed_dataset_writer& operator=(indexed_dataset_writer&&) = delete;

  /// When finish() (or commit()) was not called or failed: closes and removes the temporary
  /// files, leaving any previous PREFIX.bin/.idx as they were (unless a commit() failed
  /// part way). Never throws.
  ~indexed_dataset_writer() {
    if (state_ == state::finished) return;
    bin_.abandon();
    sizes_.abandon();
    documents_.abandon();
    std::error_code ignored;
    for (const char* suffix : {".bin.tmp", ".idx.tmp", ".idx.sizes.tmp", ".idx.documents.tmp"})
      std::filesystem::remove(path_with(suffix), ignored);
  }

  /// Appends one sample. Every token must have an exact value in the dtype: otherwise throws
  /// option_error naming the sample, the position and the value, and nothing of the sample
  /// is written (the writer stays usable). Also option_error when the sample has more than
  /// INT32_MAX tokens (Megatron's sizes are int32) or after prepare() or finish(); io_error
  /// when the write fails (the writer is then unusable). Cost: O(tokens), two passes (check,
  /// write).
  template <plain_integral T>
  void add_sample(std::span<const T> tokens) {
    require_open("add_sample");
    const std::uint64_t sample = samples_;
    if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      throw option_error(name() + ": sample " + std::to_string(sample) + " has " +
                         std::to_string(tokens.size()) +
                         " tokens; Megatron stores sizes as int32 (at most 2147483647)");
    const std::uint64_t bytes = std::uint64_t{tokens.size()} * item_size_;
    if (bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - bin_bytes_)
      throw option_error(name() + ": sample " + std::to_string(sample) +
                         " would take the .bin past INT64_MAX bytes (pointers are int64)");
    visit_dtype(dtype_, [&]<class D>(std::type_identity<D>) {
      for (std::size_t k = 0; k < tokens.size(); ++k) {
        D ignored{};
        if (!detail::exact_convert(tokens[k], ignored))
          throw option_error(name() + ": sample " + std::to_string(sample) + ", token " +
                             std::to_string(k) + ": value " + detail::value_text(tokens[k]) +
                             " is not representable as " + std::string(dtype_name(dtype_)));
      }
      state_ = state::broken;  // until the write completes
      constexpr std::size_t chunk = 4096;
      D staged[chunk];
      for (std::size_t k = 0; k < tokens.size(); k += chunk) {
        const std::size_t m = std::min(chunk, tokens.size() - k);
        for (std::size_t j = 0; j < m; ++j) detail::exact_convert(tokens[k + j], staged[j]);
        bin_.write(staged, m * sizeof(D));
      }
      state_ = state::open;
    });
    state_ = state::broken;
    sizes_.write_value(static_cast<std::int32_t>(tokens.size()));
    state_ = state::open;
    ++samples_;
    bin_bytes_ += bytes;
  }

  /// add_sample for any contiguous range of integers (std::vector<int>, std::array, ...).
  template <std::ranges::contiguous_range R>
    requires plain_integral<std::ranges::range_value_t<R>>
  void add_sample(const R& tokens) {
    add_sample(std::span<const std::ranges::range_value_t<R>>(std::ranges::data(tokens),
                                                              std::ranges::size(tokens)));
  }

  /// Ends the current document: appends the number of samples so far to the document index,
  /// as Megatron's end_document() does (twice in a row makes an empty document). O(1)
  /// amortised. Throws option_error after prepare() or finish(), io_error when the spool
  /// write fails.
  void end_document() {
    require_open("end_document");
    state_ = state::broken;
    documents_.write_value(static_cast<std::int64_t>(samples_));
    state_ = state::open;
    ++document_entries_;
    last_document_end_ = samples_;
  }

  /// Writes PREFIX.idx and puts both files in place: prepare() then commit(). Samples added
  /// after the last end_document() form a final document: Megatron's finalize() would write
  /// the document index without that entry, a file its own IndexedDataset then rejects (it
  /// asserts that the document index ends at the sequence count); we close the document
  /// instead. Throws io_error (naming the path) on any write, close or rename failure,
  /// option_error when called twice. Cost: O(samples + documents) written.
  void finish() {
    require_open("finish");
    prepare();
    commit();
  }

  /// The first half of finish(): closes the .bin and writes PREFIX.idx.tmp, everything that
  /// can fail but the renames; PREFIX.bin and PREFIX.idx are not touched. Afterwards only
  /// commit() may be called (and the destructor removes the temporaries if it is not).
  /// Throws io_error (naming the path) on a write, read or close failure (the writer is then
  /// unusable), option_error when called twice. Cost: O(samples + documents) written.
  void prepare() {
    require_open("prepare");
    state_ = state::broken;  // until the .idx is written
    if (last_document_end_ != samples_) {
      documents_.write_value(static_cast<std::int64_t>(samples_));
      ++document_entries_;
    }
    bin_.close();
    sizes_.close();
    documents_.close();

    detail::buffered_file_writer idx(path_with(".idx.tmp"));
    idx.write(detail::megatron_idx_magic, sizeof detail::megatron_idx_magic);
    idx.write_value(detail::megatron_idx_version);
    idx.write_value(static_cast<std::uint8_t>(dtype_));
    idx.write_value(static_cast<std::uint64_t>(samples_));
    idx.write_value(static_cast<std::uint64_t>(document_entries_));
    const std::filesystem::path sizes_path = path_with(".idx.sizes.tmp");
    detail::for_each_chunk<std::int32_t>(sizes_path, [&](std::span<const std::int32_t> sizes) {
      idx.write(sizes.data(), sizes.size_bytes());
    });
    std::int64_t pointer = 0;
    detail::for_each_chunk<std::int32_t>(sizes_path, [&](std::span<const std::int32_t> sizes) {
      for (const std::int32_t size : sizes) {
        idx.write_value(pointer);
        pointer += static_cast<std::int64_t>(size) * static_cast<std::int64_t>(item_size_);
      }
    });
    detail::for_each_chunk<std::int64_t>(path_with(".idx.documents.tmp"), [&](std::span<const std::int64_t> entries) {
      idx.write(entries.data(), entries.size_bytes());
    });
    idx.close();
    std::error_code ignored;
    std::filesystem::remove(sizes_path, ignored);
    std::filesystem::remove(path_with(".idx.documents.tmp"), ignored);
    state_ = state::prepared;
  }

  /// The second half of finish(): moves the old PREFIX.idx aside (to PREFIX.idx.old.tmp),
  /// renames PREFIX.bin.tmp and PREFIX.idx.tmp into place, then removes the old .idx. Throws
  /// option_error unless prepare() succeeded and commit() was not called yet; io_error
  /// (naming the path) when a rename fails: if the .bin could not be put in place, the old
  /// .idx goes back and the old dataset is as it was (or, if that fails too, the message says
  /// where the old .idx is); if only the .idx could not, the old
  /// dataset is gone (its .bin replaced) and there is no .idx. A .bin and .idx that disagree
  /// are never in place. O(1).
  void commit() {
    if (state_ == state::open) throw option_error(name() + ": commit() before prepare()");
    if (state_ != state::prepared) require_open("commit");  // finished or broken: throws
    state_ = state::broken;  // until both are in place
    // Old .idx first: between the renames there is a new .bin and no .idx, never a mismatch.
    // Every path is made before the old .idx moves, and the .bin's failure puts it back with
    // the non-throwing rename before any message is built: nothing can leave it aside.
    const std::filesystem::path idx = path_with(".idx");
    const std::filesystem::path old_idx = path_with(".idx.old.tmp");
    const std::filesystem::path bin_tmp = path_with(".bin.tmp");
    const std::filesystem::path bin = path_with(".bin");
    std::error_code ec;
    std::filesystem::rename(idx, old_idx, ec);
    const bool had_idx = !ec;
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw io_error(idx.string() + ": cannot move aside to " + old_idx.string() + ": " + ec.message());
    std::filesystem::rename(bin_tmp, bin, ec);
    if (ec) {
      std::error_code back;
      if (had_idx) std::filesystem::rename(old_idx, idx, back);  // the old dataset, as it was
      throw io_error(rename_failure(bin_tmp, bin, ec) +
                     (back ? "; the old index could not be put back either (" + back.message() + "): it is at " +
                                 old_idx.string()
                           : std::string()));
    }
    std::error_code ignored;
    std::filesystem::remove(old_idx, ignored);  // it describes the old .bin, gone now
    rename(path_with(".idx.tmp"), idx);
    state_ = state::finished;
  }

  /// Samples added so far. O(1), never throws.
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(samples_); }
  /// Entries of the document index so far (1 + documents ended). O(1), never throws.
  [[nodiscard]] std::size_t document_index_size() const noexcept { return static_cast<std::size_t>(document_entries_); }
  /// The dtype tokens are stored as. O(1), never throws.
  [[nodiscard]] token_dtype dtype() const noexcept { return dtype_; }
  /// The prefix given to the constructor. O(1), never throws.
  [[nodiscard]] const std::filesystem::path& prefix() const noexcept { return prefix_; }
  /// Whether finish() (or commit()) completed. O(1), never throws.
  [[nodiscard]] bool finished() const noexcept { return state_ == state::finished; }

 private:
  enum class state : std::uint8_t { open, prepared, broken, finished };

  std::filesystem::path path_with(const char* suffix) const {
    return detail::with_suffix(prefix_, suffix);
  }
  std::string name() const { return path_with(".bin").string(); }

  void require_open(const char* what) const {
    if (state_ == state::finished)
      throw option_error(name() + ": " + what + " after finish()");
    if (state_ == state::prepared)
      throw option_error(name() + ": " + what + " after prepare()");
    if (state_ == state::broken)
      throw option_error(name() + ": " + what + " after an earlier write failed");
  }

  static std::string rename_failure(const std::filesystem::path& from, const std::filesystem::path& to,
                                    const std::error_code& ec) {
    return from.string() + ": cannot rename to " + to.string() + ": " + ec.message();
  }

  static void rename(const std::filesystem::path& from, const std::filesystem::path& to) {
    std::error_code ec;
    std::filesystem::rename(from, to, ec);
    if (ec) throw io_error(rename_failure(from, to, ec));
  }

  std::filesystem::path prefix_;
  token_dtype dtype_;
  std::size_t item_size_;
  detail::buffered_file_writer bin_;
  detail::buffered_file_writer sizes_;      // int32 a sample, spooled
  detail::buffered_file_writer documents_;  // the document index, spooled
  std::uint64_t samples_ = 0;
  std::uint64_t document_entries_ = 1;      // the leading 0
  std::uint64_t last_document_end_ = 0;     // the last entry written
  std::uint64_t bin_bytes_ = 0;
  state state_ = state::open;
};

}  // namespace multipack
