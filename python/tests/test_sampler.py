"""multipack.BatchSampler: this rank's micro-batches as index lists, the same plan as
multipack-bench plan, every sample once per epoch across ranks, exact resume."""

import itertools
import pickle

import numpy as np
import pytest
import torch.utils.data

import multipack
from conftest import FIXED_OPTIONS, read_plan_dump, run_bench


def epoch_of(lengths, world_size, **options):
    """Every rank's steps of one epoch: [rank][step] = list of rows of indices."""
    return [list(multipack.BatchSampler(lengths, world_size=world_size, rank=r, **options))
            for r in range(world_size)]


def test_is_a_torch_sampler_and_a_batch_sampler(lengths):
    sampler = multipack.BatchSampler(lengths, 2048, micro_batch=4, world_size=1, rank=0)
    assert isinstance(sampler, torch.utils.data.Sampler)

    class Rows(torch.utils.data.Dataset):
        """Indexed by a list of indices, as a Hugging Face datasets.Dataset is."""

        def __getitem__(self, indices):
            return [int(lengths[i]) for i in indices]

    loader = torch.utils.data.DataLoader(Rows(), batch_sampler=sampler, collate_fn=lambda rows: rows)
    first = next(iter(loader))
    # The DataLoader fetches each row of a step's item: one list of sample lengths a row.
    assert len(first) == 4 and all(0 < sum(row) <= 2048 for row in first)
    assert len(loader) == len(sampler)


@pytest.mark.parametrize("world_size, micro_batch, algorithm", [(1, 16, "exact-fit"), (4, 2, "exact-fit"),
                                                                (3, 5, "randomized-exact-fit")])
def test_every_sample_once_per_epoch_across_ranks(lengths, world_size, micro_batch, algorithm):
    capacity = 2048
    ranks = epoch_of(lengths, world_size, capacity=capacity, micro_batch=micro_batch, algorithm=algorithm, seed=5)
    steps = {len(r) for r in ranks}
    assert len(steps) == 1, f"ranks take different step counts: {steps}"
    assert steps.pop() == len(multipack.BatchSampler(lengths, capacity, micro_batch, world_size=world_size, rank=0,
                                                     algorithm=algorithm, seed=5))
    seen = [i for rank in ranks for step in rank for row in step for i in row]
    assert sorted(seen) == list(np.flatnonzero(lengths)), "a sample is missing or repeated"
    for rank in ranks:
        for step in rank:
            assert len(step) == micro_batch
            for row in step:
                assert lengths[row].sum() <= capacity


def test_the_plan_of_multipack_bench(lengths, prefix, bench, tmp_path):
    options = dict(capacity=1024, micro_batch=3, algorithm="randomized-exact-fit", seed=11, epoch=2)
    run_bench(bench, "plan", "--data", prefix, "--world-size", "2", "--micro-batch", "3", "--capacity", "1024",
              "--algorithm", "randomized-exact-fit", "--seed", "11", "--epoch", "2", "--dump-plan",
              str(tmp_path / "plan.txt"))
    dump = read_plan_dump(tmp_path / "plan.txt")
    for rank in range(2):
        sampler = multipack.BatchSampler(lengths, world_size=2, rank=rank, **options)
        for step, rows in enumerate(sampler):
            assert rows == dump[(step, rank)], f"step {step} of rank {rank}"
        assert len(sampler) == 1 + max(s for s, r in dump if r == rank)


def test_epochs_reorder_and_still_cover(lengths):
    sampler = multipack.BatchSampler(lengths, 2048, 8, world_size=1, rank=0)
    first = list(sampler)
    assert list(sampler) == first, "iterating again repeats the epoch"
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first
    flat = lambda steps: sorted(i for step in steps for row in step for i in row)
    assert flat(first) == flat(second)


