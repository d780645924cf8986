// Megatron indexed dataset: the real Alpaca files, writer -> reader round trips for every
// dtype, and every kind of corruption reported with the file and the right byte offset.

#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"
#include "multipack/data/length_list.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>  // mkfifo

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"

namespace fs = std::filesystem;
using namespace multipack;

static_assert(token_dataset<indexed_dataset>);
static_assert(std::ranges::random_access_range<unaligned_array_view<std::int64_t>>);
static_assert(std::ranges::view<unaligned_array_view<std::int64_t>>);

namespace {

using test::bytes;

using test::read_bytes;
using test::write_bytes;

fs::path with(const fs::path& prefix, const char* suffix) {
  fs::path p = prefix;
  p += suffix;
  return p;
}

// Little-endian field access on a byte buffer, written independently of the library.
template <class T>
void put(bytes& b, std::size_t offset, T v) {
  REQUIRE(offset + sizeof(T) <= b.size());
  std::memcpy(b.data() + offset, &v, sizeof(T));
}
template <class T>
void append(bytes& b, T v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

/// A finished one-sample dataset at `prefix`, and its bytes: what a failed or unfinished
/// writer of the same prefix must leave as it was.
struct earlier_dataset {
  fs::path prefix;
  bytes idx;
  bytes bin;

  explicit earlier_dataset(fs::path at) : prefix(std::move(at)) {
    indexed_dataset_writer w(prefix, token_dtype::int32);
    w.add_sample(std::vector<int>{1, 2, 3});
    w.finish();
    idx = read_bytes(with(prefix, ".idx"));
    bin = read_bytes(with(prefix, ".bin"));
  }
  [[nodiscard]] bool unchanged() const {
    return read_bytes(with(prefix, ".idx")) == idx && read_bytes(with(prefix, ".bin")) == bin;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// The embedded real data.

TEST_CASE("the embedded Alpaca set opens and agrees with lengths.txt") {
  const indexed_dataset ds(test::alpaca_prefix());
  const auto lengths = test::numbers_by_iostream<std::uint64_t>(test::source_dir() / "data/alpaca/lengths.txt");
  const auto prompts = test::numbers_by_iostream<std::uint64_t>(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  REQUIRE(!lengths.empty());
  REQUIRE(ds.size() == lengths.size());
  REQUIRE(prompts.size() == lengths.size());
  CHECK(ds.dtype() == token_dtype::uint16);  // data/alpaca/README.md
  CHECK_FALSE(ds.has_sequence_modes());
  CHECK(ds.prefix() == test::alpaca_prefix());

  const auto copied = ds.lengths();
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    CAPTURE(i);
    REQUIRE(ds.length(i) == lengths[i]);
    CHECK(copied[i] == lengths[i]);
    CHECK(static_cast<std::uint64_t>(ds.sizes()[i]) == lengths[i]);
    const auto t = ds.tokens<std::uint16_t>(i);
    REQUIRE(t.size() == lengths[i]);
    CHECK(t.front() == 1);  // bos
    CHECK(t.back() == 2);   // eos
    REQUIRE(prompts[i] >= 1);
    REQUIRE(prompts[i] < lengths[i]);
    CHECK(t[prompts[i] - 1] == 13);  // the prompt ends with "\n"

    std::vector<std::int32_t> as32(t.size());
    std::vector<std::int64_t> as64(t.size());
    ds.read_tokens(i, 0, std::span(as32));
    ds.read_tokens(i, 0, std::span(as64));
    CHECK(std::equal(t.begin(), t.end(), as32.begin(), as32.end()));
    CHECK(std::equal(t.begin(), t.end(), as64.begin(), as64.end()));
    if (i > 0) CHECK(t.data() == ds.tokens<std::uint16_t>(i - 1).data() + lengths[i - 1]);
    total += lengths[i];
  }
  // Back to back (checked above), so the .bin is exactly the tokens.
  CHECK(fs::file_size(ds.bin_path()) == total * sizeof(std::uint16_t));

  // One document per sample.
  const auto docs = ds.documents();
  REQUIRE(docs.size() == ds.size() + 1);
  CHECK(ds.document_count() == ds.size());
  for (std::size_t k = 0; k < docs.size(); ++k) CHECK(docs[k] == static_cast<std::int64_t>(k));
  CHECK(std::ranges::is_sorted(docs));
  CHECK(docs.front() == 0);
  CHECK(docs.back() == static_cast<std::int64_t>(ds.size()));

  CHECK_THROWS_AS((void)ds.tokens<std::int32_t>(0), option_error);
}

TEST_CASE("the embedded Alpaca set reads the same from several threads") {
  const indexed_dataset ds(test::alpaca_prefix());
  std::vector<std::uint64_t> sums(4, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < sums.size(); ++t)
    threads.emplace_back([&, t] {
      std::vector<std::int32_t> buffer;
      for (std::size_t i = 0; i < ds.size(); ++i) {
        buffer.resize(ds.length(i));
        ds.read_tokens(i, 0, std::span(buffer));
        for (auto v : buffer) sums[t] += static_cast<std::uint64_t>(v);
      }
    });
  for (auto& th : threads) th.join();
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < ds.size(); ++i)
    for (auto v : ds.tokens<std::uint16_t>(i)) expected += v;
  for (auto s : sums) CHECK(s == expected);
}

TEST_CASE("rewriting the Alpaca set with the writer reproduces both files byte for byte") {
  // The Alpaca files were written by a separate tool following Megatron's _IndexWriter;
  // our writer must produce the identical bytes from the same samples.
  const indexed_dataset ds(test::alpaca_prefix());
  const fs::path prefix = test::fresh_temp_dir("alpaca_rewrite") / "copy";
  {
    indexed_dataset_writer w(prefix, ds.dtype());
    const auto docs = ds.documents();
    std::size_t next_doc = 1;
    for (std::size_t i = 0; i < ds.size(); ++i) {
      w.add_sample(ds.tokens<std::uint16_t>(i));
      while (next_doc < docs.size() && docs[next_doc] == static_cast<std::int64_t>(i + 1)) {
        w.end_document();
        ++next_doc;
      }
    }
    w.finish();
  }
  CHECK(read_bytes(with(prefix, ".idx")) == read_bytes(with(test::alpaca_prefix(), ".idx")));
  CHECK(read_bytes(with(prefix, ".bin")) == read_bytes(with(test::alpaca_prefix(), ".bin")));
}

// ---------------------------------------------------------------------------------------------
// Writer -> reader round trips.

namespace {

// Values of T worth storing: the extremes and their neighbours. For the float dtypes, the
// integers at the edge of exact representation and the (exactly representable) INT64_MIN.
template <class T>
std::vector<std::int64_t> edge_values() {
  if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    return {0, 1, static_cast<std::int64_t>(L::min()), static_cast<std::int64_t>(L::max()),
            static_cast<std::int64_t>(L::min()) + 1, static_cast<std::int64_t>(L::max()) - 1};
  } else {
    const std::int64_t exact = std::int64_t{1} << std::numeric_limits<T>::digits;
    return {0, 1, -1, exact, -exact, exact - 1, std::numeric_limits<std::int64_t>::min(),
            std::int64_t{1} << 62};
  }
}

struct plan {
  std::vector<std::vector<std::int64_t>> samples;
  std::vector<std::int64_t> document_index{0};  // what Megatron's builder records
};

// Writes `p` with end_document() where the plan says, and finish(); returns the plan with the
// document index Megatron's rules give (end_document appends the current sample count).
template <class T>
plan write_plan(const fs::path& prefix) {
  const auto edges = edge_values<T>();
  plan p;
  indexed_dataset_writer w(prefix, dtype_of_v<T>);
  auto add = [&](std::vector<std::int64_t> s) {
    w.add_sample(s);
    p.samples.push_back(std::move(s));
  };
  auto end_doc = [&] {
    w.end_document();
    p.document_index.push_back(static_cast<std::int64_t>(p.samples.size()));
  };
  add(edges);                   // document 0: the edges, and an empty sample
  add({});
  end_doc();
  add({edges.back()});          // document 1: one token
  end_doc();
  end_doc();                    // document 2: empty (end_document twice)
  std::vector<std::int64_t> big(300'000);  // crosses the writer's chunk and 1 MiB buffer
  for (std::size_t k = 0; k < big.size(); ++k) big[k] = edges[k % edges.size()];
  add(big);
  add(edges);
  end_doc();
  add({edges[2], edges[3]});    // a trailing document without end_document: finish closes it
  CHECK(w.size() == p.samples.size());
  w.finish();
  CHECK(w.finished());
  p.document_index.push_back(static_cast<std::int64_t>(p.samples.size()));
  return p;
}

// The .idx Megatron's _IndexWriter writes for these samples, built here from its source:
// header, then sizes int32[n], pointers int64[n] (running byte offsets), doc index int64[d].
template <class T>
bytes megatron_idx(const plan& p) {
  bytes b = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  append<std::uint64_t>(b, 1);
  append<std::uint8_t>(b, static_cast<std::uint8_t>(dtype_of_v<T>));
  append<std::uint64_t>(b, p.samples.size());
  append<std::uint64_t>(b, p.document_index.size());
  for (const auto& s : p.samples) append<std::int32_t>(b, static_cast<std::int32_t>(s.size()));
  std::int64_t pointer = 0;
  for (const auto& s : p.samples) {
    append<std::int64_t>(b, pointer);
    pointer += static_cast<std::int64_t>(s.size() * sizeof(T));
  }
  for (auto d : p.document_index) append<std::int64_t>(b, d);
  return b;
}

template <class T>
bytes megatron_bin(const plan& p) {
  bytes b;
  for (const auto& s : p.samples)
    for (auto v : s) append<T>(b, static_cast<T>(v));
  return b;
}

}  // namespace

TEST_CASE_TEMPLATE("writer -> reader round trip keeps every value, for every dtype", T,
                   std::uint8_t, std::int8_t, std::int16_t, std::uint16_t, std::int32_t,
                   std::int64_t, float, double) {
  const fs::path dir = test::fresh_temp_dir(std::string("round_trip_") +
                                            std::string(dtype_name(dtype_of_v<T>)));
  const fs::path prefix = dir / "set";
  const plan p = write_plan<T>(prefix);

  // Byte-exact against Megatron's layout, and no temporary file left behind.
  CHECK(read_bytes(with(prefix, ".idx")) == megatron_idx<T>(p));
  CHECK(read_bytes(with(prefix, ".bin")) == megatron_bin<T>(p));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);

  const indexed_dataset ds(prefix);
  CHECK(ds.dtype() == dtype_of_v<T>);
  REQUIRE(ds.size() == p.samples.size());
  const auto docs = ds.documents();
  REQUIRE(docs.size() == p.document_index.size());
  CHECK(std::ranges::equal(docs, p.document_index));
  CHECK(ds.document_count() == p.document_index.size() - 1);

  for (std::size_t i = 0; i < ds.size(); ++i) {
    CAPTURE(i);
    const auto& expected = p.samples[i];
    REQUIRE(ds.length(i) == expected.size());
    const auto t = ds.tokens<T>(i);
    REQUIRE(t.size() == expected.size());
    for (std::size_t k = 0; k < t.size(); ++k) REQUIRE(t[k] == static_cast<T>(expected[k]));

    std::vector<std::int64_t> as64(expected.size());
    ds.read_tokens(i, 0, std::span(as64));
    CHECK(as64 == expected);

    // int32 output: exact where the value fits, a sample_error naming the value otherwise.
    const bool all_fit = std::ranges::all_of(expected, [](std::int64_t v) {
      return std::in_range<std::int32_t>(v);
    });
    std::vector<std::int32_t> as32(expected.size());
    if (all_fit) {
      ds.read_tokens(i, 0, std::span(as32));
      CHECK(std::equal(as32.begin(), as32.end(), expected.begin(), expected.end()));
    } else {
      const auto msg = test::message_of<sample_error>([&] { ds.read_tokens(i, 0, std::span(as32)); });
      CHECK(test::contains(msg, "sample " + std::to_string(i)));
      CHECK(test::contains(msg, ds.idx_path().string()));
    }

    // A window in the middle reads the same tokens as the whole.
    if (expected.size() >= 3) {
      std::vector<std::int64_t> mid(expected.size() - 2);
      ds.read_tokens(i, 1, std::span(mid));
      CHECK(std::equal(mid.begin(), mid.end(), expected.begin() + 1));
    }
  }
}

TEST_CASE("an empty dataset round-trips (empty .bin, document index [0])") {
  const fs::path prefix = test::fresh_temp_dir("empty") / "none";
  indexed_dataset_writer(prefix, token_dtype::int32).finish();
  CHECK(fs::file_size(with(prefix, ".bin")) == 0);
  const indexed_dataset ds(prefix);
  CHECK(ds.size() == 0);
  CHECK(ds.empty());
  REQUIRE(ds.documents().size() == 1);
  CHECK(ds.documents()[0] == 0);
  CHECK(ds.document_count() == 0);
  CHECK(ds.lengths().empty());
  CHECK_THROWS_AS((void)ds.length(0), option_error);
}

TEST_CASE("only empty samples: an empty .bin with zero pointers") {
  const fs::path prefix = test::fresh_temp_dir("only_empty") / "set";
  {
    indexed_dataset_writer w(prefix, token_dtype::uint16);
    w.add_sample(std::vector<int>{});
    w.add_sample(std::vector<int>{});
    w.end_document();
    w.finish();
  }
  const indexed_dataset ds(prefix);
  REQUIRE(ds.size() == 2);
  CHECK(ds.length(1) == 0);
  CHECK(ds.tokens<std::uint16_t>(1).empty());
  std::vector<std::int32_t> none;
  ds.read_tokens(1, 0, std::span(none));
}

TEST_CASE("the writer refuses a token the dtype cannot hold, and writes none of that sample") {
  const fs::path prefix = test::fresh_temp_dir("unrepresentable") / "set";
  indexed_dataset_writer w(prefix, token_dtype::uint16);
  w.add_sample(std::vector<int>{1, 2});
  auto msg = test::message_of<option_error>([&] { w.add_sample(std::vector<int>{3, 65535, 65536}); });
  CHECK(test::contains(msg, "sample 1"));
  CHECK(test::contains(msg, "token 2"));
  CHECK(test::contains(msg, "65536"));
  CHECK(test::contains(msg, "uint16"));
  msg = test::message_of<option_error>([&] { w.add_sample(std::vector<long long>{-1}); });
  CHECK(test::contains(msg, "-1"));
  w.add_sample(std::vector<unsigned>{7});
  w.finish();

  const indexed_dataset ds(prefix);
  REQUIRE(ds.size() == 2);
  CHECK(ds.tokens<std::uint16_t>(1).size() == 1);
  CHECK(ds.tokens<std::uint16_t>(1)[0] == 7);
  CHECK(fs::file_size(with(prefix, ".bin")) == 3 * sizeof(std::uint16_t));

  // float32 holds integers exactly only up to 2^24; int8 up to 127.
  indexed_dataset_writer f(test::fresh_temp_dir("unrepresentable_f32") / "set", token_dtype::float32);
  f.add_sample(std::vector<std::int64_t>{1 << 24});
  CHECK_THROWS_AS(f.add_sample(std::vector<std::int64_t>{(1 << 24) + 1}), option_error);
  indexed_dataset_writer i8(test::fresh_temp_dir("unrepresentable_i8") / "set", token_dtype::int8);
  CHECK_THROWS_AS(i8.add_sample(std::vector<int>{128}), option_error);
  CHECK_THROWS_AS(i8.add_sample(std::vector<std::uint64_t>{std::numeric_limits<std::uint64_t>::max()}),
                  option_error);
}

TEST_CASE("a writer destroyed before finish leaves no .idx and keeps the previous dataset") {
  const fs::path dir = test::fresh_temp_dir("unfinished");
  const fs::path prefix = dir / "set";
  const earlier_dataset before(prefix);
  {
    indexed_dataset_writer w(prefix, token_dtype::int32);
    w.add_sample(std::vector<int>{9, 9, 9, 9, 9});
    w.end_document();
  }  // no finish()
  CHECK(before.unchanged());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);

  const fs::path fresh = dir / "never";
  { indexed_dataset_writer w(fresh, token_dtype::int32); w.add_sample(std::vector<int>{1}); }
  CHECK_FALSE(fs::exists(with(fresh, ".idx")));
  CHECK_FALSE(fs::exists(with(fresh, ".bin")));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);
}

