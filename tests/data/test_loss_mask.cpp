// Loss masks: the real Alpaca prompt lengths against the real token set, text == binary ==
// per-token mask on every sample and many windows, generated edge cases, and every kind of
// bad file reported as an exception (never a crash).

#include "multipack/data/loss_mask.hpp"
#include "multipack/data/prompt_lengths_writer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/indexed_dataset_writer.hpp"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"
#include "support/token_masks.hpp"

namespace fs = std::filesystem;
using namespace multipack;

namespace {

using test::bytes;
constexpr std::int64_t ignore = -100;

using test::read_bytes;
using test::write_bytes;

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out << s;
  REQUIRE(out);
}

// resize + memcpy rather than insert: GCC 12 at -O3 warns falsely about insert's memcpy.
template <class T>
void append(bytes& b, T v) {
  const std::size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

template <class T>
void put(bytes& b, std::size_t offset, T v) {
  REQUIRE(offset + sizeof(T) <= b.size());
  std::memcpy(b.data() + offset, &v, sizeof(T));
}

// The binary form built by hand, from the documented layout (independent of the writer).
bytes binary_form(const std::vector<std::uint32_t>& prompts) {
  bytes b = {'M', 'P', 'P', 'R', 'O', 'M', 'P', 'T'};
  append(b, std::uint32_t{1});
  append(b, std::uint32_t{0});
  append(b, std::uint64_t{prompts.size()});
  for (const std::uint32_t p : prompts) append(b, p);
  return b;
}

// A per-token 0/1 mask, 0 for the prompt.
void write_token_mask(const fs::path& prefix, const std::vector<std::uint64_t>& lengths,
                      const std::vector<std::uint64_t>& prompts) {
  REQUIRE(lengths.size() == prompts.size());
  test::write_token_mask(prefix, lengths, [&](std::size_t i, std::size_t k) { return k >= prompts[i]; });
}

// Labels as the collator would hand them: distinct values that are never `ignore`.
std::vector<std::int64_t> fresh_labels(std::size_t n, std::int64_t base) {
  std::vector<std::int64_t> v(n);
  std::iota(v.begin(), v.end(), base);
  return v;
}

// What mask_labels must produce, computed by the test alone.
std::vector<std::int64_t> expected_labels(std::uint64_t prompt, std::uint64_t first, std::size_t n,
                                          std::int64_t base) {
  auto v = fresh_labels(n, base);
  for (std::size_t k = 0; k < n; ++k)
    if (first + k < prompt) v[k] = ignore;
  return v;
}

std::vector<std::int64_t> masked(const loss_mask& m, std::size_t sample, std::uint64_t first,
                                 std::size_t n, std::int64_t base) {
  auto v = fresh_labels(n, base);
  m.mask_labels(sample, first, std::span<std::int64_t>(v), ignore);
  return v;
}

// (first, size) windows of a sample of `length` tokens with `prompt` prompt tokens: whole,
// prompt only, response only, pieces across the boundary and in the middle, empty ends.
std::vector<std::pair<std::uint64_t, std::uint64_t>> windows(std::uint64_t length, std::uint64_t prompt,
                                                             std::uint64_t salt) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> w = {
      {0, length}, {0, prompt}, {prompt, length - prompt}, {length, 0}, {0, 0},
      {length / 3, length / 3}, {length / 2, length - length / 2}};
  if (prompt >= 1 && prompt + 1 <= length) w.emplace_back(prompt - 1, 2);
  if (prompt >= 3 && prompt + 5 <= length) w.emplace_back(prompt - 3, 8);
  if (length >= 2) w.emplace_back(1, length - 2);
  if (length > 0) {
    const std::uint64_t f = (salt * 2654435761u) % length;
    w.emplace_back(f, (salt * 40503u) % (length - f + 1));
  }
  return w;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The embedded real data.

TEST_CASE("Alpaca prompt_lengths.txt matches the Alpaca tokens and masks exactly the prompt") {
  const fs::path text = test::source_dir() / "data/alpaca/prompt_lengths.txt";
  const indexed_dataset ds(test::alpaca_prefix());
  const auto prompts = test::numbers_by_iostream<std::uint64_t>(text);
  REQUIRE(prompts.size() == 5000);

  const loss_mask m = loss_mask::open_prompt_lengths(text);
  CHECK_FALSE(m.empty());
  CHECK_FALSE(m.is_token_mask());
  CHECK(m.size() == 5000);
  CHECK(m.name() == text.string());
  m.check_matches(ds);

  for (std::size_t i = 0; i < ds.size(); ++i) {
    const std::uint64_t len = ds.length(i);
    REQUIRE(m.prompt_length(i) == prompts[i]);
    // Labels from the real tokens: the prompt part becomes ignore, the rest stays the tokens.
    std::vector<std::int64_t> labels(len);
    ds.read_tokens(i, 0, std::span<std::int64_t>(labels));
    auto expect = labels;
    for (std::size_t k = 0; k < prompts[i]; ++k) expect[k] = ignore;
    m.mask_labels(i, 0, std::span<std::int64_t>(labels), ignore);
    REQUIRE(labels == expect);
  }
}

TEST_CASE("text == binary (write_prompt_lengths) == token mask (uint8), on every sample and window") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_round_trip");
  const fs::path text = test::source_dir() / "data/alpaca/prompt_lengths.txt";
  const indexed_dataset ds(test::alpaca_prefix());
  const auto prompts = test::numbers_by_iostream<std::uint64_t>(text);
  std::vector<std::uint64_t> lengths(ds.size());
  for (std::size_t i = 0; i < ds.size(); ++i) lengths[i] = ds.length(i);

  const std::vector<std::uint32_t> prompts32(prompts.begin(), prompts.end());
  write_prompt_lengths(dir / "prompts.bin", prompts32);
  CHECK(read_bytes(dir / "prompts.bin") == binary_form(prompts32));
  CHECK_FALSE(fs::exists(dir / "prompts.bin.tmp"));
  write_token_mask(dir / "mask", lengths, prompts);

  const loss_mask from_text = loss_mask::open_prompt_lengths(text);
  const loss_mask from_binary = loss_mask::open_prompt_lengths(dir / "prompts.bin");
  const loss_mask from_tokens = loss_mask::open_token_mask(dir / "mask");
  const loss_mask from_memory = loss_mask::from_prompt_lengths(prompts32);
  CHECK(from_binary.size() == 5000);
  CHECK(from_tokens.size() == 5000);
  CHECK(from_tokens.is_token_mask());
  CHECK(from_tokens.name() == (dir / "mask.idx").string());
  CHECK(from_memory.name() == "prompt lengths");
  for (const loss_mask* m : {&from_text, &from_binary, &from_tokens, &from_memory}) m->check_matches(ds);
  for (std::size_t i = 0; i < prompts.size(); ++i) REQUIRE(from_binary.prompt_length(i) == prompts[i]);

  std::size_t checked = 0;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    for (const auto& [first, n] : windows(lengths[i], prompts[i], i)) {
      REQUIRE(first + n <= lengths[i]);
      const auto base = static_cast<std::int64_t>(i * 1000);
      const auto want = expected_labels(prompts[i], first, n, base);
      INFO("sample " << i << " window [" << first << ", " << first + n << ")");
      REQUIRE(masked(from_text, i, first, n, base) == want);
      REQUIRE(masked(from_binary, i, first, n, base) == want);
      REQUIRE(masked(from_tokens, i, first, n, base) == want);
      REQUIRE(masked(from_memory, i, first, n, base) == want);
      ++checked;
    }
  }
  CHECK(checked > 5 * ds.size());
}

