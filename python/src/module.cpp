// The CPython extension `multipack._multipack`: the library's packing, planning and loading
// behind a small Python surface. The public Python API (pack, BatchSampler, Loader) is in
// python/multipack/__init__.py; this file holds what must be C++ to be fast or zero-copy:
//
// - Packing: pack()'s rows as read-only numpy arrays over the C++ result (no copy).
// - Plan: one epoch's plan; a rank's micro-batch of a step as lists of sample indices.
// - Dataset: Megatron/fairseq prefixes, concatenated (the `data/` layer).
// - EpochLoader32 / EpochLoader64: epoch_loader, one stream of batches across epochs (the
//   later epochs planned on its planning thread, with the Plan's options); each batch a dict
//   of numpy arrays over its pool buffer, which goes back to the pool when the last array over
//   it dies.
//
// The GIL is released wherever C++ works or waits: packing, planning, opening files,
// waiting for a batch, stopping the workers. The workers never touch Python objects.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <condition_variable>
#include <cstring>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "multipack/core/error.hpp"
#include "multipack/data/concatenated_dataset.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/data/loss_mask.hpp"
#include "multipack/pack/pack.hpp"
#include "multipack/pipeline/epoch_loader.hpp"
#include "multipack/schedule/distributed_env.hpp"
#include "multipack/schedule/plan.hpp"
#include "multipack/version.hpp"

namespace py = pybind11;

namespace multipack::python {

using shards_type = concatenated_dataset<indexed_dataset>;

/// Calls f() without the GIL, and takes it back. Not py::gil_scoped_release: its destructor
/// takes the GIL back, and a daemon thread doing so while the interpreter shuts down is ended
/// by pthread_exit, whose unwinding out of that noexcept destructor aborted the process
/// (std::terminate). Here the GIL is taken back in the function body, where that unwinding
/// passes through, as a pure-Python thread's does; only when f throws, by the guard.
template <class F>
decltype(auto) without_gil(F&& f) {
  struct restore_if_thrown {
    PyThreadState* state;
    ~restore_if_thrown() {
      if (state != nullptr) PyEval_RestoreThread(state);
    }
  } saved{PyEval_SaveThread()};
  if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
    f();
    PyEval_RestoreThread(std::exchange(saved.state, nullptr));
  } else {
    auto result = f();
    PyEval_RestoreThread(std::exchange(saved.state, nullptr));
    return result;
  }
}

/// Lengths given from Python (any integer numpy array or sequence of ints), as the packer
/// takes them: a copy of the caller's uint32 array when it is one (one memcpy), else the
/// values checked and copied by pack()'s own range overload (negative or too long: a
/// sample_error naming the sample). Never the caller's memory: the GIL is released while C++
/// reads the lengths, and another thread writing the array meanwhile made the packer's two
/// passes over it disagree (a write past a buffer).
class lengths_argument {
 public:
  explicit lengths_argument(const py::handle& values, const char* what) {
    const py::module_ numpy = py::module_::import("numpy");
    py::array array = numpy.attr("asarray")(values);
    // numpy makes a 0-dimensional array of what is no sequence (a generator, None, a str, an
    // int): the wrong type, a TypeError as the README says; a 2-D array is the wrong shape.
    if (array.ndim() == 0)
      throw py::type_error(std::string(what) + ": lengths must be a sequence or a one-dimensional array of "
                           "integers, got " + py::str(py::type::handle_of(values).attr("__name__")).cast<std::string>() +
                           (py::isinstance<py::iterator>(values) ? " (an iterator: make a list of it first)" : ""));
    if (array.ndim() != 1)
      throw option_error(std::string(what) + ": expected a one-dimensional array of lengths, got " +
                       std::to_string(array.ndim()) + " dimensions");
    if (array.size() == 0) return;  // [] is float64 to numpy: no values, no type to check
    // numpy makes float64 of a list that mixes numpy.uint64 with Python ints or holds an int
    // past 2^63 - 1, and object of one past 2^64 - 1: read such a list's integers exactly, and
    // those of an object array (whose items may be Python ints).
    if (const char k = array.dtype().kind(); k == 'O' || (k == 'f' && !py::isinstance<py::array>(values)))
      if (auto exact = exact_integers(values, what)) array = std::move(*exact);
    const char kind = array.dtype().kind();
    if (kind != 'i' && kind != 'u')
      throw py::type_error(std::string(what) + ": lengths must be integers, got dtype " +
                           py::str(array.dtype()).cast<std::string>());
    if (kind == 'u' && array.itemsize() == 4) {
      const array_of<std::uint32_t> given = array_of<std::uint32_t>::ensure(array);
      array_of<std::uint32_t> copy(given.size());  // aligned, too: a view at an odd offset was read in place
      if (given.size() != 0)
        std::memcpy(copy.mutable_data(), given.data(), static_cast<std::size_t>(given.size()) * sizeof(std::uint32_t));
      values_ = std::move(copy);
    } else if (kind == 'u') {
      values_ = array_of<std::uint64_t>::ensure(array);
    } else {
      values_ = array_of<std::int64_t>::ensure(array);
    }
  }

