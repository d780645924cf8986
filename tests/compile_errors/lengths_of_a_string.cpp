// expect: plain_integral
// A string handed to pack as lengths: char is integral, so this packed three samples of 97, 98
// and 99 tokens. Lengths are integers, not characters or bools (std::vector<bool> was packed
// as lengths 0 and 1 the same way).
#include <string>

#include "multipack/pack/pack.hpp"

int main() {
  const std::string lengths = "abc";
  auto packing = multipack::pack(lengths, {.capacity = 128});
}
