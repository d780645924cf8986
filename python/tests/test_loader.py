"""multipack.Loader: the batches of multipack-bench load, arrays over the pool that stay valid
while referenced, threads that stop, C++ errors as Python exceptions."""

import collections
import gc
import itertools
import os
import shutil
import threading
import time

import numpy as np
import pytest
import torch

import multipack
from conftest import FIXED_OPTIONS, multipack_threads, run_bench

ARRAYS = ["input_ids", "labels", "position_ids", "sequence_ids", "cu_seqlens"]


def bench_batches(bench, tmp_path, prefix, count, *options):
    out = tmp_path / "dump"
    run_bench(bench, "load", "--data", prefix, "--dump-batches", str(out), "--dump-count", str(count), *options)
    return out


@pytest.mark.parametrize("dtype, flags", [(np.int32, []), (np.int64, ["--int64"])])
def test_the_batches_of_multipack_bench_load(bench, tmp_path, prefix, prompt_lengths_file, dtype, flags):
    out = bench_batches(bench, tmp_path, prefix, 6, "--prompt-lengths", prompt_lengths_file, "--world-size", "2",
                        "--rank", "1", "--micro-batch", "3", "--capacity", "2048", "--seed", "5", "--epoch", "1",
                        "--algorithm", "randomized-exact-fit", "--start-step", "2", *flags)
    loader = multipack.Loader(prefix, capacity=2048, micro_batch=3, world_size=2, rank=1, seed=5, epoch=1,
                              algorithm="randomized-exact-fit", prompt_lengths=prompt_lengths_file, dtype=dtype,
                              start_step=2, threads=2)
    for batch in itertools.islice(loader, 6):
        step = batch["step"]
        for name in ARRAYS:
            want = np.load(out / f"step{step:06d}_rank1_{name}.npy")
            assert batch[name].dtype == want.dtype, name
            assert np.array_equal(batch[name], want), f"{name} of step {step}"
        assert batch["max_seqlen"] == np.load(out / f"step{step:06d}_rank1_max_seqlen.npy")
        assert batch["loss_tokens"] == np.count_nonzero(batch["labels"] != -100)
        assert batch["rank"] == 1
    assert step == 7


def test_a_token_mask_gives_the_prompt_lengths_batches(tmp_path, prefix, prompt_lengths_file):
    # convert --labels-field writes a per-token mask; here one made from the prompt lengths.
    lengths = np.loadtxt(os.path.join(os.path.dirname(prefix), "lengths.txt"), dtype=np.int64)
    prompts = multipack.read_prompt_lengths(prompt_lengths_file)
    mask = tmp_path / "mask"
    write_token_mask(mask, [np.arange(n) >= p for n, p in zip(lengths, prompts)])
    by_prompts = multipack.Loader(prefix, 2048, 4, world_size=1, rank=0, prompt_lengths=prompts)
    by_mask = multipack.Loader(prefix, 2048, 4, world_size=1, rank=0, loss_mask=str(mask))
    a = [(b["labels"].copy(), b["loss_tokens"]) for b in by_prompts]
    b = [(b["labels"].copy(), b["loss_tokens"]) for b in by_mask]
    assert len(a) == len(b) == len(by_prompts) > 0
    for (labels_a, loss_a), (labels_b, loss_b) in zip(a, b):
        assert np.array_equal(labels_a, labels_b) and loss_a == loss_b


# Megatron's dtype codes of the two kinds this file writes.
_MEGATRON_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int32): 4}


def write_megatron(prefix, samples, dtype):
    """A Megatron indexed dataset (MMIDIDX version 1) of `dtype`, one document a sample."""
    dtype = np.dtype(dtype)
    sizes = np.array([len(s) for s in samples], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64) * dtype.itemsize]).astype(np.int64)
    with open(f"{prefix}.bin", "wb") as f:
        for s in samples:
            f.write(np.asarray(s, dtype=dtype).tobytes())
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.array([1], dtype=np.uint64).tobytes())
        f.write(np.array([_MEGATRON_CODES[dtype]], dtype=np.uint8).tobytes())
        f.write(np.array([len(samples)], dtype=np.uint64).tobytes())
        f.write(np.array([len(samples) + 1], dtype=np.uint64).tobytes())
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(len(samples) + 1, dtype=np.int64).tobytes())


