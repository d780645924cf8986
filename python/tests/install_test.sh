#!/usr/bin/env bash
# The README's way to use the module from a virtualenv: a venv that sees Debian's numpy and
# torch, `cmake --install` of the build into it, and `import multipack` from the venv's
# interpreter alone (no PYTHONPATH), packing and loading the repository's data.
# Usage: install_test.sh CMAKE BUILD_DIR PYTHON WORK_DIR SOURCE_DIR
set -euo pipefail
cmake=$1 build=$2 python=$3 work=$4 source=$5
rm -rf "$work"
"$python" -m venv --without-pip --system-site-packages "$work/venv"
"$cmake" --install "$build" --prefix "$work/venv" >/dev/null
cd "$work"  # not the source tree: nothing imports from python/ by accident
env -u PYTHONPATH "$work/venv/bin/python" - "$source/data/alpaca/alpaca_llama" <<'PY'
import sys
import multipack

assert multipack.__file__.startswith(sys.prefix), f"imported {multipack.__file__}, not the venv's"
packing = multipack.pack([5, 3, 8, 1], 8)
assert packing.report["rows"] == 3 and packing.report["lower_bound"] == 3, packing.report
batch = next(iter(multipack.Loader(sys.argv[1], capacity=1024, micro_batch=2, world_size=1, rank=0)))
assert batch["input_ids"].shape == (2, 1024)
print("installed module imported from", multipack.__file__)
PY
