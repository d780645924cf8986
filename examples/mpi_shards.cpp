// Real multi-process check of the "same plan on every rank" property: every MPI process
// builds its own plan of the epoch from the same dataset and options, with no communication,
// and the processes then show, through MPI, that the plans agree and cover the data:
//
//  - each process's distributed_env::from_environment() agrees with MPI_Comm_rank,
//    MPI_Comm_size and its rank on the node (launcher "Open MPI" under Open MPI's mpirun);
//  - every rank has the same number of steps and a plan (packing and all ranks' rows) with
//    the same hash;
//  - the rows that the ranks train on, gathered step by step on rank 0, take every sample of
//    the epoch exactly once (its pieces cover its tokens once), or the sample is counted in a
//    report: empty or overlong (dropped by the packer), or left out by remainder drop;
//  - the schedules of epochs 0 and 1 differ.
// It does so for epochs 0 and 1 under both remainder policies, pad and drop.
//
//   mpirun -np 4 build/bin/mpi_shards [PREFIX] [--capacity C] [--micro-batch B]
//          [--algorithm NAME] [--overlong POLICY]
//
// PREFIX defaults to data/alpaca/alpaca_llama (from the working directory), C to 2048, B to
// 4, NAME to randomized-exact-fit, POLICY to drop (--capacity 128 --overlong split shows
// samples split across rows, some of them left out only in part by remainder drop). As root
// in a container, Open MPI also wants `--allow-run-as-root`, and `--oversubscribe` for more
// processes than cores.
// Exit status 0 when every check passes; on a failed check, or an error on any process, the
// process says what failed and the whole job is aborted with MPI_Abort (status 1).

// Only MPI's C API is used: keep the deprecated C++ bindings out of <mpi.h>.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "multipack/core/error.hpp"
#include "multipack/core/piece.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/pack/options.hpp"
#include "multipack/schedule/distributed_env.hpp"
#include "multipack/schedule/epoch_schedule.hpp"
#include "multipack/schedule/options.hpp"
#include "multipack/schedule/plan.hpp"

namespace {

int world_rank = 0;  // for messages

// A failed check: say what failed, then take the whole job down (the other processes may
// be waiting in a collective that will never complete).
[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "mpi_shards: check failed on rank %d: %s\n", world_rank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

struct arguments {
  std::string prefix = "data/alpaca/alpaca_llama";
  multipack::pack_options packing{2048, multipack::packing_algorithm::randomized_exact_fit};
  std::uint32_t micro_batch = 4;
  bool help = false;
};

constexpr const char* usage =
    "usage: mpirun -np N mpi_shards [PREFIX] [--capacity C] [--micro-batch B] [--algorithm NAME]\n"
    "                               [--overlong drop|truncate|split|error]\n";

std::uint32_t parse_count(std::string_view option, std::string_view text) {
  std::uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value == 0)
    throw multipack::option_error(std::string(option) + " wants a positive integer, not '" + std::string(text) + "'");
  return value;
}

arguments parse_arguments(int argc, char** argv) {
  arguments args;
  bool have_prefix = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.help = true;
      continue;
    }
    if (!arg.starts_with("-")) {
      if (have_prefix) throw multipack::option_error("more than one PREFIX: '" + std::string(arg) + "'\n" + usage);
      args.prefix = arg;
      have_prefix = true;
      continue;
    }
    if (i + 1 == argc) throw multipack::option_error(std::string(arg) + " wants a value\n" + usage);
    const std::string_view value = argv[++i];
    if (arg == "--capacity") {
      args.packing.capacity = parse_count(arg, value);
    } else if (arg == "--micro-batch") {
      args.micro_batch = parse_count(arg, value);
    } else if (arg == "--algorithm") {
      args.packing.algorithm = multipack::parse_packing_algorithm(value);
    } else if (arg == "--overlong") {
      args.packing.overlong = multipack::parse_overlong_policy(value);
    } else {
      throw multipack::option_error("unknown option '" + std::string(arg) + "'\n" + usage);
    }
  }
  return args;
}

