// in_memory_dataset: construction, validation of flat offsets, reads and conversions.

#include "multipack/data/in_memory_dataset.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "multipack/core/concepts.hpp"
#include "support/expect.hpp"

using namespace multipack;

static_assert(token_dataset<in_memory_dataset<>>);
static_assert(token_dataset<in_memory_dataset<std::uint16_t>>);
static_assert(token_dataset<in_memory_dataset<std::int64_t>>);
static_assert(token_dataset<in_memory_dataset<std::uint32_t>>);


TEST_CASE("built from nested vectors, every sample reads back as given") {
  const std::vector<std::vector<std::int32_t>> samples = {
      {1, 15, 27, 2}, {}, {1, 2}, {std::numeric_limits<std::int32_t>::min(), 0,
                                   std::numeric_limits<std::int32_t>::max()}};
  const in_memory_dataset<> ds(samples);
  REQUIRE(ds.size() == samples.size());
  CHECK_FALSE(ds.empty());
  std::size_t total = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    CAPTURE(i);
    CHECK(ds.length(i) == samples[i].size());
    const auto t = ds.tokens(i);
    CHECK(std::vector<std::int32_t>(t.begin(), t.end()) == samples[i]);

    std::vector<std::int32_t> out32(samples[i].size());
    std::vector<std::int64_t> out64(samples[i].size());
    ds.read_tokens(i, 0, std::span(out32));
    ds.read_tokens(i, 0, std::span(out64));
    CHECK(out32 == samples[i]);
    CHECK(std::equal(out64.begin(), out64.end(), samples[i].begin(), samples[i].end()));
    total += samples[i].size();
  }
  CHECK(ds.all_tokens().size() == total);
  REQUIRE(ds.offsets().size() == samples.size() + 1);
  CHECK(ds.offsets().front() == 0);
  CHECK(ds.offsets().back() == total);
}

TEST_CASE("built from an initializer list") {
  const in_memory_dataset<std::uint16_t> ds{{1, 65535, 2}, {1, 2}};
  REQUIRE(ds.size() == 2);
  CHECK(ds.tokens(0)[1] == 65535);
  std::vector<std::int32_t> out(3);
  ds.read_tokens(0, 0, std::span(out));
  CHECK(out == std::vector<std::int32_t>{1, 65535, 2});
}

TEST_CASE("built from flat tokens and offsets, validated") {
  const in_memory_dataset<> ok({1, 2, 3, 4, 5}, {0, 2, 2, 5});
  REQUIRE(ok.size() == 3);
  CHECK(ok.length(0) == 2);
  CHECK(ok.length(1) == 0);
  CHECK(ok.tokens(2)[0] == 3);

  const in_memory_dataset<> none({}, {});
  CHECK(none.size() == 0);
  CHECK(none.empty());

  auto msg = test::message_of<option_error>([] { in_memory_dataset<> d({1, 2}, {1, 2}); });
  CHECK(test::contains(msg, "offset 0"));
  msg = test::message_of<option_error>([] { in_memory_dataset<> d({1, 2, 3}, {0, 2, 1, 3}); });
  CHECK(test::contains(msg, "offset 2"));
  CHECK(test::contains(msg, "decrease"));
  msg = test::message_of<option_error>([] { in_memory_dataset<> d({1, 2, 3}, {0, 2}); });
  CHECK(test::contains(msg, "token count (3)"));
  msg = test::message_of<option_error>([] { in_memory_dataset<> d({1, 2, 3}, {0, 4}); });
  CHECK(test::contains(msg, "token count (3)"));
  CHECK_THROWS_AS(in_memory_dataset<>({1}, {}), option_error);  // tokens but no samples
}

TEST_CASE("reads outside a sample throw option_error; partial reads return the window") {
  const in_memory_dataset<> ds{{10, 11, 12, 13}, {20}};
  std::vector<std::int32_t> two(2);
  std::vector<std::int32_t> none;

  ds.read_tokens(0, 1, std::span(two));
  CHECK(two == std::vector<std::int32_t>{11, 12});
  ds.read_tokens(0, 2, std::span(two));
  CHECK(two == std::vector<std::int32_t>{12, 13});
  ds.read_tokens(0, 4, std::span(none));  // empty range at the end: inside

  CHECK_THROWS_AS(ds.read_tokens(0, 3, std::span(two)), option_error);
  CHECK_THROWS_AS(ds.read_tokens(0, 5, std::span(none)), option_error);
  CHECK_THROWS_AS(ds.read_tokens(1, std::numeric_limits<std::uint64_t>::max(), std::span(two)),
                  option_error);
  CHECK_THROWS_AS(ds.read_tokens(2, 0, std::span(none)), option_error);
  CHECK_THROWS_AS((void)ds.length(2), option_error);
  CHECK_THROWS_AS((void)ds.tokens(2), option_error);
  CHECK(test::contains(test::message_of<option_error>([&] { (void)ds.length(7); }), "sample 7"));
}

TEST_CASE("a token without a value in the output type is a sample_error naming it") {
  const std::int64_t big = std::int64_t{1} << 40;
  const in_memory_dataset<std::int64_t> ds{{1, big, 2}};
  std::vector<std::int64_t> out64(3);
  ds.read_tokens(0, 0, std::span(out64));
  CHECK(out64[1] == big);

  std::vector<std::int32_t> out32(3);
  const auto msg = test::message_of<sample_error>([&] { ds.read_tokens(0, 0, std::span(out32)); });
  CHECK(test::contains(msg, "sample 0"));
  CHECK(test::contains(msg, "token 1"));
  CHECK(test::contains(msg, std::to_string(big)));
  // A window that avoids the big token converts fine.
  std::vector<std::int32_t> last(1);
  ds.read_tokens(0, 2, std::span(last));
  CHECK(last[0] == 2);

  const in_memory_dataset<std::uint32_t> unsigned_ds{{4294967295u}};
  CHECK_THROWS_AS(unsigned_ds.read_tokens(0, 0, std::span(out32).first(1)), sample_error);
  unsigned_ds.read_tokens(0, 0, std::span(out64).first(1));
  CHECK(out64[0] == 4294967295);
}

TEST_CASE("a moved-from dataset is empty") {
  in_memory_dataset<> a{{1, 2}, {3}};
  const in_memory_dataset<> b(std::move(a));
  CHECK(b.size() == 2);
  CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move): documented state
  CHECK_THROWS_AS((void)a.length(0), option_error);
}
