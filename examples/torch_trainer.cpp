// A complete small C++ trainer on libtorch: a causal transformer (examples/torch_model.hpp)
// trained on packed Alpaca batches from the multipack pipeline, on the CPU, with a checkpoint
// of the model, the optimizer and the position in the plan, and an exact resume.
//
//   torch_trainer [PREFIX] [--steps N] [--checkpoint DIR] [--stop-after K] [--threads T]
//
// With no arguments, from the project root: data/alpaca/alpaca_llama with its prompt lengths
// (prompts carry no loss; any PREFIX with the mask found beside it, loss_mask_beside.hpp), 30 steps of 2 rows of 512 tokens. Each epoch is packed by
// randomized-exact-fit for (seed, epoch) and scheduled for this rank (the launcher's
// environment, or rank 0 of 1); the batches come as int64 tensors over the loader's own
// buffers. Attention is confined to each piece (sequence_ids), positions restart at every
// piece (position_ids), the loss is the Hugging Face shifted one on the labels (-100 ignored).
// It prints the loss of every step, then the training step's tokens/s beside the loader's.
// With several ranks, the gradient all-reduce is the trainer's (torch.distributed's); this
// example shows the data side on each rank.
//
// --checkpoint DIR keeps model.pt, optimizer.pt and position.txt ("epoch step trained world")
// there every 10 steps and at the end, and resumes from them (rank 0 writes them: every rank
// is at the same step, and under data parallelism holds the same model; with several nodes
// DIR must be on a file system they share); --stop-after K stops
// after K steps, as a preempted job would. A run stopped and resumed prints the same losses as
// one that never stopped (the test examples.torch_trainer checks it). A step is a step of one
// world size's plan: a resume with another world size is refused (see the README's
// schedule_options::consumed_rows for carrying a position across world sizes).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ranges>
#include <string>
#include <vector>

#include <malloc.h>

#include "torch_model.hpp"  // first: libtorch

#include "loss_mask_beside.hpp"

#include "multipack/multipack.hpp"
#include "multipack/torch/views.hpp"

namespace {

/// glibc gives every freed block over 32 MB back to the system, and the next step faults it in
/// again page by page: the logits alone are 131 MB a step here, and re-faulting them cost more
/// than the model's arithmetic (a step took twice as long). Serve such blocks from the heap and
/// keep freed memory, as jemalloc or tcmalloc would (MALLOC_MMAP_THRESHOLD_ and
/// MALLOC_TRIM_THRESHOLD_ in the environment do the same).
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

struct position {
  std::uint64_t epoch = 0;
  std::uint64_t step = 0;     ///< the next step of the epoch's plan to train on
  std::uint64_t trained = 0;  ///< steps trained on, over the epochs
  std::uint32_t world = 1;    ///< the world size whose plan `step` is a step of
};

struct checkpoint {
  std::filesystem::path dir;

  [[nodiscard]] bool exists() const { return !dir.empty() && std::filesystem::exists(dir / "position.txt"); }

  position load(example::causal_lm& model, torch::optim::Adam& optimizer) const {
    position p;
    std::ifstream in(dir / "position.txt");
    if (!(in >> p.epoch >> p.step >> p.trained >> p.world))
      throw multipack::format_error((dir / "position.txt").string() +
                                    ": not a position (epoch step trained world; one of three is an older version's)");
    torch::load(model, (dir / "model.pt").string());
    torch::load(optimizer, (dir / "optimizer.pt").string());
    return p;
  }

  void save(const position& p, const example::causal_lm& model, const torch::optim::Adam& optimizer) const {
    std::filesystem::create_directories(dir);
    torch::save(model, (dir / "model.pt.tmp").string());
    torch::save(optimizer, (dir / "optimizer.pt.tmp").string());
    std::ofstream out(dir / "position.txt.tmp");
    out << p.epoch << ' ' << p.step << ' ' << p.trained << ' ' << p.world << '\n';
    out.close();
    if (!out) throw multipack::io_error((dir / "position.txt.tmp").string() + ": cannot write");  // a full disk
    // The position last: a crash between the renames resumes from the older position with
    // newer weights at worst, never from a half-written file.
    for (const char* name : {"model.pt", "optimizer.pt", "position.txt"})
      std::filesystem::rename(dir / (std::string(name) + ".tmp"), dir / name);
  }
};

}  // namespace

