"""multipack for Python trainers: exact sample packing, a drop-in batch sampler, a zero-copy loader.

    import multipack

    packing = multipack.pack(lengths, 4096)             # rows as numpy arrays over C++ memory
    sampler = multipack.BatchSampler(lengths, 4096, micro_batch=16)   # torch's batch_sampler
    for batch in multipack.Loader("data/alpaca/alpaca_llama", capacity=4096, micro_batch=16):
        ...                                              # a dict of numpy arrays (or tensors)

Every plan is a pure function of the lengths and the options (seed, epoch): every rank computes
the same one, with no communication, and takes exactly the same number of steps. A bad value,
whether this package or the C++ library finds it, is an ``OptionError``/``SampleError``/
``FormatError`` (ValueErrors) or a ``FileError`` (an OSError), each also an ``Error``, with the
C++ library's message where it found it; a value of the wrong type is a ``TypeError``.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _multipack
from ._multipack import Error, FileError, FormatError, OptionError, SampleError  # noqa: F401

__version__ = _multipack.__version__
__all__ = ["pack", "Packing", "BatchSampler", "Loader", "distributed_env", "read_prompt_lengths", "Error",
           "FileError", "FormatError", "OptionError", "SampleError"]

Packing = _multipack.Packing

try:  # torch is optional: the sampler is a torch Sampler and the loader gives tensors when it is there
    import torch as _torch
    from torch.utils.data import Sampler as _SamplerBase
except ImportError:  # pragma: no cover - exercised where torch is absent
    _torch = None
    _SamplerBase = object

_UINT32 = 2**32 - 1
_UINT64 = 2**64 - 1


def _count(name: str, value: Any, least: int = 0, most: int = _UINT32) -> int:
    """An integer option as the C++ side takes it, or an OptionError/TypeError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < least:
        raise OptionError(f"{name} = {value}: must be at least {least}")
    if value > most:  # the type's bound; a lower one of the C++ side is checked there
        raise OptionError(f"{name} = {value}: must be at most {most}")
    return value