TEST_CASE("a mask reads the same from several threads, and copies share it") {
  const loss_mask m = loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
  const indexed_dataset ds(test::alpaca_prefix());
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); i < ds.size(); i += 4) {
        const std::uint64_t len = ds.length(i);
        if (masked(m, i, 0, len, 7) != expected_labels(m.prompt_length(i), 0, len, 7)) ++bad[static_cast<std::size_t>(t)];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(bad == std::vector<int>(4, 0));

  loss_mask copy;
  {
    const loss_mask original = loss_mask::open_prompt_lengths(test::source_dir() / "data/alpaca/prompt_lengths.txt");
    copy = original;
  }
  CHECK(copy.size() == 5000);
  CHECK(masked(copy, 3, 0, ds.length(3), 0) == expected_labels(m.prompt_length(3), 0, ds.length(3), 0));
  const loss_mask moved = std::move(copy);
  CHECK(moved.prompt_length(4999) == m.prompt_length(4999));
}

// ---------------------------------------------------------------------------------------------
// Generated edge cases.

TEST_CASE("the empty mask masks nothing and matches anything") {
  const loss_mask m;
  CHECK(m.empty());
  CHECK(m.size() == 0);
  CHECK(m.name() == "no loss mask");
  const in_memory_dataset<> ds{{1, 2, 3}, {4}};
  m.check_matches(ds);
  auto labels = fresh_labels(3, 10);
  m.mask_labels(0, 0, std::span<std::int64_t>(labels), ignore);
  m.mask_labels(123456, 99, std::span<std::int64_t>(labels), ignore);
  CHECK(labels == fresh_labels(3, 10));
}