def write_token_mask(prefix, masks):
    """A per-token loss mask: uint8 0/1, one sample a mask."""
    write_megatron(prefix, masks, np.uint8)


def indexed_samples(prefix):
    """Every sample's tokens of a Megatron indexed dataset (MMIDIDX version 1), read with numpy
    alone: the reference the loader's batches are checked against."""
    with open(f"{prefix}.idx", "rb") as f:
        index = f.read()
    assert index[:9] == b"MMIDIDX\x00\x00"
    code = index[17]
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[code]
    count = int(np.frombuffer(index, np.uint64, 1, 18)[0])
    sizes = np.frombuffer(index, np.int32, count, 34)
    pointers = np.frombuffer(index, np.int64, count, 34 + 4 * count)
    tokens = np.memmap(f"{prefix}.bin", dtype=np.uint8, mode="r")
    return [np.frombuffer(tokens, dtype, int(n), int(p)) for n, p in zip(sizes, pointers)]


def test_len_is_the_step_count_and_every_sample_comes_once(prefix, lengths):
    loader = multipack.Loader(prefix, capacity=4096, micro_batch=4, world_size=1, rank=0, depth=3)
    batches = 0
    tokens = 0
    seen = collections.Counter()
    for batch in loader:
        batches += 1
        tokens += batch["real_tokens"]
        assert batch["input_ids"].shape == (4, 4096)
        segments = np.diff(batch["cu_seqlens"])
        assert segments.sum() == 4 * 4096 and segments.max() == batch["max_seqlen"]
        # Each piece (a whole sample here: none is longer than a row) by its tokens.
        for ids, sequence in zip(batch["input_ids"], batch["sequence_ids"]):
            for s in range(1, int(sequence.max()) + 1):
                seen[ids[sequence == s].tobytes()] += 1
    assert batches == len(loader) and tokens == lengths.sum()
    expected = collections.Counter(s.astype(np.int32).tobytes() for s in indexed_samples(prefix) if len(s) > 0)
    assert seen == expected
    # pack_threads reaches the plan's packing (the sampler's test compares the plans).
    with pytest.raises(multipack.OptionError, match="at most 256"):
        multipack.Loader(prefix, capacity=4096, world_size=1, rank=0, pack_threads=257)


def test_kept_arrays_stay_valid_while_the_pool_goes_on(prefix):
    loader = multipack.Loader(prefix, capacity=1024, micro_batch=2, world_size=1, rank=0, depth=2, threads=2)
    it = iter(loader)
    kept = next(it)
    labels = kept["labels"]                      # one array of the batch, the rest dropped
    copy = labels.copy()
    del kept
    later = [next(it)["input_ids"].copy() for _ in range(20)]  # each buffer is reused many times
    assert np.array_equal(labels, copy), "a kept array was overwritten: its buffer went back to the pool"
    assert not np.array_equal(later[0], later[1])
    view = labels[1:, 5:]                        # a view of a view keeps the buffer too
    del labels
    gc.collect()
    for _ in range(5):
        next(it)
    assert np.array_equal(view, copy[1:, 5:])


def test_holding_every_buffer_is_an_error_not_a_hang(prefix):
    loader = multipack.Loader(prefix, capacity=1024, micro_batch=2, world_size=1, rank=0, depth=2)
    it = iter(loader)
    held = [next(it), next(it)]
    with pytest.raises(ValueError, match="buffer"):
        next(it)
    del held


