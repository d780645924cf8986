// expect: plain_integral
// A bool as the rank of epoch_schedule::rows and epoch_plan::pieces (is_main, say): as a uint32
// parameter it compiled as rank 1, the other rank's rows. The rank is any integer type but bool
// and the character types, as views::shard and batch_loader take it; -1 and 2^32 are
// option_errors naming it (tests/schedule/test_epoch_schedule.cpp).
#include <cstdint>
#include <vector>

#include "multipack/schedule/plan.hpp"

int main() {
  const std::vector<std::uint32_t> lengths{3, 2, 4, 1};
  const multipack::epoch_plan plan = multipack::plan_epoch(lengths, multipack::pack_options{.capacity = 4}, {.world_size = 2});
  const bool is_main = true;
  (void)plan.schedule.rows(0, is_main);
}
