"""multipack.pack: rows over the C++ result, every sample exactly once, the report, the errors."""

import gc

import numpy as np
import pytest

import multipack


def covered(packing, lengths):
    """Per sample, the tokens the rows hold of it, checking that no row is over capacity and
    that a sample's pieces tile [0, held) without a gap or an overlap."""
    offsets = packing.row_offsets
    pieces = packing.pieces
    capacity = packing.report["capacity"]
    assert offsets[0] == 0 and offsets[-1] == len(pieces) and np.all(np.diff(offsets.astype(np.int64)) >= 1)
    tokens = (pieces[:, 2].astype(np.int64) - pieces[:, 1])
    assert np.all(tokens > 0)
    row_tokens = np.add.reduceat(tokens, offsets[:-1].astype(np.int64)) if len(packing) else np.zeros(0)
    assert np.all(row_tokens <= capacity), "a row is over capacity"
    held = np.zeros(len(lengths), dtype=np.int64)
    np.add.at(held, pieces[:, 0].astype(np.int64), tokens)
    order = np.lexsort((pieces[:, 1], pieces[:, 0]))
    sample, begin, end = (pieces[order, k].astype(np.int64) for k in range(3))
    first = np.ones(len(sample), dtype=bool)
    first[1:] = sample[1:] != sample[:-1]
    assert np.all(begin[first] == 0), "a sample's first piece does not start at its token 0"
    assert np.all(begin[1:][~first[1:]] == end[:-1][~first[1:]]), "a sample's pieces leave a gap or overlap"
    return held


