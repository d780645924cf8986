#!/usr/bin/env python3
"""The Python module's figures, each beside what a Python trainer uses today, in the same run.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/bench_python.py [--samples N] [--repeat R]

1. BatchSampler: one epoch of N lengths drawn from data/alpaca/lengths.txt at 4,096 tokens,
   micro-batch 16 (the plan, the next epoch's plan in the memory of the last, and every step's
   index lists), beside a numba proxy of axolotl's
   MultipackBatchSampler (shuffle, then its first-fit-decreasing allocator that grows each bin
   by binary search over the next samples, then index lists).
2. Loader: tokens/s of a Python loop taking 16 x 4,096 int64 batches of data/alpaca (its prefix
   given R times), beside a numpy collator building the same batches from the same plan.
3. The per-batch cost of crossing into Python: batches already built, taken from the pool.
4. Epoch boundaries: a Python loop over 4 epochs of the same batches with a 2 ms step, the
   trainer's wait for each epoch's first batch beside its longest wait for any other; one
   Loader continuing from epoch to epoch (set_epoch), beside a new C++ loader each epoch.

Prints a Markdown table.
"""

import argparse
import os
import time

import numpy as np

import multipack

CAPACITY = 4096
MICRO_BATCH = 16


# --- a proxy of axolotl's sampler (src/axolotl/utils/samplers/multipack.py), numba, one process -----
def axolotl_proxy():
    import numba

    @numba.njit(cache=False)
    def first_fit_decreasing_fits(window, capacity, bins):
        """Whether the lengths fit `bins` bins by first-fit decreasing."""
        room = np.full(bins, capacity, dtype=window.dtype)
        for length in np.sort(window)[::-1]:
            placed = False
            for b in range(bins):
                if room[b] >= length:
                    room[b] -= length
                    placed = True
                    break
            if not placed:
                return False
        return True

    @numba.njit(cache=False)
    def first_fit_decreasing(window, capacity, offset):
        """The bins of first-fit decreasing, as lists of indices (offset added)."""
        order = np.argsort(window)[::-1]
        room = [0 for _ in range(0)]
        bins = [[0 for _ in range(0)] for _ in range(0)]
        for i in order:
            length = window[i]
            placed = False
            for b in range(len(room)):
                if room[b] >= length:
                    room[b] -= length
                    bins[b].append(i + offset)
                    placed = True
                    break
            if not placed:
                room.append(capacity - length)
                bins.append([i + offset])
        return bins

    @numba.njit(cache=False)
    def allocate(lengths, cumsum, capacity, ranks):
        """Bins of `ranks` at a time: the longest run of next samples that first-fit decreasing
        fits, by binary search; stops when a group cannot fill every rank."""
        start = 0
        used = 0
        out = [[0 for _ in range(0)] for _ in range(0)]
        while True:
            low = 1
            high = 1 + np.searchsorted(cumsum[start:], used + capacity * ranks, "right")
            while high - low > 1:
                middle = (low + high) // 2
                if first_fit_decreasing_fits(lengths[start:start + middle], capacity, ranks):
                    low = middle
                else:
                    high = middle
            group = first_fit_decreasing(lengths[start:start + low], capacity, start)
            if len(group) < ranks:
                break
            start += low
            used = cumsum[start - 1]
            out.append(group[0])
        return out

    def epoch(lengths, seed):
        indices = np.random.default_rng(seed).permutation(len(lengths))  # its RandomSampler
        shuffled = lengths[indices]
        bins = allocate(shuffled, np.cumsum(shuffled), CAPACITY, 1)
        return [[[int(indices[i]) for i in b] for b in bins[k:k + MICRO_BATCH]]
                for k in range(0, len(bins), MICRO_BATCH)]

    return epoch


def seconds(f):
    start = time.perf_counter()
    result = f()
    return time.perf_counter() - start, result


