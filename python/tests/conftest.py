"""What every Python test shares: the repository's real Alpaca sample, multipack-bench, thread counts."""

import os
import pathlib
import subprocess
import time

import numpy as np
import pytest

SOURCE = pathlib.Path(os.environ.get("MULTIPACK_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
ALPACA = SOURCE / "data" / "alpaca"
PREFIX = ALPACA / "alpaca_llama"

# Every option the sampler's and the loader's plans are made with, and another value for each.
FIXED_OPTIONS = {"world_size": 2, "rank": 1, "micro_batch": 3, "capacity": 1024, "seed": 8, "max_per_row": 4,
                 "pack_threads": 2, "algorithm": "next-fit", "overlong": "truncate", "remainder": "drop",
                 "balance": False}


@pytest.fixture(scope="session")
def prefix() -> str:
    return str(PREFIX)


@pytest.fixture(scope="session")
def lengths() -> np.ndarray:
    """The 5,000 real Alpaca lengths, as lengths.txt lists them."""
    return np.loadtxt(ALPACA / "lengths.txt", dtype=np.int64)


@pytest.fixture(scope="session")
def prompt_lengths_file() -> str:
    return str(ALPACA / "prompt_lengths.txt")


@pytest.fixture(scope="session")
def bench() -> str:
    """multipack-bench of the same build, for equivalence with the C++ command."""
    path = os.environ.get("MULTIPACK_BENCH")
    if not path or not os.path.exists(path):
        pytest.skip("MULTIPACK_BENCH is not set: multipack-bench is not built")
    return path


def run_bench(bench: str, *args: str) -> str:
    done = subprocess.run([bench, *args], capture_output=True, text=True)
    assert done.returncode == 0, f"multipack-bench {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def read_plan_dump(path) -> dict:
    """multipack-bench plan --dump-plan: {(step, rank): [each row's sample indices]} (a whole
    sample is written as its index, a piece of one as sample:begin:end)."""
    steps: dict = {}
    for line in open(path):
        fields = line.split()
        if not fields or not fields[0].isdigit():
            continue
        step, rank = int(fields[1]), int(fields[2])
        steps.setdefault((step, rank), []).append([int(p.split(":")[0]) for p in fields[4:]])
    return steps


def _thread_names() -> list:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:  # the thread ended since the listing
            pass
    return names


def multipack_threads(expected: int) -> int:
    """multipack's threads in this process (C++ threads, which threading does not see; named
    multipack-batch, multipack-plan and multipack-pack), once there are `expected` of them
    (10 s at most). Only multipack's are counted: the threads of torch, of OpenBLAS or of an
    earlier test's library do not move the count. A thread that was just joined is listed
    until the kernel reaps it, after the join returned (seen under AddressSanitizer): a count
    that stays wrong is a leak, one that settles is not."""
    deadline = time.monotonic() + 10
    count = sum(name.startswith("multipack-") for name in _thread_names())
    while count != expected and time.monotonic() < deadline:
        time.sleep(0.01)
        count = sum(name.startswith("multipack-") for name in _thread_names())
    return count
