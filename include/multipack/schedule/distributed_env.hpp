#pragma once
// This process's rank, world size and local rank, read from the variables that the usual
// launchers set, so that a plan can be sharded without the caller wiring them by hand.
//
// The variables, by launcher ("launcher" is the name distributed_env reports):
//
//   launcher    rank                   world size             local rank
//   "torchrun"  RANK                   WORLD_SIZE             LOCAL_RANK (+ LOCAL_WORLD_SIZE)
//   "Open MPI"  OMPI_COMM_WORLD_RANK   OMPI_COMM_WORLD_SIZE   OMPI_COMM_WORLD_LOCAL_RANK
//   "PMI"       PMI_RANK               PMI_SIZE               MPI_LOCALRANKID  (MPICH/Hydra)
//   "Slurm"     SLURM_PROCID           SLURM_STEP_NUM_TASKS   SLURM_LOCALID
//
// The rules, exactly:
//  - Precedence follows nesting, innermost launcher first: torchrun, then Open MPI / PMI, then
//    Slurm. `srun torchrun ...` or `mpirun ... torchrun ...` legitimately leave the outer
//    job's values (often one task per node) next to torchrun's, and they differ; the
//    innermost launcher is the one that describes this process. The innermost launcher with
//    any of its variables set decides alone: its variables must be complete and valid, and
//    the variables of the launchers around it are not read at all (so neither checked).
//  - Open MPI and PMI describe the same MPI world: when both are set, rank, world size and
//    (where both give it) local rank must agree, else the environment is contradictory and
//    the error names both variables and their values. Agreeing, they report "Open MPI".
//  - Rank and world size come as a pair: one without the other, or a local variable
//    (LOCAL_RANK, LOCAL_WORLD_SIZE, SLURM_LOCALID, ...) without them, is an error naming the
//    variable that is set and the one that is missing (Slurm outside srun: see below). The
//    local rank alone is optional:
//    without it, local_rank is 0 (RANK and WORLD_SIZE are all that torch's env:// needs).
//  - Every value read is a plain decimal integer in [0, 4294967295]: digits only, no sign,
//    no spaces, not empty (leading zeros are accepted). Anything else is an error naming the
//    variable and quoting its value.
//  - world size >= 1; rank < world size; local rank <= rank (a process cannot have more
//    processes before it on its node than in the world); with LOCAL_WORLD_SIZE, it is
//    >= 1, at most WORLD_SIZE, and local rank < LOCAL_WORLD_SIZE.
//  - Slurm's variables describe a task of `srun` only: srun sets SLURM_STEP_NUM_TASKS, the
//    tasks of its step. A batch script (sbatch) or an salloc shell runs once, yet has the
//    allocation's SLURM_NTASKS and SLURM_PROCID=0: read as rank 0 of SLURM_NTASKS, that one
//    process would train on 1/SLURM_NTASKS of the data. So without SLURM_STEP_NUM_TASKS,
//    SLURM_NTASKS > 1 (or SLURM_PROCID > 0, or SLURM_LOCALID > 0: another task on the node)
//    is an error that says to start the trainer with srun, and otherwise (SLURM_NTASKS = 1,
//    or SLURM_PROCID or SLURM_LOCALID alone at 0) it is rank 0 of 1, launcher "Slurm".
//  - No variable of any launcher set: a single process, rank 0 of 1, local rank 0,
//    launcher "none".
// Every error is an option_error whose message starts with "distributed_env: ".

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "multipack/core/detail/quote.hpp"
#include "multipack/core/error.hpp"

namespace multipack {

namespace detail {

// The names of one launcher's variables; local_world_size is null where it has none.
struct launcher_variables {
  std::string_view launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

inline constexpr launcher_variables torchrun_variables{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                       "LOCAL_WORLD_SIZE"};
inline constexpr launcher_variables open_mpi_variables{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                                       "OMPI_COMM_WORLD_LOCAL_RANK", nullptr};
inline constexpr launcher_variables pmi_variables{"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", nullptr};
inline constexpr launcher_variables slurm_variables{"Slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS",
                                                    "SLURM_LOCALID", nullptr};
// The allocation's task count, set in a batch script and an salloc shell too (see the rules).
inline constexpr const char* slurm_allocation_tasks = "SLURM_NTASKS";


// One variable that was set: its name, and its value both as text and as a number.
struct env_number {
  const char* name = nullptr;
  std::uint32_t value = 0;

