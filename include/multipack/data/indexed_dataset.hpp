#pragma once
// Megatron-LM's indexed dataset (the "MMIDIDX" .idx + .bin pair that
// tools/preprocess_data.py writes), memory-mapped and validated once, at open.
//
// PREFIX.idx, little-endian, no padding (so the arrays are unaligned: 34 + 4n is not a
// multiple of 8; every read from it goes through std::memcpy):
//
//   byte 0            magic "MMIDIDX\0\0"                 9 bytes
//   byte 9            version, u64 = 1
//   byte 17           dtype code, u8 (see token_dtype)
//   byte 18           sequence count n, u64
//   byte 26           document count d, u64 (entries of the document index, 1 + documents)
//   byte 34           sizes     int32[n]   tokens in each sequence
//   byte 34 + 4n      pointers  int64[n]   byte offset of each sequence in PREFIX.bin
//   byte 34 + 12n     document index int64[d]: 0, end of document 0, ..., n
//   byte 34+12n+8d    (optional) sequence modes int8[n] (Megatron core, multimodal)
//
// fairseq's variant (fairseq/data/indexed_dataset.py, MMapIndexedDataset) has the same magic
// and version and no document count, document index or modes:
//
//   byte 0 magic, byte 9 version, byte 17 dtype, byte 18 sequence count n (as above)
//   byte 26           sizes     int32[n]
//   byte 26 + 4n      pointers  int64[n]   back to back from 0 (fairseq's builder writes so)
//
// The two are told apart by the file size: exactly 26 + 12n bytes is fairseq's (Megatron's
// is at least 42 + 12n).
//
// PREFIX.bin holds the tokens, in the dtype, wherever the pointers say (back to back when
// Megatron writes it). "Sequence" (Megatron's word) is what the rest of multipack calls a
// sample; a document is a run of consecutive samples.

#include <algorithm>
#include <bit>
#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "multipack/core/detail/quote.hpp"
#include "multipack/core/error.hpp"
#include "multipack/core/sample.hpp"
#include "multipack/data/detail/mapped_file.hpp"
#include "multipack/data/dtype.hpp"

namespace multipack {

static_assert(std::endian::native == std::endian::little,
              "indexed_dataset maps Megatron's little-endian files directly: big-endian hosts "
              "are not supported");

/// A read-only array of T stored at an arbitrary byte address (Megatron's .idx arrays are
/// not aligned). Elements are returned by value, each copied out with std::memcpy.
/// A random-access, borrowed view; valid while the dataset that gave it is alive.
/// (view_base rather than view_interface: clang 14 cannot instantiate the latter here.)
template <class T>
class unaligned_array_view : public std::ranges::view_base {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  class iterator {
   public:
    using iterator_concept = std::random_access_iterator_tag;
    using iterator_category = std::random_access_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using reference = T;  // a prvalue: there is no aligned T in memory to refer to

    iterator() = default;
    explicit iterator(const std::byte* p) noexcept : p_(p) {}

    T operator*() const noexcept {
      T v;
      std::memcpy(&v, p_, sizeof(T));
      return v;
    }
    T operator[](difference_type n) const noexcept { return *(*this + n); }

    iterator& operator++() noexcept { p_ += sizeof(T); return *this; }
    iterator operator++(int) noexcept { iterator t = *this; ++*this; return t; }
    iterator& operator--() noexcept { p_ -= sizeof(T); return *this; }
    iterator operator--(int) noexcept { iterator t = *this; --*this; return t; }
    iterator& operator+=(difference_type n) noexcept {
      p_ += n * static_cast<difference_type>(sizeof(T));
      return *this;
    }
    iterator& operator-=(difference_type n) noexcept { return *this += -n; }
    friend iterator operator+(iterator it, difference_type n) noexcept { return it += n; }
    friend iterator operator+(difference_type n, iterator it) noexcept { return it += n; }
    friend iterator operator-(iterator it, difference_type n) noexcept { return it -= n; }
    friend difference_type operator-(const iterator& a, const iterator& b) noexcept {
      return (a.p_ - b.p_) / static_cast<difference_type>(sizeof(T));
    }
    friend bool operator==(const iterator&, const iterator&) = default;
    friend std::strong_ordering operator<=>(const iterator& a, const iterator& b) noexcept {
      return std::compare_three_way{}(a.p_, b.p_);
    }

