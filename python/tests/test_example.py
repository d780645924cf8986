"""examples/python/hf_trainer_sampler.py runs as the README says, and its loss falls."""

import os
import re
import subprocess
import sys

from conftest import SOURCE


def test_the_example_trains():
    done = subprocess.run([sys.executable, str(SOURCE / "examples" / "python" / "hf_trainer_sampler.py"), "--steps",
                           "8"], capture_output=True, text=True, cwd=SOURCE, env=os.environ, timeout=300)
    assert done.returncode == 0, done.stderr
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", done.stdout)]
    assert len(losses) == 8, done.stdout
    assert losses[-1] < losses[0] - 0.1, f"the loss did not fall: {losses}"
    assert "trained 8 steps" in done.stdout


def test_the_example_takes_the_mask_beside_any_dataset(tmp_path):
    # Another dataset than Alpaca: it failed on Alpaca's prompt lengths (5,000 of them), and
    # took no PREFIX.prompt_lengths (what multipack-bench convert writes) without being told.
    import numpy as np
    from test_loader import write_megatron

    rng = np.random.default_rng(3)
    prefix = tmp_path / "small"
    write_megatron(str(prefix), [rng.integers(1, 1000, size=int(n)) for n in rng.integers(30, 200, size=60)], np.int32)

    def first_loss_tokens():
        done = subprocess.run([sys.executable, str(SOURCE / "examples" / "python" / "hf_trainer_sampler.py"),
                               str(prefix), "--steps", "2"], capture_output=True, text=True, cwd=SOURCE,
                              env=os.environ, timeout=300)
        assert done.returncode == 0, done.stderr
        return int(re.findall(r"\((\d+) loss tokens\)", done.stdout)[0])

    every_token = first_loss_tokens()  # no mask beside it: every token but each piece's first
    (tmp_path / "small.prompt_lengths").write_text("10\n" * 60)
    assert first_loss_tokens() < every_token  # the same first batch, its prompts masked
