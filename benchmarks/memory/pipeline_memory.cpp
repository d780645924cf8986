// The resident memory of a 10 M-sample pipeline before and at its first batch (data/alpaca seen
// 2,000 times, packed at 4096, 8 ranks x 16 rows, 2 threads, depth 4). scripts/bench-pipeline-memory
// builds it against these headers and against those of 0.1.0 before the views were opened
// (commit 28d15e8, whose views::shard copied the packing), and runs both.
#include <malloc.h>
#include <cstdio>
#include <fstream>
#include <string>
#include "multipack/views.hpp"
#include "multipack/data/indexed_dataset.hpp"
using namespace multipack;
static long rss_kb() { std::ifstream f("/proc/self/status"); std::string k; long v = 0;
  while (f >> k) { if (k == "VmRSS:") { f >> v; return v; } f.ignore(1 << 20, '\n'); } return 0; }
struct repeated {
  const indexed_dataset* inner; std::size_t n; std::size_t copies;
  std::size_t size() const { return n * copies; }
  std::uint64_t length(std::size_t i) const { return inner->length(i % n); }
  template <class Out> void read_tokens(std::size_t i, std::uint64_t first, std::span<Out> out) const { inner->read_tokens(i % n, first, out); }
#ifdef MULTIPACK_SAMPLE_RANGES  // the views of 0.1.0 took datasets that were not ranges
  dataset_iterator<repeated> begin() const { return {this, 0}; }
  dataset_iterator<repeated> end() const { return {this, size()}; }
#endif
};
int main(int argc, char** argv) {
  if (argc != 2) { std::fprintf(stderr, "usage: %s PREFIX\n", argv[0]); return 2; }
  const indexed_dataset alpaca(argv[1]);
  const repeated data{&alpaca, alpaca.size(), 2000};
  const long base = rss_kb();
  auto rows = data | views::pack({4096});
  malloc_trim(0);
  const long packed = rss_kb();
  auto steps = rows | views::shard({8, 16, 1, 0}, 0);
  malloc_trim(0);
  const long sharded = rss_kb();
  auto batches = steps | views::prefetch({2, 4});
  const auto first_batch = batches.begin();  // workers started, first batch taken
  (void)(first_batch == batches.end());
  malloc_trim(0);
  const long first = rss_kb();
  std::printf("samples %zu rows %zu: after pack %+.1f MB, after shard %+.1f MB, with the first batch %+.1f MB (over %.1f MB before)\n",
              data.size(), rows.size(), (packed - base) / 1024.0, (sharded - base) / 1024.0, (first - base) / 1024.0, base / 1024.0);
}
