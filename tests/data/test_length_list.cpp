// Length lists: the real files, every accepted spelling, and errors naming file and line.

#include "multipack/data/length_list.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "multipack/data/indexed_dataset.hpp"
#include "support/expect.hpp"
#include "support/paths.hpp"

namespace fs = std::filesystem;
using namespace multipack;

namespace {



std::string parse_error(std::string_view text) {
  return test::message_of<format_error>([&] { (void)parse_length_list(text, "lengths.txt"); });
}

}  // namespace

TEST_CASE("the embedded lengths files read as iostream reads them, and match the dataset") {
  const fs::path dir = test::source_dir() / "data/alpaca";
  const auto lengths = read_length_list(dir / "lengths.txt");
  const auto prompts = read_length_list(dir / "prompt_lengths.txt");
  CHECK(lengths == test::numbers_by_iostream<std::uint32_t>(dir / "lengths.txt"));
  CHECK(prompts == test::numbers_by_iostream<std::uint32_t>(dir / "prompt_lengths.txt"));
  CHECK(lengths == indexed_dataset(test::alpaca_prefix()).lengths());
}

TEST_CASE("accepted spellings: trailing newline or not, CRLF, spaces and tabs, leading zeros") {
  const std::vector<std::uint32_t> expected = {1, 22, 333};
  for (const char* text : {"1\n22\n333", "1\n22\n333\n", "1\r\n22\r\n333\r\n", "1\r\n22\r\n333",
                           " 1 \n\t22\t\n  333  \r\n", "001\n022\n0333\n"}) {
    CAPTURE(text);
    CHECK(parse_length_list(text, "t") == expected);
  }
  CHECK(parse_length_list("", "t").empty());
  CHECK(parse_length_list("0\n", "t") == std::vector<std::uint32_t>{0});
  CHECK(parse_length_list("4294967295", "t") == std::vector<std::uint32_t>{4294967295u});
}

TEST_CASE("each bad line is a format_error naming the file, the 1-based line and the text") {
  struct bad {
    const char* text;
    int line;
    const char* shown;
    const char* why;
  };
  for (const bad b : {bad{"1\n\n3\n", 2, "''", "empty"}, bad{"\n", 1, "''", "empty"},
                      bad{"1\n2\n\n", 3, "''", "empty"}, bad{"1\n   \n2", 2, "''", "empty"},
                      bad{"1\nx\n", 2, "'x'", "not a non-negative integer"},
                      bad{"1\n2\n-5\n", 3, "'-5'", "negative"},
                      bad{"4294967296\n", 1, "'4294967296'", "larger than 4294967295"},
                      bad{"99999999999999999999999\n", 1, "'99999999999999999999999'", "larger"},
                      bad{"12.5", 1, "'12.5'", "not a non-negative integer"},
                      bad{"1e3", 1, "'1e3'", "not a non-negative"},
                      bad{"+5", 1, "'+5'", "not a non-negative"},
                      bad{"0x10", 1, "'0x10'", "not a non-negative"},
                      bad{"1 2", 1, "'1 2'", "not a non-negative"},
                      bad{"7\n8\r9\n", 2, "'8\\x0d9'", "not a non-negative"}}) {
    CAPTURE(b.text);
    const auto msg = parse_error(b.text);
    CHECK(test::contains(msg, "lengths.txt: line " + std::to_string(b.line) + ": "));
    CHECK(test::contains(msg, b.shown));
    CHECK(test::contains(msg, b.why));
  }
}

TEST_CASE("a long or binary bad line is shown truncated and escaped") {
  const std::string garbage = "12" + std::string(1000, 'z') + "\n";
  const auto msg = parse_error("5\n" + garbage);
  CHECK(test::contains(msg, "line 2"));
  CHECK(test::contains(msg, "'..."));
  CHECK(msg.size() < 200);

  const std::string binary("\x01\xff\x00 9", 5);
  const auto bin_msg = parse_error(binary);
  CHECK(test::contains(bin_msg, "\\x01\\xff\\x00"));
}

TEST_CASE("files: a round trip through disk, and io_errors naming the path") {
  const fs::path dir = test::fresh_temp_dir("files");
  std::mt19937_64 rng(7);
  std::vector<std::uint32_t> values(100'000);
  std::string text;
  for (auto& v : values) {
    v = static_cast<std::uint32_t>(rng());
    text += std::to_string(v);
    text += (v % 3 == 0) ? "\r\n" : "\n";
  }
  {
    std::ofstream out(dir / "many.txt", std::ios::binary);
    out << text;
  }
  CHECK(read_length_list(dir / "many.txt") == values);

  {
    std::ofstream out(dir / "empty.txt");
  }
  CHECK(read_length_list(dir / "empty.txt").empty());

  {
    std::ofstream out(dir / "bad.txt", std::ios::binary);
    out << "1\n2\nthree\n";
  }
  auto msg = test::message_of<format_error>([&] { (void)read_length_list(dir / "bad.txt"); });
  CHECK(test::contains(msg, (dir / "bad.txt").string() + ": line 3: 'three'"));

  msg = test::message_of<io_error>([&] { (void)read_length_list(dir / "absent.txt"); });
  CHECK(test::contains(msg, (dir / "absent.txt").string()));
  msg = test::message_of<io_error>([&] { (void)read_length_list(dir); });
  CHECK(test::contains(msg, dir.string()));
}