def test_break_and_garbage_collection_stop_the_threads(prefix):
    gc.collect()  # a loader of an earlier test, kept by a traceback's cycle, stops now and not mid-count
    assert multipack_threads(0) == 0, "an earlier test's loader still runs"
    for batch in multipack.Loader(prefix, capacity=2048, micro_batch=2, world_size=1, rank=0, threads=3):
        break
    del batch
    gc.collect()
    assert multipack_threads(0) == 0, "the loop ended but the workers still run"

    loader = multipack.Loader(prefix, capacity=2048, micro_batch=2, world_size=1, rank=0, threads=3)
    it = iter(loader)
    next(it)
    assert multipack_threads(3 + 1) == 3 + 1, "three workers and the planning thread"
    del it
    gc.collect()
    assert multipack_threads(0) == 0
    with multipack.Loader(prefix, capacity=2048, world_size=1, rank=0, threads=2) as scoped:
        next(iter(scoped))
    assert multipack_threads(0) == 0


def test_close_from_another_thread_ends_the_loop_there(prefix):
    # A watchdog or shutdown thread closes the loader while the loop waits for a batch: the
    # loop ends (it waited in a freed loader before), and no thread is left.
    gc.collect()
    assert multipack_threads(0) == 0
    for trial in range(100):
        loader = multipack.Loader(prefix, capacity=8192, micro_batch=64, world_size=1, rank=0, threads=1, depth=2)
        it = iter(loader)
        consumer = threading.Thread(target=lambda: [None for _ in it])
        consumer.start()
        time.sleep(0.001 * (trial % 5))
        loader.close()
        consumer.join(30)
        assert not consumer.is_alive(), f"trial {trial}: the loop still waits after close()"
        del it
    gc.collect()
    assert multipack_threads(0) == 0


def test_a_state_saved_after_the_epoch_resumes_to_nothing(prefix):
    options = dict(capacity=2048, micro_batch=2, world_size=1, rank=0, seed=3)
    loader = multipack.Loader(prefix, **options)
    steps = sum(1 for _ in loader)
    state = loader.state_dict()
    assert state["step"] == steps == len(loader)
    resumed = multipack.Loader(prefix, **options)
    resumed.load_state_dict(state)
    assert sum(1 for _ in resumed) == 0
    assert sum(1 for _ in resumed) == steps, "a later pass over the epoch is a whole one"


def test_after_the_rows_a_restart_with_another_world_size_left_the_epoch_is_whole_again(prefix):
    options = dict(capacity=2048, micro_batch=2, rank=0, seed=3)
    run = multipack.Loader(prefix, world_size=2, **options)
    for _ in itertools.islice(run, 9):
        pass
    state = run.state_dict()
    run.close()
    resumed = multipack.Loader(prefix, world_size=3, **options)
    resumed.load_state_dict(state)
    steps_left = len(resumed)
    assert sum(1 for _ in resumed) == steps_left
    whole = multipack.Loader(prefix, world_size=3, **options)
    assert len(resumed) == len(whole) > steps_left, "len() is the next pass's: the whole epoch"
    assert resumed.state_dict()["step"] == len(whole)
    assert sum(1 for _ in resumed) == len(whole)
    resumed.close()
    whole.close()


def test_resume_from_state_dict_is_the_tail(prefix, prompt_lengths_file):
    options = dict(capacity=2048, micro_batch=2, world_size=2, rank=0, seed=3, prompt_lengths=prompt_lengths_file)
    full = [b["input_ids"].copy() for b in multipack.Loader(prefix, **options)]
    run = multipack.Loader(prefix, **options)
    taken = [b["input_ids"].copy() for b in itertools.islice(run, 9)]
    resumed = multipack.Loader(prefix, **options)
    resumed.load_state_dict(run.state_dict())
    tail = [b["input_ids"].copy() for b in resumed]
    assert len(taken + tail) == len(full) == len(run)
    assert all(np.array_equal(a, b) for a, b in zip(taken + tail, full))