   private:
    const std::byte* p_ = nullptr;
  };

  unaligned_array_view() = default;
  /// `count` values of T starting at byte `data`.
  unaligned_array_view(const std::byte* data, std::size_t count) noexcept
      : data_(data), count_(count) {}

  /// O(1), never throws, thread-safe.
  [[nodiscard]] iterator begin() const noexcept { return iterator(data_); }
  [[nodiscard]] iterator end() const noexcept { return iterator(data_ + count_ * sizeof(T)); }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// First and last element; the view must not be empty. O(1), thread-safe.
  [[nodiscard]] T front() const noexcept { return (*this)[0]; }
  [[nodiscard]] T back() const noexcept { return (*this)[count_ - 1]; }
  /// Element i; i < size() is the caller's duty (as for std::span). O(1), thread-safe.
  [[nodiscard]] T operator[](std::size_t i) const noexcept {
    T v;
    std::memcpy(&v, data_ + i * sizeof(T), sizeof(T));
    return v;
  }

 private:
  const std::byte* data_ = nullptr;
  std::size_t count_ = 0;
};

namespace detail {
inline constexpr char megatron_idx_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr std::uint64_t megatron_idx_version = 1;
inline constexpr std::uint64_t megatron_idx_header_size = 34;
inline constexpr std::uint64_t fairseq_idx_header_size = 26;

/// PREFIX + suffix, without treating a dot in PREFIX as an extension ("a.v2" -> "a.v2.idx").
inline std::filesystem::path with_suffix(const std::filesystem::path& prefix, const char* suffix) {
  std::filesystem::path p = prefix;
  p += suffix;
  return p;
}

/// Maps PREFIX + suffix. When that fails and PREFIX is a file's name with its .bin or .idx
/// (a common slip: `--data corpus.bin`), the io_error says which prefix was meant.
inline mapped_file map_part(const std::filesystem::path& prefix, const char* suffix) {
  try {
    return mapped_file(with_suffix(prefix, suffix));
  } catch (const io_error& e) {
    const auto extension = prefix.extension();
    if (extension == ".bin" || extension == ".idx") {
      std::filesystem::path meant = prefix;
      meant.replace_extension();
      std::error_code ignored;
      if (std::filesystem::exists(with_suffix(meant, ".idx"), ignored))
        throw io_error(std::string(e.what()) + " (a dataset is named by its prefix, without .bin or .idx: " +
                       meant.string() + ")");
    }
    throw;
  }
}
}  // namespace detail

/// Which writer's index layout a dataset has (see the header).
enum class index_format : std::uint8_t { megatron, fairseq };

/// A Megatron-LM (or fairseq) indexed dataset opened from PREFIX (PREFIX.idx + PREFIX.bin), both
/// memory-mapped. Satisfies multipack::token_dataset.
///
/// Everything in the .idx is checked once, in the constructor; afterwards no access can read
/// outside either file. The files must not be modified or truncated while open (mmap).
/// Every const member may be called from any number of threads at once.
class indexed_dataset {
 public:
  /// Opens and validates PREFIX.idx and PREFIX.bin. Cost: one pass over the .idx
  /// (O(samples + documents)); the .bin is mapped, not read.
  /// Throws io_error (naming the path) when a file cannot be opened or mapped, and
  /// format_error "<file>: byte <offset>: <what was expected, what was found>" for: bad
  /// magic, version != 1, unknown dtype code, counts that do not match the .idx size
  /// (truncated or trailing bytes), a negative size, a pointer that is negative, not a
  /// multiple of the item size or whose tokens run past the end of the .bin, a document
  /// index that does not start at 0, decreases, or does not end at the sample count.
  /// A file with exactly n bytes after the document index is accepted as Megatron core's
  /// multimodal layout (sequence_modes); any other trailing length is an error. A file of
  /// exactly 26 + 12n bytes is read as fairseq's layout, whose pointers must run back to back.
  ///
  /// indexed_dataset({a, b}) does not compile (see path_like); several prefixes are a
  /// concatenation: open_indexed_datasets(prefixes) (data/concatenated_dataset.hpp).
  template <path_like Path>
  explicit indexed_dataset(const Path& prefix)
      : prefix_(prefix),
        idx_(detail::map_part(prefix_, ".idx")),
        bin_(detail::map_part(prefix_, ".bin")) {
    validate();
  }

