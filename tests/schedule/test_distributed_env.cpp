// distributed_env: each launcher's variables, precedence by nesting, and an error naming the
// variables for every malformed, incomplete or contradictory environment.

#include "multipack/schedule/distributed_env.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "support/expect.hpp"

using namespace multipack;

namespace {

using fake_env = std::map<std::string, std::string>;

distributed_env read(const fake_env& env) {
  return distributed_env::from([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string read_error(const fake_env& env) {
  return test::message_of<option_error>([&] { (void)read(env); });
}

void check_env(const distributed_env& e, std::uint32_t rank, std::uint32_t world, std::uint32_t local,
               const std::string& launcher) {
  CHECK(e.rank == rank);
  CHECK(e.world_size == world);
  CHECK(e.local_rank == local);
  CHECK(e.launcher == launcher);
}

// Every variable distributed_env reads.
const std::vector<std::string> all_variables = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",                             // torchrun
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",       // Open MPI
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",                                          // PMI
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NTASKS"};           // Slurm

// Saves the variables on construction and puts them back (set or unset) on destruction.
class saved_environment {
 public:
  saved_environment() {
    for (const auto& name : all_variables) {
      const char* value = std::getenv(name.c_str());
      saved_[name] = value == nullptr ? std::nullopt : std::optional<std::string>(value);
    }
  }
  saved_environment(const saved_environment&) = delete;
  saved_environment& operator=(const saved_environment&) = delete;
  ~saved_environment() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace

TEST_CASE("no variables: a single process, rank 0 of 1") {
  check_env(read({}), 0, 1, 0, "none");
  check_env(read({{"UNRELATED", "7"}, {"MASTER_ADDR", "node0"}}), 0, 1, 0, "none");
  const distributed_env defaults;
  check_env(defaults, 0, 1, 0, "none");
}

TEST_CASE("each launcher alone, with its local rank") {
  check_env(read({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}}), 5, 8,
            1, "torchrun");
  check_env(read({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}}), 5, 8, 1, "torchrun");
  check_env(read({{"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}),
            3, 4, 1, "Open MPI");
  check_env(read({{"PMI_RANK", "6"}, {"PMI_SIZE", "16"}, {"MPI_LOCALRANKID", "2"}}), 6, 16, 2, "PMI");
  check_env(read({{"SLURM_PROCID", "9"}, {"SLURM_STEP_NUM_TASKS", "12"}, {"SLURM_NTASKS", "12"},
                  {"SLURM_LOCALID", "3"}}),
            9, 12, 3, "Slurm");
}

TEST_CASE("the local rank is optional: 0 without it") {
  check_env(read({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), 1, 2, 0, "torchrun");
  check_env(read({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), 1, 2, 0, "PMI");
  check_env(read({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}}), 0, 1, 0, "Slurm");
}

TEST_CASE("Slurm: only a task that srun started is one of the allocation's tasks") {
  // A batch script's own variables (sbatch --ntasks=4, as `env` prints them there): SLURM_NTASKS
  // is the allocation's, SLURM_PROCID 0, and no step. Read as rank 0 of 4, the one process the
  // script runs would train on a quarter of the data.
  const fake_env batch_script = {{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}};
  auto msg = read_error(batch_script);
  CHECK(msg.starts_with("distributed_env: SLURM_NTASKS=4 but SLURM_STEP_NUM_TASKS is not set"));
  CHECK(test::contains(msg, "srun"));
  msg = read_error({{"SLURM_PROCID", "2"}});
  CHECK(msg.starts_with("distributed_env: SLURM_PROCID=2 but SLURM_STEP_NUM_TASKS is not set"));
  // A local rank above 0 means another task on this node (it was read as rank 0 of 1, the
  // local rank dropped: this process would train on all of the data beside the others).
  msg = read_error({{"SLURM_LOCALID", "3"}});
  CHECK(msg.starts_with("distributed_env: SLURM_LOCALID=3 but SLURM_STEP_NUM_TASKS is not set"));
  msg = read_error({{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "5"}});
  CHECK(msg.starts_with("distributed_env: SLURM_LOCALID=5 but SLURM_STEP_NUM_TASKS is not set"));
  // An allocation of one task: that process is the whole job.
  check_env(read({{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}), 0, 1, 0, "Slurm");
  check_env(read({{"SLURM_PROCID", "0"}}), 0, 1, 0, "Slurm");
  // An allocation of no task is malformed, as a world size of 0 from any launcher is (it was
  // read as one task).
  CHECK(read_error({{"SLURM_NTASKS", "0"}, {"SLURM_PROCID", "0"}}) ==
        "distributed_env: world size 0 (SLURM_NTASKS=0): a world has at least 1 rank");
  // The tasks that `srun` starts from that script: the step's task count is the world.
  check_env(read({{"SLURM_NTASKS", "4"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "3"},
                  {"SLURM_LOCALID", "1"}}),
            3, 4, 1, "Slurm");
  check_env(read({{"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"}}), 1, 2, 0, "Slurm");
  // torchrun or mpirun run from the batch script: the inner launcher decides, no error.
  fake_env batch_torchrun = batch_script;
  batch_torchrun.insert({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "5"}});
  check_env(read(batch_torchrun), 5, 8, 5, "torchrun");
  fake_env batch_mpirun = batch_script;
  batch_mpirun.insert({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  check_env(read(batch_mpirun), 2, 4, 0, "Open MPI");
}

TEST_CASE("limits and spellings: the last rank, a world of 4294967295, leading zeros") {
  check_env(read({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}}), 3, 4, 3, "torchrun");
  check_env(read({{"RANK", "4294967294"}, {"WORLD_SIZE", "4294967295"}}), 4294967294u, 4294967295u, 0,
            "torchrun");
  check_env(read({{"RANK", "007"}, {"WORLD_SIZE", "010"}}), 7, 10, 0, "torchrun");
}

TEST_CASE("torchrun inside Slurm or MPI: the innermost launcher, torchrun, wins") {
  // srun --ntasks-per-node=1 torchrun --nproc-per-node=4: Slurm sees 2 tasks, torchrun 8 ranks.
  const fake_env srun_torchrun = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                                  {"RANK", "6"},         {"WORLD_SIZE", "8"},   {"LOCAL_RANK", "2"},
                                  {"LOCAL_WORLD_SIZE", "4"}};
  check_env(read(srun_torchrun), 6, 8, 2, "torchrun");
  const fake_env mpirun_torchrun = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                    {"RANK", "5"},                 {"WORLD_SIZE", "8"},
                                    {"LOCAL_RANK", "1"}};
  check_env(read(mpirun_torchrun), 5, 8, 1, "torchrun");
  // MPI inside a Slurm allocation: MPI wins over Slurm.
  check_env(read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}), 3, 4, 0,
            "PMI");
  // The outer launcher's variables are not read when an inner one is set: broken ones do not matter.
  check_env(read({{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "x"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}), 0, 1, 0,
            "torchrun");
}

TEST_CASE("Open MPI and PMI together: agreeing, they are one MPI world") {
  check_env(read({{"OMPI_COMM_WORLD_RANK", "2"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"PMI_RANK", "2"},
                  {"PMI_SIZE", "4"},
                  {"MPI_LOCALRANKID", "0"}}),
            2, 4, 0, "Open MPI");
  // The local rank comes from whichever of the two gives it.
  check_env(read({{"OMPI_COMM_WORLD_RANK", "2"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"PMI_RANK", "2"},
                  {"PMI_SIZE", "4"},
                  {"MPI_LOCALRANKID", "1"}}),
            2, 4, 1, "Open MPI");
}

TEST_CASE("Open MPI and PMI disagreeing: an error naming both variables and their values") {
  struct contradiction {
    fake_env env;
    const char* ompi;
    const char* pmi;
  };
  const fake_env base = {{"OMPI_COMM_WORLD_RANK", "2"},       {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"PMI_RANK", "2"},
                         {"PMI_SIZE", "4"},                   {"MPI_LOCALRANKID", "0"}};
  auto with = [&](const char* name, const char* value) {
    fake_env e = base;
    e[name] = value;
    return e;
  };
  for (const auto& c : {contradiction{with("PMI_RANK", "3"), "OMPI_COMM_WORLD_RANK=2", "PMI_RANK=3"},
                        contradiction{with("PMI_SIZE", "8"), "OMPI_COMM_WORLD_SIZE=4", "PMI_SIZE=8"},
                        contradiction{with("MPI_LOCALRANKID", "1"), "OMPI_COMM_WORLD_LOCAL_RANK=0",
                                      "MPI_LOCALRANKID=1"}}) {
    CAPTURE(c.pmi);
    const auto msg = read_error(c.env);
    CHECK(msg.starts_with("distributed_env: "));
    CHECK(test::contains(msg, "contradictory"));
    CHECK(test::contains(msg, c.ompi));
    CHECK(test::contains(msg, c.pmi));
  }
}

TEST_CASE("a malformed value: an error naming the variable and quoting the value") {
  struct bad {
    const char* value;
    const char* quoted;
    const char* why;
  };
  for (const char* variable : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                               "PMI_RANK", "MPI_LOCALRANKID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                               "SLURM_LOCALID"}) {
    for (const bad b : {bad{"", "''", "empty"}, bad{"abc", "'abc'", "not a non-negative decimal integer"},
                        bad{"-1", "'-1'", "not a non-negative"}, bad{"3x", "'3x'", "not a non-negative"},
                        bad{" 3", "' 3'", "not a non-negative"}, bad{"3 ", "'3 '", "not a non-negative"},
                        bad{"+3", "'+3'", "not a non-negative"}, bad{"0x10", "'0x10'", "not a non-negative"},
                        bad{"1.0", "'1.0'", "not a non-negative"},
                        bad{"4294967296", "'4294967296'", "larger than 4294967295"},
                        bad{"99999999999", "'99999999999'", "larger than 4294967295"}}) {
      CAPTURE(variable);
      CAPTURE(b.value);
      fake_env env = {{variable, b.value}};
      const auto msg = read_error(env);
      CHECK(msg.starts_with("distributed_env: "));
      CHECK(test::contains(msg, std::string(variable) + "=" + b.quoted));
      CHECK(test::contains(msg, b.why));
    }
  }
  // Control bytes are escaped and a long value is cut short.
  const auto msg = read_error({{"RANK", "1\n2"}, {"WORLD_SIZE", "4"}});
  CHECK(test::contains(msg, "RANK='1\\x0a2'"));
  const auto long_msg = read_error({{"WORLD_SIZE", std::string(1000, '7') + "z"}, {"RANK", "0"}});
  CHECK(test::contains(long_msg, "WORLD_SIZE='" + std::string(40, '7') + "'..."));
  CHECK(long_msg.size() < 200);
}

TEST_CASE("half a pair: an error naming the variable set and the one missing") {
  struct half {
    fake_env env;
    const char* set;
    const char* missing;
  };
  for (const auto& h : {
           half{{{"RANK", "0"}}, "RANK=0", "WORLD_SIZE"},
           half{{{"WORLD_SIZE", "2"}}, "WORLD_SIZE=2", "RANK"},
           half{{{"LOCAL_RANK", "0"}}, "LOCAL_RANK=0", "RANK"},
           half{{{"LOCAL_WORLD_SIZE", "4"}}, "LOCAL_WORLD_SIZE=4", "RANK"},
           half{{{"LOCAL_RANK", "0"}, {"WORLD_SIZE", "2"}}, "WORLD_SIZE=2", "RANK"},
           half{{{"OMPI_COMM_WORLD_RANK", "1"}}, "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE"},
           half{{{"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK"},
           half{{{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}, "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_RANK"},
           half{{{"PMI_RANK", "1"}}, "PMI_RANK=1", "PMI_SIZE"},
           half{{{"PMI_SIZE", "2"}}, "PMI_SIZE=2", "PMI_RANK"},
           half{{{"MPI_LOCALRANKID", "0"}}, "MPI_LOCALRANKID=0", "PMI_RANK"},
           half{{{"SLURM_STEP_NUM_TASKS", "2"}}, "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID"},
           half{{{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "0"}}, "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID"},
           // Half of the inner launcher is an error even when an outer one is complete.
           half{{{"RANK", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}, "RANK=0", "WORLD_SIZE"},
           // Half of PMI next to a complete Open MPI.
           half{{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMI_RANK", "0"}},
                "PMI_RANK=0",
                "PMI_SIZE"},
       }) {
    CAPTURE(h.set);
    const auto msg = read_error(h.env);
    CHECK(msg.starts_with("distributed_env: "));
    CHECK(test::contains(msg, h.set));
    CHECK(test::contains(msg, "but " + std::string(h.missing)));
  }
}

TEST_CASE("world size 0 and a rank outside the world") {
  auto msg = read_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  CHECK(msg.starts_with("distributed_env: "));
  CHECK(test::contains(msg, "WORLD_SIZE=0"));
  msg = read_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "0"}});
  CHECK(test::contains(msg, "SLURM_STEP_NUM_TASKS=0"));

  CHECK(read_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}}) ==
        "distributed_env: rank 4 is outside the world of 4 ranks (RANK=4, WORLD_SIZE=4)");
  CHECK(read_error({{"RANK", "1"}, {"WORLD_SIZE", "1"}}) ==
        "distributed_env: rank 1 is outside the world of 1 rank (RANK=1, WORLD_SIZE=1)");
  msg = read_error({{"OMPI_COMM_WORLD_RANK", "9"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  CHECK(test::contains(msg, "rank 9 is outside the world of 2 ranks"));
  CHECK(test::contains(msg, "OMPI_COMM_WORLD_RANK=9, OMPI_COMM_WORLD_SIZE=2"));
  msg = read_error({{"PMI_RANK", "4294967295"}, {"PMI_SIZE", "4294967295"}});
  CHECK(test::contains(msg, "PMI_RANK=4294967295, PMI_SIZE=4294967295"));
  msg = read_error({{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "2"}});
  CHECK(test::contains(msg, "SLURM_PROCID=3, SLURM_STEP_NUM_TASKS=2"));
}

TEST_CASE("local rank checks: not above the rank, below LOCAL_WORLD_SIZE") {
  auto msg = read_error({{"RANK", "2"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}});
  CHECK(msg.starts_with("distributed_env: "));
  CHECK(test::contains(msg, "local rank 3"));
  CHECK(test::contains(msg, "LOCAL_RANK=3, RANK=2"));
  msg = read_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "1"}});
  CHECK(test::contains(msg, "SLURM_LOCALID=1, SLURM_PROCID=0"));
  msg = read_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}});
  CHECK(test::contains(msg, "MPI_LOCALRANKID=1, PMI_RANK=0"));

  msg = read_error({{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "4"}, {"LOCAL_WORLD_SIZE", "4"}});
  CHECK(test::contains(msg, "local rank 4 is outside the local world of 4 ranks"));
  CHECK(test::contains(msg, "LOCAL_RANK=4, LOCAL_WORLD_SIZE=4"));
  msg = read_error({{"RANK", "0"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}});
  CHECK(test::contains(msg, "LOCAL_WORLD_SIZE=0"));
  msg = read_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}});
  CHECK(test::contains(msg, "LOCAL_WORLD_SIZE=4, WORLD_SIZE=2"));
  // The last local rank of the last node is fine.
  check_env(read({{"RANK", "7"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}}), 7, 8, 3,
            "torchrun");
}

TEST_CASE("an empty lookup function is an option_error") {
  const auto msg = test::message_of<option_error>([] { (void)distributed_env::from({}); });
  CHECK(msg.starts_with("distributed_env: "));
}

TEST_CASE("from_environment reads the real environment (torchrun set, then restored)") {
  const saved_environment restore;
  for (const auto& name : all_variables) ::unsetenv(name.c_str());
  check_env(distributed_env::from_environment(), 0, 1, 0, "none");

  ::setenv("SLURM_PROCID", "0", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  check_env(distributed_env::from_environment(), 3, 4, 1, "torchrun");

  ::setenv("RANK", "4", 1);
  const auto msg = test::message_of<option_error>([] { (void)distributed_env::from_environment(); });
  CHECK(msg == "distributed_env: rank 4 is outside the world of 4 ranks (RANK=4, WORLD_SIZE=4)");
}