def test_prompt_length_files_named_for_their_shards_go_with_them_in_any_order(tmp_path):
    # 11 shards: sorted(glob()) lists shard_10 before shard_2, where the directory's shards are
    # in natural order. Every prompt fits every sample, so a file paired with another shard of
    # the same count would be taken without an error, masking the wrong tokens.
    rng = np.random.default_rng(4)
    prompts = []
    for k in range(11):
        samples = [rng.integers(0, 32000, n) for n in rng.integers(20, 200, 30)]
        write_megatron(tmp_path / f"shard_{k}", samples, np.int32)
        prompts.append(rng.integers(0, 20, 30))
        np.savetxt(tmp_path / f"shard_{k}.prompt_lengths", prompts[-1], fmt="%d")
    globbed = sorted(str(p) for p in tmp_path.glob("*.prompt_lengths"))
    assert globbed[2].endswith("shard_10.prompt_lengths")
    options = dict(capacity=512, micro_batch=2, world_size=1, rank=0, seed=1)
    expected = [b["labels"].copy() for b in multipack.Loader(str(tmp_path), **options,
                                                              prompt_lengths=np.concatenate(prompts))]
    loader = multipack.Loader(str(tmp_path), **options, prompt_lengths=globbed)
    assert all(np.array_equal(a, b["labels"]) for a, b in itertools.zip_longest(expected, loader))
    # One named for another shard than the one at its place, among files not so named: refused.
    others = []
    for k in range(11):
        others.append(tmp_path / f"copy_{k}.txt")
        shutil.copy(tmp_path / f"shard_{k}.prompt_lengths", others[-1])
    with pytest.raises(multipack.OptionError, match="shard_1.prompt_lengths is named for prefix 2"):
        multipack.Loader(str(tmp_path), **options, prompt_lengths=[tmp_path / "shard_1.prompt_lengths", *others[1:]])


def test_a_second_iteration_ends_the_first_with_an_error_not_as_a_short_epoch(prefix):
    loader = multipack.Loader(prefix, capacity=1024, micro_batch=4, world_size=1, rank=0)
    first = iter(loader)
    for _ in range(10):
        next(first)
    second = iter(loader)  # a peek, or zip(loader, loader): restarts the C++ loader
    next(second)
    with pytest.raises(multipack.OptionError, match="ended by a later iter"):
        next(first)  # once ended quietly: a loop that looked like a whole epoch of 10 steps
    assert loader.state_dict()["step"] == 1
    assert sum(1 for _ in second) == len(loader) - 1
    # close() from elsewhere still ends a loop quietly, also when another iteration starts after it.
    third = iter(loader)
    next(third)
    loader.close()
    fourth = iter(loader)
    next(fourth)
    assert list(third) == []


def test_epochs(prefix):
    loader = multipack.Loader(prefix, capacity=2048, micro_batch=2, world_size=1, rank=0)
    first = next(iter(loader))["input_ids"].copy()
    loader.set_epoch(1)
    assert not np.array_equal(next(iter(loader))["input_ids"], first)
    loader.set_epoch(0)
    assert np.array_equal(next(iter(loader))["input_ids"], first)


def test_torch_tensors_over_the_same_memory(prefix):
    loader = multipack.Loader(prefix, capacity=1024, micro_batch=2, world_size=1, rank=0, dtype="int64",
                              as_torch=True)
    batch = next(iter(loader))
    assert isinstance(batch["input_ids"], torch.Tensor) and batch["input_ids"].dtype == torch.int64
    assert batch["cu_seqlens"].dtype == torch.int32
    embedded = torch.nn.Embedding(32000, 4)(batch["input_ids"])
    assert embedded.shape == (2, 1024, 4)
    assert int((batch["labels"] != -100).sum()) == batch["loss_tokens"]


