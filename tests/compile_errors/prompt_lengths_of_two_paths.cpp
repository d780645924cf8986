// expect: path_like
// Two paths in braces where one file's path is taken: refused (see path_like), as every
// function that takes a path does, instead of opening the path of the iterator pair (a, b).
#include "multipack/data/loss_mask.hpp"

int main() {
  const char* a = "prompt_lengths_0.txt";
  const char* b = "prompt_lengths_1.txt";
  auto mask = multipack::loss_mask::open_prompt_lengths({a, b});
}