  indexed_dataset(const indexed_dataset&) = delete;
  indexed_dataset& operator=(const indexed_dataset&) = delete;
  /// Takes the mappings; `other` is left an empty dataset (size 0). Never throws.
  indexed_dataset(indexed_dataset&& other) noexcept { swap(other); }
  indexed_dataset& operator=(indexed_dataset&& other) noexcept {
    indexed_dataset(std::move(other)).swap(*this);
    return *this;
  }
  ~indexed_dataset() = default;

  /// Number of samples (Megatron's sequence count). O(1), never throws, thread-safe.
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }

  /// The samples in order, as a random-access range of dataset_sample (a pointer and an
  /// index each): `dataset | std::views::filter(f)`, `dataset | multipack::views::pack(o)`.
  /// O(1), never throws; valid as long as the dataset is.
  [[nodiscard]] dataset_iterator<indexed_dataset> begin() const noexcept { return {this, 0}; }
  [[nodiscard]] dataset_iterator<indexed_dataset> end() const noexcept { return {this, size()}; }

  /// Tokens in sample i. Checked: throws option_error when i >= size(). O(1) (one 4-byte
  /// memcpy from the mapped .idx), thread-safe.
  [[nodiscard]] std::uint64_t length(std::size_t i) const {
    check_index(i, "length");
    return static_cast<std::uint64_t>(raw_size(i));
  }

  /// The storage type of the tokens in the .bin. O(1), never throws, thread-safe.
  [[nodiscard]] token_dtype dtype() const noexcept { return dtype_; }

  /// Megatron's layout or fairseq's (which has no document index: documents() is empty).
  /// O(1), never throws, thread-safe.
  [[nodiscard]] index_format format() const noexcept { return format_; }

  /// Megatron's document index: document_count() + 1 non-decreasing sample indices, from 0
  /// to size(); document k is samples [documents()[k], documents()[k+1]). A view over the
  /// mapped .idx (values copied out on access). O(1), never throws, thread-safe.
  [[nodiscard]] unaligned_array_view<std::int64_t> documents() const noexcept {
    if (idx_.data() == nullptr) return {};  // moved from
    return {idx_.data() + documents_offset(), doc_entries_};
  }
  /// Number of documents (entries of the document index minus one). O(1), never throws.
  [[nodiscard]] std::size_t document_count() const noexcept {
    return doc_entries_ == 0 ? 0 : doc_entries_ - 1;
  }

  /// The raw `sizes` array (int32, all >= 0). A view over the mapped .idx. O(1), never throws.
  [[nodiscard]] unaligned_array_view<std::int32_t> sizes() const noexcept {
    if (idx_.data() == nullptr) return {};  // moved from
    return {idx_.data() + sizes_offset(), count_};
  }

  /// Every sample's length, copied out (what a packer takes). O(size()), thread-safe;
  /// throws std::bad_alloc only.
  [[nodiscard]] std::vector<std::uint32_t> lengths() const {
    std::vector<std::uint32_t> out(count_);
    for (std::size_t i = 0; i < count_; ++i) out[i] = static_cast<std::uint32_t>(raw_size(i));
    return out;
  }