def test_errors_carry_the_library_message(prefix, tmp_path):
    short = tmp_path / "short_prompts.txt"
    short.write_text("1\n2\n3\n")
    with pytest.raises(ValueError, match="missing"):
        multipack.Loader(str(tmp_path / "missing"), world_size=1, rank=0)
    with pytest.raises(multipack.OptionError, match="outside"):
        multipack.Loader(prefix, world_size=2, rank=5)
    with pytest.raises(multipack.OptionError, match="int32 or int64"):
        multipack.Loader(prefix, world_size=1, rank=0, dtype=np.float32)
    with pytest.raises(multipack.OptionError, match="threads"):
        multipack.Loader(prefix, world_size=1, rank=0, threads=0)
    with pytest.raises(multipack.OptionError, match="depth = 1: must be at least 2"):  # a for loop holds one batch
        multipack.Loader(prefix, world_size=1, rank=0, depth=1)
    # The token type's range, here rather than at the first batch.
    with pytest.raises(multipack.OptionError, match="ignore_index = 1099511627776: must be at most 2147483647"):
        multipack.Loader(prefix, world_size=1, rank=0, ignore_index=2**40)
    with pytest.raises(multipack.OptionError, match="pad_token_id = 2147483648: must be at most 2147483647"):
        multipack.Loader(prefix, world_size=1, rank=0, pad_token_id=2**31)
    multipack.Loader(prefix, world_size=1, rank=0, dtype=np.int64, ignore_index=2**40).close()
    with pytest.raises(multipack.OptionError, match="not both"):
        multipack.Loader(prefix, world_size=1, rank=0, prompt_lengths=[0] * 5000, loss_mask=prefix)
    with pytest.raises(multipack.OptionError, match="start_step 100000 is past"):
        multipack.Loader(prefix, world_size=1, rank=0, start_step=100_000)
    with pytest.raises(multipack.OptionError, match="2 files for 1 prefixes"):
        multipack.Loader(prefix, world_size=1, rank=0, prompt_lengths=[short, short])
    with pytest.raises(multipack.FormatError, match="negative"):
        multipack.Loader(prefix, world_size=1, rank=0, prompt_lengths=np.full(5000, -1))
    with pytest.raises(TypeError, match="train_on_inputs must be True or False"):  # "false" would be truthy
        multipack.Loader(prefix, world_size=1, rank=0, train_on_inputs="false")
    with pytest.raises(multipack.FormatError, match="prompt"):
        multipack.Loader(prefix, world_size=1, rank=0, prompt_lengths=[1, 2, 3])
    # A file of another dataset's prompt lengths: the error names the file given.
    with pytest.raises(multipack.FormatError, match="short_prompts.txt"):
        multipack.Loader(prefix, world_size=1, rank=0, prompt_lengths=short)
    # A truncated index: the message names the file and what is wrong, as the C++ one does.
    broken = tmp_path / "broken"
    shutil.copy(prefix + ".bin", str(broken) + ".bin")
    data = open(prefix + ".idx", "rb").read()
    open(str(broken) + ".idx", "wb").write(data[: len(data) // 2])
    with pytest.raises(multipack.FormatError, match="broken.idx") as caught:
        multipack.Loader(str(broken), world_size=1, rank=0)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, multipack.Error)  # each library error is one, as in C++
    # A file the system does not open: an OSError naming it.
    with pytest.raises(OSError, match="absent.txt") as caught:
        multipack.Loader(prefix, world_size=1, rank=0, prompt_lengths=str(tmp_path / "absent.txt"))
    assert isinstance(caught.value, multipack.FileError)
    assert isinstance(caught.value, multipack.Error)
    with pytest.raises(multipack.Error, match="unknown packing algorithm"):  # an OptionError, as the library's
        multipack.Loader(prefix, world_size=1, rank=0, algorithm="nope")
    for kind in (multipack.FileError, multipack.FormatError, multipack.OptionError, multipack.SampleError):
        assert issubclass(kind, multipack.Error)


def test_a_worker_error_arrives_as_a_python_exception(prefix, tmp_path):
    # The .bin rewritten under a running loader: the worker that builds the next batch finds it
    # changed and throws; the batches before arrive first, then the C++ error, as an OSError.
    copy = tmp_path / "copy"
    shutil.copy(prefix + ".bin", str(copy) + ".bin")
    shutil.copy(prefix + ".idx", str(copy) + ".idx")
    loader = multipack.Loader(str(copy), capacity=512, micro_batch=1, world_size=1, rank=0, depth=2, threads=1)
    it = iter(loader)
    next(it)
    stat = os.stat(str(copy) + ".bin")
    # 2 s later, as the C++ tests' rewrite_in_place: a change whatever the file system's clock granularity
    os.utime(str(copy) + ".bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    with pytest.raises(multipack.FileError, match="changed since it was opened") as caught:
        for _ in range(len(loader)):
            next(it)
    assert isinstance(caught.value, OSError)
    with pytest.raises(multipack.FileError):  # and at every later call
        next(it)
    loader.close()


def test_one_loader_spans_the_epochs(prefix):
    """Epoch after epoch from one C++ loader: the same batches as a fresh loader's each epoch;
    no thread started; the later epochs planned by its planning thread (Python plans only the
    first) and packed into the memory of plans let go; the epoch boundaries counted."""
    options = dict(capacity=2048, micro_batch=2, world_size=1, rank=0, algorithm="randomized-exact-fit", threads=2)
    gc.collect()  # as in the test above
    assert multipack_threads(0) == 0
    loader = multipack.Loader(prefix, **options)
    running = loader._batches
    for epoch in range(4):
        loader.set_epoch(epoch)
        running_threads = multipack_threads(2 + 1)
        assert running_threads == 2 + 1, f"epoch {epoch}: two workers and the planning thread"
        got = []
        for b in loader:
            assert b["epoch"] == epoch
            got.append(b["input_ids"].copy())
        assert loader._batches is running, f"epoch {epoch}: another C++ loader was started"
        with multipack.Loader(prefix, epoch=epoch, **options) as fresh:
            expected = [b["input_ids"].copy() for b in fresh]
        assert len(got) == len(expected) == len(loader)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected)), f"epoch {epoch}"
    assert loader._plans_made == 1, "epochs 1 to 3 are the planning thread's plans"
    statistics = loader.statistics()
    assert statistics["boundaries"] == 3 and statistics["batches"] == 4 * len(loader)
    # Epoch e + 2 is planned once half of epoch e + 1 is built: this loop let epoch e's plan go
    # at e + 1's start, so epochs 2 and 3 are packed into memory let go (two plans' memory).
    assert loader._recycler.reused >= 2
    loader.close()
    assert multipack_threads(0) == 0