TEST_CASE("prepare() writes everything but leaves the old dataset in place; commit() replaces it") {
  const fs::path dir = test::fresh_temp_dir("two_phase");
  const fs::path prefix = dir / "set";
  const earlier_dataset before(prefix);
  {
    indexed_dataset_writer w(prefix, token_dtype::int32);
    CHECK_THROWS_AS(w.commit(), option_error);  // nothing prepared
    w.add_sample(std::vector<int>{7, 8});
    w.prepare();
    CHECK(before.unchanged());
    CHECK(fs::exists(with(prefix, ".idx.tmp")));
    CHECK_THROWS_AS(w.add_sample(std::vector<int>{1}), option_error);
    CHECK_THROWS_AS(w.end_document(), option_error);
    CHECK_THROWS_AS(w.prepare(), option_error);
    CHECK_THROWS_AS(w.finish(), option_error);
  }  // prepared, never committed: the temporaries go, the old dataset stays
  CHECK(before.unchanged());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);

  indexed_dataset_writer w(prefix, token_dtype::int32);
  w.add_sample(std::vector<int>{7, 8});
  w.prepare();
  w.commit();
  CHECK(w.finished());
  CHECK_THROWS_AS(w.commit(), option_error);
  const indexed_dataset ds(prefix);
  REQUIRE(ds.size() == 1);
  CHECK(ds.length(0) == 2);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);
}