def test_the_plan_options_are_fixed_and_assigning_epoch_is_set_epoch(lengths):
    """An option every plan is made with cannot be assigned after construction (the plans,
    and state_dict, would silently disagree with it); assigning ``epoch`` is set_epoch."""
    sampler = multipack.BatchSampler(lengths, 2048, micro_batch=4, world_size=1, rank=0, seed=2)
    before = {name: getattr(sampler, name) for name in FIXED_OPTIONS}
    first = list(sampler)
    for name, value in FIXED_OPTIONS.items():
        with pytest.raises(AttributeError, match=f"BatchSampler.{name} is fixed"):
            setattr(sampler, name, value)
    assert {name: getattr(sampler, name) for name in FIXED_OPTIONS} == before
    assert list(sampler) == first
    assert sampler.state_dict()["seed"] == 2

    partway = iter(sampler)
    next(partway)
    sampler.epoch = 1  # mid-epoch: the next iteration is epoch 1 from its first step, as set_epoch gives
    assert sampler.epoch == 1
    expected = list(multipack.BatchSampler(lengths, 2048, micro_batch=4, world_size=1, rank=0, seed=2, epoch=1))
    assert expected != first
    assert list(sampler) == expected
    with pytest.raises(multipack.OptionError, match="epoch"):
        sampler.epoch = -1


def test_resume_from_state_dict_is_the_tail(lengths):
    options = dict(capacity=2048, micro_batch=4, world_size=2, rank=1, seed=9, algorithm="randomized-exact-fit")
    full = list(multipack.BatchSampler(**options, lengths=lengths, epoch=3))
    run = multipack.BatchSampler(lengths, **options, epoch=3)
    taken = list(itertools.islice(iter(run), 7))
    state = pickle.loads(pickle.dumps(run.state_dict()))  # what a checkpoint holds survives pickling
    assert state["epoch"] == 3 and state["step"] == 7
    resumed = multipack.BatchSampler(lengths, **options)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert taken + tail == full
    assert list(resumed) == full, "the iteration after the resumed one is the whole epoch again"


def test_restart_with_another_world_size_trains_on_the_rest(lengths):
    options = dict(capacity=2048, micro_batch=2, seed=4)
    before = [multipack.BatchSampler(lengths, world_size=4, rank=r, **options) for r in range(4)]
    its = [iter(s) for s in before]
    trained = [i for _ in range(5) for it in its for row in next(it) for i in row]
    state = before[0].state_dict()
    assert all(s.state_dict() == state for s in before), "every rank saves the same state"
    after = []
    for r in range(3):
        sampler = multipack.BatchSampler(lengths, world_size=3, rank=r, **options)
        sampler.load_state_dict(state)
        steps_left = len(sampler)
        after.append(list(sampler))
        assert len(after[-1]) == steps_left
        # The rows left are trained: len(), the state and the next pass are the whole epoch's.
        whole = list(multipack.BatchSampler(lengths, world_size=3, rank=r, **options))
        assert len(sampler) == len(whole) > steps_left
        done = sampler.state_dict()
        assert (done["step"], done["plan_consumed_rows"]) == (len(whole), 0)
        assert list(sampler) == whole
        resumed = multipack.BatchSampler(lengths, world_size=3, rank=r, **options)
        resumed.load_state_dict(done)
        assert list(resumed) == []
    assert len({len(a) for a in after}) == 1
    rest = [i for steps in after for step in steps for row in step for i in row]
    assert sorted(trained + rest) == list(np.flatnonzero(lengths))


def test_a_restart_with_another_world_size_after_the_last_step_is_empty_then_whole(lengths):
    options = dict(capacity=2048, micro_batch=2, seed=4)
    done = multipack.BatchSampler(lengths, world_size=2, rank=0, **options)
    assert len(list(done)) == len(done)
    resumed = multipack.BatchSampler(lengths, world_size=3, rank=0, **options)
    resumed.load_state_dict(done.state_dict())
    assert len(resumed) == 0 and list(resumed) == []
    whole = list(multipack.BatchSampler(lengths, world_size=3, rank=0, **options))
    assert len(resumed) == len(whole) and resumed.state_dict()["step"] == len(whole)
    assert list(resumed) == whole


