// expect: plain_integral
// A bool where the end-of-text token goes (the flag of some other option, say): as a uint32
// parameter it compiled as token 1. The token id is any integer type but bool and the
// character types; a double (50256.5) is refused the same way.
#include "multipack/data/llmc_dataset.hpp"

int main() {
  const bool wide = true;
  multipack::llmc_dataset dataset("shard_000.bin", wide);
}