TEST_CASE("a prepare() that cannot write the .idx (a full disk) keeps the old dataset, leaves no temporary") {
  REQUIRE(fs::exists("/dev/full"));  // the full disk: every write fails with ENOSPC (every Linux has it)
  const fs::path dir = test::fresh_temp_dir("full_disk");
  const fs::path prefix = dir / "set";
  const earlier_dataset before(prefix);
  {
    fs::create_symlink("/dev/full", with(prefix, ".idx.tmp"));  // the .idx is written through it
    indexed_dataset_writer w(prefix, token_dtype::int32);
    w.add_sample(std::vector<int>{7, 8});
    CHECK(test::contains(test::message_of<io_error>([&] { w.prepare(); }), with(prefix, ".idx.tmp").string()));
    CHECK_THROWS_AS(w.commit(), option_error);
  }
  CHECK(before.unchanged());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);
}

TEST_CASE("a commit() whose .bin cannot be put in place keeps the old dataset, .idx included") {
  // The failure injected: PREFIX.bin.tmp gone after prepare(), so its rename fails (as a
  // rename can on a file system remounted read-only, or out of quota for the directory).
  const fs::path dir = test::fresh_temp_dir("failed_commit");
  const fs::path prefix = dir / "set";
  const earlier_dataset before(prefix);
  {
    indexed_dataset_writer w(prefix, token_dtype::int32);
    w.add_sample(std::vector<int>{7, 8});
    w.prepare();
    fs::remove(with(prefix, ".bin.tmp"));
    CHECK(test::contains(test::message_of<io_error>([&] { w.commit(); }), with(prefix, ".bin.tmp").string()));
    CHECK(before.unchanged());
    CHECK(indexed_dataset(prefix).size() == 1);
    CHECK_FALSE(w.finished());
    CHECK_THROWS_AS(w.commit(), option_error);  // one try, as after any failure
  }
  CHECK(before.unchanged());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);  // no temporary left
}