TEST_CASE("prompt length 0 masks nothing, == length masks everything") {
  const in_memory_dataset<> ds{{1, 2, 3}, {4, 5, 6}, {7, 8}, {}};
  const loss_mask m = loss_mask::from_prompt_lengths({0, 3, 1, 0}, "gen");
  m.check_matches(ds);
  CHECK(masked(m, 0, 0, 3, 0) == fresh_labels(3, 0));
  CHECK(masked(m, 1, 0, 3, 0) == std::vector<std::int64_t>(3, ignore));
  CHECK(masked(m, 1, 1, 2, 0) == std::vector<std::int64_t>(2, ignore));
  CHECK(masked(m, 2, 0, 2, 5) == std::vector<std::int64_t>{ignore, 6});
  CHECK(masked(m, 2, 1, 1, 5) == std::vector<std::int64_t>{5});
  CHECK(masked(m, 3, 0, 0, 0).empty());

  // Other label types, and an ignore value given as a plain int.
  std::vector<std::int32_t> labels32 = {9, 9, 9};
  m.mask_labels(1, 1, std::span<std::int32_t>(labels32).first(2), -1);
  CHECK(labels32 == std::vector<std::int32_t>{-1, -1, 9});

  // The same through the token form.
  const fs::path dir = test::fresh_temp_dir("loss_mask_edges");
  write_token_mask(dir / "mask", {3, 3, 2, 0}, {0, 3, 1, 0});
  const loss_mask t = loss_mask::open_token_mask(dir / "mask");
  t.check_matches(ds);
  for (std::size_t i = 0; i < 4; ++i) {
    const std::uint64_t len = ds.length(i);
    for (std::uint64_t first = 0; first <= len; ++first)
      for (std::uint64_t n = 0; first + n <= len; ++n)
        REQUIRE(masked(t, i, first, n, 0) == masked(m, i, first, n, 0));
  }
}

TEST_CASE("a token mask of any integer dtype: nonzero carries loss") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_dtypes");
  const in_memory_dataset<> ds{{1, 2, 3, 4, 5}, {6, 7}};
  const std::vector<std::vector<std::int64_t>> values = {{0, 7, 0, -1, 1}, {0, 0}};
  const std::vector<std::vector<std::int64_t>> want = {{ignore, 1, ignore, 3, 4}, {ignore, ignore}};
  for (const token_dtype d : {token_dtype::uint8, token_dtype::int8, token_dtype::int16,
                              token_dtype::uint16, token_dtype::int32, token_dtype::int64}) {
    CAPTURE(dtype_name(d));
    const fs::path prefix = dir / std::string(dtype_name(d));
    {
      indexed_dataset_writer w(prefix, d);
      for (auto v : values) {
        if (d == token_dtype::uint8 || d == token_dtype::uint16)
          std::replace(v.begin(), v.end(), std::int64_t{-1}, std::int64_t{200});
        w.add_sample(v);
      }
      w.finish();
    }
    const loss_mask m = loss_mask::open_token_mask(prefix);
    m.check_matches(ds);
    for (std::size_t i = 0; i < 2; ++i) {
      const std::size_t n = values[i].size();
      auto labels = fresh_labels(n, 0);
      m.mask_labels(i, 0, std::span<std::int64_t>(labels), ignore);
      CHECK(labels == want[i]);
    }
  }

  // A float mask is refused: more likely the wrong file than a mask.
  {
    indexed_dataset_writer w(dir / "float", token_dtype::float32);
    w.add_sample(std::vector<int>{0, 1});
    w.finish();
  }
  const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_token_mask(dir / "float"); });
  CHECK(test::contains(msg, (dir / "float.idx").string()));
  CHECK(test::contains(msg, "float32"));

  // A prompt-length file given as a token mask's prefix: the error says where it goes.
  const fs::path prompts = test::source_dir() / "data/alpaca/prompt_lengths.txt";
  const auto wrong = test::message_of<option_error>([&] { (void)loss_mask::open_token_mask(prompts); });
  CHECK(test::contains(wrong, prompts.string() + ": a file, not the prefix of a token mask"));
  CHECK(test::contains(wrong, "--prompt-lengths"));
}

