// expect: sample_range
// Text, not tokens, handed to views::pack: std::u8string is a contiguous range of an integral
// type, so its bytes were packed as token ids (std::string was refused, std::u8string,
// std::u16string and std::wstring were not). Every character type is refused now.
#include <string>
#include <vector>

#include "multipack/views.hpp"

int main() {
  std::vector<std::u8string> documents{u8"the first document", u8"the second"};
  auto rows = documents | multipack::views::pack({.capacity = 64});
}
