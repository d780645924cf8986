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