TEST_CASE("a mask that does not describe the dataset's samples is a format_error naming both numbers") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_mismatch");
  const indexed_dataset ds(test::alpaca_prefix());
  const auto prompts = test::numbers_by_iostream<std::uint64_t>(test::source_dir() / "data/alpaca/prompt_lengths.txt");

  SUBCASE("4,999 lines for 5,000 samples") {
    std::string s;
    for (std::size_t i = 0; i + 1 < prompts.size(); ++i) s += std::to_string(prompts[i]) + "\n";
    write_text(dir / "short.txt", s);
    const loss_mask m = loss_mask::open_prompt_lengths(dir / "short.txt");
    CHECK(m.size() == 4999);
    const auto msg = test::message_of<format_error>([&] { m.check_matches(ds); });
    CHECK(test::contains(msg, (dir / "short.txt").string()));
    CHECK(test::contains(msg, "4999"));
    CHECK(test::contains(msg, "5000"));
  }
  SUBCASE("a prompt longer than its sample (real data)") {
    std::string s;
    for (std::size_t i = 0; i < prompts.size(); ++i)
      s += std::to_string(i == 1234 ? ds.length(1234) + 1 : prompts[i]) + "\n";
    write_text(dir / "long.txt", s);
    const loss_mask m = loss_mask::open_prompt_lengths(dir / "long.txt");
    const auto msg = test::message_of<format_error>([&] { m.check_matches(ds); });
    CHECK(test::contains(msg, (dir / "long.txt").string()));
    CHECK(test::contains(msg, "sample 1234"));
    CHECK(test::contains(msg, std::to_string(ds.length(1234) + 1)));
    CHECK(test::contains(msg, std::to_string(ds.length(1234))));
  }
  SUBCASE("a prompt longer than its sample (generated)") {
    const in_memory_dataset<> small{{1, 2}, {1, 2, 3}};
    const auto msg = test::message_of<format_error>(
        [&] { loss_mask::from_prompt_lengths({2, 5}, "gen prompts").check_matches(small); });
    CHECK(test::contains(msg, "gen prompts"));
    CHECK(test::contains(msg, "sample 1"));
    CHECK(test::contains(msg, "prompt length 5"));
    CHECK(test::contains(msg, "length 3"));
    // More entries than samples.
    const auto more = test::message_of<format_error>(
        [&] { loss_mask::from_prompt_lengths({1, 1, 1}, "gen prompts").check_matches(small); });
    CHECK(test::contains(more, "3 samples"));
    CHECK(test::contains(more, "has 2"));
  }
  SUBCASE("a token mask with a different sample count") {
    const in_memory_dataset<> small{{1, 2}, {1, 2, 3}};
    write_token_mask(dir / "three", {2, 3, 1}, {1, 1, 0});
    const loss_mask m = loss_mask::open_token_mask(dir / "three");
    const auto msg = test::message_of<format_error>([&] { m.check_matches(small); });
    CHECK(test::contains(msg, (dir / "three.idx").string()));
    CHECK(test::contains(msg, "3 samples"));
    CHECK(test::contains(msg, "has 2"));
  }
  SUBCASE("a token mask with a sample of a different length") {
    const in_memory_dataset<> small{{1, 2}, {1, 2, 3}, {4}};
    write_token_mask(dir / "off", {2, 4, 1}, {1, 1, 0});
    const loss_mask m = loss_mask::open_token_mask(dir / "off");
    const auto msg = test::message_of<format_error>([&] { m.check_matches(small); });
    CHECK(test::contains(msg, (dir / "off.idx").string()));
    CHECK(test::contains(msg, "sample 1"));
    CHECK(test::contains(msg, "mask length 4"));
    CHECK(test::contains(msg, "length 3"));
  }
}