// The environment as the launcher set it, checked against what MPI says.
void check_environment(const multipack::distributed_env& env, bool open_mpi_variables, int rank, int size) {
  if (env.rank != static_cast<std::uint32_t>(rank) || env.world_size != static_cast<std::uint32_t>(size))
    fail("distributed_env says rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
         " (launcher " + env.launcher + "), MPI says rank " + std::to_string(rank) + " of " + std::to_string(size));
  // Open MPI's mpirun sets OMPI_COMM_WORLD_*: then "Open MPI" must be the launcher read.
  // Under other launchers (MPICH's Hydra: "PMI", srun: "Slurm") the numbers are what counts;
  // a singleton (no launcher) is rank 0 of 1, "none".
  if (open_mpi_variables && env.launcher != "Open MPI")
    fail("distributed_env reads launcher '" + env.launcher + "' under Open MPI's mpirun");
  if (env.launcher == "none" && size != 1)
    fail("distributed_env finds no launcher, but MPI runs " + std::to_string(size) + " processes");
  // The local rank picks the GPU: it must be this process's rank among those on its node.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_rank = 0;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_free(&node);
  if (env.local_rank != static_cast<std::uint32_t>(node_rank))
    fail("distributed_env says local rank " + std::to_string(env.local_rank) + ", MPI_COMM_TYPE_SHARED says " +
         std::to_string(node_rank));
}