  /// Calls f with the lengths as a contiguous range (the GIL may be released inside f: the
  /// array is held by this object).
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(
        [&f](const auto& held) {
          using held_type = std::decay_t<decltype(held)>;
          if constexpr (std::is_same_v<held_type, std::monostate>) {
            return f(std::span<const std::uint32_t>());
          } else {
            using value = typename held_type::value_type;
            return f(std::span<const value>(held.data(), static_cast<std::size_t>(held.size())));
          }
        },
        values_);
  }

 private:
  template <class T>
  using array_of = py::array_t<T, py::array::c_style | py::array::forcecast>;

  // The items of a sequence as uint64; std::nullopt when an item is not an integer (1.5).
  // Throws sample_error for a negative length or one past 2^64 - 1 (naming the sample, as the
  // packer does), what an item's __index__ throws other than TypeError. O(n).
  static std::optional<py::array> exact_integers(const py::handle& values, const char* what) {
    std::vector<py::int_> items;
    for (const py::handle item : values) {
      PyObject* index = PyNumber_Index(item.ptr());  // ints, numpy integers, bool; not floats
      if (index == nullptr) {
        if (PyErr_ExceptionMatches(PyExc_TypeError) == 0) throw py::error_already_set();
        PyErr_Clear();
        return std::nullopt;
      }
      items.push_back(py::reinterpret_steal<py::int_>(index));
    }
    array_of<std::uint64_t> out(static_cast<py::ssize_t>(items.size()));
    std::uint64_t* data = out.mutable_data();
    for (std::size_t i = 0; i < items.size(); ++i) {
      data[i] = PyLong_AsUnsignedLongLong(items[i].ptr());
      if (PyErr_Occurred() != nullptr) {  // OverflowError: negative, or past 64 bits
        PyErr_Clear();
        const std::string value = py::str(items[i]).cast<std::string>();
        throw sample_error(value.starts_with('-')
                               ? "sample " + std::to_string(i) + " has negative length " + value
                               : std::string(what) + ": sample " + std::to_string(i) + " has length " + value +
                                     ", past 2^64 - 1");
      }
    }
    return py::array(std::move(out));
  }

  // No values (an empty argument), or the array holding them.
  std::variant<std::monostate, array_of<std::uint32_t>, array_of<std::uint64_t>, array_of<std::int64_t>> values_;
};

