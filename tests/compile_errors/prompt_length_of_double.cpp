// expect: plain_integral
// A floating-point prompt length (a ratio times a length, say): as a uint32 parameter it was
// truncated silently. A negative integer is an option_error naming it
// (tests/data/test_loss_mask.cpp).
#include "multipack/data/prompt_lengths_writer.hpp"

int main() {
  multipack::prompt_lengths_writer writer("prompt_lengths.bin");
  const double prompt = 12.5;
  writer.add(prompt);
}