def sampler_rows(samples):
    alpaca = np.loadtxt("data/alpaca/lengths.txt", dtype=np.int64)
    lengths = alpaca[np.random.default_rng(1).integers(0, len(alpaca), samples)].astype(np.uint32)
    sampler = multipack.BatchSampler(lengths, CAPACITY, MICRO_BATCH, world_size=1, rank=0, seed=1)
    plan_seconds, _ = seconds(lambda: multipack.BatchSampler(lengths, CAPACITY, MICRO_BATCH, world_size=1, rank=0,
                                                             seed=1))
    # As a DataLoader takes it: each step's lists made, used, dropped.
    iterate_seconds, step_count = seconds(lambda: sum(1 for _ in sampler))
    # As axolotl's generate_batches holds them: every list of the epoch at once (Python's
    # memory and its garbage collector's passes over the live lists are most of this).
    ours_seconds, steps = seconds(lambda: list(sampler))
    ours_rows = sum(1 for s in steps for r in s if r)
    del steps
    # The next epoch's plan, packed into the memory of the one it replaces.
    sampler.set_epoch(1)
    later_seconds, _ = seconds(sampler.plan)
    bound = -(-int(lengths.sum()) // CAPACITY)
    epoch = axolotl_proxy()
    small = lengths[:20000]
    epoch(small, 0)  # numba compiles here, outside the timing
    theirs_seconds, batches = seconds(lambda: epoch(lengths.astype(np.int64), 1))
    theirs_rows = sum(len(b) for b in batches)
    theirs_samples = sum(len(r) for b in batches for r in b)
    return [
        ("BatchSampler: the epoch's plan (constructor)", f"{samples:,} lengths @ {CAPACITY}", plan_seconds,
         f"{ours_rows:,} rows, {ours_rows / bound:.4f} x the lower bound"),
        ("BatchSampler: the next epoch's plan (set_epoch, in the last plan's memory)", f"{samples:,} lengths @ {CAPACITY}",
         later_seconds, f"{later_seconds / plan_seconds:.2f} x the first epoch's plan"),
        ("BatchSampler: iterating the epoch (each step's lists made, dropped)", f"{step_count:,} steps x {MICRO_BATCH}",
         iterate_seconds, f"plan + iteration {plan_seconds + iterate_seconds:.3f} s"),
        ("BatchSampler: list() of the epoch (every list kept)", f"{step_count:,} steps x {MICRO_BATCH}", ours_seconds,
         f"plan + list {plan_seconds + ours_seconds:.3f} s"),
        ("axolotl sampler proxy (numba; every list kept)", f"{samples:,} lengths @ {CAPACITY}", theirs_seconds,
         f"{theirs_rows:,} rows, {theirs_rows / bound:.4f} x the lower bound, {samples - theirs_samples:,} samples "
         f"left out; {theirs_seconds / (plan_seconds + iterate_seconds):.0f} x plan + iteration, "
         f"{theirs_seconds / (plan_seconds + ours_seconds):.1f} x plan + list"),
    ]


def read_index(prefix):
    """Sizes and byte offsets of a Megatron .idx (MMIDIDX version 1)."""
    with open(prefix + ".idx", "rb") as f:
        head = f.read(9 + 8 + 1 + 8 + 8)
        count = int(np.frombuffer(head, np.uint64, 1, 18)[0])
        sizes = np.frombuffer(f.read(4 * count), np.int32)
        pointers = np.frombuffer(f.read(8 * count), np.int64)
    return sizes, pointers


def python_collator(tokens, pointers, itemsize, prompts, rows, lengths_of):
    """A packed micro-batch built in numpy, as a Python collator would: [B, C] int64 arrays."""
    input_ids = np.zeros((MICRO_BATCH, CAPACITY), np.int64)
    labels = np.full((MICRO_BATCH, CAPACITY), -100, np.int64)
    position_ids = np.zeros((MICRO_BATCH, CAPACITY), np.int64)
    sequence_ids = np.zeros((MICRO_BATCH, CAPACITY), np.int64)
    cu = [0]
    for r, row in enumerate(rows):
        at = 0
        for k, sample in enumerate(row):
            start = pointers[sample] // itemsize
            n = int(lengths_of[sample])
            piece = tokens[start:start + n]
            input_ids[r, at:at + n] = piece
            labels[r, at + max(1, int(prompts[sample])):at + n] = piece[max(1, int(prompts[sample])):]
            position_ids[r, at:at + n] = np.arange(n)
            sequence_ids[r, at:at + n] = k + 1
            at += n
            cu.append(r * CAPACITY + at)
        if at < CAPACITY:
            cu.append((r + 1) * CAPACITY)
    return input_ids, labels, position_ids, sequence_ids, np.array(cu, np.int32)


def loader_rows(repeat, threads):
    prefix = "data/alpaca/alpaca_llama"
    prompts_file = "data/alpaca/prompt_lengths.txt"
    paths = [prefix] * repeat
    prompts = np.tile(multipack.read_prompt_lengths(prompts_file), repeat)
    loader = multipack.Loader(paths, capacity=CAPACITY, micro_batch=MICRO_BATCH, world_size=1, rank=0,
                              prompt_lengths=prompts, dtype="int64", threads=threads, depth=8)
    tokens_seen = 0
    start = time.perf_counter()
    for batch in loader:
        tokens_seen += batch["input_ids"].size
    ours = time.perf_counter() - start
    steps = len(loader)
    loader.close()  # its workers would build the next epoch beside the baseline

    sizes, pointers = read_index(prefix)
    tokens = np.memmap(prefix + ".bin", np.uint16, "r")
    lengths_of = np.tile(sizes.astype(np.int64), repeat)
    all_pointers = np.tile(pointers, repeat)
    sampler = multipack.BatchSampler(lengths_of, CAPACITY, MICRO_BATCH, world_size=1, rank=0)
    start = time.perf_counter()
    built = 0
    for rows in sampler:
        out = python_collator(tokens, all_pointers, 2, prompts, rows, lengths_of)
        built += out[0].size
    theirs = time.perf_counter() - start
    assert built == tokens_seen and len(sampler) == steps, (built, tokens_seen)

    # Crossing into Python: the pool full of built batches, then each taken and dropped.
    crossing = multipack.Loader(paths, capacity=64, micro_batch=1, world_size=1, rank=0, threads=2, depth=4096,
                                overlong="truncate")
    it = iter(crossing)
    next(it)
    time.sleep(1.0)
    taken = 2000
    start = time.perf_counter()
    for _ in range(taken):
        next(it)
    per_batch = (time.perf_counter() - start) / taken
    del it
    return [
        (f"Loader, Python loop ({threads} threads)", f"{steps} x {MICRO_BATCH} x {CAPACITY} int64", ours,
         f"{tokens_seen / ours:.3g} tokens/s"),
        ("numpy collator, same batches, one thread", f"{steps} x {MICRO_BATCH} x {CAPACITY} int64", theirs,
         f"{built / theirs:.3g} tokens/s; {1e3 * theirs / steps:.2f} ms a batch ({theirs / ours:.1f} x the Loader)"),
        ("a built batch handed to Python (dict of 5 arrays)", f"{taken} batches", per_batch * taken,
         f"{1e6 * per_batch:.1f} us a batch"),
    ]


def boundary_rows(repeat, threads, epochs=4, step_seconds=0.002):
    """The trainer's waits over `epochs` epochs, a `step_seconds` step each batch: at the epoch
    boundaries (from the end of an epoch's last step to the next epoch's first batch: set_epoch,
    the iteration's start, the batch) and at every other step."""
    paths = ["data/alpaca/alpaca_llama"] * repeat

    def run(new_loader_each_epoch):
        loader = multipack.Loader(paths, capacity=CAPACITY, micro_batch=MICRO_BATCH, world_size=1, rank=0,
                                  dtype="int64", threads=threads, depth=8)
        boundary_waits, step_wait = [], 0.0
        stepped = time.perf_counter()
        for epoch in range(epochs):
            if new_loader_each_epoch:
                loader.close()  # the next iteration starts a C++ loader, as every epoch did before
            loader.set_epoch(epoch)
            first = True
            for batch in loader:
                waited = time.perf_counter() - stepped
                if first and epoch > 0:
                    boundary_waits.append(waited)
                elif not first:
                    step_wait = max(step_wait, waited)
                first = False
                del batch
                time.sleep(step_seconds)
                stepped = time.perf_counter()
        steps = len(loader)
        loader.close()
        return boundary_waits, step_wait, steps

    spanning, spanning_step, steps = run(False)
    restarted, restarted_step, _ = run(True)
    work = f"{epochs} epochs x {steps} steps of {MICRO_BATCH} x {CAPACITY}, a {1e3 * step_seconds:.0f} ms step"
    return [
        ("Loader across epochs (set_epoch, one C++ loader)", work, sum(spanning),
         f"the trainer waits {1e6 * max(spanning):.0f} us at most at {len(spanning)} boundaries; "
         f"{1e6 * spanning_step:.0f} us at most at any other step"),
        ("a new C++ loader each epoch (close() before set_epoch)", work, sum(restarted),
         f"{1e3 * max(restarted):.1f} ms at most a boundary ({1e3 * sum(restarted) / len(restarted):.1f} ms mean); "
         f"{1e6 * restarted_step:.0f} us at most at any other step"),
    ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    rows = loader_rows(args.repeat, args.threads) + boundary_rows(args.repeat, args.threads) + sampler_rows(args.samples)
    print("| what | work | seconds | figures |")
    print("|---|---|---:|---|")
    for what, work, s, figures in rows:
        print(f"| {what} | {work} | {s:.3f} | {figures} |")


if __name__ == "__main__":
    main()