  /// The tokens of sample i, in place in the mapped .bin (no copy). T must be the storage
  /// type of dtype() (dtype_of_v<T> == dtype()): throws option_error otherwise, and when
  /// i >= size(). O(1), thread-safe. The span lives as long as the dataset.
  template <token_type T>
  [[nodiscard]] std::span<const T> tokens(std::size_t i) const {
    check_index(i, "tokens");
    if (dtype_of_v<T> != dtype_)
      throw option_error(idx_.path().string() + ": tokens<" +
                         std::string(dtype_name(dtype_of_v<T>)) + ">(): the file holds " +
                         std::string(dtype_name(dtype_)) +
                         " tokens (use that type, or read_tokens to convert)");
    return raw_tokens<T>(i);
  }

  /// Writes tokens [first, first + out.size()) of sample i into `out`, converted to Out.
  /// Throws option_error when i >= size() or the range is not inside the sample, and
  /// sample_error (naming the file, sample, position and value) when a token has no exact
  /// Out value (an int64 token above INT32_MAX read into int32, a fractional float token).
  /// Cost: O(out.size()), one pass over mapped memory. Thread-safe.
  template <plain_integral Out, std::size_t Extent>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<Out, Extent> out) const {
    check_index(i, "read_tokens");
    const std::uint64_t length = static_cast<std::uint64_t>(raw_size(i));
    if (first > length || out.size() > length - first)
      throw option_error(idx_.path().string() + ": read_tokens: tokens [" +
                         std::to_string(first) + ", " + range_end_text(first, out.size()) +
                         ") are outside sample " + std::to_string(i) + " of length " +
                         std::to_string(length));
    visit_dtype(dtype_, [&]<class S>(std::type_identity<S>) {
      const S* src = raw_tokens<S>(i).data() + first;
      convert_tokens(src, out, i, first);
    });
  }

  /// Asks the processor to start loading tokens [first, first + count) of sample i into the
  /// cache, so that a read_tokens of them soon after does not wait on memory (the collator
  /// calls it for the next row while it writes this one: pieces sit at random places of the
  /// file). A hint: out-of-range arguments are ignored. O(count / 64), never throws,
  /// thread-safe.
  void prefetch_tokens(std::size_t i, std::uint64_t first, std::uint64_t count) const noexcept {
    if (i >= count_) return;
    const auto length = static_cast<std::uint64_t>(raw_size(i));
    if (first >= length) return;
    count = std::min(count, length - first);
    const std::size_t width = dtype_size(dtype_);
    const std::byte* begin = bin_.data() + raw_pointer(i) + first * width;
    const std::uint64_t bytes = count * width;
    for (std::uint64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(begin + offset);
  }

  /// Whether the .idx carries Megatron core's per-sample modes (multimodal datasets).
  /// O(1), never throws, thread-safe.
  [[nodiscard]] bool has_sequence_modes() const noexcept { return has_modes_; }
  /// The per-sample modes, or an empty span when the file has none. O(1), never throws.
  [[nodiscard]] std::span<const std::int8_t> sequence_modes() const noexcept {
    if (!has_modes_) return {};
    return {reinterpret_cast<const std::int8_t*>(idx_.data() + modes_offset()), count_};
  }

  /// The prefix it was opened with, and the two files. O(1), never throws, thread-safe.
  [[nodiscard]] const std::filesystem::path& prefix() const noexcept { return prefix_; }
  [[nodiscard]] const std::filesystem::path& idx_path() const noexcept { return idx_.path(); }
  [[nodiscard]] const std::filesystem::path& bin_path() const noexcept { return bin_.path(); }

  /// Throws io_error naming the file when the .idx or the .bin has changed size or been
  /// written since the dataset was opened (a shard rewritten while training: reads past a
  /// shrunk file's end would raise SIGBUS, a rewritten one would give other tokens). The
  /// batch loader calls it before each batch. Deleting the files is harmless (the mappings
  /// keep them). Two fstat calls, thread-safe.
  void check_unchanged() const {
    idx_.check_unchanged();
    bin_.check_unchanged();
  }

  /// Exchanges two datasets. O(1), never throws.
  void swap(indexed_dataset& other) noexcept {
    using std::swap;
    swap(prefix_, other.prefix_);
    swap(idx_, other.idx_);
    swap(bin_, other.bin_);
    swap(dtype_, other.dtype_);
    swap(item_size_, other.item_size_);
    swap(count_, other.count_);
    swap(doc_entries_, other.doc_entries_);
    swap(has_modes_, other.has_modes_);
    swap(header_size_, other.header_size_);
    swap(format_, other.format_);
  }

 private:
  // --- layout ------------------------------------------------------------------------------
  std::uint64_t sizes_offset() const noexcept { return header_size_; }
  std::uint64_t pointers_offset() const noexcept { return sizes_offset() + 4 * std::uint64_t{count_}; }
  std::uint64_t documents_offset() const noexcept { return sizes_offset() + 12 * std::uint64_t{count_}; }
  std::uint64_t modes_offset() const noexcept { return documents_offset() + 8 * std::uint64_t{doc_entries_}; }

  template <class T>
  T load(std::uint64_t offset) const noexcept {
    T v;
    std::memcpy(&v, idx_.data() + offset, sizeof(T));
    return v;
  }
  std::int32_t raw_size(std::size_t i) const noexcept { return load<std::int32_t>(sizes_offset() + 4 * std::uint64_t{i}); }
  std::int64_t raw_pointer(std::size_t i) const noexcept { return load<std::int64_t>(pointers_offset() + 8 * std::uint64_t{i}); }

  // Valid only after validate(): the pointer is aligned to sizeof(T) and in bounds, and the
  // mapping is page-aligned, so the span is properly aligned too.
  template <class T>
  std::span<const T> raw_tokens(std::size_t i) const noexcept {
    if (raw_size(i) == 0) return {};
    const std::byte* p = bin_.data() + raw_pointer(i);
    return {reinterpret_cast<const T*>(p), static_cast<std::size_t>(raw_size(i))};
  }

  void check_index(std::size_t i, const char* what) const {
    if (i >= count_)
      throw option_error(idx_.path().string() + ": " + what + ": sample " + std::to_string(i) +
                         " out of range (the dataset has " + std::to_string(count_) + " samples)");
  }

  static std::string range_end_text(std::uint64_t first, std::size_t n) {
    // first + n may exceed 2^64 - 1 when a caller passes a wild `first`.
    if (n > std::numeric_limits<std::uint64_t>::max() - first)
      return std::to_string(first) + " + " + std::to_string(n);
    return std::to_string(first + n);
  }

  template <class S, class Out, std::size_t Extent>
  void convert_tokens(const S* src, std::span<Out, Extent> out, std::size_t i, std::uint64_t first) const {
    const std::size_t bad = detail::convert_exactly(src, out.data(), out.size());
    if (bad != out.size())
      throw sample_error(idx_.path().string() + ": sample " + std::to_string(i) + ", token " +
                         std::to_string(first + bad) + ": value " + detail::value_text(src[bad]) + " (" +
                         std::string(dtype_name(dtype_)) + ") has no exact " + std::string(detail::type_name<Out>()) +
                         " value");
  }

  // --- validation --------------------------------------------------------------------------
  [[noreturn]] void fail(std::uint64_t offset, const std::string& what) const {
    throw format_error(idx_.path().string() + ": byte " + std::to_string(offset) + ": " + what);
  }

  // Checks that `n` bytes at `offset` exist (the header fields, read in order).
  void need(std::uint64_t offset, std::uint64_t n, const char* field) const {
    const std::uint64_t file = idx_.size();
    if (file < offset + n)
      fail(offset, std::string("truncated ") + field + ": expected " + std::to_string(n) +
                       " bytes, the file has " + std::to_string(file - offset) +
                       " (it ends at byte " + std::to_string(file) + ")");
  }

  // The sizes and pointers, one pass. `back_to_back`: each sample must start where the last
  // one ended, from byte 0 (fairseq's builder writes so; it also tells a Megatron file cut
  // to fairseq's size from a real fairseq file).
  void validate_samples(bool back_to_back) {
    const std::string bin_name = bin_.path().string();
    const std::uint64_t bin_size = bin_.size();
    std::uint64_t next = 0;
    for (std::size_t i = 0; i < count_; ++i) {
      const std::uint64_t size_at = sizes_offset() + 4 * std::uint64_t{i};
      const std::uint64_t pointer_at = pointers_offset() + 8 * std::uint64_t{i};
      const std::int32_t size = raw_size(i);
      if (size < 0)
        fail(size_at, "sequence " + std::to_string(i) + " size " + std::to_string(size) +
                          " is negative");
      const std::int64_t pointer = raw_pointer(i);
      if (pointer < 0)
        fail(pointer_at, "sequence " + std::to_string(i) + " pointer " + std::to_string(pointer) +
                             " is negative");
      const auto begin = static_cast<std::uint64_t>(pointer);
      if (begin % item_size_ != 0)
        fail(pointer_at, "sequence " + std::to_string(i) + " pointer " + std::to_string(begin) +
                             " is not a multiple of the " + std::string(dtype_name(dtype_)) +
                             " item size " + std::to_string(item_size_));
      const std::uint64_t bytes = static_cast<std::uint64_t>(size) * item_size_;  // < 2^35
      if (back_to_back && begin != next)
        fail(pointer_at, "sequence " + std::to_string(i) + " pointer " + std::to_string(begin) + " should be " +
                             std::to_string(next) + ": fairseq's samples lie back to back from byte 0");
      next = begin + bytes;
      if (begin > bin_size || bytes > bin_size - begin)
        fail(pointer_at, "sequence " + std::to_string(i) + " (" + std::to_string(size) +
                             " tokens at pointer " + std::to_string(begin) + ") ends at byte " +
                             std::to_string(begin + bytes) + " of " + bin_name +
                             ", past its end: " + bin_name + " has " +
                             std::to_string(bin_size) + " bytes");
    }
  }

  void validate_fairseq(std::uint64_t n) {
    if (n > std::numeric_limits<std::size_t>::max()) fail(18, "sequence count exceeds this platform's size_t");
    format_ = index_format::fairseq;
    header_size_ = detail::fairseq_idx_header_size;
    count_ = static_cast<std::size_t>(n);
    doc_entries_ = 0;
    validate_samples(true);
  }

  void validate() {
    const std::uint64_t file = idx_.size();

    // Header. The magic is compared first, even on a short file, so that a file of another
    // format is reported as such rather than as truncated.
    const std::size_t magic_seen = file < 9 ? static_cast<std::size_t>(file) : 9;
    if (magic_seen > 0 && std::memcmp(idx_.data(), detail::megatron_idx_magic, magic_seen) != 0)
      fail(0, "bad magic: expected 4d 4d 49 44 49 44 58 00 00 (\"MMIDIDX\\0\\0\", Megatron "
              "MMapIndexedDataset), found " + detail::hex_bytes(idx_.data(), magic_seen));
    need(0, 9, "magic");
    need(9, 8, "version");
    const auto version = load<std::uint64_t>(9);
    if (version != detail::megatron_idx_version)
      fail(9, "version is " + std::to_string(version) + ", expected 1");
    need(17, 1, "dtype code");
    dtype_ = dtype_from_code(load<std::uint8_t>(17), idx_.path().string() + ": byte 17");
    item_size_ = dtype_size(dtype_);
    need(18, 8, "sequence count");
    const auto n = load<std::uint64_t>(18);
    if (file >= detail::fairseq_idx_header_size && (file - detail::fairseq_idx_header_size) % 12 == 0 &&
        (file - detail::fairseq_idx_header_size) / 12 == n) {
      validate_fairseq(n);
      return;
    }
    need(26, 8, "document count");
    const auto d = load<std::uint64_t>(26);

    // Counts against the file size: overflow-safe, by dividing what is left. Which count is
    // wrong cannot be told from the size alone, so the message names both.
    const std::uint64_t after_header = file - detail::megatron_idx_header_size;
    const std::string counts = "sequence count " + std::to_string(n) + " and document count " +
                               std::to_string(d) + " (bytes 18 and 26)";
    if (n > after_header / 12 || d > (after_header - 12 * n) / 8) {
      constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
      const bool representable = n <= (max - 34) / 12 && d <= (max - 34 - 12 * n) / 8;
      fail(18, counts + " need an index of " +
                   (representable ? std::to_string(34 + 12 * n + 8 * d) : "more than 2^64") +
                   " bytes, but the file has " + std::to_string(file) + " (truncated at byte " +
                   std::to_string(file) + ", or a count is wrong)");
    }
    if (n > std::numeric_limits<std::size_t>::max() || d > std::numeric_limits<std::size_t>::max())
      fail(18, counts + " exceed this platform's size_t");
    count_ = static_cast<std::size_t>(n);
    doc_entries_ = static_cast<std::size_t>(d);
    const std::uint64_t expected = modes_offset();
    const std::uint64_t trailing = file - expected;
    if (trailing != 0) {
      if (trailing != n)
        fail(expected, std::to_string(trailing) + " bytes after the document index, expected "
                       "the end of the file (or " + std::to_string(n) +
                       " bytes of sequence modes); " + counts + " say the index ends here");
      has_modes_ = true;
    }

    validate_samples(false);

    // Document index.
    const std::uint64_t docs_at = documents_offset();
    if (d == 0)
      fail(26, "document count is 0, expected at least 1 (the document index starts with 0)");
    const auto docs = documents();
    std::int64_t previous = docs[0];
    if (previous != 0)
      fail(docs_at, "document index starts with " + std::to_string(previous) + ", expected 0");
    for (std::size_t k = 1; k < doc_entries_; ++k) {
      const std::int64_t v = docs[k];
      if (v < previous)
        fail(docs_at + 8 * std::uint64_t{k},
             "document index entry " + std::to_string(k) + " is " + std::to_string(v) +
                 ", less than entry " + std::to_string(k - 1) + " (" + std::to_string(previous) +
                 "): the document index must not decrease");
      previous = v;
    }
    if (static_cast<std::uint64_t>(previous) != n)
      fail(docs_at + 8 * (d - 1), "document index ends with " + std::to_string(previous) +
                                      ", expected the sequence count " + std::to_string(n));
  }

  std::filesystem::path prefix_;
  detail::mapped_file idx_;
  detail::mapped_file bin_;
  token_dtype dtype_ = token_dtype::int32;
  std::size_t item_size_ = 4;
  std::size_t count_ = 0;        // sequences (samples)
  std::size_t doc_entries_ = 0;  // entries of the document index (documents + 1)
  bool has_modes_ = false;
  std::uint64_t header_size_ = detail::megatron_idx_header_size;
  index_format format_ = index_format::megatron;
};

/// Exchanges two datasets. O(1), never throws.
inline void swap(indexed_dataset& a, indexed_dataset& b) noexcept { a.swap(b); }

}  // namespace multipack

// The view holds only a pointer into the dataset's mapping: iterators outlive the view.
namespace std::ranges {
template <class T>
inline constexpr bool enable_borrowed_range<multipack::unaligned_array_view<T>> = true;
}  // namespace std::ranges