def test_a_state_of_another_run_is_refused_and_a_refused_state_changes_nothing(lengths):
    options = dict(capacity=2048, micro_batch=4, world_size=1, rank=0, seed=1)
    run = multipack.BatchSampler(lengths, **options)
    list(itertools.islice(iter(run), 40))
    state = run.state_dict()
    # Another plan: resuming its step would train some samples twice and others never.
    for other in (dict(algorithm="randomized-exact-fit"), dict(max_per_row=3), dict(capacity=4096),
                  dict(overlong="truncate"), dict(remainder="drop"), dict(balance=False), dict(seed=2)):
        sampler = multipack.BatchSampler(lengths, **{**options, **other})
        with pytest.raises(multipack.OptionError, match=f"saved with {next(iter(other))}"):
            sampler.load_state_dict(state)
    changed = lengths.copy()
    changed[7] += 1
    for other_lengths, key in ((lengths[:-1], "samples"), (changed, "tokens")):
        with pytest.raises(multipack.OptionError, match=f"saved with {key}"):
            multipack.BatchSampler(other_lengths, **options).load_state_dict(state)

    sampler = multipack.BatchSampler(lengths, **options, epoch=2)
    next(iter(sampler))
    before = sampler.state_dict()
    for bad in ({**state, "epoch": 5, "step": 10**6}, {**state, "epoch": 5, "world_size": 2, "consumed_rows": 10**9}):
        with pytest.raises(multipack.OptionError):
            sampler.load_state_dict(bad)
        assert sampler.state_dict() == before


def test_a_state_saved_after_the_epoch_resumes_to_nothing_whatever_the_loop(lengths):
    options = dict(capacity=2048, micro_batch=4, world_size=2, rank=0, seed=5)
    by_for = multipack.BatchSampler(lengths, **options)
    full = [step for step in by_for]
    by_count = multipack.BatchSampler(lengths, **options)  # a loop that stops at len(), never at StopIteration
    assert list(itertools.islice(iter(by_count), len(by_count))) == full
    state = by_for.state_dict()
    assert state == by_count.state_dict() and state["step"] == len(full)
    for world_size in (2, 3):
        resumed = multipack.BatchSampler(lengths, **{**options, "world_size": world_size})
        resumed.load_state_dict(state)
        assert list(resumed) == [], "the epoch was done"
        # Later passes over the epoch are whole ones, with another world size too.
        whole = len(multipack.BatchSampler(lengths, **{**options, "world_size": world_size}))
        assert len(list(resumed)) == len(resumed) == whole
    # Under remainder drop too, with a smaller step: the rows the epoch dropped stay dropped
    # (a run of 1 x 1 once trained the saving run's 3 dropped rows as 3 more steps).
    dropping = multipack.BatchSampler(lengths, **options, remainder="drop")
    assert len(list(dropping)) > 0 and dropping.plan().schedule_report["dropped_rows"] > 0
    for shape in (dict(world_size=1, micro_batch=1), dict(world_size=2, micro_batch=1)):
        resumed = multipack.BatchSampler(lengths, **{**options, **shape}, remainder="drop")
        resumed.load_state_dict(dropping.state_dict())
        assert list(resumed) == [], "the epoch was done"
    # set_epoch inside the loop: the state is the new epoch's, which nothing has trained yet.
    it = iter(by_for)
    for _ in range(10):
        next(it)
    by_for.set_epoch(1)
    next(it)
    assert (by_for.state_dict()["epoch"], by_for.state_dict()["step"]) == (1, 0)


def test_all_ranks_for_a_loader_that_shards_the_batches_itself(lengths):
    # Hugging Face accelerate's prepare_data_loader (the Trainer's, axolotl's) wraps a batch
    # sampler in BatchSamplerShard: process p takes its batches p, p + N, ... With all_ranks
    # those are exactly rank p's micro-batches; a per-rank sampler would lose (N-1)/N of them.
    options = dict(capacity=2048, micro_batch=4, world_size=3, seed=2, algorithm="randomized-exact-fit")
    sampler = multipack.BatchSampler(lengths, **options, all_ranks=True)
    everything = list(sampler)
    per_rank = [list(multipack.BatchSampler(lengths, **options, rank=r)) for r in range(3)]
    assert len(everything) == len(sampler) == 3 * len(per_rank[0])
    for process in range(3):
        assert everything[process::3] == per_rank[process]
    assert sampler.state_dict()["step"] == len(per_rank[0])
    with pytest.raises(AttributeError):
        sampler.all_ranks = False