TEST_CASE("mask_labels outside the mask is an option_error and leaves the labels untouched") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_misuse");
  const loss_mask p = loss_mask::from_prompt_lengths({2, 1}, "gen");
  write_token_mask(dir / "mask", {3, 2}, {2, 1});
  const loss_mask t = loss_mask::open_token_mask(dir / "mask");
  auto labels = fresh_labels(2, 0);
  const std::span<std::int64_t> s(labels);
  for (const loss_mask* m : {&p, &t}) {
    const auto msg = test::message_of<option_error>([&] { m->mask_labels(2, 0, s, ignore); });
    CHECK(test::contains(msg, m->name()));
    CHECK(test::contains(msg, "sample 2"));
    CHECK(test::contains(msg, "2 samples"));
    CHECK_THROWS_AS(m->mask_labels(std::numeric_limits<std::size_t>::max(), 0, s, ignore), option_error);
  }
  // Token form: the range must lie inside the mask sample.
  const auto msg = test::message_of<option_error>([&] { t.mask_labels(1, 1, s, ignore); });
  CHECK(test::contains(msg, "[1, 3)"));
  CHECK(test::contains(msg, "sample 1 of length 2"));
  CHECK_THROWS_AS(t.mask_labels(0, 4, s.first(0), ignore), option_error);
  CHECK_THROWS_AS(t.mask_labels(0, std::numeric_limits<std::uint64_t>::max(), s, ignore), option_error);
  // Prompt form: a range that overflows.
  CHECK_THROWS_AS(p.mask_labels(0, std::numeric_limits<std::uint64_t>::max(), s, ignore), option_error);
  CHECK(labels == fresh_labels(2, 0));
  // prompt_length is for the prompt form only.
  CHECK_THROWS_AS((void)t.prompt_length(0), option_error);
  CHECK_THROWS_AS((void)p.prompt_length(2), option_error);
  CHECK_THROWS_AS((void)loss_mask().prompt_length(0), option_error);
}

// ---------------------------------------------------------------------------------------------
// Bad files.

TEST_CASE("a binary prompt-length file cut at any byte, or damaged, is a format_error") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_bad_binary");
  const fs::path path = dir / "p.bin";
  const std::vector<std::uint32_t> prompts = {5, 0, 4294967295u};
  write_prompt_lengths(path, prompts);
  const bytes good = read_bytes(path);
  REQUIRE(good.size() == 24 + 12);
  REQUIRE(good == binary_form(prompts));
  {
    const loss_mask m = loss_mask::open_prompt_lengths(path);
    CHECK(m.size() == 3);
    CHECK(m.prompt_length(2) == 4294967295u);
  }

  SUBCASE("truncated at every byte offset") {
    for (std::size_t cut = 0; cut < good.size(); ++cut) {
      CAPTURE(cut);
      write_bytes(path, bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
      const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
      CHECK(test::contains(msg, path.string()));
      CHECK(test::contains(msg, "byte "));
    }
  }
  SUBCASE("bad magic") {
    bytes b = good;
    b[7] = 'X';
    write_bytes(path, b);
    const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
    CHECK(test::contains(msg, path.string() + ": byte 0: bad magic"));
    CHECK(test::contains(msg, "MPPROMPT"));
  }
  SUBCASE("another binary format altogether") {
    bytes b = good;
    std::memcpy(b.data(), "MMIDIDX\0", 8);
    write_bytes(path, b);
    const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
    CHECK(test::contains(msg, path.string() + ": byte 0: not a prompt-length file"));
  }
  SUBCASE("bad version") {
    bytes b = good;
    put(b, 8, std::uint32_t{2});
    write_bytes(path, b);
    const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
    CHECK(test::contains(msg, path.string() + ": byte 8: version is 2, expected 1"));
  }
  SUBCASE("reserved field not 0") {
    bytes b = good;
    put(b, 12, std::uint32_t{1});
    write_bytes(path, b);
    const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
    CHECK(test::contains(msg, path.string() + ": byte 12: reserved"));
  }
  SUBCASE("trailing bytes") {
    for (std::size_t extra : {1u, 3u, 4u, 100u}) {
      CAPTURE(extra);
      bytes b = good;
      b.resize(b.size() + extra, 0);
      write_bytes(path, b);
      const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
      CHECK(test::contains(msg, path.string() + ": byte 36: " + std::to_string(extra) + " trailing bytes"));
    }
  }
  SUBCASE("a count that does not fit the file, up to 2^64 - 1") {
    for (std::uint64_t count : {std::uint64_t{4}, std::uint64_t{1} << 62, std::uint64_t{1} << 63,
                                std::numeric_limits<std::uint64_t>::max()}) {
      CAPTURE(count);
      bytes b = good;
      put(b, 16, count);
      write_bytes(path, b);
      const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
      CHECK(test::contains(msg, path.string() + ": byte 24: truncated"));
    }
  }
  SUBCASE("a count smaller than the file") {
    bytes b = good;
    put(b, 16, std::uint64_t{2});
    write_bytes(path, b);
    const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(path); });
    CHECK(test::contains(msg, "byte 32: 4 trailing bytes"));
  }
}

