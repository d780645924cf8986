// llm.c token shards: the real Alpaca tokens written as a shard (both versions) read back
// sample by sample; documents split at the end-of-text token; a shard cut mid-document;
// every truncation and header corruption a clear format_error.

#include "multipack/data/llmc_dataset.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"

namespace fs = std::filesystem;
using namespace multipack;

static_assert(token_dataset<llmc_dataset>);

namespace {

/// A shard as llm.c writes it (written here independently of the library): a 256 x int32
/// header, then the tokens as uint16 (version 1) or uint32 (version 7).
test::bytes shard(const std::vector<std::uint32_t>& tokens, bool wide) {
  std::int32_t header[256] = {};
  header[0] = wide ? 20240801 : 20240520;
  header[1] = wide ? 7 : 1;
  header[2] = static_cast<std::int32_t>(tokens.size());
  test::bytes b(sizeof header + tokens.size() * (wide ? 4 : 2));
  std::memcpy(b.data(), header, sizeof header);
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    if (wide) {
      std::memcpy(b.data() + sizeof header + 4 * k, &tokens[k], 4);
    } else {
      const auto t = static_cast<std::uint16_t>(tokens[k]);
      std::memcpy(b.data() + sizeof header + 2 * k, &t, 2);
    }
  }
  return b;
}

std::string open_error(const fs::path& path, const test::bytes& b, std::uint32_t eot = 0) {
  test::write_bytes(path, b);
  std::string msg = test::message_of<format_error>([&] { llmc_dataset ds(path, eot); });
  CHECK(test::contains(msg, path.string()));
  return msg;
}

}  // namespace

TEST_CASE("the Alpaca samples as an llm.c shard: one sample a document, end-of-text first") {
  const indexed_dataset alpaca(test::alpaca_prefix());
  const std::uint32_t eot = 32000;  // outside Llama's vocabulary: no sample holds it
  std::vector<std::uint32_t> tokens;
  for (std::size_t i = 0; i < alpaca.size(); ++i) {
    tokens.push_back(eot);
    std::vector<std::uint32_t> sample(alpaca.length(i));
    alpaca.read_tokens(i, 0, std::span(sample));
    tokens.insert(tokens.end(), sample.begin(), sample.end());
  }
  const fs::path dir = test::fresh_temp_dir("llmc_alpaca");
  for (const bool wide : {false, true}) {
    CAPTURE(wide);
    const fs::path path = dir / (wide ? "alpaca_v7.bin" : "alpaca_v1.bin");
    test::write_bytes(path, shard(tokens, wide));
    const llmc_dataset ds(path, eot);
    CHECK(ds.token_bytes() == (wide ? 4U : 2U));
    CHECK(ds.token_count() == tokens.size());
    REQUIRE(ds.size() == alpaca.size());
    for (std::size_t i = 0; i < ds.size(); ++i) {
      REQUIRE(ds.length(i) == alpaca.length(i) + 1);
      std::vector<std::int32_t> got(ds.length(i));
      ds.read_tokens(i, 0, std::span(got));
      REQUIRE(got[0] == static_cast<std::int32_t>(eot));
      std::vector<std::int32_t> want(alpaca.length(i));
      alpaca.read_tokens(i, 0, std::span(want));
      REQUIRE(std::vector<std::int32_t>(got.begin() + 1, got.end()) == want);
    }
  }
}