def test_the_plan_options_and_the_dataset_are_fixed_and_assigning_epoch_continues(prefix):
    """Assigning an option every plan is made with, or the dataset, is refused (the running C++
    loader was made with them); assigning ``epoch`` is set_epoch, so the next epoch continues
    the same C++ loader."""
    options = dict(capacity=2048, micro_batch=2, world_size=1, rank=0, seed=6)
    with multipack.Loader(prefix, **options) as loader:
        running = loader._batches
        for name, value in {**FIXED_OPTIONS, "dataset": None}.items():
            with pytest.raises(AttributeError, match=f"Loader.{name} is fixed"):
                setattr(loader, name, value)
        assert loader.seed == 6 and loader.rank == 0 and len(loader.dataset.lengths) > 0
        first = [b["input_ids"].copy() for b in loader]
        loader.epoch = 1
        second = [b["input_ids"].copy() for b in loader]
        assert loader._batches is running, "epoch 1 continued the C++ loader"
    with multipack.Loader(prefix, epoch=1, **options) as fresh:
        expected = [b["input_ids"].copy() for b in fresh]
    assert len(second) == len(expected) and all(np.array_equal(a, b) for a, b in zip(second, expected))
    assert not all(np.array_equal(a, b) for a, b in zip(first, second))


def test_a_loop_that_counts_its_steps_and_short_epochs_keep_the_loader(prefix):
    """islice(loader, len(loader)) never reaches StopIteration: the next epoch continues the C++
    loader all the same. Epochs of fewer steps than the prefetch depth: the loader lets each
    plan go before Python asks for it, and Python still takes the planning thread's."""
    loader = multipack.Loader(prefix, capacity=2048, micro_batch=2, world_size=1, rank=0, seed=3)
    running = loader._batches
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert [b["epoch"] for b in itertools.islice(loader, len(loader))] == [epoch] * len(loader)
        assert loader._batches is running
    loader.close()
    short = multipack.Loader(prefix, capacity=65536, micro_batch=4, world_size=1, rank=0, depth=8,
                             algorithm="randomized-exact-fit")
    running = short._batches
    assert len(short) < 8
    for epoch in range(5):
        short.set_epoch(epoch)
        with multipack.Loader(prefix, capacity=65536, micro_batch=4, world_size=1, rank=0, epoch=epoch,
                              algorithm="randomized-exact-fit") as fresh:
            expected = [b["input_ids"].copy() for b in fresh]
        got = [b["input_ids"].copy() for b in short]
        assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
        assert short._batches is running
    assert short._plans_made == 1, "the later epochs are the planning thread's plans"
    short.close()