  // "RANK=4", for messages.
  [[nodiscard]] std::string shown() const { return std::string(name) + "=" + std::to_string(value); }
};

// The variable `name` read through `lookup`: nullopt when unset; throws option_error when
// set to anything but a decimal integer in [0, 4294967295]. The value is copied before the
// next lookup, since getenv's pointer may not outlive it.
inline std::optional<env_number> read_env_number(const std::function<const char*(const char*)>& lookup,
                                                 const char* name) {
  if (name == nullptr) return std::nullopt;
  const char* raw = lookup(name);
  if (raw == nullptr) return std::nullopt;
  const std::string text(raw);
  const auto fail = [&](std::string_view why) {
    throw option_error("distributed_env: " + std::string(name) + "=" + quote(text) + " " +
                       std::string(why));
  };
  if (text.empty()) fail("is empty, not a non-negative decimal integer");
  for (const char c : text)
    if (c < '0' || c > '9') fail("is not a non-negative decimal integer (digits only)");
  std::uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) fail("is larger than 4294967295");
  if (ec != std::errc{} || end != text.data() + text.size())
    fail("is not a non-negative decimal integer (digits only)");
  return env_number{name, value};
}

// What one launcher's variables say, once read and checked on their own.
struct launcher_values {
  const launcher_variables* variables = nullptr;
  env_number rank;
  env_number world_size;
  std::optional<env_number> local_rank;
  std::optional<env_number> local_world_size;
};

inline std::string ranks_phrase(std::uint32_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

// The values of `vars`: nullopt when none of its variables is set; throws option_error for a
// malformed value, half a pair, or values that contradict each other (see the rules above).
inline std::optional<launcher_values> read_launcher(const std::function<const char*(const char*)>& lookup,
                                                    const launcher_variables& vars) {
  const auto rank = read_env_number(lookup, vars.rank);
  const auto world = read_env_number(lookup, vars.world_size);
  const auto local = read_env_number(lookup, vars.local_rank);
  const auto local_world = read_env_number(lookup, vars.local_world_size);
  if (!rank && !world && !local && !local_world) return std::nullopt;

  const std::string who = " (" + std::string(vars.launcher) + " sets both)";
  if (rank && !world)
    throw option_error("distributed_env: " + std::string(vars.rank) + " is set (" + rank->shown() + ") but " +
                       vars.world_size + " is not" + who);
  if (world && !rank)
    throw option_error("distributed_env: " + std::string(vars.world_size) + " is set (" + world->shown() +
                       ") but " + vars.rank + " is not" + who);
  if (!rank) {
    const env_number& stray = local ? *local : *local_world;
    throw option_error("distributed_env: " + std::string(stray.name) + " is set (" + stray.shown() + ") but " +
                       vars.rank + " and " + vars.world_size + " are not");
  }

  if (world->value == 0)
    throw option_error("distributed_env: world size 0 (" + world->shown() + "): a world has at least 1 rank");
  if (rank->value >= world->value)
    throw option_error("distributed_env: rank " + std::to_string(rank->value) + " is outside the world of " +
                       ranks_phrase(world->value) + " (" + rank->shown() + ", " + world->shown() + ")");
  if (local && local->value > rank->value)
    throw option_error("distributed_env: local rank " + std::to_string(local->value) + " is above the rank " +
                       std::to_string(rank->value) + " (" + local->shown() + ", " + rank->shown() +
                       "): no node can hold more processes before this one than the world does");
  if (local_world) {
    if (local_world->value == 0)
      throw option_error("distributed_env: local world size 0 (" + local_world->shown() +
                         "): a node runs at least 1 rank");
    if (local_world->value > world->value)
      throw option_error("distributed_env: the local world of " + ranks_phrase(local_world->value) +
                         " is larger than the world of " + ranks_phrase(world->value) + " (" +
                         local_world->shown() + ", " + world->shown() + ")");
    const std::uint32_t local_value = local ? local->value : 0;
    if (local_value >= local_world->value)
      throw option_error("distributed_env: local rank " + std::to_string(local_value) +
                         " is outside the local world of " + ranks_phrase(local_world->value) + " (" +
                         (local ? local->shown() : std::string(vars.local_rank) + " unset, so 0") + ", " +
                         local_world->shown() + ")");
  }
  return launcher_values{&vars, *rank, *world, local, local_world};
}

// Slurm's values: those of an srun task, or for a process that srun did not start (no
// SLURM_STEP_NUM_TASKS), rank 0 of 1 when the allocation has one task; nullopt when no Slurm
// variable is set. Throws option_error for a process outside srun in an allocation of several
// tasks (SLURM_NTASKS above 1, or SLURM_PROCID or SLURM_LOCALID above 0), which would otherwise
// take 1/SLURM_NTASKS of the data, or all of it as rank 0 of 1, beside the other tasks.
inline std::optional<launcher_values> read_slurm(const std::function<const char*(const char*)>& lookup) {
  if (read_env_number(lookup, slurm_variables.world_size)) return read_launcher(lookup, slurm_variables);
  const auto tasks = read_env_number(lookup, slurm_allocation_tasks);
  const auto rank = read_env_number(lookup, slurm_variables.rank);
  const auto local = read_env_number(lookup, slurm_variables.local_rank);
  if (!tasks && !rank && !local) return std::nullopt;
  if (tasks && tasks->value == 0)
    throw option_error("distributed_env: world size 0 (" + tasks->shown() + "): a world has at least 1 rank");
  // A local rank above 0 says so too: another task runs on this node.
  if ((tasks && tasks->value > 1) || (rank && rank->value > 0) || (local && local->value > 0)) {
    const env_number& shown = tasks && tasks->value > 1 ? *tasks : rank && rank->value > 0 ? *rank : *local;
    throw option_error("distributed_env: " + shown.shown() + " but SLURM_STEP_NUM_TASKS is not set: this process " +
                       "was not started by srun (a batch script or an salloc shell runs once), so it is not one " +
                       "of the allocation's tasks; start the trainer with srun (or torchrun, mpirun), or give " +
                       "the rank and world size yourself");
  }
  const env_number one_task{slurm_allocation_tasks, 1};
  return launcher_values{&slurm_variables, env_number{slurm_variables.rank, 0}, one_task, std::nullopt,
                         std::nullopt};
}

// Throws option_error naming both variables when Open MPI's `a` and PMI's `b` differ.
inline void require_same_mpi_value(std::string_view what, const env_number& a, const env_number& b) {
  if (a.value != b.value)
    throw option_error("distributed_env: Open MPI and PMI give contradictory " + std::string(what) + "s (" +
                       a.shown() + ", " + b.shown() + "); both describe the same MPI world");
}

}  // namespace detail

/// This process's place among the processes of a distributed job.
struct distributed_env {
  std::uint32_t rank = 0;        ///< in [0, world_size)
  std::uint32_t world_size = 1;  ///< processes in the job, >= 1
  std::uint32_t local_rank = 0;  ///< rank among the processes of this node (picks the GPU); <= rank
  /// "torchrun", "Open MPI", "PMI", "Slurm", or "none" (no variables: a single process).
  std::string launcher = "none";