TEST_CASE("a binary file of no samples opens; an empty file does not") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_zero");
  write_prompt_lengths(dir / "zero.bin", std::span<const std::uint32_t>());
  CHECK(read_bytes(dir / "zero.bin").size() == 24);
  const loss_mask m = loss_mask::open_prompt_lengths(dir / "zero.bin");
  CHECK_FALSE(m.empty());
  CHECK(m.size() == 0);
  m.check_matches(in_memory_dataset<>{});
  CHECK_THROWS_AS(m.check_matches(in_memory_dataset<>{{1}}), format_error);

  write_text(dir / "empty.txt", "");
  const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(dir / "empty.txt"); });
  CHECK(test::contains(msg, (dir / "empty.txt").string()));
  CHECK(test::contains(msg, "empty file"));
}

TEST_CASE("a text prompt-length file with a bad line is a format_error naming file and line") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_bad_text");
  write_text(dir / "p.txt", "12\n7\n-3\n");
  const auto msg = test::message_of<format_error>([&] { (void)loss_mask::open_prompt_lengths(dir / "p.txt"); });
  CHECK(test::contains(msg, (dir / "p.txt").string() + ": line 3"));
  write_text(dir / "q.txt", "12\r\n 7\t\n0");
  const loss_mask m = loss_mask::open_prompt_lengths(dir / "q.txt");
  CHECK(m.size() == 3);
  CHECK(m.prompt_length(1) == 7);
}

TEST_CASE("missing files are io_errors naming them") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_missing");
  const auto a = test::message_of<io_error>([&] { (void)loss_mask::open_prompt_lengths(dir / "nope.txt"); });
  CHECK(test::contains(a, (dir / "nope.txt").string()));
  const auto b = test::message_of<io_error>([&] { (void)loss_mask::open_token_mask(dir / "nope"); });
  CHECK(test::contains(b, (dir / "nope.idx").string()));
  const auto c = test::message_of<io_error>([&] { (void)loss_mask::open_prompt_lengths(dir); });
  CHECK(test::contains(c, dir.string()));

  const std::vector<std::uint32_t> p = {1};
  const auto d = test::message_of<io_error>([&] { write_prompt_lengths(dir / "no/such/dir/p.bin", p); });
  CHECK(test::contains(d, (dir / "no/such/dir/p.bin.tmp").string()));
}

TEST_CASE("prompt_lengths_writer::add refuses a negative or too large length, naming it") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_add_range");
  prompt_lengths_writer writer(dir / "p.bin");
  writer.add(3);  // an int: range-checked, not converted silently
  const int minus_one = -1;
  CHECK(test::contains(test::message_of<option_error>([&] { writer.add(minus_one); }),
                       "prompt length -1 of sample 1 is not one of 0 to 4294967295"));
  CHECK_THROWS_AS(writer.add(std::int64_t{1} << 32), option_error);
  writer.add(std::uint64_t{7});
  writer.finish();
  const loss_mask m = loss_mask::open_prompt_lengths(dir / "p.bin");
  REQUIRE(m.size() == 2);  // nothing of the refused ones was written
  CHECK(m.prompt_length(0) == 3);
  CHECK(m.prompt_length(1) == 7);
}