TEST_CASE("a finished writer refuses further calls") {
  const fs::path prefix = test::fresh_temp_dir("finished") / "set";
  indexed_dataset_writer w(prefix, token_dtype::int64);
  w.finish();
  CHECK_THROWS_AS(w.finish(), option_error);
  CHECK_THROWS_AS(w.end_document(), option_error);
  CHECK_THROWS_AS(w.add_sample(std::vector<int>{1}), option_error);
  CHECK_THROWS_AS(indexed_dataset_writer(prefix, static_cast<token_dtype>(9)), option_error);
}

TEST_CASE("a prefix with a dot keeps the dot: PREFIX.idx, not a replaced extension") {
  const fs::path dir = test::fresh_temp_dir("dotted");
  indexed_dataset_writer w(dir / "set.v2", token_dtype::int32);
  w.add_sample(std::vector<int>{5});
  w.finish();
  CHECK(fs::exists(dir / "set.v2.idx"));
  CHECK(fs::exists(dir / "set.v2.bin"));
  CHECK(indexed_dataset(dir / "set.v2").size() == 1);
}

TEST_CASE("missing or unreadable files are io_errors naming the path") {
  const fs::path dir = test::fresh_temp_dir("io");
  auto msg = test::message_of<io_error>([&] { indexed_dataset ds(dir / "absent"); });
  CHECK(test::contains(msg, (dir / "absent.idx").string()));

  {
    indexed_dataset_writer w(dir / "no_bin", token_dtype::int32);
    w.add_sample(std::vector<int>{1});
    w.finish();
  }
  fs::remove(dir / "no_bin.bin");
  msg = test::message_of<io_error>([&] { indexed_dataset ds(dir / "no_bin"); });
  CHECK(test::contains(msg, (dir / "no_bin.bin").string()));

  fs::create_directories(dir / "folder.idx");
  msg = test::message_of<io_error>([&] { indexed_dataset ds(dir / "folder"); });
  CHECK(test::contains(msg, (dir / "folder.idx").string()));

  // A named pipe: open() of a FIFO waits for a writer, which never comes (this hung).
  REQUIRE(::mkfifo((dir / "pipe.idx").c_str(), 0600) == 0);
  msg = test::message_of<io_error>([&] { indexed_dataset ds(dir / "pipe"); });
  CHECK(test::contains(msg, (dir / "pipe.idx").string() + ": not a regular file"));
  msg = test::message_of<io_error>([&] { (void)read_length_list(dir / "pipe.idx"); });
  CHECK(test::contains(msg, "not a regular file"));

  msg = test::message_of<io_error>(
      [&] { indexed_dataset_writer w(dir / "no_such_dir" / "set", token_dtype::int32); });
  CHECK(test::contains(msg, (dir / "no_such_dir").string()));
}