def test_what_accelerate_reads_of_a_batch_sampler_it_shards(lengths):
    # accelerate's DataLoaderShard.set_epoch reaches a batch sampler it wrapped in
    # BatchSamplerShard only as batch_sampler.batch_sampler.sampler.set_epoch
    # (accelerate/data_loader.py): without that path every epoch would silently repeat epoch
    # 0's order. batch_size it would read as samples per batch (gather_for_metrics cuts the
    # last batch to len(dataset) % (batch_size x processes)): a micro-batch of rows has none.
    options = dict(capacity=2048, micro_batch=4, world_size=2, seed=2)
    sampler = multipack.BatchSampler(lengths, **options, all_ranks=True)
    assert getattr(sampler, "batch_size", None) is None

    class Shard:  # accelerate's BatchSamplerShard, as set_epoch sees it: no sampler of its own
        def __init__(self, batch_sampler):
            self.batch_sampler = batch_sampler

    shard = Shard(sampler)
    epoch_0 = list(sampler)
    assert hasattr(shard.batch_sampler, "sampler") and hasattr(shard.batch_sampler.sampler, "set_epoch")
    shard.batch_sampler.sampler.set_epoch(1)
    assert sampler.epoch == 1
    assert list(sampler) != epoch_0
    assert list(sampler) == list(multipack.BatchSampler(lengths, **options, all_ranks=True, epoch=1))


def test_world_from_the_environment(lengths, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    sampler = multipack.BatchSampler(lengths, 2048, 2)
    assert (sampler.rank, sampler.world_size) == (2, 3)
    assert list(sampler) == list(multipack.BatchSampler(lengths, 2048, 2, world_size=3, rank=2))
    assert multipack.BatchSampler(lengths, 2048, 2, world_size=3).rank == 2  # the environment's world
    # A world size given without a rank is refused where the environment's rank is of another
    # world: each process took rank 5 of 6, or without a launcher all took rank 0.
    with pytest.raises(multipack.OptionError, match="world_size 6 without rank, and torchrun's variables say 3"):
        multipack.BatchSampler(lengths, 2048, 2, world_size=6)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(multipack.OptionError, match="world_size 4 without rank, and no launcher's variables"):
        multipack.BatchSampler(lengths, 2048, 2, world_size=4)
    assert multipack.BatchSampler(lengths, 2048, 2, world_size=1).rank == 0
    assert multipack.BatchSampler(lengths, 2048, 2, world_size=4, all_ranks=True).rank == 0  # rank not used
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(multipack.OptionError, match="RANK"):
        multipack.BatchSampler(lengths, 2048, 2)
    # A Slurm batch script that runs the trainer itself, without srun: one process, not 4.
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "0")
    with pytest.raises(multipack.OptionError, match="SLURM_NTASKS=4 but SLURM_STEP_NUM_TASKS is not set.*srun"):
        multipack.BatchSampler(lengths, 2048, 2)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    assert multipack.distributed_env() == {"rank": 0, "world_size": 4, "local_rank": 0, "launcher": "Slurm"}


def test_padding_rows_complete_the_last_step(lengths):
    sampler = multipack.BatchSampler(lengths, 4096, micro_batch=7, world_size=3, rank=0)
    report = sampler.report
    padded = report["schedule"]["padded_rows"]
    rows = [row for r in range(3) for step in multipack.BatchSampler(lengths, 4096, 7, world_size=3, rank=r)
            for row in step]
    assert sum(1 for row in rows if row == []) == padded
    # Ranks whose last step is padding only (no token to train on there): counted in the report.
    seen_padding_only = False
    for world in range(3, 12):
        samplers = [multipack.BatchSampler(lengths, 4096, 2, world_size=world, rank=r) for r in range(world)]
        last_steps = [list(s)[-1] for s in samplers]
        padding_only = sum(1 for step in last_steps if all(row == [] for row in step))
        assert samplers[0].report["schedule"]["padding_only_ranks"] == padding_only
        seen_padding_only |= padding_only > 0
    assert seen_padding_only
    dropped = multipack.BatchSampler(lengths, 4096, 7, world_size=3, rank=0, remainder="drop")
    assert all(row for step in dropped for row in step)


def test_pack_threads_give_the_same_plan(lengths):
    many = np.random.default_rng(4).choice(lengths, 60_000).astype(np.uint32)
    options = {"capacity": 2048, "micro_batch": 2, "algorithm": "randomized-exact-fit", "seed": 5}
    assert epoch_of(many, 2, **options, pack_threads=3) == epoch_of(many, 2, **options)
    with pytest.raises(multipack.OptionError, match="at most 256"):
        multipack.BatchSampler(lengths, 2048, world_size=1, rank=0, pack_threads=257)