TEST_CASE("write_prompt_lengths replaces an existing file whole") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_replace");
  const std::vector<std::uint32_t> a = {1, 2, 3, 4}, b = {9};
  write_prompt_lengths(dir / "p.bin", a);
  const loss_mask before = loss_mask::open_prompt_lengths(dir / "p.bin");  // keeps the old mapping
  write_prompt_lengths(dir / "p.bin", b);
  const loss_mask after = loss_mask::open_prompt_lengths(dir / "p.bin");
  CHECK(after.size() == 1);
  CHECK(after.prompt_length(0) == 9);
  CHECK(before.size() == 4);  // the rename left the old inode, and its mapping, intact
  CHECK(before.prompt_length(3) == 4);
  CHECK_FALSE(fs::exists(dir / "p.bin.tmp"));
}

TEST_CASE("a dataset and its prompt lengths prepared before either is committed: a companion that fails changes neither") {
  REQUIRE(fs::exists("/dev/full"));  // the full disk: every write fails with ENOSPC (every Linux has it)
  const fs::path dir = test::fresh_temp_dir("loss_mask_two_phase");
  const fs::path prefix = dir / "set";
  const fs::path prompts = dir / "set.prompt_lengths";
  const auto convert = [&](const std::vector<std::vector<int>>& samples, bool full_disk) {
    if (full_disk) fs::create_symlink("/dev/full", dir / "set.prompt_lengths.tmp");
    indexed_dataset_writer tokens(prefix, token_dtype::int32);
    prompt_lengths_writer lengths(prompts);
    for (const auto& sample : samples) {
      tokens.add_sample(sample);
      lengths.add(sample.size() / 2);
    }
    tokens.prepare();
    lengths.prepare();
    tokens.commit();
    lengths.commit();
  };
  convert({{1, 2, 3}, {4, 5}}, false);
  const bytes idx_before = read_bytes(dir / "set.idx");
  const bytes bin_before = read_bytes(dir / "set.bin");
  const bytes prompts_before = read_bytes(prompts);

  CHECK(test::contains(test::message_of<io_error>([&] { convert({{6, 7, 8, 9}}, true); }),
                       (dir / "set.prompt_lengths.tmp").string() + ": write failed"));
  CHECK(read_bytes(dir / "set.idx") == idx_before);
  CHECK(read_bytes(dir / "set.bin") == bin_before);
  CHECK(read_bytes(prompts) == prompts_before);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 3);  // no temporary

  convert({{6, 7, 8, 9}}, false);
  const indexed_dataset ds(prefix);
  const loss_mask m = loss_mask::open_prompt_lengths(prompts);
  REQUIRE(ds.size() == 1);
  REQUIRE(m.size() == 1);
  CHECK(m.prompt_length(0) == 2);
}

TEST_CASE("prompt_lengths_writer: prepare() leaves the old file, commit() replaces it; out of order is an option_error") {
  const fs::path dir = test::fresh_temp_dir("loss_mask_prepare");
  const std::vector<std::uint32_t> a = {1, 2}, b = {9};
  write_prompt_lengths(dir / "p.bin", a);
  const bytes before = read_bytes(dir / "p.bin");
  {
    prompt_lengths_writer writer(dir / "p.bin");
    CHECK_THROWS_AS(writer.commit(), option_error);
    writer.add(b);
    writer.prepare();
    CHECK(read_bytes(dir / "p.bin") == before);
    CHECK_THROWS_AS(writer.add(1), option_error);
    CHECK_THROWS_AS(writer.prepare(), option_error);
    CHECK_THROWS_AS(writer.finish(), option_error);
  }  // never committed
  CHECK(read_bytes(dir / "p.bin") == before);
  CHECK_FALSE(fs::exists(dir / "p.bin.tmp"));
  prompt_lengths_writer writer(dir / "p.bin");
  writer.add(b);
  writer.prepare();
  writer.commit();
  CHECK_THROWS_AS(writer.commit(), option_error);
  CHECK_THROWS_AS(writer.add(1), option_error);
  CHECK(loss_mask::open_prompt_lengths(dir / "p.bin").prompt_length(0) == 9);
  CHECK_FALSE(fs::exists(dir / "p.bin.tmp"));
}

