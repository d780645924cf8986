// expect: compiles
// The control of the argument cases beside it (a bool, a double, a character range or a null
// name where an integer or a name goes): the same headers and calls, with the arguments they
// are meant to take, so that a case failing for a reason of its own cannot pass.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "multipack/data/in_memory_dataset.hpp"
#include "multipack/data/length_list.hpp"
#include "multipack/data/llmc_dataset.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/data/prompt_lengths_writer.hpp"
#include "multipack/pack/pack.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/views.hpp"

int main() {
  // Compiled only (-fsyntax-only): nothing here opens or writes a file.
  const int end_of_text = 50256;
  multipack::llmc_dataset dataset("shard_000.bin", end_of_text);
  multipack::llmc_dataset narrow("shard_001.bin", std::uint16_t{50256});

  std::vector<std::vector<int>> samples{{1, 2, 3}, {4, 5}};
  const int rank = 1;
  const std::size_t wide_rank = 1;
  auto steps = samples | multipack::views::pack({.capacity = 8}) | multipack::views::shard({.world_size = 2}, rank);
  auto same = multipack::views::shard(samples | multipack::views::pack({.capacity = 8}), {.world_size = 2}, wide_rank);
  std::vector<std::u8string> unused_text;  // (text is refused: text_samples_to_pack.cpp)
  (void)unused_text;

  const std::vector<int> lengths{97, 98, 99};
  auto packing = multipack::pack(lengths, {.capacity = 128});

  std::vector<std::uint32_t> prompts{3, 0, 5};
  auto mask = multipack::loss_mask::from_prompt_lengths(prompts, "prompts");
  auto unnamed = multipack::loss_mask::from_prompt_lengths(prompts);
  auto parsed = multipack::parse_length_list("3\n5\n", "lengths.txt");

  multipack::prompt_lengths_writer writer("prompt_lengths.bin");
  writer.add(12);
  writer.add(std::uint32_t{12});
  writer.add(prompts);
  // batch_loader_rank_of_bool.cpp's call with an integer rank.
  auto dataset_in_memory = std::make_shared<const multipack::in_memory_dataset<>>(
      std::vector<std::vector<std::int32_t>>{{1, 2, 3}, {4, 5}});
  const std::vector<std::uint32_t> sample_lengths{3, 2};
  auto plan = std::make_shared<const multipack::epoch_plan>(
      multipack::plan_epoch(sample_lengths, multipack::pack_options{.capacity = 8}, {.world_size = 2}));
  multipack::batch_loader<multipack::in_memory_dataset<>> loader(dataset_in_memory, plan, rank, {}, {});
  multipack::batch_loader<multipack::in_memory_dataset<>> wide(dataset_in_memory, plan, wide_rank, {}, {});
  // schedule_rank_of_bool.cpp's call with integer ranks.
  (void)plan->schedule.rows(0, rank);
  (void)plan->pieces(0, wide_rank, 0);

  (void)steps;
  (void)same;
  (void)packing;
  (void)mask;
  (void)unnamed;
  (void)parsed;
}