// FNV-1a over 64-bit words: a hash that every rank computes the same way on the same plan.
class plan_hasher {
 public:
  void add(std::uint64_t v) noexcept {
    for (int byte = 0; byte < 8; ++byte) {
      hash_ ^= (v >> (8 * byte)) & 0xff;
      hash_ *= 0x100000001b3ULL;
    }
  }
  [[nodiscard]] std::uint64_t value() const noexcept { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

// The whole plan: every row of the packing, and every rank's rows in every step.
std::uint64_t plan_hash(const multipack::epoch_plan& plan) {
  plan_hasher h;
  for (const std::uint64_t offset : plan.packed.rows.row_offsets()) h.add(offset);
  for (const multipack::piece& p : plan.packed.rows.pieces()) {
    h.add(p.sample);
    h.add(p.begin);
    h.add(p.end);
  }
  const multipack::epoch_schedule& schedule = plan.schedule;
  h.add(schedule.steps());
  h.add(schedule.world_size());
  h.add(schedule.micro_batch());
  for (std::uint64_t step = 0; step < schedule.steps(); ++step)
    for (std::uint32_t rank = 0; rank < schedule.world_size(); ++rank)
      for (const std::uint32_t row : schedule.rows(step, rank)) h.add(row);
  return h.value();
}

// What one rank trains on in one step, as it would hand it to its trainer: per slot, the
// row, its piece count, then (sample, begin, end) of each piece.
std::vector<std::uint32_t> step_message(const multipack::epoch_plan& plan, std::uint64_t step, std::uint32_t rank) {
  std::vector<std::uint32_t> message;
  const std::span<const std::uint32_t> rows = plan.schedule.rows(step, rank);
  for (std::uint32_t slot = 0; slot < rows.size(); ++slot) {
    const std::span<const multipack::piece> pieces = plan.pieces(step, rank, slot);
    message.push_back(rows[slot]);
    message.push_back(static_cast<std::uint32_t>(pieces.size()));
    for (const multipack::piece& p : pieces) message.insert(message.end(), {p.sample, p.begin, p.end});
  }
  return message;
}

// A piece of the epoch's packing, and whether some rank trained on it (or its row was left
// out of the schedule).
struct tagged_piece {
  multipack::piece piece;
  bool trained = false;
};

// Rank 0's tally of what all ranks trained on in one epoch.
struct epoch_tally {
  std::vector<tagged_piece> pieces;    // every piece trained on, from every rank
  std::vector<std::uint8_t> row_seen;  // per row of the packing
  std::uint64_t real_slots = 0;
  std::uint64_t padding_slots = 0;
  std::uint64_t tokens = 0;
};

// Reads the messages of all ranks for `step` (rank 0 only) and checks each against rank 0's
// own plan: a rank that built another plan shows up here, at its step.
void tally_step(const std::string& label, const multipack::epoch_plan& plan, std::uint64_t step,
                std::span<const std::uint32_t> buffer, std::span<const int> counts, std::span<const int> displacements,
                epoch_tally& tally) {
  const auto& rows = plan.packed.rows;
  for (std::uint32_t rank = 0; rank < counts.size(); ++rank) {
    const std::span<const std::uint32_t> message =
        buffer.subspan(static_cast<std::size_t>(displacements[rank]), static_cast<std::size_t>(counts[rank]));
    const std::string where = label + ", step " + std::to_string(step) + ", rank " + std::to_string(rank);
    const std::span<const std::uint32_t> expected_rows = plan.schedule.rows(step, rank);
    std::size_t k = 0;
    for (std::uint32_t slot = 0; slot < expected_rows.size(); ++slot) {
      if (k + 2 > message.size()) fail(where + ": its message ends before slot " + std::to_string(slot));
      const std::uint32_t row = message[k++];
      const std::uint32_t count = message[k++];
      if (row != expected_rows[slot])
        fail(where + ", slot " + std::to_string(slot) + ": the rank trains on row " + std::to_string(row) +
             ", rank 0's plan says " + std::to_string(expected_rows[slot]));
      if (k + 3ull * count > message.size()) fail(where + ": its message ends inside slot " + std::to_string(slot));
      if (row == multipack::epoch_schedule::padding_row) {
        if (count != 0) fail(where + ": a padding row with pieces");
        ++tally.padding_slots;
        continue;
      }
      if (tally.row_seen[row]++ != 0) fail(where + ": row " + std::to_string(row) + " is trained on twice");
      ++tally.real_slots;
      const std::span<const multipack::piece> expected_pieces = rows[row];
      if (count != expected_pieces.size())
        fail(where + ": row " + std::to_string(row) + " has " + std::to_string(count) + " pieces, rank 0's has " +
             std::to_string(expected_pieces.size()));
      for (std::uint32_t j = 0; j < count; ++j, k += 3) {
        const multipack::piece p{message[k], message[k + 1], message[k + 2]};
        if (p != expected_pieces[j]) fail(where + ": row " + std::to_string(row) + " differs from rank 0's");
        tally.pieces.push_back({p, true});
        tally.tokens += p.length();
      }
    }
    if (k != message.size()) fail(where + ": its message is longer than its micro-batch");
  }
}

struct coverage {
  std::uint64_t whole = 0;      // samples taken exactly once, all their tokens
  std::uint64_t split = 0;      // ... of which in more than one piece
  std::uint64_t truncated = 0;  // ... of which only the first row's worth (overlong truncate)
  std::uint64_t partial = 0;    // some pieces taken, the others in rows left out (split + drop)
  std::uint64_t left_out = 0;   // every piece in rows left out (remainder drop)
  std::uint64_t empty = 0;
  std::uint64_t overlong_dropped = 0;
};

// A failed check of one sample (and one of its pieces). The message is built with +=: GCC 12
// warns falsely (-Wrestrict) about some chains of + on std::string.
[[noreturn]] void fail_sample(const std::string& label, std::uint32_t sample, std::uint32_t length,
                              const multipack::piece* p, const std::string& why) {
  std::string message = label;
  message += ", sample " + std::to_string(sample);
  message += " (" + std::to_string(length) + " tokens)";
  if (p != nullptr) {
    message += ", piece [" + std::to_string(p->begin);
    message += ", " + std::to_string(p->end);
    message += ")";
  }
  message += ": ";
  message += why;
  fail(message);
}

// The pieces trained on and those left out must together cover every sample's tokens
// [0, expected) exactly once, and a sample with no piece must be one the packer dropped:
// so every sample is taken once, or accounted for. `pieces` is sorted here.
coverage check_coverage(const std::string& label, std::span<const std::uint32_t> lengths,
                        const multipack::pack_options& packing, std::vector<tagged_piece>& pieces) {
  std::sort(pieces.begin(), pieces.end(), [](const tagged_piece& a, const tagged_piece& b) {
    return a.piece.sample != b.piece.sample ? a.piece.sample < b.piece.sample : a.piece.begin < b.piece.begin;
  });
  coverage c;
  std::size_t next = 0;
  for (std::uint32_t sample = 0; sample < lengths.size(); ++sample) {
    const std::uint32_t length = lengths[sample];
    const bool overlong = length > packing.capacity;
    const bool packer_drops = length == 0 || (overlong && packing.overlong == multipack::overlong_policy::drop);
    // What of the sample a packing keeps: all of it, or its first row under truncate.
    const std::uint32_t expected =
        overlong && packing.overlong == multipack::overlong_policy::truncate ? packing.capacity : length;
    std::uint32_t covered = 0;
    std::size_t trained = 0;
    std::size_t left_out = 0;
    for (; next < pieces.size() && pieces[next].piece.sample == sample; ++next) {
      const multipack::piece& p = pieces[next].piece;
      if (packer_drops) fail_sample(label, sample, length, &p, "in a row, but the packer should have left it out");
      if (p.begin != covered)
        fail_sample(label, sample, length, &p,
                    "after " + std::to_string(covered) +
                        " tokens: " + (p.begin < covered ? "tokens taken twice" : "tokens in no row"));
      if (p.end <= p.begin || p.end > expected)
        fail_sample(label, sample, length, &p, "outside [0, " + std::to_string(expected) + ")");
      covered = p.end;
      ++(pieces[next].trained ? trained : left_out);
    }
    if (packer_drops) {
      ++(length == 0 ? c.empty : c.overlong_dropped);
      continue;
    }
    if (covered != expected)
      fail_sample(label, sample, length, nullptr,
                  "its rows hold " + std::to_string(covered) + " of its " + std::to_string(expected) + " tokens");
    if (left_out == 0) {
      ++c.whole;
      if (trained > 1) ++c.split;
      if (expected < length) ++c.truncated;
    } else {
      ++(trained == 0 ? c.left_out : c.partial);
    }
  }
  if (next != pieces.size())
    fail(label + ": piece of sample " + std::to_string(pieces[next].piece.sample) + ", past the " +
         std::to_string(lengths.size()) + " samples of the dataset");
  return c;
}

template <class T>
void require_equal(const std::string& what, T got, T want) {
  if (got != want) fail(what + ": " + std::to_string(got) + ", expected " + std::to_string(want));
}

void run(const arguments& args, const multipack::distributed_env& env, bool open_mpi_variables) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  check_environment(env, open_mpi_variables, rank, size);

  // Every process opens the dataset and plans on its own: no broadcast of lengths or plans.
  const multipack::indexed_dataset dataset(args.prefix);
  const std::vector<std::uint32_t> lengths = dataset.lengths();
  if (rank == 0)
    std::printf("mpi_shards: %s, %zu samples, capacity %u, micro-batch %u, %s, overlong %s, %d rank%s (launcher %s)\n",
                args.prefix.c_str(), lengths.size(), args.packing.capacity, args.micro_batch,
                std::string(multipack::to_string(args.packing.algorithm)).c_str(),
                std::string(multipack::to_string(args.packing.overlong)).c_str(), size, size == 1 ? "" : "s",
                env.launcher.c_str());

  constexpr std::array remainders{multipack::remainder_policy::pad, multipack::remainder_policy::drop};
  std::array<std::array<std::uint64_t, 2>, remainders.size()> hashes{};  // [remainder][epoch], rank 0
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    for (std::size_t r = 0; r < remainders.size(); ++r) {
      multipack::schedule_options options;
      options.world_size = env.world_size;
      options.micro_batch = args.micro_batch;
      options.epoch = epoch;
      options.remainder = remainders[r];
      const multipack::epoch_plan plan = multipack::plan_epoch(lengths, args.packing, options);
      const multipack::epoch_schedule& schedule = plan.schedule;
      const std::string label =
          "epoch " + std::to_string(epoch) + ", remainder " + std::string(multipack::to_string(remainders[r]));

      // Same step count and same plan everywhere: gathered before the per-step loop, whose
      // collectives would not match on ranks with different step counts.
      const std::array<std::uint64_t, 2> mine{schedule.steps(), plan_hash(plan)};
      std::vector<std::uint64_t> all(rank == 0 ? 2 * static_cast<std::size_t>(size) : 0);
      MPI_Gather(mine.data(), 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        for (int other = 1; other < size; ++other) {
          if (all[2 * other] != mine[0])
            fail(label + ": rank " + std::to_string(other) + " has " + std::to_string(all[2 * other]) +
                 " steps, rank 0 has " + std::to_string(mine[0]));
          if (all[2 * other + 1] != mine[1])
            fail(label + ": rank " + std::to_string(other) + " built another plan (hash differs from rank 0's)");
        }
        hashes[r][epoch] = mine[1];
      }

      // Each step, every rank sends what it trains on to rank 0, which tallies it.
      epoch_tally tally;
      if (rank == 0) tally.row_seen.assign(plan.packed.rows.size(), 0);
      std::vector<int> counts(rank == 0 ? static_cast<std::size_t>(size) : 0);
      std::vector<int> displacements(counts.size());
      std::vector<std::uint32_t> buffer;
      for (std::uint64_t step = 0; step < schedule.steps(); ++step) {
        const std::vector<std::uint32_t> message = step_message(plan, step, env.rank);
        if (message.size() > INT_MAX) throw multipack::option_error("a step's message exceeds what MPI counts");
        const int count = static_cast<int>(message.size());
        MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank == 0) {
          std::uint64_t total = 0;
          for (int other = 0; other < size; ++other) {
            displacements[other] = static_cast<int>(total);
            total += static_cast<std::uint64_t>(counts[other]);
            if (total > INT_MAX) throw multipack::option_error("a step's messages exceed what MPI counts");
          }
          buffer.resize(total);
        }
        MPI_Gatherv(message.data(), count, MPI_UINT32_T, buffer.data(), counts.data(), displacements.data(),
                    MPI_UINT32_T, 0, MPI_COMM_WORLD);
        if (rank == 0) tally_step(label, plan, step, buffer, counts, displacements, tally);
      }
      if (rank != 0) continue;

      // Every row trained on once or counted, every sample taken once or counted.
      const multipack::pack_report& packed = plan.packed.report;
      const multipack::schedule_report& report = schedule.report();
      require_equal(label + ": rows trained on", tally.real_slots, report.scheduled_rows);
      require_equal(label + ": padding rows", tally.padding_slots, report.padded_rows);
      require_equal(label + ": rows never trained on", std::uint64_t{plan.packed.rows.size()} - tally.real_slots,
                    report.dropped_rows + report.consumed_rows);
      require_equal(label + ": tokens trained on", tally.tokens, packed.packed_tokens - report.dropped_tokens);
      // The rows nobody trained on: what remainder drop left out, if anything.
      for (std::size_t row = 0; row < plan.packed.rows.size(); ++row)
        if (tally.row_seen[row] == 0)
          for (const multipack::piece& p : plan.packed.rows[row]) tally.pieces.push_back({p, false});
      const coverage c = check_coverage(label, lengths, args.packing, tally.pieces);
      require_equal(label + ": empty samples", c.empty, packed.empty_samples);
      require_equal(label + ": overlong samples not taken", c.overlong_dropped, packed.dropped_samples);
      require_equal(label + ": samples (wholly or in part) in rows left out", c.left_out + c.partial,
                    report.dropped_samples);
      if (remainders[r] == multipack::remainder_policy::pad) {
        // Nothing left out: every sample the packer split or truncated is among those taken.
        require_equal(label + ": samples dropped under pad", report.dropped_samples, std::uint64_t{0});
        require_equal(label + ": split samples", c.split, packed.split_samples);
        require_equal(label + ": truncated samples", c.truncated, packed.truncated_samples);
      }
      std::printf(
          "%s: %llu steps x %d ranks x %u rows (%llu padding); %llu samples taken exactly once "
          "(%llu split, %llu truncated); dropped by the packer: %llu empty, %llu overlong; "
          "by the remainder: %llu samples (%llu rows, %llu in part); plan %016llx on every rank\n",
          label.c_str(), static_cast<unsigned long long>(schedule.steps()), size, args.micro_batch,
          static_cast<unsigned long long>(report.padded_rows), static_cast<unsigned long long>(c.whole),
          static_cast<unsigned long long>(c.split), static_cast<unsigned long long>(c.truncated),
          static_cast<unsigned long long>(c.empty), static_cast<unsigned long long>(c.overlong_dropped),
          static_cast<unsigned long long>(report.dropped_samples), static_cast<unsigned long long>(report.dropped_rows),
          static_cast<unsigned long long>(c.partial), static_cast<unsigned long long>(hashes[r][epoch]));
      std::fflush(stdout);
    }
  }
  if (rank == 0) {
    // A new epoch is a new order (and, for the randomized packer, new rows).
    for (std::size_t r = 0; r < remainders.size(); ++r)
      if (hashes[r][0] == hashes[r][1])
        fail("remainder " + std::string(multipack::to_string(remainders[r])) + ": epochs 0 and 1 have the same plan");
    std::printf("mpi_shards: all checks passed on %d rank%s\n", size, size == 1 ? "" : "s");
  }
  // The other ranks wait for rank 0's verdict: a failed check then aborts a job whose
  // processes are all still running, not half finalized.
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  // The environment is read before MPI_Init: what the launcher set, not what MPI_Init may add.
  multipack::distributed_env env;
  std::exception_ptr env_error;
  try {
    env = multipack::distributed_env::from_environment();
  } catch (...) {
    env_error = std::current_exception();
  }
  const bool open_mpi_variables = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  try {
    if (env_error) std::rethrow_exception(env_error);
    const arguments args = parse_arguments(argc, argv);
    if (args.help) {
      if (world_rank == 0) std::fputs(usage, stdout);
    } else {
      run(args, env, open_mpi_variables);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_shards: rank %d: %s\n", world_rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // the other processes may wait in a collective for this one
    return 1;
  } catch (...) {
    std::fprintf(stderr, "mpi_shards: rank %d: an exception of unknown type\n", world_rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  MPI_Finalize();
  return 0;
}