def test_an_epoch_out_of_sequence_restarts_the_loader(prefix):
    """The next iteration continues the C++ loader only when it is the next epoch from step 0:
    the same epoch again, an epoch skipped, a break or a resume start another."""
    options = dict(capacity=2048, micro_batch=2, world_size=1, rank=0, seed=7)
    loader = multipack.Loader(prefix, **options)
    first = [b["input_ids"].copy() for b in loader]
    again = [b["input_ids"].copy() for b in loader]  # no set_epoch: epoch 0 again
    assert len(first) == len(again) and all(np.array_equal(a, b) for a, b in zip(first, again))
    loader.set_epoch(2)  # epoch 1 skipped
    with multipack.Loader(prefix, epoch=2, **options) as fresh:
        expected = [b["input_ids"].copy() for b in fresh]
    for b, want in zip(loader, expected):
        assert b["epoch"] == 2 and np.array_equal(b["input_ids"], want)
        break  # stops the workers
    assert loader._batches is None or loader._batches.closed
    got = [b["input_ids"].copy() for b in loader]  # epoch 2 again, from its first step
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
    loader.close()
    # set_epoch inside the loop, at the last step: the next iteration is the epoch set last.
    loader = multipack.Loader(prefix, **options)
    for b in loader:
        if b["step"] == len(loader) - 1:
            loader.set_epoch(1)
    loader.set_epoch(2)
    got = [b["input_ids"].copy() for b in loader]
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
    loader.close()
    # The last epochs there are: a C++ loader runs up to epoch 2^64 - 2, the next starts another.
    top = multipack.Loader(prefix, epoch=2**64 - 2, **options)
    assert [b["epoch"] for b in top] == [2**64 - 2] * len(top)
    top.set_epoch(2**64 - 1)
    assert [b["epoch"] for b in top] == [2**64 - 1] * len(top) and len(top) > 0
    top.close()


def test_two_threads_iterating_one_loader_get_every_batch_once_or_an_error(prefix):
    # Two threads in next() at once each waited for a batch the other had taken, while every
    # buffer sat built: both hung for good. The second caller is refused while one is inside.
    loader = multipack.Loader(prefix, capacity=256, world_size=1, rank=0, threads=2, depth=4)
    iteration = iter(loader)
    steps = [[], []]
    errors = []

    def consume(k):
        try:
            for batch in iteration:
                steps[k].append(batch["step"])
        except multipack.OptionError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=consume, args=(k,), daemon=True) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "two threads iterating one Loader hung"
    assert all("already running on another thread" in e for e in errors), errors
    if not errors:  # never at once: between them, every step once
        assert sorted(steps[0] + steps[1]) == list(range(len(loader)))
    loader.close()


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="pybind11's dispatcher catches the exit's forced unwind by reference, which UBSan "
                           "reports as a reference bound to null (pybind11.h, not this module)")
def test_a_daemon_thread_iterating_at_exit_lets_the_process_exit(prefix):
    # At interpreter shutdown, a daemon thread taking the GIL back is ended by pthread_exit;
    # from inside pybind11's gil_scoped_release destructor (noexcept) that aborted the process.
    import subprocess
    import sys
    script = (
        "import multipack, threading, time\n"
        f"loader = multipack.Loader({str(prefix)!r}, capacity=256, world_size=1, rank=0, threads=2, depth=4)\n"
        "def consume():\n"
        "    epoch = 0\n"
        "    while True:\n"
        "        loader.set_epoch(epoch)\n"
        "        epoch += 1\n"
        "        for batch in loader:\n"
        "            pass\n"
        "threading.Thread(target=consume, daemon=True).start()\n"
        "time.sleep(0.5)\n"
    )
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ, timeout=120)
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
