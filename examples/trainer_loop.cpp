// The shape of a custom C++ trainer's data loop: open a dataset, load every epoch's batches
// for this rank from one epoch_loader (rank and world from the launcher's environment), save
// the position with the model, and resume from it exactly after a restart.
//
//   trainer_loop [PREFIX] [--checkpoint FILE] [--epochs N] [--stop-after K]
//
// With no arguments, run from the project root: data/alpaca/alpaca_llama with its prompt
// lengths (prompts carry no loss; any PREFIX with the mask found beside it,
// loss_mask_beside.hpp), as the environment says (torchrun, Open MPI, Slurm), or as rank 0
// of 1. --checkpoint FILE keeps "epoch step digest world" there every few steps (FILE.rankR
// for rank R of several) and resumes from it, with the same world size; --stop-after K stops
// after K steps, as a preempted job would. The digest (over every batch trained on) shows that
// a run stopped and resumed saw the same batches as one that never stopped.

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "multipack/multipack.hpp"

#include "loss_mask_beside.hpp"

namespace {

struct position {
  std::uint64_t epoch = 0;
  std::uint64_t step = 0;  ///< the next step to train on
  std::uint64_t digest = 14695981039346656037ULL;
  std::uint32_t world = 1;  ///< the world size whose plan `step` is a step of
};

/// The checkpoint at `path`, or a fresh start when there is none. A step is a step of one
/// world size's plan: a checkpoint of another world size (its own, or one that another world
/// size's naming left beside it) is refused rather than resumed at a step of another plan.
position load(const std::string& path, const std::string& named, std::uint32_t world) {
  position p{.world = world};
  std::ifstream in(path);
  if (!in) {
    for (const std::string& other : {named, named + ".rank0"})
      if (other != path && std::filesystem::exists(other))
        throw multipack::option_error(other + ": a checkpoint of another world size than this run's " +
                                      std::to_string(world));
    return p;
  }
  if (!(in >> p.epoch >> p.step >> p.digest >> p.world))
    throw multipack::format_error(path + ": not a checkpoint (epoch step digest world)");
  if (p.world != world)
    throw multipack::option_error(path + ": saved at a step of " + std::to_string(p.world) + " ranks' plan; this run has " +
                                  std::to_string(world));
  return p;
}

void save(const std::string& path, const position& p) {
  const std::string temporary = path + ".tmp";
  std::ofstream out(temporary);
  out << p.epoch << ' ' << p.step << ' ' << p.digest << ' ' << p.world << '\n';
  out.close();
  if (!out) throw multipack::io_error(temporary + ": cannot write");  // a full disk: keep the last checkpoint
  std::filesystem::rename(temporary, path);  // atomic: a crash never leaves half a checkpoint
}

/// What the "model" sees of a batch, folded into the digest (FNV-1a over tokens and labels).
std::uint64_t fold(std::uint64_t digest, const multipack::batch_view<>& batch) {
  const auto mix = [&](std::int64_t value) {
    digest ^= static_cast<std::uint64_t>(value);
    digest *= 1099511628211ULL;
  };
  for (const std::int32_t t : batch.used_input_ids()) mix(t);
  for (const std::int32_t t : batch.used_labels()) mix(t);
  return digest;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string prefix = "data/alpaca/alpaca_llama";
  std::string checkpoint;
  std::uint64_t epochs = 2;
  std::uint64_t stop_after = 0;  // 0: never
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--checkpoint" && has_value) checkpoint = argv[++i];
    else if (arg == "--epochs" && has_value) epochs = std::stoull(argv[++i]);
    else if (arg == "--stop-after" && has_value) stop_after = std::stoull(argv[++i]);
    else if (arg.rfind("--", 0) != 0) prefix = arg;
    else throw multipack::option_error("unknown argument " + arg);
  }

  const auto env = multipack::distributed_env::from_environment();
  const auto dataset = std::make_shared<const multipack::indexed_dataset>(prefix);
  std::vector<std::uint32_t> lengths(dataset->size());
  for (std::size_t i = 0; i < lengths.size(); ++i) lengths[i] = static_cast<std::uint32_t>(dataset->length(i));
  multipack::batch_options batch;
  batch.mask = example::loss_mask_beside(prefix);
  // Each rank's own file under a launcher: the digest is of the rank's batches, and ranks
  // writing one file raced at its rename.
  const std::string named = checkpoint;
  if (!checkpoint.empty() && env.world_size > 1) checkpoint += ".rank" + std::to_string(env.rank);

  position at = checkpoint.empty() ? position{.world = env.world_size} : load(checkpoint, named, env.world_size);
  std::printf("rank %u of %u (%s), from epoch %llu step %llu\n", env.rank, env.world_size, env.launcher.c_str(),
              static_cast<unsigned long long>(at.epoch), static_cast<unsigned long long>(at.step));
  std::uint64_t trained = 0;
  std::uint64_t loss_tokens = 0;
  // One loader for every epoch left: its threads and buffers serve them all, and it plans
  // epoch e + 1 in the background while epoch e trains. Every rank computes the same plans
  // from the same inputs: no communication.
  if (at.epoch < epochs) {
    multipack::epoch_loader<multipack::indexed_dataset> loader(
        dataset,
        multipack::plan_each_epoch(lengths, {.capacity = 2048, .algorithm = multipack::packing_algorithm::randomized_exact_fit},
                                   {.world_size = env.world_size, .micro_batch = 8, .seed = 1234}),
        env.rank, batch, {.threads = 2, .depth = 4}, {.first = at.epoch, .count = epochs - at.epoch, .start_step = at.step});
    while (auto b = loader.next()) {
      if ((*b)->epoch != at.epoch) {  // the first batch of the next epoch: the last one ended at step at.step
        std::printf("epoch %llu: %llu steps\n", static_cast<unsigned long long>(at.epoch),
                    static_cast<unsigned long long>(at.step));
        at.epoch = (*b)->epoch;
      }
      const multipack::batch_view<>& view = (*b)->view;
      // train(view.used_input_ids(), view.used_labels(), view.used_position_ids(), view.used_cu_seqlens(), ...)
      at.digest = fold(at.digest, view);
      loss_tokens += view.loss_tokens;
      at.step = (*b)->step + 1;
      ++trained;
      if (!checkpoint.empty() && at.step % 5 == 0) save(checkpoint, at);
      if (stop_after != 0 && trained == stop_after) {
        if (!checkpoint.empty()) save(checkpoint, at);
        std::printf("stopped after %llu steps at epoch %llu step %llu\n", static_cast<unsigned long long>(trained),
                    static_cast<unsigned long long>(at.epoch), static_cast<unsigned long long>(at.step));
        return 0;
      }
    }
    std::printf("epoch %llu: %llu steps\n", static_cast<unsigned long long>(at.epoch),
                static_cast<unsigned long long>(at.step));
    const multipack::epoch_loader_statistics s = loader.statistics();
    std::printf("waited for data at %llu epoch boundaries: the longest %.6f s; any other step's longest %.6f s\n",
                static_cast<unsigned long long>(s.boundaries), s.max_boundary_wait_seconds, s.max_step_wait_seconds);
    at = {epochs, 0, at.digest, env.world_size};
  }
  if (!checkpoint.empty()) save(checkpoint, at);
  std::printf("trained on %llu batches (%llu tokens with loss); digest %016llx\n",
              static_cast<unsigned long long>(trained), static_cast<unsigned long long>(loss_tokens),
              static_cast<unsigned long long>(at.digest));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "trainer_loop: %s\n", e.what());
  return 1;
}