// ---------------------------------------------------------------------------------------------
// Corruption. A small valid set: int32 tokens, samples {1,2,3} {4} | {5,6} {} |, so
// n = 4, d = 3; sizes at 34 + 4i, pointers at 34 + 4n + 8i, document index at 34 + 12n + 8k.

namespace {

constexpr std::size_t n_small = 4;
constexpr std::size_t d_small = 3;
constexpr std::size_t size_at(std::size_t i) { return 34 + 4 * i; }
constexpr std::size_t pointer_at(std::size_t i) { return 34 + 4 * n_small + 8 * i; }
constexpr std::size_t doc_at(std::size_t k) { return 34 + 12 * n_small + 8 * k; }
constexpr std::size_t idx_size_small = doc_at(d_small);

struct small_set {
  fs::path dir;
  fs::path prefix;
  bytes idx;
  bytes bin;
};

small_set make_small(const std::string& name) {
  small_set s;
  s.dir = test::fresh_temp_dir(name);
  s.prefix = s.dir / "small";
  indexed_dataset_writer w(s.prefix, token_dtype::int32);
  w.add_sample(std::vector<int>{1, 2, 3});
  w.add_sample(std::vector<int>{4});
  w.end_document();
  w.add_sample(std::vector<int>{5, 6});
  w.add_sample(std::vector<int>{});
  w.end_document();
  w.finish();
  s.idx = read_bytes(with(s.prefix, ".idx"));
  s.bin = read_bytes(with(s.prefix, ".bin"));
  REQUIRE(s.idx.size() == idx_size_small);
  REQUIRE(indexed_dataset(s.prefix).size() == n_small);
  return s;
}

// Writes `idx` (and `bin`) as a fresh prefix and returns the format_error's message.
std::string open_error(const small_set& s, const bytes& idx, const bytes* bin = nullptr) {
  static int counter = 0;
  const fs::path prefix = s.dir / ("case" + std::to_string(counter++));
  write_bytes(with(prefix, ".idx"), idx);
  write_bytes(with(prefix, ".bin"), bin ? *bin : s.bin);
  auto msg = test::message_of<format_error>([&] { indexed_dataset ds(prefix); });
  // Every message names the file it is about.
  CHECK(test::contains(msg, with(prefix, ".idx").string()));
  return msg;
}

std::string byte_at(std::size_t offset) { return ": byte " + std::to_string(offset) + ": "; }

/// Writes `idx` beside the set's .bin and opens it: returns whether it opened (then every
/// sample was read back whole) or false on the format_error it must otherwise throw.
bool opens_and_reads(const small_set& s, const bytes& idx) {
  const fs::path prefix = s.dir / "flip";
  write_bytes(with(prefix, ".idx"), idx);
  write_bytes(with(prefix, ".bin"), s.bin);
  try {
    const indexed_dataset ds(prefix);
    for (std::size_t i = 0; i < ds.size(); ++i) {
      std::vector<std::int64_t> out(ds.length(i));
      try {
        ds.read_tokens(i, 0, std::span(out));
      } catch (const sample_error&) {  // float dtype: a fractional value
      }
    }
    return true;
  } catch (const format_error&) {
    return false;
  }
}

}  // namespace

