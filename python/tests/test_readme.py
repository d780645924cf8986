"""The README's Python blocks: each compiles, and each complete one runs from the repository root.

A block whose first line starts with "# In axolotl's" shows lines for another project's code
(its names are that project's): it is only compiled."""

import os
import re

import pytest

from conftest import SOURCE


def python_blocks():
    text = (SOURCE / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_readme_has_python_blocks():
    assert len(python_blocks()) >= 4


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_block(index, monkeypatch):
    block = python_blocks()[index]
    code = compile(block, f"README.md python block {index}", "exec")
    if block.startswith("# In axolotl's"):
        return
    monkeypatch.chdir(SOURCE)
    for variable in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)
    exec(code, {"__name__": f"readme_block_{index}"})
