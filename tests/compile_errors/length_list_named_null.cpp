// expect: deleted
// 0 as the length list's name: it converted to a null const char*, then to std::string_view,
// which read through the null pointer.
#include "multipack/data/length_list.hpp"

int main() {
  auto lengths = multipack::parse_length_list("3\n5\n", 0);
}