def _name(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string such as 'exact-fit', got {type(value).__name__} {value!r}")
    return value


def _flag(name: str, value: Any) -> bool:
    """A yes/no option: True or False only (a config's string "false" is truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def pack(lengths, capacity: int, algorithm: str = "exact-fit", overlong: str = "drop", seed: int = 0,
         epoch: int = 0, max_per_row: int = 0, threads: int = 1) -> Packing:
    """Packs samples of the given lengths into rows of ``capacity`` tokens.

    ``lengths``: any one-dimensional integer numpy array or sequence of ints (a uint32 array is
    read in place). ``algorithm``: 'exact-fit' (default), 'randomized-exact-fit',
    'best-fit-decreasing', 'first-fit-decreasing', 'next-fit'. ``overlong`` (a sample longer
    than a row): 'drop' (counted in the report), 'truncate', 'split', 'error'.

    Returns a ``Packing``: ``len()`` rows; ``row_offsets`` (uint64, rows + 1) and ``pieces``
    ((pieces, 3) uint32: sample, begin, end), read-only numpy arrays over the C++ result, no
    copy; ``row(r)`` the pieces of row r; ``report`` a dict (rows, lower_bound, efficiency,
    dropped_samples, ...). The GIL is released while packing. ``threads``: the passes over the
    samples run on up to that many threads (at most 256), each with 16,384 samples at least,
    and the exact-fit algorithms fill their rows in two halves on two threads from 2^20
    samples: the same rows for any count.
    """
    return _multipack.pack(lengths, _count("capacity", capacity, 1), _name("algorithm", algorithm),
                           _name("overlong", overlong), _count("seed", seed, 0, _UINT64),
                           _count("epoch", epoch, 0, _UINT64), _count("max_per_row", max_per_row),
                           _count("threads", threads, 1))


def distributed_env() -> Dict[str, Any]:
    """This process's rank, world size and local rank from the launcher's variables (torchrun's
    RANK/WORLD_SIZE, Open MPI's, PMI's, Slurm's srun tasks; none set: rank 0 of 1). A malformed or
    contradictory environment raises OptionError naming the variable, as does a process in a Slurm
    allocation of several tasks that srun did not start (it would train on 1/N of the data alone)."""
    rank, world_size, local_rank, launcher = _multipack.distributed_env()
    return {"rank": rank, "world_size": world_size, "local_rank": local_rank, "launcher": launcher}


def read_prompt_lengths(path: Union[str, os.PathLike]) -> np.ndarray:
    """A prompt-length file (text, one integer a line, or the binary form ``convert`` writes) as
    a uint32 array: tokens [0, n) of each sample carry no loss."""
    return _multipack.read_prompt_lengths(os.fspath(path))


def _fixed(name: str, doc: str) -> property:
    """An option every plan is made with (and, for a loader, its running C++ loader): read-only
    after construction, since assigning it could change neither the plans already made nor the
    one a loader's planning thread is making, and ``state_dict`` would then describe a run that
    did not happen."""

    def refuse(self, value):
        kind = type(self).__name__
        raise AttributeError(f"{kind}.{name} is fixed when the {kind} is made (its plans are made with it): "
                             f"make a new {kind} instead")

    return property(lambda self: self.__dict__["_" + name], refuse, doc=doc)


class _Epochs:
    """What the sampler and the loader share: the options of the plan, one plan an epoch (made
    when first needed, in C++ without the GIL; packed into the memory of a plan let go before,
    once nothing holds it, as the C++ plan_each_epoch does), and the position for resuming."""

    world_size = _fixed("world_size", "The ranks sharing each step.")
    rank = _fixed("rank", "This process's rank, in [0, world_size).")
    micro_batch = _fixed("micro_batch", "Rows a rank takes each step.")
    capacity = _fixed("capacity", "Tokens a row holds.")
    seed = _fixed("seed", "The seed of every epoch's order of rows (and packing, for 'randomized-exact-fit').")
    max_per_row = _fixed("max_per_row", "The most samples in a row (0: no limit).")
    pack_threads = _fixed("pack_threads", "Threads that pack each epoch's plan (the same plan for any count).")
    algorithm = _fixed("algorithm", "The packing algorithm.")
    overlong = _fixed("overlong", "What happens to a sample longer than a row.")
    remainder = _fixed("remainder", "What happens to the rows that do not fill a last step.")
    balance = _fixed("balance", "Whether each step's rows are balanced across the ranks.")

    @property
    def epoch(self) -> int:
        """The epoch the next iteration trains on. Assigning it is ``set_epoch``."""
        return self._epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def __init__(self, lengths, capacity, micro_batch, world_size, rank, seed, epoch, algorithm, overlong,
                 max_per_row, remainder, balance, pack_threads):
        if world_size is None or rank is None:
            env = distributed_env()
            if rank is None and world_size is not None and _count("world_size", world_size, 1) != env["world_size"]:
                # The environment's rank is of another world (rank 0 of 1 without a launcher):
                # every process would take the same rank and train on the same rows.
                said = ("no launcher's variables are set" if env["launcher"] == "none" else
                        f"{env['launcher']}'s variables say {env['world_size']} ranks")
                raise OptionError(f"world_size {world_size} without rank, and {said}: give rank too")
            world_size = env["world_size"] if world_size is None else world_size
            rank = env["rank"] if rank is None else rank
        self._world_size = _count("world_size", world_size, 1)
        self._rank = _count("rank", rank)
        if self.rank >= self.world_size:
            raise OptionError(f"rank {self.rank} is outside the world of {self.world_size} ranks")
        self._micro_batch = _count("micro_batch", micro_batch, 1)
        self._capacity = _count("capacity", capacity, 1)
        self._seed = _count("seed", seed, 0, _UINT64)
        self._epoch = _count("epoch", epoch, 0, _UINT64)
        self._max_per_row = _count("max_per_row", max_per_row)
        self._pack_threads = _count("pack_threads", pack_threads, 1)
        self._algorithm = _name("algorithm", algorithm)
        self._overlong = _name("overlong", overlong)
        self._remainder = _name("remainder", remainder)
        self._balance = _flag("balance", balance)
        self._lengths = lengths
        arguments = _multipack.PlanArguments()
        arguments.capacity = self.capacity
        arguments.algorithm = self.algorithm
        arguments.overlong = self.overlong
        arguments.max_per_row = self.max_per_row
        arguments.world_size = self.world_size
        arguments.micro_batch = self.micro_batch
        arguments.seed = self.seed
        arguments.remainder = self.remainder
        arguments.balance = self.balance
        arguments.pack_threads = self.pack_threads
        self._plan_arguments = arguments
        self._plan = None
        self._plan_key = None
        self._plans_made = 0  # plans made here, not by a loader's planning thread
        # The plans this object let go, once nothing else holds them (a loader of an earlier
        # epoch may): each later epoch is packed into one, not into fresh memory.
        self._recycler = _multipack.PlanRecycler()
        self._start_step = 0      # the step the next iteration starts at
        self._consumed_rows = 0   # rows of this epoch before the plan's step 0 (a run of another shape's)
        self._next_step = 0       # the step after the last one handed out (None: the whole plan's steps)
        self._iterated = False    # an iteration of this epoch began since set_epoch or load_state_dict
        self.plan()  # bad options fail here, not at the first batch

    def plan(self) -> "_multipack.Plan":
        """This epoch's plan (the same on every rank)."""
        key = (self.epoch, self._consumed_rows)
        if self._plan_key != key:
            self._plan = self._plan_key = None  # let go first, to be packed into
            self._plan = self._planned(key)
            if self._plan is None:
                self._plan = _multipack.Plan(self._lengths, self._plan_arguments, self.epoch, self._consumed_rows,
                                             self._recycler)
                self._plans_made += 1
            self._plan_key = key
        return self._plan

    def _planned(self, key) -> Optional["_multipack.Plan"]:
        """The plan of `key` made ahead elsewhere (a loader's planning thread), or None."""
        return None

    def __len__(self) -> int:
        """Steps of this epoch, the same on every rank (after a resume with another world size:
        the steps of the rows left, until they are handed out)."""
        return self.plan().steps

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration trains on: a new order of rows (and, for
        'randomized-exact-fit', a new packing), from its first step."""
        epoch = _count("epoch", epoch, 0, _UINT64)
        if epoch != self._epoch:
            self._epoch = epoch
            self._start_step = self._next_step = 0
            self._consumed_rows = 0
            self._iterated = False

    # What a state must agree on with the object that loads it: the options every plan is made
    # with (world_size and micro_batch may differ: the epoch then resumes after the rows
    # trained on) and the lengths' count and sum.
    _PLAN_STATE = ("seed", "capacity", "algorithm", "overlong", "max_per_row", "remainder", "balance")

    def _lengths_state(self) -> Dict[str, int]:
        report = self.plan().packing_report
        return {"samples": report["samples"], "tokens": report["tokens"]}

    def state_dict(self) -> Dict[str, Any]:
        """Where training stands: the epoch, the steps of its plan handed out (the plan's step
        count once the epoch's iteration is done), the rows of the epoch trained on
        (``consumed_rows``, for a restart with another world size or micro-batch) and those
        before the plan's first step (``plan_consumed_rows``: not 0 after such a restart); and
        what the plans are made of (the plan options, the lengths' count and sum), which
        ``load_state_dict`` checks. Taken from a ``torch.utils.data.DataLoader`` with workers,
        or from accelerate's prepared data loader (which fetches one batch ahead, even without
        workers), the sampler's own state is ahead of training by the batches fetched ahead:
        checkpoint the ``DataLoader`` with torchdata's ``StatefulDataLoader`` instead."""
        step = self._handed_out()
        state = {"epoch": self.epoch, "step": step, "world_size": self.world_size,
                 "micro_batch": self.micro_batch,
                 "consumed_rows": self.plan().consumed_rows_after(step),
                 "plan_consumed_rows": self._consumed_rows}
        state.update({key: getattr(self, key) for key in self._PLAN_STATE})
        state.update(self._lengths_state())
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes where ``state`` (a ``state_dict()``) stood: the next iteration yields exactly
        what the interrupted one would have yielded next (nothing, when it was saved after the
        epoch's last step). With another world size or micro-batch, that iteration covers the
        rows of the epoch not yet trained on; later iterations of the epoch cover all of it.
        Raises OptionError (a ValueError), changing nothing, when the state is another run's
        (other plan options or lengths) or does not fit this epoch."""
        for key in ("epoch", "step", "world_size", "micro_batch", "consumed_rows", "plan_consumed_rows",
                    *self._PLAN_STATE, "samples", "tokens"):
            if key not in state:
                raise OptionError(f"load_state_dict: the state has no {key!r} (keys: {sorted(state)})")
        expected = {key: getattr(self, key) for key in self._PLAN_STATE}
        expected.update(self._lengths_state())
        for key, value in expected.items():
            if state[key] != value:
                raise OptionError(f"load_state_dict: the state was saved with {key} {state[key]!r}, this one has "
                                  f"{key} {value!r}: its plan would be another")
        epoch = _count("epoch", state["epoch"], 0, _UINT64)
        step = _count("step", state["step"], 0, _UINT64)
        same_shape = state["world_size"] == self.world_size and state["micro_batch"] == self.micro_batch
        # The same plan as the saving run's (its step `step`), or the rows it did not train on.
        rows_key = "plan_consumed_rows" if same_shape else "consumed_rows"
        consumed_rows = _count(rows_key, state[rows_key], 0, _UINT64)
        if not same_shape:
            step = 0
        before = (self._epoch, self._consumed_rows, self._start_step, self._next_step, self._iterated)
        self._epoch, self._consumed_rows = epoch, consumed_rows
        try:
            steps = self.plan().steps  # a consumed_rows past the epoch's rows fails here
            if step > steps:
                raise OptionError(f"load_state_dict: step {step} is past the epoch's {steps} steps")
        except BaseException:
            self._epoch, self._consumed_rows, self._start_step, self._next_step, self._iterated = before
            raise
        self._start_step = self._next_step = step
        self._iterated = False

    def _finish_resumed_rows(self, epoch: int) -> None:
        """Once the rows a resume with another world size left are handed out: the epoch is
        done, and len(), the state and the next iteration are the whole epoch's (the plan of
        those rows would otherwise stay until the next iteration began, and len() give its
        steps for an iteration of the whole epoch). The whole epoch is planned when len() or
        state_dict() asks, not here on the training thread (set_epoch usually comes first)."""
        if self._epoch == epoch and self._consumed_rows != 0:
            self._consumed_rows = 0
            self._start_step = 0
            self._next_step = None  # the whole plan's step count, when asked

    def _handed_out(self) -> int:
        """The step after the last one handed out."""
        if self._next_step is None:
            self._next_step = self.plan().steps
        return self._next_step

    def _steps(self) -> range:
        """The steps the next iteration covers: from a resume's step (after a resume's rows, with
        another world size) the first time, then the whole epoch."""
        if self._iterated:
            self._consumed_rows = 0  # a resume's rows apply to one iteration
        self._iterated = True
        start = self._start_step
        self._start_step = 0
        self._next_step = start
        steps = range(start, self.plan().steps)
        if not steps:  # a resume's rows all trained already: nothing to hand out, the epoch is done
            self._finish_resumed_rows(self._epoch)
        return steps


class BatchSampler(_Epochs, _SamplerBase):
    """A ``torch.utils.data`` batch sampler of packed rows, for this rank: a drop-in for
    axolotl's ``MultipackBatchSampler`` and a Hugging Face ``Trainer``'s batch sampler (with
    ``all_ranks=True`` there: see below).

    Each item is one step's micro-batch: ``micro_batch`` rows, each a list of sample indices
    (axolotl's shape; a padding row that completes the last step is ``[]``, unless
    ``remainder='drop'``). ``len()`` is exact and the same on every rank. ``set_epoch(e)``
    gives epoch e's order (and packing, for 'randomized-exact-fit'), as assigning ``epoch``
    does; ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly (torchdata's
    ``StatefulDataLoader`` protocol). The other options are read-only attributes.

    ``world_size``/``rank`` default to the launcher's environment (``distributed_env``); a
    ``world_size`` given without ``rank`` must be the environment's.
    ``all_ranks=True`` yields every rank's micro-batch of each step, rank after rank (``len()``:
    steps x world_size), for a data loader that shards a batch sampler itself: Hugging Face
    accelerate's ``prepare_data_loader`` (which the ``Trainer`` and axolotl call) gives process
    p the batches p, p + N, ..., that is rank p's micro-batch of every step. Given a per-rank
    sampler instead, it would keep 1/N of each rank's steps. ``rank`` is then not used; the
    state counts a step once its last rank's micro-batch is handed out.
    ``pack_threads`` packs each epoch's plan on that many threads, as ``pack(threads=...)``: the
    same plan for any count. ``overlong='split'`` is refused: a piece of a sample is not a sample
    index; use 'drop' (counted in ``report``), 'truncate' (the index stands for the sample's first
    ``capacity`` tokens: the collator must cut it) or ``multipack.Loader``, which builds split
    pieces.
    """

    def __init__(self, lengths, capacity: int, micro_batch: int = 1, world_size: Optional[int] = None,
                 rank: Optional[int] = None, seed: int = 0, algorithm: str = "exact-fit", overlong: str = "drop",
                 max_per_row: int = 0, remainder: str = "pad", balance: bool = True, epoch: int = 0,
                 pack_threads: int = 1, all_ranks: bool = False):
        if overlong == "split":
            raise OptionError("BatchSampler: overlong='split' cuts samples into pieces, which lists of sample "
                              "indices cannot express; use overlong='drop' or 'truncate', or multipack.Loader")
        self._all_ranks = _flag("all_ranks", all_ranks)
        if self._all_ranks and rank is None:
            rank = 0  # not used: every rank's micro-batches are yielded
        _Epochs.__init__(self, lengths, capacity, micro_batch, world_size, rank, seed, epoch, algorithm, overlong,
                         max_per_row, remainder, balance, pack_threads)

    all_ranks = _fixed("all_ranks", "Whether every rank's micro-batches are yielded, rank after rank.")

    @property
    def sampler(self) -> "BatchSampler":
        """This sampler itself: accelerate's ``DataLoaderShard.set_epoch`` reaches a batch sampler
        it wrapped in ``BatchSamplerShard`` only as ``batch_sampler.batch_sampler.sampler``, so
        without it every epoch would repeat epoch 0's order, silently."""
        return self

    @property
    def report(self) -> Dict[str, Any]:
        """What this epoch's packing and schedule did with every sample and row."""
        plan = self.plan()
        return {"packing": plan.packing_report, "schedule": plan.schedule_report}

    def __len__(self) -> int:
        """Micro-batches of this epoch: its steps, times world_size with ``all_ranks``."""
        return self.plan().steps * (self.world_size if self.all_ranks else 1)

    def __iter__(self) -> Iterator[List[List[int]]]:
        steps = self._steps()
        if not steps:
            return
        plan, epoch = self.plan(), self.epoch
        ranks = range(self.world_size) if self.all_ranks else (self.rank,)
        for step in steps:
            for rank in ranks:
                indices = plan.indices(step, rank)
                # The step counts once its last micro-batch is handed out; not after set_epoch
                # in the loop: the state is the new epoch's.
                if self._epoch == epoch and rank == ranks[-1]:
                    self._next_step = step + 1
                    if self._next_step == steps.stop:  # said now: a loop that counts never resumes us
                        self._finish_resumed_rows(epoch)
                yield indices


def _paths(value) -> List[str]:
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    return [os.fspath(v) for v in value]


class Loader(_Epochs):
    """Complete training batches of this rank, built by C++ threads ahead of the loop.

    ``paths``: Megatron/fairseq indexed datasets (a prefix of PREFIX.bin/.idx, a directory of
    them, or a pattern such as 'corpus/shard_*'; several are concatenated in order).
    Loss mask: ``prompt_lengths`` (a file, a list of files one a prefix, each named
    PREFIX.prompt_lengths in any order or in the prefixes' order, or an integer array:
    tokens [0, n) of sample i carry no loss) or ``loss_mask`` (the PREFIX of a per-token mask
    that ``multipack-bench convert --labels-field`` writes); ``train_on_inputs`` ignores it.
    ``dtype``: the token arrays' type, int32 or int64 (what ``torch.nn.Embedding`` takes).
    ``threads`` build batches; ``pack_threads`` pack each epoch's plan, as ``pack(threads=...)``.

    Iterating yields a dict per step: ``input_ids``, ``labels`` (unshifted; ``ignore_index``
    where no loss), ``position_ids``, ``sequence_ids`` (each [micro_batch, row_length]),
    ``cu_seqlens`` (int32, FlashAttention's), and ``max_seqlen``, ``real_tokens``,
    ``loss_tokens``, ``padding_rows``, ``epoch``, ``step``, ``rank``. The arrays are over the pool's
    buffer, no copy; the buffer goes back to the pool when the last array over it dies, so a
    batch kept stays valid (while the pool's other buffers carry on). With ``as_torch=True``
    they are torch tensors over the same memory (``torch.from_numpy``).

    One C++ loader runs from epoch to epoch: after an epoch's last step, ``set_epoch(e + 1)`` and
    the next iteration continue it (no thread started, no buffer allocated; the next epoch's
    plan made by its planning thread while the epoch before trained). Any other next iteration
    (the same epoch again, another epoch, a resume, after a ``break``) starts a new one.

    The GIL is released while the loop waits and while the workers build. ``break`` followed by
    the loop's end, ``close()``, ``with`` or garbage collection stops the threads. ``len()`` is
    the epoch's step count; ``set_epoch`` (or assigning ``epoch``), ``state_dict``,
    ``load_state_dict`` and the read-only options as in ``BatchSampler``; ``start_step`` starts
    the first iteration later. One thread iterates, one iteration at a time: a second
    ``iter()`` restarts the C++ loader, and the first iteration's next step then raises
    OptionError. ``close()`` from another thread ends the loop quietly.
    """

    dataset = _fixed("dataset", "The samples: the datasets of ``paths``, concatenated.")

    def __init__(self, paths, capacity: int = 4096, micro_batch: int = 1, world_size: Optional[int] = None,
                 rank: Optional[int] = None, epoch: int = 0, seed: int = 0, algorithm: str = "exact-fit",
                 overlong: str = "drop", max_per_row: int = 0, remainder: str = "pad", balance: bool = True,
                 prompt_lengths=None, loss_mask=None, train_on_inputs: bool = False, threads: int = 2,
                 depth: int = 4, start_step: int = 0, dtype=np.int32, pad_to_multiple: int = 0,
                 ignore_index: int = -100, pad_token_id: int = 0, as_torch: bool = False, pack_threads: int = 1):
        self._dataset = _multipack.Dataset(_paths(paths))
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise OptionError(f"dtype must be int32 or int64, got {dtype}")
        if prompt_lengths is not None and loss_mask is not None:
            raise OptionError("give prompt_lengths or loss_mask, not both")
        if as_torch and _torch is None:
            raise ImportError("as_torch=True needs torch, which cannot be imported here")
        self._batches_type = _multipack.EpochLoader64 if dtype == np.dtype(np.int64) else _multipack.EpochLoader32
        self._prompt_lengths = self._prompt_lengths_of(prompt_lengths)
        # What an error about the lengths calls them: the file, where one was given.
        self._prompt_lengths_name = (os.fspath(prompt_lengths) if isinstance(prompt_lengths, (str, os.PathLike))
                                     else "prompt_lengths")
        self._loss_mask = None if loss_mask is None else os.fspath(loss_mask)
        arguments = _multipack.LoaderArguments()
        arguments.pad_to_multiple = _count("pad_to_multiple", pad_to_multiple)
        arguments.train_on_inputs = _flag("train_on_inputs", train_on_inputs)
        # The token type's range: checked here, not first by the workers at the first batch.
        bits = dtype.itemsize * 8
        arguments.ignore_index = _count("ignore_index", ignore_index, -2**(bits - 1), 2**(bits - 1) - 1)
        arguments.pad_token_id = _count("pad_token_id", pad_token_id, -2**(bits - 1), 2**(bits - 1) - 1)
        arguments.threads = _count("threads", threads, 1, 1024)
        # Two at least: a for loop holds its last batch while it asks for the next.
        arguments.depth = _count("depth", depth, 2, 65536)
        self._arguments = arguments
        self.as_torch = _flag("as_torch", as_torch)
        self._batches = None
        self._batches_key = None  # (epoch, consumed rows, step) of the C++ loader's next batch
        self._iteration = None    # the last iteration (_Batches), weakly
        self._last_statistics = None
        _Epochs.__init__(self, self.dataset.lengths, capacity, micro_batch, world_size, rank, seed, epoch, algorithm,
                         overlong, max_per_row, remainder, balance, pack_threads)
        self._start_step = self._next_step = _count("start_step", start_step, 0, _UINT64)
        if self._start_step > self.plan().steps:
            raise OptionError(f"start_step {self._start_step} is past the epoch's {self.plan().steps} steps")
        # The first iteration's loader starts now: its workers build while the trainer sets up,
        # and a mask or file that does not fit fails here rather than at the first batch.
        if self._start_step < self.plan().steps:
            self._start(self._start_step)

    def _prompt_lengths_of(self, value) -> Optional[np.ndarray]:
        if value is None:
            return None
        if isinstance(value, (str, os.PathLike)):
            return read_prompt_lengths(value)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, os.PathLike)) for v in value):
            sizes = self.dataset.shard_sizes
            if len(value) != len(sizes):
                raise OptionError(f"prompt_lengths: {len(value)} files for {len(sizes)} prefixes: give one a prefix, "
                                  f"in the same order, or one file for all")
            # Files named PREFIX.prompt_lengths go with their prefix in any order (sorted(glob())
            # lists shard_10 before shard_2, where a directory's shards are in natural order).
            parts = []
            for path, size in zip(_multipack.prompt_length_files_in_prefix_order(value, self.dataset), sizes):
                part = read_prompt_lengths(path)
                if len(part) != size:
                    raise FormatError(f"{os.fspath(path)}: {len(part)} prompt lengths, but its prefix has {size} "
                                      f"samples")
                parts.append(part)
            return np.concatenate(parts)
        array = np.asarray(value)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise TypeError(f"prompt_lengths must be a file, a list of files or a one-dimensional integer array, "
                            f"got {type(value).__name__}")
        if array.size and (array.min() < 0 or array.max() > _UINT32):
            raise FormatError("prompt_lengths: a value is negative or larger than 4294967295")
        return array.astype(np.uint32)

    def _start(self, start_step: int):
        """A C++ loader from this epoch's `start_step` on, through the later epochs: its workers
        start building now, and its planning thread plans the next epoch."""
        # An iteration still reading the C++ loader closed here must not end as if its epoch did.
        running = self._iteration() if self._iteration is not None else None
        if running is not None and running._batches is not None and running._batches is self._batches:
            running._superseded = True  # not one that close() ended already
        self.close()
        self._arguments.rank = self.rank
        self._arguments.start_step = start_step
        self._batches = self._batches_type(self.dataset, self.plan(), self.epoch, self._plan_arguments, self._recycler,
                                           self._prompt_lengths, self._prompt_lengths_name, self._loss_mask,
                                           self._arguments)
        self._batches_key = (self.epoch, self._consumed_rows, start_step)
        return self._batches

    def _planned(self, key) -> Optional["_multipack.Plan"]:
        # The next epoch's plan from the running loader's planning thread, made while the last
        # epoch trained (a later epoch starts at its step 0, with no rows consumed before).
        if key[1] != 0 or self._batches is None or self._batches.closed:
            return None
        return self._batches.planned(key[0])

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        steps = self._steps()
        key = (self.epoch, self._consumed_rows, steps.start)
        if not len(steps):
            batches = None
        elif self._batches is not None and not self._batches.closed and self._batches_key == key:
            batches = self._batches  # started ahead: by the constructor, or the last epoch's iteration
        else:
            batches = self._start(steps.start)
        self._batches_key = None  # being taken
        iteration = _Batches(self, batches, len(steps), self.epoch)
        self._iteration = weakref.ref(iteration)
        return iteration

    @staticmethod
    def _as_torch(batch: Dict[str, Any]) -> Dict[str, Any]:
        return {k: _torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}

    def statistics(self) -> Dict[str, Any]:
        """The figures of the running C++ loader (or of the last one), over every epoch it
        spanned: the prefetcher's (batches, consumer_wait_seconds, producer_busy_seconds,
        mean_ready, max_ready, elapsed_seconds) and the epoch boundaries' (boundaries,
        boundary_wait_seconds, max_boundary_wait_seconds beside max_step_wait_seconds, the
        longest wait for any other batch; planning_seconds of the later epochs' plans,
        plan_wait_seconds of the workers waiting for one). Any thread may call it, also while
        another iterates the loader."""
        if self._batches is not None and not self._batches.closed:
            return self._batches.statistics()
        if self._last_statistics is None:
            raise OptionError("statistics: no iteration has run")
        return self._last_statistics

    def close(self) -> None:
        """Stops and joins the worker threads and the planning thread, which finishes the plan
        it makes first (up to one planning's time, in the second half of an epoch only: the
        next epoch is planned from the time half of this one is built).
        Batches still referenced stay valid."""
        if self._batches is not None:
            if not self._batches.closed:
                self._last_statistics = self._batches.statistics()
            self._batches.close()
            self._batches = None

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a destructor must not raise
            pass


