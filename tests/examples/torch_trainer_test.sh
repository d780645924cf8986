#!/usr/bin/env bash
# examples/torch_trainer as a trainer author runs it: with no arguments, from the project
# root, it trains and the loss falls (the mean of the last five steps at least one nat under
# the first five's); stopped after K steps and resumed from its checkpoint (model, optimizer,
# position in the plan), it prints exactly the losses of a run that never stopped.
# Usage: torch_trainer_test.sh TORCH_TRAINER SOURCE_DIR WORKDIR [RESUME_STEPS]
# RESUME_STEPS (12 by default, at least 2): the length of the stopped-and-resumed runs, which
# stop after 1 and after RESUME_STEPS - 1 steps. The sanitized build gives 4: each step takes
# seconds under AddressSanitizer, and the default run still trains its 30 steps.
set -euo pipefail
trainer=$1 source=$2 work=$3 resume_steps=${4:-12}
rm -rf "$work" && mkdir -p "$work"
cd "$source"  # the example's defaults are relative to the project root
losses() { sed -n 's/^epoch [0-9]* step [0-9]*: loss \([0-9.]*\) over .*/\1/p' "$1"; }

"$trainer" >"$work/default.txt"
tail -1 "$work/default.txt"
losses "$work/default.txt" >"$work/default.losses"
steps=$(wc -l <"$work/default.losses")
[[ $steps -ge 10 ]] || { echo "FAIL: $steps steps printed"; cat "$work/default.txt"; exit 1; }
python3 - "$work/default.losses" <<'PY'
import sys
losses = [float(x) for x in open(sys.argv[1])]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print('loss: %.3f over the first five steps, %.3f over the last five (%d steps)' % (first, last, len(losses)))
if not last < first - 1.0:
    sys.exit('FAIL: the loss did not fall by a nat')
PY

"$trainer" --steps "$resume_steps" >"$work/full.txt"
# Two runs that print no loss would compare equal: the full run has its losses, and the stopped
# run's first part its own.
[[ $(losses "$work/full.txt" | wc -l) -eq $resume_steps ]] ||
  { echo "FAIL: --steps $resume_steps printed $(losses "$work/full.txt" | wc -l) losses"; cat "$work/full.txt"; exit 1; }
for stop in 1 $((resume_steps - 1)); do
  rm -rf "$work/checkpoint"
  "$trainer" --steps "$resume_steps" --checkpoint "$work/checkpoint" --stop-after "$stop" >"$work/first.txt"
  "$trainer" --steps "$resume_steps" --checkpoint "$work/checkpoint" >"$work/second.txt"
  [[ $(losses "$work/first.txt" | wc -l) -eq $stop ]] ||
    { echo "FAIL: stopped after $stop steps, the first run printed:"; cat "$work/first.txt"; exit 1; }
  if ! diff <(grep '^epoch' "$work/full.txt") <(grep -h '^epoch' "$work/first.txt" "$work/second.txt") >"$work/diff.txt"; then
    echo "FAIL: stopped after $stop steps and resumed, the losses differ from an uninterrupted run:"
    cat "$work/diff.txt"
    exit 1
  fi
  echo "ok - stopped after $stop steps and resumed: $(head -1 "$work/second.txt"); the same $resume_steps losses"
done

# The checkpoint is at a step of one world size's plan: another world size is refused, not
# resumed at a step of another plan (nor, past that plan's end, looped over forever).
rc=0
env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 "$trainer" --steps "$resume_steps" --checkpoint "$work/checkpoint" \
  >"$work/other_world.txt" 2>&1 || rc=$?
[[ $rc -eq 1 ]] && grep -q "saved at a step of 1 ranks' plan; this run has 2" "$work/other_world.txt" ||
  { echo "FAIL: a checkpoint of 1 rank resumed by 2: status $rc"; cat "$work/other_world.txt"; exit 1; }
echo "ok - a checkpoint resumed with another world size: refused, naming both"