TEST_CASE("splitting at the end-of-text token: a leading partial document, empty shards, narrow reads") {
  const fs::path dir = test::fresh_temp_dir("llmc_split");
  const fs::path path = dir / "s.bin";
  SUBCASE("tokens before the first end-of-text form sample 0") {
    test::write_bytes(path, shard({7, 8, 50256, 1, 2, 50256, 50256, 3}, false));
    const llmc_dataset ds(path, 50256);
    REQUIRE(ds.size() == 4);
    CHECK(ds.length(0) == 2);
    CHECK(ds.length(1) == 3);
    CHECK(ds.length(2) == 1);
    CHECK(ds.length(3) == 2);
    std::vector<std::int64_t> out(2);
    ds.read_tokens(1, 1, std::span(out));
    CHECK(out == std::vector<std::int64_t>{1, 2});
    CHECK_THROWS_AS(ds.read_tokens(3, 1, std::span(out)), option_error);
    CHECK_THROWS_AS(static_cast<void>(ds.length(4)), option_error);
  }
  SUBCASE("an empty shard has no samples") {
    test::write_bytes(path, shard({}, true));
    CHECK(llmc_dataset(path, 0).empty());
  }
  SUBCASE("a uint32 token above INT32_MAX has no int32 value, but an int64 one") {
    test::write_bytes(path, shard({5, 0x90000000U}, true));
    const llmc_dataset ds(path, 5);
    std::vector<std::int32_t> narrow(2);
    const std::string msg = test::message_of<sample_error>([&] { ds.read_tokens(0, 0, std::span(narrow)); });
    CHECK(test::contains(msg, "token 1: value 2415919104 (uint32)"));
    std::vector<std::int64_t> wide(2);
    ds.read_tokens(0, 0, std::span(wide));
    CHECK(wide[1] == 0x90000000LL);
  }
  SUBCASE("an end-of-text token wider than the shard's tokens") {
    test::write_bytes(path, shard({1, 2}, false));
    CHECK_THROWS_AS(llmc_dataset(path, 70000), option_error);
  }
  SUBCASE("a negative end-of-text token is refused as itself, not read as 4294967295") {
    // As a uint32 parameter, -1 became 4294967295: a token no shard holds, so a uint32 shard
    // opened as one sample. (A bool or a double does not compile: tests/compile_errors.)
    test::write_bytes(path, shard({1, 2}, true));
    const std::string msg = test::message_of<option_error>([&] { llmc_dataset ds(path, -1); });
    CHECK(test::contains(msg, "end-of-text token -1 is not a token id"));
    CHECK(llmc_dataset(path, std::int64_t{2}).size() == 2);  // {1} and {2}: any integer type works
    CHECK_THROWS_AS(llmc_dataset(path, std::int64_t{1} << 32), option_error);
  }
}

TEST_CASE("llm.c shards: every truncation and every header corruption is a format_error at its byte") {
  const fs::path dir = test::fresh_temp_dir("llmc_corrupt");
  const test::bytes good = shard({50256, 10, 11, 50256, 12}, false);
  SUBCASE("bad magic, wrong version, negative count") {
    test::bytes b = good;
    b[0] = 0;
    CHECK(test::contains(open_error(dir / "magic.bin", b), "byte 0: bad magic"));
    b = good;
    b[4] = 7;
    CHECK(test::contains(open_error(dir / "version.bin", b), "byte 4: version 7, expected 1"));
    b = good;
    b[11] = 0x80;
    CHECK(test::contains(open_error(dir / "count.bin", b), "byte 8: token count"));
  }
  SUBCASE("trailing bytes") {
    test::bytes b = good;
    b.push_back(0);
    CHECK(test::contains(open_error(dir / "trailing.bin", b), "(trailing bytes)"));
  }
  SUBCASE("truncated at every byte") {
    for (std::size_t cut = 0; cut < good.size(); ++cut) {
      CAPTURE(cut);
      const std::string msg =
          open_error(dir / "cut.bin", test::bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
      CHECK(test::contains(msg, "truncated"));
    }
  }
  SUBCASE("any byte of the counted header fields changed") {
    for (std::size_t at = 0; at < 12; ++at)
      for (const unsigned value : {0x00U, 0x01U, 0x80U, 0xffU}) {
        test::bytes b = good;
        if (b[at] == value) continue;
        b[at] = static_cast<unsigned char>(value);
        CAPTURE(at);
        CAPTURE(value);
        const std::string msg = open_error(dir / "flip.bin", b, 50256);
        if (at < 8) {  // the field's first byte: magic at 0, version at 4
          CHECK(test::contains(msg, "byte " + std::to_string(at / 4 * 4) + ":"));
        } else {  // the token count as read: refused where it is, or for the file it does not fit
          std::int32_t count = 0;
          std::memcpy(&count, b.data() + 8, sizeof count);
          CHECK(test::contains(msg, count < 0 ? "byte 8: token count " + std::to_string(count) + " is negative"
                                              : "the header's " + std::to_string(count) + " uint16 tokens"));
        }
      }
  }
}
