// expect: indexed_dataset\(<brace-enclosed initializer list>\)
// Two prefixes in braces: with a path parameter this compiled, as the path of the iterator
// pair (a, b), and failed at run time. Several prefixes: open_indexed_datasets(prefixes).
#include "multipack/data/indexed_dataset.hpp"

int main() {
  const char* a = "corpus/shard_0";
  const char* b = "corpus/shard_1";
  multipack::indexed_dataset dataset({a, b});
}
