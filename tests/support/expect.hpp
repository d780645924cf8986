#pragma once
// Small test helpers shared by the test files: the message of an expected exception, and an
// independent (iostream) reader of integer lists to compare the library's parsers against.

#include <doctest/doctest.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace multipack::test {

/// The message of the E that f() throws; fails the test when it throws nothing or another type.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw the wrong exception type: " << e.what());
  }
  FAIL("threw nothing");
  return {};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Whitespace-separated integers read with iostreams: a reference independent of the library.
template <class T>
std::vector<T> numbers_by_iostream(const std::filesystem::path& p) {
  std::ifstream in(p);
  REQUIRE(in);
  std::vector<T> v;
  for (T x; in >> x;) v.push_back(x);
  return v;
}

}  // namespace multipack::test