def test_bad_arguments(lengths):
    with pytest.raises(multipack.OptionError, match="split"):
        multipack.BatchSampler(lengths, 256, overlong="split", world_size=1, rank=0)
    with pytest.raises(multipack.OptionError, match="outside the world"):
        multipack.BatchSampler(lengths, 2048, world_size=2, rank=2)
    with pytest.raises(multipack.OptionError, match="micro_batch"):
        multipack.BatchSampler(lengths, 2048, micro_batch=0, world_size=1, rank=0)
    with pytest.raises(multipack.OptionError, match="remainder policy"):
        multipack.BatchSampler(lengths, 2048, remainder="keep", world_size=1, rank=0)
    with pytest.raises(TypeError, match="balance must be True or False"):  # "false" would be truthy
        multipack.BatchSampler(lengths, 2048, balance="false", world_size=1, rank=0)
    sampler = multipack.BatchSampler(lengths, 2048, world_size=1, rank=0)
    with pytest.raises(multipack.OptionError, match="seed"):
        sampler.load_state_dict({**sampler.state_dict(), "seed": 1})
    with pytest.raises(multipack.OptionError, match="step"):
        sampler.load_state_dict({**sampler.state_dict(), "step": 10**6})
    with pytest.raises(multipack.OptionError, match="consumed_rows"):
        sampler.load_state_dict({"epoch": 0, "step": 0, "world_size": 1, "micro_batch": 1, "seed": 0})


def test_truncated_samples_keep_their_index(lengths):
    sampler = multipack.BatchSampler(lengths, 256, 4, world_size=1, rank=0, overlong="truncate")
    seen = sorted(i for step in sampler for row in step for i in row)
    assert seen == list(np.flatnonzero(lengths))


def test_restarts_chained_across_world_sizes_train_on_every_sample_once(lengths):
    # 4 ranks, then 3 (after a restart), then 3 again (a resume of the same shape), then 2: the
    # consumed rows of each state count every earlier part once.
    options = dict(capacity=2048, micro_batch=2, seed=8, algorithm="randomized-exact-fit", epoch=1)
    trained = []
    state = None
    for world_size, steps in [(4, 5), (3, 4), (3, 3), (2, None)]:
        samplers = [multipack.BatchSampler(lengths, world_size=world_size, rank=r, **options)
                    for r in range(world_size)]
        for s in samplers:
            if state is not None:
                s.load_state_dict(state)
        its = [iter(s) for s in samplers]
        taken = 0
        while steps is None or taken < steps:
            try:
                micro_batches = [next(it) for it in its]
            except StopIteration:
                break
            trained += [i for step in micro_batches for row in step for i in row]
            taken += 1
        if steps is not None:  # stopped mid-epoch: every rank saves the same state
            state = samplers[0].state_dict()
            assert all(s.state_dict() == state for s in samplers)
    assert sorted(trained) == list(np.flatnonzero(lengths)), "a sample is missing or repeated"


def test_later_epochs_are_packed_into_the_memory_of_the_plan_let_go(lengths):
    """Each epoch's plan goes back to the sampler when the next is made, and the next is packed
    into its memory: the same steps as a fresh sampler's. A plan still held is left alone."""
    options = dict(world_size=1, rank=0, algorithm="randomized-exact-fit")
    sampler = multipack.BatchSampler(lengths, 2048, 8, **options)
    for epoch in range(4):
        sampler.set_epoch(epoch)
        assert list(sampler) == list(multipack.BatchSampler(lengths, 2048, 8, epoch=epoch, **options))
    assert sampler._recycler.reused == 3, "epochs 1, 2 and 3 in the memory of the one before"
    held = sampler.plan()
    steps = [held.indices(step, 0) for step in range(held.steps)]
    sampler.set_epoch(4)
    assert list(sampler) == list(multipack.BatchSampler(lengths, 2048, 8, epoch=4, **options))
    assert sampler._recycler.reused == 3, "the plan held was not packed into"
    assert [held.indices(step, 0) for step in range(held.steps)] == steps