TEST_CASE("corruptions of the header are reported at their byte") {
  const small_set s = make_small("corrupt_header");

  SUBCASE("bad magic") {
    bytes b = s.idx;
    b[3] = 'X';
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(0)));
    CHECK(test::contains(msg, "magic"));
  }
  SUBCASE("another format entirely (fairseq's TNTIDX)") {
    bytes b = s.idx;
    std::memcpy(b.data(), "TNTIDX\0\0", 8);
    CHECK(test::contains(open_error(s, b), byte_at(0)));
  }
  SUBCASE("bad version") {
    bytes b = s.idx;
    put<std::uint64_t>(b, 9, 2);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(9)));
    CHECK(test::contains(msg, "version is 2"));
  }
  SUBCASE("unknown dtype codes") {
    for (unsigned code : {0u, 9u, 10u, 255u}) {
      CAPTURE(code);
      bytes b = s.idx;
      b[17] = static_cast<unsigned char>(code);
      const auto msg = open_error(s, b);
      CHECK(test::contains(msg, byte_at(17)));
      CHECK(test::contains(msg, "dtype code " + std::to_string(code)));
    }
  }
  SUBCASE("sequence count too big for the file") {
    bytes b = s.idx;
    put<std::uint64_t>(b, 18, n_small + 1);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(18)));
    CHECK(test::contains(msg, "sequence count " + std::to_string(n_small + 1)));
  }
  SUBCASE("sequence count so big that its byte size overflows 64 bits") {
    for (std::uint64_t n : {std::uint64_t{1} << 62, std::numeric_limits<std::uint64_t>::max()}) {
      bytes b = s.idx;
      put<std::uint64_t>(b, 18, n);
      CHECK(test::contains(open_error(s, b), byte_at(18)));
    }
  }
  SUBCASE("document count too big for the file") {
    bytes b = s.idx;
    put<std::uint64_t>(b, 26, d_small + 1);
    const auto msg = open_error(s, b);
    // Which count is wrong cannot be told from the size: both are named, with their bytes.
    CHECK(test::contains(msg, byte_at(18)));
    CHECK(test::contains(msg, "document count " + std::to_string(d_small + 1)));
    CHECK(test::contains(msg, "bytes 18 and 26"));
    put<std::uint64_t>(b, 26, std::numeric_limits<std::uint64_t>::max());
    CHECK(test::contains(open_error(s, b), "document count " + std::to_string(std::numeric_limits<std::uint64_t>::max())));
  }
  SUBCASE("document count 0") {
    bytes b(s.idx.begin(), s.idx.begin() + static_cast<std::ptrdiff_t>(doc_at(0)));
    put<std::uint64_t>(b, 26, 0);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(26)));
    CHECK(test::contains(msg, "document count is 0"));
  }
  SUBCASE("bytes after the document index") {
    bytes b = s.idx;
    b.push_back(0);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(idx_size_small)));
  }
}

TEST_CASE("a truncated .idx is reported at the field it cuts, or where the file ends") {
  const small_set s = make_small("corrupt_truncated");
  struct cut_case {
    std::size_t cut;
    std::size_t reported;
  };
  // In the header, the field that is cut; in the arrays, the end of the file.
  for (const cut_case c : {cut_case{0, 0}, cut_case{5, 0}, cut_case{9, 9}, cut_case{12, 9},
                           cut_case{17, 17}, cut_case{18, 18}, cut_case{25, 18},
                           cut_case{30, 26}, cut_case{34, 34}, cut_case{size_at(2), size_at(2)},
                           cut_case{pointer_at(1) + 3, pointer_at(1) + 3},
                           cut_case{doc_at(1), doc_at(1)}, cut_case{idx_size_small - 1, idx_size_small - 1}}) {
    CAPTURE(c.cut);
    const bytes b(s.idx.begin(), s.idx.begin() + static_cast<std::ptrdiff_t>(c.cut));
    const auto msg = open_error(s, b);
    if (c.cut < 34) {
      CHECK(test::contains(msg, byte_at(c.reported)));
    } else {
      CHECK(test::contains(msg, "truncated at byte " + std::to_string(c.reported)));
    }
  }
}

TEST_CASE("truncating a valid .idx at every byte offset is a format_error, never a crash") {
  const small_set s = make_small("truncate_every");
  for (std::size_t cut = 0; cut < s.idx.size(); ++cut) {
    CAPTURE(cut);
    const bytes b(s.idx.begin(), s.idx.begin() + static_cast<std::ptrdiff_t>(cut));
    (void)open_error(s, b);
  }
}