TEST_CASE("prompt_lengths_writer: a failed write leaves it unusable, not writing on after a gap") {
  REQUIRE(fs::exists("/dev/full"));  // the full disk: every write fails with ENOSPC (every Linux has it)
  const fs::path dir = test::fresh_temp_dir("loss_mask_write_failed");
  fs::create_symlink("/dev/full", dir / "p.bin.tmp");
  {
    prompt_lengths_writer writer(dir / "p.bin");
    const std::vector<std::uint32_t> many(300'000, 7);  // 1.2 MB: more than the 1 MiB buffer, so it writes
    CHECK_THROWS_AS(writer.add(std::span<const std::uint32_t>(many)), io_error);
    CHECK(test::contains(test::message_of<option_error>([&] { writer.add(1); }), "after an earlier write failed"));
    CHECK_THROWS_AS(writer.finish(), option_error);
  }
  CHECK_FALSE(fs::exists(dir / "p.bin"));
  CHECK_FALSE(fs::exists(dir / "p.bin.tmp"));
}

TEST_CASE("prompt-length files named for their prefixes are put in the prefixes' order; others keep their places") {
  namespace fs = std::filesystem;
  const fs::path dir = test::fresh_temp_dir("prompt_files_order");
  std::vector<fs::path> prefixes;  // natural order, as a directory's shards are listed
  for (int k = 0; k < 12; ++k) prefixes.push_back(dir / ("shard_" + std::to_string(k)));
  const auto named = [](const fs::path& prefix) { return fs::path(prefix) += ".prompt_lengths"; };
  std::vector<fs::path> in_order;
  for (const fs::path& p : prefixes) in_order.push_back(named(p));

  // A shell pattern's order (shard_0, shard_1, shard_10, shard_11, shard_2, ...), one file
  // spelled another way: each file goes with its shard.
  std::vector<fs::path> listed = in_order;
  std::sort(listed.begin(), listed.end());
  REQUIRE(listed != in_order);
  listed[5] = dir / "." / listed[5].filename();
  const std::vector<fs::path> ordered = prompt_length_files_in_prefix_order(listed, prefixes);
  REQUIRE(ordered.size() == prefixes.size());
  for (std::size_t k = 0; k < prefixes.size(); ++k)
    CHECK(fs::weakly_canonical(ordered[k]) == fs::weakly_canonical(in_order[k]));

  // Files not named for the prefixes keep their places, as do named ones where they belong.
  std::vector<fs::path> other;
  for (std::size_t k = 0; k < prefixes.size(); ++k) other.push_back(dir / ("part-" + std::to_string(k)));
  other[3] = in_order[3];
  CHECK(prompt_length_files_in_prefix_order(other, prefixes) == other);
  // A prefix given twice has one name for two places: by position.
  const std::vector<fs::path> twice = {prefixes[0], prefixes[0], prefixes[1]};
  const std::vector<fs::path> twice_files = {in_order[0], in_order[0], in_order[1]};
  CHECK(prompt_length_files_in_prefix_order(twice_files, twice) == twice_files);

  // Named for another prefix than the one at its place, among files not so named: a guess, refused.
  other[3] = in_order[4];
  CHECK(test::contains(test::message_of<option_error>([&] { (void)prompt_length_files_in_prefix_order(other, prefixes); }),
                       "shard_4.prompt_lengths is named for prefix 5"));
  // Two files named for one prefix: not a pairing by name either.
  std::vector<fs::path> doubled = in_order;
  doubled[1] = in_order[0];
  CHECK(test::contains(test::message_of<option_error>([&] { (void)prompt_length_files_in_prefix_order(doubled, prefixes); }),
                       "shard_0.prompt_lengths is named for prefix 1"));
  CHECK(test::contains(test::message_of<option_error>([&] {
                         (void)prompt_length_files_in_prefix_order(std::vector<fs::path>(in_order.begin(), in_order.end() - 1), prefixes);
                       }),
                       "11 prompt-length files for 12 prefixes"));
}
