"""torch is optional: without it the sampler is a plain iterable and the loader gives numpy arrays."""

import os
import subprocess
import sys

from conftest import PREFIX


def test_the_module_works_where_torch_cannot_be_imported():
    program = f"""
import sys
sys.modules["torch"] = None          # import torch now raises ImportError
import multipack
sampler = multipack.BatchSampler([5, 3, 8, 1], 8, world_size=1, rank=0)
assert sorted(i for step in sampler for row in step for i in row) == [0, 1, 2, 3]
assert len(sampler) == 3
batch = next(iter(multipack.Loader({str(PREFIX)!r}, capacity=512, world_size=1, rank=0)))
assert type(batch["input_ids"]).__module__ == "numpy"
try:
    multipack.Loader({str(PREFIX)!r}, world_size=1, rank=0, as_torch=True)
except ImportError as e:
    assert "torch" in str(e)
else:
    raise AssertionError("as_torch=True without torch did not raise")
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=os.environ)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