def rows_lower_bound(lengths, capacity):
    """Martello and Toth's L2 bound on rows, from its definition: for k = 1 and every length up to
    half a row, the samples over half a row each take a row, and those in [k, capacity / 2] fill
    what the ones of at most capacity - k leave before they need rows of their own."""
    lengths = lengths[lengths > 0].astype(np.int64)
    long = lengths[2 * lengths > capacity]
    bound = 0
    for k in [1] + np.unique(lengths[2 * lengths <= capacity]).tolist():
        room = int((capacity - long[long <= capacity - k]).sum())
        short = int(lengths[(lengths >= k) & (2 * lengths <= capacity)].sum())
        bound = max(bound, len(long) + max(0, -(-(short - room) // capacity)))
    return bound


@pytest.mark.parametrize("algorithm", ["exact-fit", "randomized-exact-fit", "best-fit-decreasing",
                                       "first-fit-decreasing", "next-fit"])
def test_every_sample_once_on_alpaca(lengths, algorithm):
    packing = multipack.pack(lengths, 2048, algorithm=algorithm, seed=3)
    held = covered(packing, lengths)
    assert np.array_equal(held, lengths), "a sample is missing, repeated or cut"
    r = packing.report
    assert r["rows"] == len(packing) and r["samples"] == len(lengths) and r["tokens"] == lengths.sum()
    assert r["packed_samples"] == np.count_nonzero(lengths) and r["dropped_samples"] == 0
    # No Alpaca sample is over 2048: none dropped, the bound is over the lengths themselves.
    assert r["lower_bound"] == rows_lower_bound(lengths, 2048) and r["rows"] >= r["lower_bound"]
    assert 0 < r["efficiency"] <= 1


def test_overlong_policies(lengths):
    capacity = 256
    over = lengths > capacity
    assert over.any(), "the Alpaca sample has samples over 256 tokens"
    dropped = multipack.pack(lengths, capacity, overlong="drop")
    held = covered(dropped, lengths)
    assert np.array_equal(held, np.where(over, 0, lengths))
    assert dropped.report["dropped_samples"] == over.sum()
    assert dropped.report["dropped_tokens"] == lengths[over].sum()

    truncated = multipack.pack(lengths, capacity, overlong="truncate")
    assert np.array_equal(covered(truncated, lengths), np.minimum(lengths, capacity))
    split = multipack.pack(lengths, capacity, overlong="split")
    assert np.array_equal(covered(split, lengths), lengths)
    assert split.report["split_samples"] == over.sum()

    with pytest.raises(multipack.SampleError, match="sample") as caught:
        multipack.pack(lengths, capacity, overlong="error")
    assert isinstance(caught.value, ValueError)


def test_rows_are_views_over_the_packing(lengths):
    packing = multipack.pack(lengths.astype(np.uint32), 4096)
    pieces, offsets = packing.pieces, packing.row_offsets
    assert pieces.dtype == np.uint32 and pieces.shape == (packing.report["pieces"], 3)
    assert offsets.dtype == np.uint64 and offsets.shape == (len(packing) + 1,)
    for array in (pieces, offsets):
        assert not array.flags.owndata and not array.flags.writeable
        with pytest.raises(ValueError):
            array[0] = 1
    # Twelve bytes a piece: the columns are strided views, not copies.
    assert pieces.strides == (12, 4)
    row = packing.row(3)
    assert np.shares_memory(row, pieces)
    assert np.array_equal(row, pieces[offsets[3]:offsets[4]])
    assert np.array_equal(packing.row(-1), pieces[offsets[-2]:])
    with pytest.raises(IndexError):
        packing.row(len(packing))
    # The arrays keep the C++ result alive.
    expected = pieces.copy()
    del packing, row
    gc.collect()
    assert np.array_equal(pieces, expected)


@pytest.mark.parametrize("convert", [lambda a: a.astype(np.int32), lambda a: a.astype(np.uint16),
                                     lambda a: a.astype(np.uint64), lambda a: list(map(int, a)),
                                     lambda a: tuple(a.astype(np.int16)), lambda a: a[::-1][::-1],
                                     # numpy makes this list float64: its integers are read exactly
                                     lambda a: [np.uint64(a[0])] + list(map(int, a[1:]))])
def test_any_integer_lengths_give_the_same_rows(lengths, convert):
    want = multipack.pack(lengths, 2048)
    got = multipack.pack(convert(lengths), 2048)
    assert np.array_equal(got.pieces, want.pieces) and np.array_equal(got.row_offsets, want.row_offsets)


def test_randomized_depends_on_seed_and_epoch_only(lengths):
    a = multipack.pack(lengths, 2048, algorithm="randomized-exact-fit", seed=1, epoch=0)
    b = multipack.pack(lengths, 2048, algorithm="randomized-exact-fit", seed=1, epoch=0)
    c = multipack.pack(lengths, 2048, algorithm="randomized-exact-fit", seed=1, epoch=1)
    assert np.array_equal(a.pieces, b.pieces)
    assert not np.array_equal(a.pieces, c.pieces)


def test_max_per_row(lengths):
    packing = multipack.pack(lengths, 4096, max_per_row=4)
    assert np.diff(packing.row_offsets.astype(np.int64)).max() <= 4
    assert np.array_equal(covered(packing, lengths), lengths)


def test_threads_give_the_same_rows(lengths):
    # Alpaca resampled to 100,000 samples: parts of 16,384 samples at least for the threads.
    many = np.random.default_rng(3).choice(lengths, 100_000).astype(np.uint32)
    for algorithm in ("exact-fit", "randomized-exact-fit"):
        one = multipack.pack(many, 2048, algorithm=algorithm, seed=2)
        for threads in (2, 4):
            got = multipack.pack(many, 2048, algorithm=algorithm, seed=2, threads=threads)
            assert np.array_equal(got.pieces, one.pieces) and np.array_equal(got.row_offsets, one.row_offsets)
            assert got.report == one.report


def test_an_object_array_of_integers_is_read_exactly():
    as_objects = np.array([5, 3, 7], dtype=object)  # as pandas gives an int column with None removed
    assert multipack.pack(as_objects, 16).pieces.tolist() == multipack.pack([5, 3, 7], 16).pieces.tolist()


def test_empty_and_zero_lengths():
    assert len(multipack.pack([], 16)) == 0
    packing = multipack.pack([0, 5, 0], 16)
    assert len(packing) == 1 and packing.report["empty_samples"] == 2
    assert packing.pieces.tolist() == [[1, 0, 5]]


@pytest.mark.parametrize("lengths, error, message", [
    ([3, -1], ValueError, "negative"),
    ([1.5, 2.0], TypeError, "integers"),
    ([True, False], TypeError, "integers"),
    (["3"], TypeError, "integers"),
    ([[1, 2], [3, 4]], ValueError, "one-dimensional"),
    # No sequence at all: the wrong type, named.
    ((n for n in [1, 2]), TypeError, "got generator \\(an iterator: make a list of it first\\)"),
    (None, TypeError, "got NoneType"),
    ("123", TypeError, "got str"),
    (7, TypeError, "got int"),
    (np.array([1.5, 2], dtype=object), TypeError, "integers"),
    ([2**40], ValueError, "sample 0"),
    # Integers that numpy makes float64 or object: read exactly, refused for their length.
    ([np.uint64(3), 2**63], ValueError, "sample 1 has 9223372036854775808 tokens"),
    ([2**64], ValueError, "sample 0 has length 18446744073709551616"),
    ([-1, 2**63], ValueError, "sample 0 has negative length -1"),
])
def test_bad_lengths_are_refused(lengths, error, message):
    with pytest.raises(error, match=message) as caught:
        multipack.pack(lengths, 16)
    assert error is TypeError or isinstance(caught.value, multipack.Error)  # except multipack.Error takes it


@pytest.mark.parametrize("options, error, message", [
    ({"capacity": 0}, ValueError, "capacity"),
    ({"capacity": 2**27}, ValueError, "capacity"),
    ({"capacity": -4}, ValueError, "capacity"),
    ({"capacity": 4.0}, TypeError, "capacity"),
    ({"algorithm": "best-fit"}, ValueError, "exact-fit"),
    ({"overlong": "wrap"}, ValueError, "truncate"),
    ({"max_per_row": True}, TypeError, "max_per_row"),
    ({"threads": 0}, ValueError, "threads = 0: must be at least 1"),
    ({"threads": 257}, ValueError, "at most 256"),  # the C++ library's check: the count reaches it
])
def test_bad_options_are_refused(lengths, options, error, message):
    arguments = {"capacity": 2048, **options}
    with pytest.raises(error, match=message) as caught:
        multipack.pack(lengths, **arguments)
    assert error is TypeError or isinstance(caught.value, multipack.Error)  # the package's checks too


def test_lengths_written_by_another_thread_while_packing_cannot_corrupt_memory(lengths):
    # The GIL is released while C++ packs. A uint32 array was read in place, twice (count, then
    # bucket): another thread's writes between the passes sent the second past its buffer, a
    # segfault within a few calls. The lengths are copied first now: some packing comes back.
    import threading

    changing = np.ones(1 << 20, dtype=np.uint32)
    stop = threading.Event()

    def writer():
        value = 1
        while not stop.is_set():
            value = 3 - value
            changing.fill(value)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(30):
            packing = multipack.pack(changing, 4096)
            assert packing.report["samples"] == changing.size
    finally:
        stop.set()
        thread.join()
    # An unaligned view (a uint32 array at an odd byte offset) packs as its aligned copy does.
    raw = np.zeros(4 * len(lengths) + 1, dtype=np.uint8)
    unaligned = raw[1:].view(np.uint32)
    unaligned[:] = lengths
    assert np.array_equal(multipack.pack(unaligned, 4096).pieces, multipack.pack(np.array(lengths, np.uint32), 4096).pieces)
