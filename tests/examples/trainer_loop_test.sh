#!/usr/bin/env bash
# examples/trainer_loop as a trainer uses it: a run stopped after K steps and resumed from its
# checkpoint trains on exactly the batches of a run that never stopped (same digest), for
# stops inside the first epoch, at its boundary region and inside the second.
# Usage: trainer_loop_test.sh TRAINER_LOOP SOURCE_DIR WORKDIR
set -euo pipefail
trainer=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cd "$source"  # the example's defaults are relative to the project root
digest_of() { sed -n 's/.*digest \([0-9a-f]*\)$/\1/p' "$1"; }
"$trainer" >"$work/full.txt"
full=$(digest_of "$work/full.txt")
[[ -n $full ]] || { echo "no digest from the full run:"; cat "$work/full.txt"; exit 1; }
steps=$(sed -n 's/^epoch 0: \([0-9]*\) steps$/\1/p' "$work/full.txt")
for stop in 1 7 $((steps - 1)) $((steps + 3)); do
  rm -f "$work/ckpt"
  "$trainer" --checkpoint "$work/ckpt" --stop-after "$stop" >"$work/first.txt"
  "$trainer" --checkpoint "$work/ckpt" >"$work/second.txt"
  resumed=$(digest_of "$work/second.txt")
  [[ $resumed == "$full" ]] || { echo "stopped after $stop, resumed: digest $resumed, uninterrupted $full"; cat "$work/first.txt" "$work/second.txt"; exit 1; }
  echo "ok - stopped after $stop steps and resumed: $(head -1 "$work/second.txt"), digest $resumed"
done
echo "trainer_loop resumes exactly ($steps steps an epoch)"