TEST_CASE("corruptions of sizes and pointers are reported at their byte") {
  const small_set s = make_small("corrupt_arrays");

  SUBCASE("negative size") {
    bytes b = s.idx;
    put<std::int32_t>(b, size_at(2), -5);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(size_at(2))));
    CHECK(test::contains(msg, "sequence 2 size -5 is negative"));
  }
  SUBCASE("size that runs past the end of the .bin") {
    bytes b = s.idx;
    put<std::int32_t>(b, size_at(2), std::numeric_limits<std::int32_t>::max());
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(pointer_at(2))));
    CHECK(test::contains(msg, ".bin"));
  }
  SUBCASE("pointer past the end of the .bin") {
    bytes b = s.idx;
    put<std::int64_t>(b, pointer_at(1), static_cast<std::int64_t>(s.bin.size()));
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(pointer_at(1))));
    CHECK(test::contains(msg, "sequence 1"));
    CHECK(test::contains(msg, std::to_string(s.bin.size()) + " bytes"));
  }
  SUBCASE("pointer near INT64_MAX (no overflow)") {
    bytes b = s.idx;
    put<std::int64_t>(b, pointer_at(0), std::numeric_limits<std::int64_t>::max() - 3);
    CHECK(test::contains(open_error(s, b), byte_at(pointer_at(0))));
  }
  SUBCASE("an empty sample's pointer past the end") {
    bytes b = s.idx;
    put<std::int64_t>(b, pointer_at(3), static_cast<std::int64_t>(s.bin.size()) + 4);
    CHECK(test::contains(open_error(s, b), byte_at(pointer_at(3))));
  }
  SUBCASE("negative pointer") {
    bytes b = s.idx;
    put<std::int64_t>(b, pointer_at(2), -8);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(pointer_at(2))));
    CHECK(test::contains(msg, "negative"));
  }
  SUBCASE("misaligned pointer") {
    bytes b = s.idx;
    put<std::int64_t>(b, pointer_at(1), 2);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(pointer_at(1))));
    CHECK(test::contains(msg, "not a multiple"));
  }
  SUBCASE("truncated .bin") {
    const bytes bin(s.bin.begin(), s.bin.end() - 4);  // cuts the last token of sample 2
    const auto msg = open_error(s, s.idx, &bin);
    CHECK(test::contains(msg, byte_at(pointer_at(2))));
    CHECK(test::contains(msg, ".bin"));
    CHECK(test::contains(msg, std::to_string(bin.size()) + " bytes"));
  }
}

TEST_CASE("corruptions of the document index are reported at their byte") {
  const small_set s = make_small("corrupt_documents");

  SUBCASE("does not start at 0") {
    bytes b = s.idx;
    put<std::int64_t>(b, doc_at(0), 1);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(doc_at(0))));
    CHECK(test::contains(msg, "expected 0"));
  }
  SUBCASE("decreases") {
    bytes b = s.idx;
    put<std::int64_t>(b, doc_at(1), static_cast<std::int64_t>(n_small) + 1);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(doc_at(2))));
    CHECK(test::contains(msg, "decrease"));
  }
  SUBCASE("negative entry") {
    bytes b = s.idx;
    put<std::int64_t>(b, doc_at(1), -1);
    CHECK(test::contains(open_error(s, b), byte_at(doc_at(1))));
  }
  SUBCASE("does not end at the sequence count") {
    bytes b = s.idx;
    put<std::int64_t>(b, doc_at(d_small - 1), static_cast<std::int64_t>(n_small) - 1);
    const auto msg = open_error(s, b);
    CHECK(test::contains(msg, byte_at(doc_at(d_small - 1))));
    CHECK(test::contains(msg, "sequence count " + std::to_string(n_small)));
  }
}

TEST_CASE("any single corrupted byte is caught or harmless: never a crash or a wild read") {
  const small_set s = make_small("flip_every");
  int opened = 0;
  for (std::size_t at = 0; at < s.idx.size(); ++at) {
    for (unsigned value : {0x00u, 0x01u, 0x7fu, 0x80u, 0xffu}) {
      bytes b = s.idx;
      b[at] = static_cast<unsigned char>(value);
      opened += opens_and_reads(s, b) ? 1 : 0;
    }
  }
  CHECK(opened > 0);  // harmless changes (token values, the dtype) exist and still open
}

TEST_CASE("a file with n bytes after the document index carries Megatron's sequence modes") {
  const small_set s = make_small("modes");
  bytes b = s.idx;
  for (std::size_t i = 0; i < n_small; ++i) b.push_back(static_cast<unsigned char>(i % 2));
  const fs::path prefix = s.dir / "with_modes";
  write_bytes(with(prefix, ".idx"), b);
  write_bytes(with(prefix, ".bin"), s.bin);
  const indexed_dataset ds(prefix);
  REQUIRE(ds.has_sequence_modes());
  REQUIRE(ds.sequence_modes().size() == n_small);
  for (std::size_t i = 0; i < n_small; ++i) CHECK(ds.sequence_modes()[i] == static_cast<std::int8_t>(i % 2));

  b.push_back(0);  // n + 1 trailing bytes: neither layout
  CHECK(test::contains(open_error(s, b), byte_at(idx_size_small)));
}

// ---------------------------------------------------------------------------------------------
// Access.