/// A read-only numpy array over `data`, kept alive by `owner` (the Python object that holds
/// the C++ memory). O(1), no copy.
template <class T>
py::array read_only_array(const T* data, std::vector<py::ssize_t> shape, std::vector<py::ssize_t> strides,
                          const py::handle& owner) {
  py::array a(py::dtype::of<T>(), std::move(shape), std::move(strides), data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

py::dict to_dict(const pack_report& r) {
  py::dict d;
  d["samples"] = r.samples;
  d["tokens"] = r.tokens;
  d["packed_samples"] = r.packed_samples;
  d["packed_tokens"] = r.packed_tokens;
  d["pieces"] = r.pieces;
  d["rows"] = r.rows;
  d["capacity"] = r.capacity;
  d["lower_bound"] = r.lower_bound;
  d["empty_samples"] = r.empty_samples;
  d["dropped_samples"] = r.dropped_samples;
  d["dropped_tokens"] = r.dropped_tokens;
  d["truncated_samples"] = r.truncated_samples;
  d["truncated_tokens"] = r.truncated_tokens;
  d["split_samples"] = r.split_samples;
  d["efficiency"] = r.efficiency();
  d["rows_over_lower_bound"] = r.rows_over_lower_bound();
  return d;
}

py::dict to_dict(const schedule_report& r) {
  py::dict d;
  d["world_size"] = r.world_size;
  d["micro_batch"] = r.micro_batch;
  d["steps"] = r.steps;
  d["rows"] = r.rows;
  d["consumed_rows"] = r.consumed_rows;
  d["scheduled_rows"] = r.scheduled_rows;
  d["padded_rows"] = r.padded_rows;
  d["padding_only_ranks"] = r.padding_only_ranks;
  d["dropped_rows"] = r.dropped_rows;
  d["dropped_samples"] = r.dropped_samples;
  d["dropped_tokens"] = r.dropped_tokens;
  d["balance_mean"] = r.balance_mean;
  d["balance_worst"] = r.balance_worst;
  return d;
}

pack_options packing_options(std::uint32_t capacity, const std::string& algorithm, const std::string& overlong,
                             std::uint64_t seed, std::uint64_t epoch, std::uint32_t max_per_row,
                             std::uint32_t threads) {
  pack_options o;
  o.capacity = capacity;
  o.algorithm = parse_packing_algorithm(algorithm);
  o.overlong = parse_overlong_policy(overlong);
  o.seed = seed;
  o.epoch = epoch;
  o.max_per_row = max_per_row;
  o.threads = threads;
  return o;
}

/// The pieces of `rows` as numpy arrays over them: (n, 3) uint32 rows of sample, begin, end
/// (12 bytes a piece, as piece is laid out).
static_assert(sizeof(piece) == 3 * sizeof(std::uint32_t), "piece is three packed uint32");

py::array pieces_array(std::span<const piece> pieces, const py::handle& owner) {
  const auto* first = pieces.empty() ? nullptr : &pieces.front().sample;
  static const piece none{};
  return read_only_array<std::uint32_t>(first != nullptr ? first : &none.sample,
                                        {static_cast<py::ssize_t>(pieces.size()), 3},
                                        {static_cast<py::ssize_t>(sizeof(piece)), sizeof(std::uint32_t)}, owner);
}

/// pack()'s result, owned by Python; its arrays are views over it.
struct packing_result {
  packing result;
};

/// The plans a sampler or loader let go, for its next epochs' plans to be packed into.
struct plan_recycler_handle {
  std::shared_ptr<detail::plan_recycler> recycler = std::make_shared<detail::plan_recycler>();
};

/// The options of every epoch's plan of a sampler or loader: all but the epoch and the rows
/// consumed before its first step (a restart with another world size).
struct plan_arguments {
  std::uint32_t capacity = 4096;
  std::string algorithm = "exact-fit";
  std::string overlong = "drop";
  std::uint32_t max_per_row = 0;
  std::uint32_t world_size = 1;
  std::uint32_t micro_batch = 1;
  std::uint64_t seed = 0;
  std::string remainder = "pad";
  bool balance = true;
  std::uint32_t pack_threads = 1;

  /// Throws option_error for an unknown algorithm or overlong policy.
  [[nodiscard]] pack_options packing(std::uint64_t epoch) const {
    return packing_options(capacity, algorithm, overlong, seed, epoch, max_per_row, pack_threads);
  }

  /// Throws option_error for an unknown remainder policy.
  [[nodiscard]] schedule_options schedule(std::uint64_t epoch, std::uint64_t consumed_rows) const {
    schedule_options s;
    s.world_size = world_size;
    s.micro_batch = micro_batch;
    s.seed = seed;
    s.epoch = epoch;
    s.remainder = parse_remainder_policy(remainder);
    s.balance = balance;
    s.consumed_rows = consumed_rows;
    return s;
  }
};

/// One epoch's plan, shared with the loaders made from it.
struct plan_handle {
  std::shared_ptr<const epoch_plan> plan;

  [[nodiscard]] std::uint64_t steps() const noexcept { return plan->schedule.steps(); }

  /// Rank `rank`'s micro-batch of `step` as a list of rows, each a list of sample indices;
  /// a padding row is an empty list. Throws option_error for a step or rank out of range.
  [[nodiscard]] py::list indices(std::uint64_t step, std::uint32_t rank) const {
    const auto rows = plan->schedule.rows(step, rank);
    py::list out(rows.size());
    for (std::size_t slot = 0; slot < rows.size(); ++slot) {
      if (rows[slot] == epoch_schedule::padding_row) {
        out[slot] = py::list();
        continue;
      }
      const std::span<const piece> pieces = plan->packed.rows[rows[slot]];
      PyObject* row = PyList_New(static_cast<py::ssize_t>(pieces.size()));
      if (row == nullptr) throw py::error_already_set();
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        PyObject* index = PyLong_FromUnsignedLong(pieces[k].sample);
        if (index == nullptr) {
          Py_DECREF(row);
          throw py::error_already_set();
        }
        PyList_SET_ITEM(row, static_cast<py::ssize_t>(k), index);  // steals the reference
      }
      out[slot] = py::reinterpret_steal<py::list>(row);
    }
    return out;
  }
};

/// The Megatron/fairseq prefixes of a Loader, concatenated.
struct dataset_handle {
  std::shared_ptr<const shards_type> dataset;
  std::vector<std::filesystem::path> prefixes;
  // Every sample's, as the planner takes them; shared with the loaders' planning threads.
  std::shared_ptr<const std::vector<std::uint32_t>> lengths;
};

dataset_handle open_dataset(const std::vector<std::filesystem::path>& where) {
  if (where.empty()) throw option_error("Dataset: no paths given");
  dataset_handle d;
  for (const auto& w : where)
    for (auto& prefix : indexed_prefixes(w)) d.prefixes.push_back(std::move(prefix));
  d.dataset = std::make_shared<const shards_type>(open_indexed_datasets(d.prefixes));
  auto lengths = std::make_shared<std::vector<std::uint32_t>>();
  lengths->reserve(d.dataset->size());
  for (const indexed_dataset& shard : d.dataset->shards()) {
    const std::vector<std::uint32_t> part = shard.lengths();
    lengths->insert(lengths->end(), part.begin(), part.end());
  }
  d.lengths = std::move(lengths);
  return d;
}

/// The arguments of a loader's batches besides the plan.
struct loader_arguments {
  std::uint32_t rank = 0;
  std::uint32_t pad_to_multiple = 0;
  bool train_on_inputs = false;
  std::int64_t ignore_index = -100;
  std::int64_t pad_token_id = 0;
  unsigned threads = 2;
  std::size_t depth = 4;
  std::uint64_t start_step = 0;
};

/// The plans of an epoch loader, shared by its planner (the planning thread) and Python: the
/// first epoch's is Python's own, handed over once; each later one is made on the planning
/// thread, into the memory of a plan let go (the Python plans' recycler), and kept until
/// Python takes it, so that Python's plan of that epoch (len(), the steps of its iteration) is
/// the same object rather than a second planning at the epoch boundary. Thread-safe.
class loader_plans {
 public:
  loader_plans(std::shared_ptr<const std::vector<std::uint32_t>> lengths, plan_arguments arguments,
               std::shared_ptr<detail::plan_recycler> recycler, std::uint64_t first_epoch,
               std::shared_ptr<const epoch_plan> first)
      : lengths_(std::move(lengths)),
        arguments_(std::move(arguments)),
        recycler_(std::move(recycler)),
        first_epoch_(first_epoch),
        first_(std::move(first)) {}

  /// The planner: epoch `epoch`'s plan, later epochs starting at their step 0. Throws what
  /// plan_epoch throws. Cost: one planning (none for the first epoch).
  std::shared_ptr<const epoch_plan> plan(std::uint64_t epoch) {
    {
      const std::lock_guard lock(mutex_);
      if (epoch == first_epoch_ && first_) return std::exchange(first_, nullptr);
      planning_ = epoch;
    }
    std::shared_ptr<const epoch_plan> plan;
    std::exception_ptr error;
    try {
      plan = detail::plan_epoch_recycling(recycler_, std::span<const std::uint32_t>(*lengths_),
                                          arguments_.packing(epoch), arguments_.schedule(epoch, 0));
    } catch (...) {
      error = std::current_exception();
    }
    {
      const std::lock_guard lock(mutex_);
      planning_.reset();
      done_ = epoch;
      if (plan) {
        unclaimed_.emplace_back(epoch, plan);
        if (unclaimed_.size() > most_unclaimed) unclaimed_.pop_front();
      }
    }
    made_or_failed_.notify_all();
    if (error) std::rethrow_exception(error);
    return plan;
  }

  /// The plan the planner made for `epoch` (at step 0), if not taken yet: waits while the
  /// planner makes it, and with `due` (the loader's plans_next(epoch): the planner is about to
  /// be asked for it) until it is made or failed; lets go of the plans of the epochs before
  /// (the epochs go in order). Null otherwise (the caller plans it itself).
  [[nodiscard]] std::shared_ptr<const epoch_plan> made(std::uint64_t epoch, bool due) {
    std::unique_lock lock(mutex_);
    made_or_failed_.wait(lock, [&] { return planning_ != epoch && (!due || (done_ && *done_ >= epoch)); });
    std::shared_ptr<const epoch_plan> taken;
    while (!unclaimed_.empty() && unclaimed_.front().first <= epoch) {
      if (unclaimed_.front().first == epoch) taken = std::move(unclaimed_.front().second);
      unclaimed_.pop_front();
    }
    return taken;
  }

 private:
  std::shared_ptr<const std::vector<std::uint32_t>> lengths_;
  plan_arguments arguments_;
  std::shared_ptr<detail::plan_recycler> recycler_;
  std::uint64_t first_epoch_;
  std::mutex mutex_;
  std::condition_variable made_or_failed_;
  std::shared_ptr<const epoch_plan> first_;  // until the loader takes it
  std::optional<std::uint64_t> planning_;    // the epoch the planner is making
  std::optional<std::uint64_t> done_;        // the last epoch it made or failed
  // The plans made and not taken yet, in epoch order. The loader lets a plan go once its
  // steps are built, which for an epoch of a few steps is before Python asks for it; the
  // planner runs ahead of Python by one epoch, or, with epochs of fewer steps than the
  // prefetch depth, a few (small) ones: beyond most_unclaimed the oldest goes.
  static constexpr std::size_t most_unclaimed = 8;
  std::deque<std::pair<std::uint64_t, std::shared_ptr<const epoch_plan>>> unclaimed_;
};

/// epoch_loader over a Dataset, for Python: from a Plan of its first epoch (and step) on,
/// through every later epoch, one stream; next() gives a dict of numpy arrays.
template <batch_token T>
class python_loader {
 public:
  using loader_type = epoch_loader<shards_type, T>;
  using lease_type = typename loader_type::lease;

  python_loader(const dataset_handle& data, const plan_handle& first, std::uint64_t epoch,
                const plan_arguments& plans, const plan_recycler_handle& recycler, loss_mask mask,
                const loader_arguments& a)
      : plans_(std::make_shared<loader_plans>(data.lengths, plans, recycler.recycler, epoch, first.plan)) {
    batch_options options;
    options.pad_to_multiple = a.pad_to_multiple;
    options.collate.train_on_inputs = a.train_on_inputs;
    options.collate.ignore_index = a.ignore_index;
    options.collate.pad_token_id = a.pad_token_id;
    options.mask = std::move(mask);
    prefetch_options prefetch;
    prefetch.threads = a.threads;
    prefetch.depth = a.depth;
    // Every epoch from `epoch` on, as far as epochs are numbered: the loop decides where to stop.
    epoch_range epochs;
    epochs.first = epoch;
    epochs.count = std::max<std::uint64_t>(1, std::numeric_limits<std::uint64_t>::max() - epoch);
    epochs.start_step = a.start_step;
    loader_ = without_gil([&] {
      return std::make_shared<loader_type>(
          data.dataset, [plans = plans_](std::uint64_t e) { return plans->plan(e); }, a.rank, std::move(options),
          prefetch, epochs);
    });
  }

  /// The next batch (of this epoch, or the next one's first), or None after the last epoch
  /// or once closed. Blocks (without the GIL) until it is built.
  py::object next() {
    if (!loader_) return py::none();
    // One caller at a time (the loader's consumer is one thread): two threads in next() each
    // waited on a batch the other had taken, while every buffer was built, for good.
    if (in_next_)
      throw option_error("Loader: next() is already running on another thread; one thread iterates a Loader");
    in_next_ = true;
    const struct done_guard {
      bool& flag;
      ~done_guard() { flag = false; }  // with the GIL: set and cleared under it
    } done{in_next_};
    // Its own reference: a close() from another thread meanwhile leaves the loader to this
    // call, which stops it (the lease keeps its buffer) instead of waiting in a freed one.
    std::shared_ptr<loader_type> loader = loader_;
    std::optional<lease_type> lease = without_gil([&loader] {
      std::optional<lease_type> taken = loader->next();
      loader.reset();
      return taken;
    });
    if (!lease) return py::none();
    // The lease moves into a capsule that every array holds: the buffer goes back to the pool
    // when the last array over it dies.
    auto* owned = new lease_type(std::move(*lease));
    py::capsule owner(owned, [](void* p) { delete static_cast<lease_type*>(p); });
    const batch_view<T>& v = (**owned).view;
    const auto rows = static_cast<py::ssize_t>(v.rows);
    const auto length = static_cast<py::ssize_t>(v.row_length);
    const auto over = [&](std::span<T> array) {
      return py::array(py::dtype::of<T>(), std::vector<py::ssize_t>{rows, length},
                       std::vector<py::ssize_t>{length * py::ssize_t{sizeof(T)}, py::ssize_t{sizeof(T)}}, array.data(),
                       owner);
    };
    py::dict batch;
    batch["input_ids"] = over(v.input_ids);
    batch["labels"] = over(v.labels);
    batch["position_ids"] = over(v.position_ids);
    batch["sequence_ids"] = over(v.sequence_ids);
    const std::span<const std::int32_t> cu_seqlens = v.used_cu_seqlens();
    batch["cu_seqlens"] = py::array(py::dtype::of<std::int32_t>(),
                                    std::vector<py::ssize_t>{static_cast<py::ssize_t>(cu_seqlens.size())},
                                    std::vector<py::ssize_t>{py::ssize_t{sizeof(std::int32_t)}}, cu_seqlens.data(), owner);
    batch["max_seqlen"] = v.max_seqlen;
    batch["real_tokens"] = v.real_tokens;
    batch["loss_tokens"] = v.loss_tokens;
    batch["padding_rows"] = v.padding_rows;
    batch["epoch"] = (**owned).epoch;
    batch["step"] = (**owned).step;
    batch["rank"] = (**owned).rank;
    return batch;
  }

  /// The plan this loader's planner made for `epoch`, if still held (waits while it is being
  /// made, without the GIL); None otherwise.
  [[nodiscard]] std::optional<plan_handle> planned(std::uint64_t epoch) {
    std::shared_ptr<const epoch_plan> plan;
    {
      std::shared_ptr<loader_type> loader = loader_;  // as next(): a close() meanwhile cannot free it
      plan = without_gil([&] {
        auto made = plans_->made(epoch, loader && loader->plans_next(epoch));
        loader.reset();
        return made;
      });
    }
    if (!plan) return std::nullopt;
    return plan_handle{std::move(plan)};
  }

  /// Stops and joins the workers and the planning thread (without the GIL); with a next() or
  /// planned() under way on another thread, that call stops them when it returns. Batches
  /// still referenced stay valid.
  void close() {
    std::shared_ptr<loader_type> closing = std::move(loader_);
    without_gil([&closing] { closing.reset(); });
  }

  [[nodiscard]] bool closed() const noexcept { return loader_ == nullptr; }

  [[nodiscard]] py::dict statistics() const {
    if (!loader_) throw option_error("Loader: this loader is closed");
    const epoch_loader_statistics s = loader_->statistics();
    py::dict d;
    d["batches"] = s.prefetch.batches;
    d["consumer_wait_seconds"] = s.prefetch.consumer_wait_seconds;
    d["producer_busy_seconds"] = s.prefetch.producer_busy_seconds;
    d["elapsed_seconds"] = s.prefetch.elapsed_seconds;
    d["max_ready"] = s.prefetch.max_ready;
    d["mean_ready"] = s.prefetch.mean_ready;
    d["boundaries"] = s.boundaries;
    d["boundary_wait_seconds"] = s.boundary_wait_seconds;
    d["max_boundary_wait_seconds"] = s.max_boundary_wait_seconds;
    d["max_step_wait_seconds"] = s.max_step_wait_seconds;
    d["planning_seconds"] = s.planning_seconds;
    d["plan_wait_seconds"] = s.plan_wait_seconds;
    return d;
  }

  ~python_loader() {
    if (loader_) close();
  }

 private:
  std::shared_ptr<loader_plans> plans_;
  std::shared_ptr<loader_type> loader_;  // shared with a next() under way: see next()
  bool in_next_ = false;                  // a next() is under way (read and written with the GIL)
};

template <batch_token T>
void bind_loader(py::module_& m, const char* name) {
  using L = python_loader<T>;
  py::class_<L>(m, name)
      .def(py::init([](const dataset_handle& data, const plan_handle& first, std::uint64_t epoch,
                       const plan_arguments& plans, const plan_recycler_handle& recycler,
                       const py::object& prompt_lengths, const std::string& prompt_lengths_name,
                       const std::optional<std::filesystem::path>& token_mask, const loader_arguments& a) {
             loss_mask mask;
             if (token_mask) {
               mask = loss_mask::open_token_mask(*token_mask);
             } else if (!prompt_lengths.is_none()) {
               auto values = py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>::ensure(prompt_lengths);
               if (!values) throw py::error_already_set();
               mask = loss_mask::from_prompt_lengths(
                   std::vector<std::uint32_t>(values.data(), values.data() + values.size()), prompt_lengths_name);
             }
             return std::make_unique<L>(data, first, epoch, plans, recycler, std::move(mask), a);
           }),
           py::arg("dataset"), py::arg("first_plan"), py::arg("epoch"), py::arg("plan_arguments"), py::arg("recycler"),
           py::arg("prompt_lengths"), py::arg("prompt_lengths_name"), py::arg("token_mask"), py::arg("arguments"))
      .def("next", &L::next)
      .def("planned", &L::planned, py::arg("epoch"))
      .def("close", &L::close)
      .def_property_readonly("closed", &L::closed)
      .def("statistics", &L::statistics);
}

}  // namespace multipack::python