int main(int argc, char** argv) try {
  keep_freed_memory();
  std::string prefix = "data/alpaca/alpaca_llama";
  checkpoint saved;
  std::uint64_t total_steps = 30;
  std::uint64_t stop_after = 0;  // 0: never
  unsigned threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--steps" && has_value) total_steps = std::stoull(argv[++i]);
    else if (arg == "--checkpoint" && has_value) saved.dir = argv[++i];
    else if (arg == "--stop-after" && has_value) stop_after = std::stoull(argv[++i]);
    else if (arg == "--threads" && has_value) threads = static_cast<unsigned>(std::stoul(argv[++i]));
    else if (arg.rfind("--", 0) != 0) prefix = arg;
    else throw multipack::option_error("unknown argument " + arg);
  }
  constexpr std::uint32_t capacity = 512, micro_batch = 2;
  constexpr std::uint64_t seed = 1234;

  const auto env = multipack::distributed_env::from_environment();
  const multipack::indexed_dataset dataset(prefix);
  multipack::batch_options batch;
  batch.mask = example::loss_mask_beside(prefix);

  torch::manual_seed(0);
  example::causal_lm model(example::causal_lm_options{.width = 64, .layers = 2, .heads = 4, .max_positions = capacity});
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(3e-3));
  position at = saved.exists() ? saved.load(model, optimizer) : position{.world = env.world_size};
  if (at.world != env.world_size)
    throw multipack::option_error(saved.dir.string() + ": saved at a step of " + std::to_string(at.world) +
                                  " ranks' plan; this run has " + std::to_string(env.world_size));
  const bool saves = !saved.dir.empty() && env.rank == 0;  // one writer: every rank is at the same step
  std::printf("rank %u of %u (%s), from epoch %llu step %llu, %llu steps in all\n", env.rank, env.world_size,
              env.launcher.c_str(), static_cast<unsigned long long>(at.epoch), static_cast<unsigned long long>(at.step),
              static_cast<unsigned long long>(total_steps));

  double step_seconds = 0, loader_busy_seconds = 0, loader_wait_seconds = 0;
  std::uint64_t step_tokens = 0, trained_now = 0;
  const auto started = std::chrono::steady_clock::now();
  while (at.trained < total_steps) {
    // Every rank computes the same packing and schedule from (seed, epoch): no communication.
    const multipack::pack_options packing{.capacity = capacity,
                                          .algorithm = multipack::packing_algorithm::randomized_exact_fit,
                                          .seed = seed, .epoch = at.epoch};
    auto steps = dataset | multipack::views::pack(packing) |
                 multipack::views::shard({.world_size = env.world_size, .micro_batch = micro_batch, .seed = seed,
                                          .epoch = at.epoch}, env.rank);
    if (steps.size() == 0)  // fewer rows than one step takes: no epoch would ever end
      throw multipack::option_error("epoch " + std::to_string(at.epoch) + " has no step for " +
                                    std::to_string(env.world_size) + " ranks of " + std::to_string(micro_batch) + " rows");
    if (at.step > steps.size())  // another dataset than the checkpoint's
      throw multipack::option_error("the checkpoint's step " + std::to_string(at.step) + " is past the end of epoch " +
                                    std::to_string(at.epoch) + " (" + std::to_string(steps.size()) + " steps)");
    const std::uint64_t left = std::min<std::uint64_t>(steps.size() - at.step, total_steps - at.trained);
    // Resume at the checkpoint's step in O(1): drop the steps done, take what is left to do.
    auto batches = steps | std::views::drop(at.step) | std::views::take(left) |
                   multipack::views::prefetch_as<std::int64_t>({.threads = threads, .depth = 4}, batch) |
                   multipack::torch::views::to_tensors();
    for (const multipack::torch::batch_tensors& b : batches) {
      const auto step_start = std::chrono::steady_clock::now();
      optimizer.zero_grad();
      const auto logits = model(b.input_ids, b.position_ids, example::block_causal_mask(b.sequence_ids));
      const example::token_loss loss = example::shifted_loss(logits, b.labels);
      (loss.sum / static_cast<double>(std::max<std::int64_t>(loss.tokens, 1))).backward();
      optimizer.step();
      step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      step_tokens += static_cast<std::uint64_t>(b.input_ids.numel());
      at.step = b.step + 1;
      ++at.trained;
      ++trained_now;
      std::printf("epoch %llu step %llu: loss %.6f over %lld tokens\n", static_cast<unsigned long long>(at.epoch),
                  static_cast<unsigned long long>(b.step), loss.sum.item<double>() / static_cast<double>(loss.tokens),
                  static_cast<long long>(loss.tokens));
      if (saves && at.trained % 10 == 0) saved.save(at, model, optimizer);
      if (stop_after != 0 && trained_now == stop_after) {
        if (saves) saved.save(at, model, optimizer);
        std::printf("stopped after %llu steps at epoch %llu step %llu\n", static_cast<unsigned long long>(trained_now),
                    static_cast<unsigned long long>(at.epoch), static_cast<unsigned long long>(at.step));
        return 0;
      }
    }
    loader_busy_seconds += batches.statistics().producer_busy_seconds;
    loader_wait_seconds += batches.statistics().consumer_wait_seconds;
    if (at.step == steps.size()) {
      ++at.epoch;
      at.step = 0;
    }
  }
  if (saves) saved.save(at, model, optimizer);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double tokens = static_cast<double>(step_tokens);
  std::printf("trained %llu steps in %.1f s: the training step %.3g tokens/s; the loader %.3g tokens/s with %u threads "
              "(%.3g a worker-second of building); the trainer waited for data %.2f %% of the time\n",
              static_cast<unsigned long long>(trained_now), seconds, tokens / step_seconds,
              loader_busy_seconds > 0 ? tokens / loader_busy_seconds * threads : 0.0, threads,
              loader_busy_seconds > 0 ? tokens / loader_busy_seconds : 0.0, 100.0 * loader_wait_seconds / seconds);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "torch_trainer: %s\n", e.what());
  return 1;
}