TEST_CASE("reads outside a sample or past the last sample throw option_error") {
  const small_set s = make_small("bounds");
  const indexed_dataset ds(s.prefix);
  std::vector<std::int32_t> out(2);
  std::vector<std::int32_t> none;
  const auto len = ds.length(0);  // 3

  CHECK_THROWS_AS(ds.read_tokens(ds.size(), 0, std::span(none)), option_error);
  CHECK_THROWS_AS((void)ds.length(ds.size()), option_error);
  CHECK_THROWS_AS((void)ds.tokens<std::int32_t>(ds.size()), option_error);
  CHECK_THROWS_AS(ds.read_tokens(0, len + 1, std::span(none)), option_error);
  CHECK_THROWS_AS(ds.read_tokens(0, len - 1, std::span(out)), option_error);
  CHECK_THROWS_AS(ds.read_tokens(0, std::numeric_limits<std::uint64_t>::max(), std::span(out)),
                  option_error);
  std::vector<std::int32_t> too_many(len + 1);
  const auto msg = test::message_of<option_error>([&] { ds.read_tokens(0, 0, std::span(too_many)); });
  CHECK(test::contains(msg, "sample 0"));

  // The edges that are inside: an empty read at the end, the last two tokens.
  ds.read_tokens(0, len, std::span(none));
  ds.read_tokens(0, len - 2, std::span(out));
  CHECK(out == std::vector<std::int32_t>{2, 3});
  std::int64_t fixed[2];
  ds.read_tokens(0, 1, std::span(fixed));
  CHECK(fixed[0] == 2);
  CHECK(fixed[1] == 3);
}

TEST_CASE("a moved-from dataset is empty, the moved-to one works") {
  const small_set s = make_small("move");
  indexed_dataset a(s.prefix);
  indexed_dataset b(std::move(a));
  CHECK(b.size() == n_small);
  CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move): documented state
  CHECK(a.documents().empty());
  CHECK_THROWS_AS((void)a.length(0), option_error);
  a = std::move(b);
  CHECK(a.size() == n_small);
  CHECK(a.tokens<std::int32_t>(2)[1] == 6);
}

// ---------------------------------------------------------------------------------------------
// fairseq's variant: the same magic and version, no document count, index or modes.

namespace {

/// fairseq's .idx of the samples a Megatron .idx describes: bytes 0-25 of the header, then the
/// sizes and pointers (which Megatron also writes back to back).
bytes fairseq_of(const bytes& megatron) {
  std::uint64_t n = 0;
  std::memcpy(&n, megatron.data() + 18, 8);
  REQUIRE(megatron.size() >= 34 + 12 * n);
  bytes b(26 + 12 * n);
  std::memcpy(b.data(), megatron.data(), 26);
  std::memcpy(b.data() + 26, megatron.data() + 34, 12 * n);
  return b;
}

}  // namespace

TEST_CASE("fairseq's layout: the Alpaca set without a document index reads the same, told apart by size") {
  const indexed_dataset megatron(test::alpaca_prefix());
  const fs::path dir = test::fresh_temp_dir("fairseq_alpaca");
  const fs::path prefix = dir / "alpaca_fairseq";
  const bytes idx = fairseq_of(read_bytes(with(test::alpaca_prefix(), ".idx")));
  write_bytes(with(prefix, ".idx"), idx);
  fs::copy_file(with(test::alpaca_prefix(), ".bin"), with(prefix, ".bin"));
  const indexed_dataset fairseq(prefix);
  CHECK(megatron.format() == index_format::megatron);
  CHECK(fairseq.format() == index_format::fairseq);
  CHECK(idx.size() == 26 + 12 * megatron.size());
  REQUIRE(fairseq.size() == megatron.size());
  CHECK(fairseq.dtype() == megatron.dtype());
  CHECK(fairseq.documents().empty());
  CHECK(fairseq.document_count() == 0);
  CHECK_FALSE(fairseq.has_sequence_modes());
  for (std::size_t i = 0; i < megatron.size(); ++i) {
    REQUIRE(fairseq.length(i) == megatron.length(i));
    std::vector<std::int32_t> a(megatron.length(i)), b(fairseq.length(i));
    megatron.read_tokens(i, 0, std::span(a));
    fairseq.read_tokens(i, 0, std::span(b));
    REQUIRE(a == b);
  }
}

TEST_CASE("a fairseq index whose samples do not lie back to back is an error at the pointer") {
  const small_set s = make_small("fairseq_gap");
  bytes b = fairseq_of(s.idx);
  REQUIRE(indexed_dataset(s.prefix).size() == n_small);
  put<std::int64_t>(b, 26 + 4 * n_small + 8, 8);  // sample 1 starts at 8, sample 0 ends at 12
  const auto msg = open_error(s, b);
  CHECK(test::contains(msg, byte_at(26 + 4 * n_small + 8)));
  CHECK(test::contains(msg, "back to back"));
}

TEST_CASE("a fairseq index truncated anywhere or with any byte changed: an error or a sound dataset") {
  const small_set s = make_small("fairseq_every");
  const bytes fairseq = fairseq_of(s.idx);
  {
    const fs::path prefix = s.dir / "whole";
    write_bytes(with(prefix, ".idx"), fairseq);
    write_bytes(with(prefix, ".bin"), s.bin);
    REQUIRE(indexed_dataset(prefix).format() == index_format::fairseq);
  }
  for (std::size_t cut = 0; cut < fairseq.size(); ++cut) {
    CAPTURE(cut);
    (void)open_error(s, bytes(fairseq.begin(), fairseq.begin() + static_cast<std::ptrdiff_t>(cut)));
  }
  int opened = 0;
  for (std::size_t at = 0; at < fairseq.size(); ++at)
    for (unsigned value : {0x00u, 0x01u, 0x80u, 0xffu}) {
      bytes b = fairseq;
      b[at] = static_cast<unsigned char>(value);
      opened += opens_and_reads(s, b) ? 1 : 0;
    }
  CHECK(opened > 0);
}