  /// Reads the process's environment (std::getenv) under the rules at the top of this
  /// header. Cost: at most 14 getenv calls and a few small strings. Throws option_error
  /// ("distributed_env: ...") for a malformed, incomplete or contradictory environment.
  /// Thread-safe against other readers of the environment, NOT against setenv, putenv or
  /// unsetenv in another thread at the same time (POSIX gives getenv no such guarantee):
  /// call it at start-up, before spawning threads that modify the environment.
  [[nodiscard]] static distributed_env from_environment() {
    return from([](const char* name) -> const char* { return std::getenv(name); });
  }

  /// As from_environment, with every variable read through `lookup`, which returns the
  /// value of the variable named by its argument, or nullptr when it is unset (for tests,
  /// and for callers with their own environment). Each returned string is copied before the
  /// next call, so it need only live until then. Cost: at most 14 calls of lookup. Throws
  /// option_error as from_environment does, or when `lookup` is empty; lets through what
  /// lookup throws. Thread-safe when lookup is.
  [[nodiscard]] static distributed_env from(const std::function<const char*(const char*)>& lookup) {
    if (!lookup) throw option_error("distributed_env: the lookup function is empty");
    auto chosen = detail::read_launcher(lookup, detail::torchrun_variables);
    if (!chosen) {
      const auto open_mpi = detail::read_launcher(lookup, detail::open_mpi_variables);
      const auto pmi = detail::read_launcher(lookup, detail::pmi_variables);
      if (open_mpi && pmi) {
        detail::require_same_mpi_value("rank", open_mpi->rank, pmi->rank);
        detail::require_same_mpi_value("world size", open_mpi->world_size, pmi->world_size);
        if (open_mpi->local_rank && pmi->local_rank)
          detail::require_same_mpi_value("local rank", *open_mpi->local_rank, *pmi->local_rank);
        chosen = open_mpi;
        if (!chosen->local_rank) chosen->local_rank = pmi->local_rank;
      } else {
        chosen = open_mpi ? open_mpi : pmi;
      }
    }
    if (!chosen) chosen = detail::read_slurm(lookup);
    if (!chosen) return distributed_env{};
    return distributed_env{chosen->rank.value, chosen->world_size.value,
                           chosen->local_rank ? chosen->local_rank->value : 0,
                           std::string(chosen->variables->launcher)};
  }
};

}  // namespace multipack