PYBIND11_MODULE(_multipack, m) {
  using namespace multipack;
  using namespace multipack::python;
  m.doc() = "multipack's C++ core; use the package `multipack`, not this module";
  m.attr("__version__") = std::to_string(MULTIPACK_VERSION_MAJOR) + "." + std::to_string(MULTIPACK_VERSION_MINOR) + "." +
                          std::to_string(MULTIPACK_VERSION_PATCH);

  // The library's exceptions, with their messages: each is an Error (as each C++ one is a
  // multipack::error), and also what Python code expects of it: the option and sample errors
  // are ValueErrors, a corrupt file a ValueError too (its content is wrong), a file the system
  // refused an OSError. Derived ones after the base, which pybind11 tries last.
  static py::exception<error> base(m, "Error", PyExc_RuntimeError);
  const auto error_and = [&](PyObject* python_base) { return py::make_tuple(base, py::handle(python_base)); };
  static py::exception<io_error> io(m, "FileError", error_and(PyExc_OSError).ptr());
  static py::exception<format_error> format(m, "FormatError", error_and(PyExc_ValueError).ptr());
  static py::exception<option_error> option(m, "OptionError", error_and(PyExc_ValueError).ptr());
  static py::exception<sample_error> sample(m, "SampleError", error_and(PyExc_ValueError).ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const io_error& e) {
      io(e.what());
    } catch (const format_error& e) {
      format(e.what());
    } catch (const option_error& e) {
      option(e.what());
    } catch (const sample_error& e) {
      sample(e.what());
    } catch (const error& e) {
      base(e.what());
    }
  });

  py::class_<packing_result>(m, "Packing")
      .def("__len__", [](const packing_result& p) { return p.result.rows.size(); })
      .def_property_readonly("row_offsets",
                             [](const py::object& self) {
                               const auto& rows = self.cast<const packing_result&>().result.rows;
                               const auto offsets = rows.row_offsets();
                               return read_only_array<std::uint64_t>(offsets.data(),
                                                                     {static_cast<py::ssize_t>(offsets.size())},
                                                                     {sizeof(std::uint64_t)}, self);
                             })
      .def_property_readonly("pieces",
                             [](const py::object& self) {
                               return pieces_array(self.cast<const packing_result&>().result.rows.pieces(), self);
                             })
      .def("row",
           [](const py::object& self, py::ssize_t r) {
             const auto& rows = self.cast<const packing_result&>().result.rows;
             const auto n = static_cast<py::ssize_t>(rows.size());
             if (r < 0) r += n;
             if (r < 0 || r >= n) throw py::index_error("row " + std::to_string(r) + " of " + std::to_string(n));
             return pieces_array(rows[static_cast<std::size_t>(r)], self);
           })
      .def_property_readonly("report", [](const packing_result& p) { return to_dict(p.result.report); });

  m.def(
      "pack",
      [](const py::handle& lengths, std::uint32_t capacity, const std::string& algorithm, const std::string& overlong,
         std::uint64_t seed, std::uint64_t epoch, std::uint32_t max_per_row, std::uint32_t threads) {
        const lengths_argument values(lengths, "pack");
        const pack_options options = packing_options(capacity, algorithm, overlong, seed, epoch, max_per_row, threads);
        auto result = std::make_unique<packing_result>();
        result->result = without_gil([&] { return values.visit([&](auto span) { return pack(span, options); }); });
        return result;
      },
      py::arg("lengths"), py::arg("capacity"), py::arg("algorithm"), py::arg("overlong"), py::arg("seed"),
      py::arg("epoch"), py::arg("max_per_row"), py::arg("threads"));

  py::class_<plan_recycler_handle>(m, "PlanRecycler")
      .def(py::init<>())
      .def_property_readonly(
          "reused", [](const plan_recycler_handle& r) { return r.recycler->reused(); },
          "Plans packed into the memory of a plan let go before (what the tests and benchmarks count).");

  py::class_<plan_arguments>(m, "PlanArguments")
      .def(py::init<>())
      .def_readwrite("capacity", &plan_arguments::capacity)
      .def_readwrite("algorithm", &plan_arguments::algorithm)
      .def_readwrite("overlong", &plan_arguments::overlong)
      .def_readwrite("max_per_row", &plan_arguments::max_per_row)
      .def_readwrite("world_size", &plan_arguments::world_size)
      .def_readwrite("micro_batch", &plan_arguments::micro_batch)
      .def_readwrite("seed", &plan_arguments::seed)
      .def_readwrite("remainder", &plan_arguments::remainder)
      .def_readwrite("balance", &plan_arguments::balance)
      .def_readwrite("pack_threads", &plan_arguments::pack_threads);

  py::class_<plan_handle>(m, "Plan")
      .def(py::init([](const py::handle& lengths, const plan_arguments& arguments, std::uint64_t epoch,
                       std::uint64_t consumed_rows, const plan_recycler_handle* recycler) {
             const lengths_argument values(lengths, "Plan");
             const pack_options packing = arguments.packing(epoch);
             const schedule_options schedule = arguments.schedule(epoch, consumed_rows);
             return without_gil([&] {
               // With a recycler: packed into a plan let go before, when one came back.
               if (recycler != nullptr)
                 return plan_handle{values.visit([&](auto span) {
                   return detail::plan_epoch_recycling(recycler->recycler, span, packing, schedule);
                 })};
               return plan_handle{std::make_shared<const epoch_plan>(
                   values.visit([&](auto span) { return plan_epoch(span, packing, schedule); }))};
             });
           }),
           py::arg("lengths"), py::arg("arguments"), py::arg("epoch"), py::arg("consumed_rows"),
           py::arg("recycler") = nullptr)
      .def_property_readonly("steps", &plan_handle::steps)
      .def("indices", &plan_handle::indices, py::arg("step"), py::arg("rank"))
      .def("consumed_rows_after", [](const plan_handle& p, std::uint64_t steps) {
        return p.plan->schedule.consumed_rows_after(steps);
      })
      .def_property_readonly("packing_report", [](const plan_handle& p) { return to_dict(p.plan->packed.report); })
      .def_property_readonly("schedule_report", [](const plan_handle& p) { return to_dict(p.plan->schedule.report()); });

  py::class_<dataset_handle>(m, "Dataset")
      .def(py::init([](const std::vector<std::filesystem::path>& where) {
             return without_gil([&] { return open_dataset(where); });
           }),
           py::arg("paths"))
      .def("__len__", [](const dataset_handle& d) { return d.dataset->size(); })
      .def_property_readonly("prefixes", [](const dataset_handle& d) { return d.prefixes; })
      .def_property_readonly("shard_sizes",
                             [](const dataset_handle& d) {
                               std::vector<std::uint64_t> sizes;
                               for (const indexed_dataset& s : d.dataset->shards()) sizes.push_back(s.size());
                               return sizes;
                             })
      .def_property_readonly("lengths", [](const py::object& self) {
        const auto& lengths = *self.cast<const dataset_handle&>().lengths;
        return read_only_array<std::uint32_t>(lengths.data(), {static_cast<py::ssize_t>(lengths.size())},
                                              {sizeof(std::uint32_t)}, self);
      });

  m.def(
      "prompt_length_files_in_prefix_order",
      [](std::vector<std::filesystem::path> files, const dataset_handle& d) {
        return prompt_length_files_in_prefix_order(std::move(files), d.prefixes);
      },
      py::arg("files"), py::arg("dataset"));

  m.def(
      "read_prompt_lengths",
      [](const std::filesystem::path& path) {
        loss_mask mask;
        mask = without_gil([&] { return loss_mask::open_prompt_lengths(path); });
        py::array_t<std::uint32_t> out(static_cast<py::ssize_t>(mask.size()));
        auto* data = out.mutable_data();
        for (std::size_t i = 0; i < mask.size(); ++i) data[i] = mask.prompt_length(i);
        return out;
      },
      py::arg("path"));

  m.def("distributed_env", [] {
    const distributed_env env = distributed_env::from_environment();
    return py::make_tuple(env.rank, env.world_size, env.local_rank, env.launcher);
  });

  py::class_<loader_arguments>(m, "LoaderArguments")
      .def(py::init<>())
      .def_readwrite("rank", &loader_arguments::rank)
      .def_readwrite("pad_to_multiple", &loader_arguments::pad_to_multiple)
      .def_readwrite("train_on_inputs", &loader_arguments::train_on_inputs)
      .def_readwrite("ignore_index", &loader_arguments::ignore_index)
      .def_readwrite("pad_token_id", &loader_arguments::pad_token_id)
      .def_readwrite("threads", &loader_arguments::threads)
      .def_readwrite("depth", &loader_arguments::depth)
      .def_readwrite("start_step", &loader_arguments::start_step);

  bind_loader<std::int32_t>(m, "EpochLoader32");
  bind_loader<std::int64_t>(m, "EpochLoader64");
}
