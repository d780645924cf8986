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
trained_in() { sed -n 's/^trained on \([0-9]*\) batches.*/\1/p' "$1"; }
"$trainer" >"$work/full.txt"
full=$(digest_of "$work/full.txt")
[[ -n $full ]] || { echo "no digest from the full run:"; cat "$work/full.txt"; exit 1; }
steps=$(sed -n 's/^epoch 0: \([0-9]*\) steps$/\1/p' "$work/full.txt")
total=$(trained_in "$work/full.txt")
[[ -n $steps && -n $total && $steps -gt 8 && $total -gt $((steps + 3)) ]] ||
  { echo "the full run's epoch 0 steps ('$steps') or batches ('$total') are missing:"; cat "$work/full.txt"; exit 1; }
for stop in 1 7 $((steps - 1)) $((steps + 3)); do
  rm -f "$work/ckpt"
  "$trainer" --checkpoint "$work/ckpt" --stop-after "$stop" >"$work/first.txt"
  "$trainer" --checkpoint "$work/ckpt" >"$work/second.txt"
  resumed=$(digest_of "$work/second.txt")
  [[ $resumed == "$full" ]] || { echo "stopped after $stop, resumed: digest $resumed, uninterrupted $full"; cat "$work/first.txt" "$work/second.txt"; exit 1; }
  # The digest is carried in the checkpoint, so a run that ignored it and trained from the
  # start would match too: the stop must have happened, and the resumed run trained the rest.
  grep -q "^stopped after $stop steps" "$work/first.txt" || { echo "did not stop after $stop:"; cat "$work/first.txt"; exit 1; }
  [[ $(trained_in "$work/second.txt") == $((total - stop)) ]] ||
    { echo "stopped after $stop of $total, the resumed run trained:"; cat "$work/second.txt"; exit 1; }
  echo "ok - stopped after $stop steps and resumed: $(head -1 "$work/second.txt"), digest $resumed"
done
# Under a launcher each rank keeps its own checkpoint (its digest is of its own batches; ranks
# writing one file raced at its rename).
rm -f "$work/ckpt" "$work/ckpt.rank1"
env WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 "$trainer" --checkpoint "$work/ckpt" --stop-after 3 >"$work/rank1.txt"
[[ -f $work/ckpt.rank1 && ! -e $work/ckpt ]] || { echo "rank 1 of 2 did not write ckpt.rank1 alone:"; ls "$work"; exit 1; }
echo "ok - rank 1 of 2 keeps its checkpoint in FILE.rank1"
# A step is a step of one world size's plan: resumed with another, refused (it resumed rank 0
# at a step of the other plan, or started over, silently).
env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 "$trainer" --checkpoint "$work/ckpt" --stop-after 3 >"$work/rank0.txt"
for env_of in "WORLD_SIZE=1 RANK=0 LOCAL_RANK=0" "WORLD_SIZE=4 RANK=1 LOCAL_RANK=1" "WORLD_SIZE=4 RANK=3 LOCAL_RANK=3"; do
  rc=0
  env $env_of "$trainer" --checkpoint "$work/ckpt" >"$work/other.txt" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] && grep -Eq "another world size than this run's|saved at a step of 2 ranks' plan" "$work/other.txt" ||
    { echo "a checkpoint of 2 ranks resumed as $env_of: status $rc"; cat "$work/other.txt"; exit 1; }
done
echo "ok - a checkpoint resumed with another world size: refused"

# Any PREFIX takes the mask beside it: PREFIX.prompt_lengths (what convert writes) as
# data/alpaca's prompt_lengths.txt, the same tokens with loss; none, more.
loss_tokens() { sed -n 's/.*batches (\([0-9]*\) tokens with loss).*/\1/p' "$1"; }
cp data/alpaca/alpaca_llama.bin data/alpaca/alpaca_llama.idx "$work/"
"$trainer" "$work/alpaca_llama" --epochs 1 >"$work/unmasked.txt"
cp data/alpaca/prompt_lengths.txt "$work/alpaca_llama.prompt_lengths"
"$trainer" "$work/alpaca_llama" --epochs 1 >"$work/masked.txt"
"$trainer" --epochs 1 >"$work/default.txt"
[[ -n $(loss_tokens "$work/masked.txt") && $(loss_tokens "$work/masked.txt") == $(loss_tokens "$work/default.txt") &&
   $(loss_tokens "$work/unmasked.txt") -gt $(loss_tokens "$work/masked.txt") ]] ||
  { echo "PREFIX.prompt_lengths not taken:"; cat "$work/unmasked.txt" "$work/masked.txt" "$work/default.txt"; exit 1; }
echo "ok - PREFIX.prompt_lengths is the mask: $(loss_tokens "$work/masked.txt") tokens with loss, $(loss_tokens "$work/unmasked.txt") without"
echo "trainer_loop resumes exactly ($steps steps an epoch)"