class _Batches:
    """One iteration of a Loader: the epoch's steps. Holds no batch between calls, so a batch
    the loop drops goes back to the pool at once. Once the epoch's last step is handed out, the
    C++ loader goes on with the next epoch, for the next iteration; stopped before (``break``,
    ``close()``, collected), it stops the workers."""

    def __init__(self, loader: Loader, batches, steps: int, epoch: int):
        self._loader = loader
        self._batches = batches
        self._left = steps   # steps of the epoch still to hand out
        self._epoch = epoch  # the epoch iterated (set_epoch may change the loader's in the loop)
        self._superseded = False  # a later iteration restarted the C++ loader under this one

    def __iter__(self) -> "_Batches":
        return self

    def __next__(self) -> Dict[str, Any]:
        if self._left == 0 or self._batches is None:
            raise StopIteration
        batch = self._batches.next()
        if batch is None:  # the C++ loader ended before the epoch did: closed from another thread
            self.close()
            if self._superseded:
                raise OptionError("Loader: this iteration was ended by a later iter() of the same Loader, which "
                                  "restarted its C++ loader; iterate a Loader once at a time (zip(loader, loader) "
                                  "or next(iter(loader)) inside its own loop end that loop)")
            raise StopIteration
        if batch["epoch"] != self._epoch:
            raise RuntimeError(f"Loader: a batch of epoch {batch['epoch']} in the iteration of epoch {self._epoch}")
        self._left -= 1
        if self._loader._epoch == self._epoch:  # not after set_epoch in the loop: the state is the new epoch's
            self._loader._next_step = batch["step"] + 1
        if self._left == 0:
            # The epoch's last step: the C++ loader's next batch is the next epoch's first,
            # which its workers may be building already. Said now, not at StopIteration, which
            # a loop that counts its steps (islice, zip) never reaches.
            self._loader._finish_resumed_rows(self._epoch)
            if self._epoch + 1 < _UINT64:  # a C++ loader runs up to epoch 2^64 - 2
                self._loader._batches_key = (self._epoch + 1, 0, 0)
            self._batches = None
        return self._loader._as_torch(batch) if self._loader.as_torch else batch

    def close(self) -> None:
        if self._batches is not None:
            if not self._batches.closed:
                self._loader._last_statistics = self._batches.statistics()
            self._batches.close()
            self._batches = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a destructor must not raise
            pass
