#!/usr/bin/env bash
# multipack-bench with several inputs (--data as Megatron-LM's --data-path): data/alpaca split
# into 7 shards must give, through a pattern, a directory or the prefixes listed, exactly the
# rows, plan, report and batches of the single file; a weighted blend takes w x N
# samples from each corpus; bad --data gives one-line errors. `load --pipeline views` gives
# the batches of the plan pipeline, byte for byte.
#
#   bash tests/command/inputs_command_test.sh <multipack-bench> <source-dir> <scratch-dir>
#
# Each check prints one line; the first failure prints FAIL and exits non-zero. Needs bash and
# python3 (standard library only).
set -euo pipefail

source "$(dirname "$0")/harness.sh" pack "$@"
prompts=$source_dir/data/alpaca/prompt_lengths.txt

# ---------------------------------------------------------------------------------------------
# The shards: samples [k N / 7, (k + 1) N / 7) of alpaca_llama as JSON Lines with their prompt
# lengths, read from the .bin/.idx with struct alone, then converted by the command itself.
shards=$work/shards
mkdir -p "$shards"
"$python" - "$prefix" "$prompts" "$shards/shard" 7 <<'PY'
import json, struct, sys
prefix, prompts_file, out, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with open(prefix + '.idx', 'rb') as f:
    idx = f.read()
count, = struct.unpack_from('<Q', idx, 18)
sizes = struct.unpack_from(f'<{count}i', idx, 34)
pointers = struct.unpack_from(f'<{count}q', idx, 34 + 4 * count)
with open(prefix + '.bin', 'rb') as f:
    data = f.read()
with open(prompts_file) as f:
    prompts = [int(x) for x in f.read().split()]
for k in range(n):
    with open(f'{out}_{k}.jsonl', 'w') as f:
        for i in range(k * count // n, (k + 1) * count // n):
            ids = list(struct.unpack_from(f'<{sizes[i]}H', data, pointers[i]))
            f.write(json.dumps({'input_ids': ids, 'prompt_length': prompts[i]}) + '\n')
PY
shard_prefixes=()
shard_prompts=()
for k in 0 1 2 3 4 5 6; do
  "$bench" convert --input "$shards/shard_$k.jsonl" --output "$shards/shard_$k" --dtype uint16 >/dev/null 2>"$work/err" ||
    fail "convert shard $k: $(cat "$work/err")"
  rm "$shards/shard_$k.jsonl"
  shard_prefixes+=("$shards/shard_$k")
  shard_prompts+=("$shards/shard_$k.prompt_lengths")
done
ok "data/alpaca split into 7 shards (convert, --dtype uint16, prompt lengths)"

# same_report A B: the two --json reports agree on every field but the input, its cost and
# the times and memory of the run.
same_report() {
  "$python" - "$1" "$2" <<'PY' || fail "the reports differ: $1 $2"
import json, sys
from dump_format import die
a, b = (json.load(open(p)) for p in sys.argv[1:3])
skip = {'input', 'open_seconds', 'open_rss_bytes', 'corpora', 'prompt_lengths', 'pipeline'}
varying = ('seconds', 'rss', 'peak', 'per_second', 'over_', 'fraction', 'busy', 'ready', 'memcpy')
for k in a:
    if k in skip or any(v in k for v in varying):
        continue
    if a.get(k) != b.get(k):
        die(f'{k}: {a.get(k)!r} vs {b.get(k)!r}')
PY
}

# ---------------------------------------------------------------------------------------------
# 1. pack: the pattern, the directory and the 7 prefixes listed give the single file's rows.
"$bench" pack --data "$prefix" --capacity 2048 --json --dump-rows "$work/rows-one.txt" >"$work/one.json"
for form in pattern directory listed; do
  case $form in
    pattern) data=("$shards/shard_*") ;;
    directory) data=("$shards") ;;
    listed) data=("${shard_prefixes[@]}") ;;
  esac
  expect_success --data "${data[@]}" --capacity 2048 --json --dump-rows "$work/rows-$form.txt"
  cp "$work/out" "$work/$form.json"
  cmp -s "$work/rows-one.txt" "$work/rows-$form.txt" || fail "pack --data ${data[*]}: other rows than the single file"
  same_report "$work/one.json" "$work/$form.json"
  "$python" - "$work/$form.json" "$form" <<'PY' || fail "pack --data ${data[*]}: corpora"
import json, sys
from dump_format import die
r, form = json.load(open(sys.argv[1])), sys.argv[2]
corpora = r['corpora']
want = 7 if form == 'listed' else 1
if len(corpora) != want or any(c['weight'] is not None for c in corpora):
    die(f'{len(corpora)} corpora, expected {want} without weights: {corpora}')
if sum(c['samples'] for c in corpora) != r['samples'] or sum(c['tokens'] for c in corpora) != r['tokens']:
    die(f'the corpora do not add up to the report: {corpora}')
if form == 'listed' and [c['samples'] for c in corpora] != [(k + 1) * 5000 // 7 - k * 5000 // 7 for k in range(7)]:
    die(f'samples per shard {[c["samples"] for c in corpora]}')
if not (r['open_seconds'] >= 0 and r['open_rss_bytes'] > 0):
    die(f'open_seconds {r["open_seconds"]}, open_rss_bytes {r["open_rss_bytes"]}')
PY
  ok "pack --data, 7 shards ($form): the single file's rows and report; corpora add up"
done

# ---------------------------------------------------------------------------------------------
# 2. plan: the same plan.
plan_flags=(--world-size 3 --micro-batch 4 --capacity 2048 --seed 5 --epoch 2 --algorithm randomized-exact-fit)
"$bench" plan --data "$prefix" "${plan_flags[@]}" --json --dump-plan "$work/plan-one.txt" >"$work/plan-one.json"
"$bench" plan --data "$shards/shard_*" "${plan_flags[@]}" --json --dump-plan "$work/plan-shards.txt" >"$work/plan-shards.json"
cmp -s "$work/plan-one.txt" "$work/plan-shards.txt" || fail "plan --data shard_*: another plan than the single file"
same_report "$work/plan-one.json" "$work/plan-shards.json"
ok "plan --data shard_*: the single file's plan and report"

# ---------------------------------------------------------------------------------------------
# 3. load: the same batches, with one prompt-length file a shard; then the views pipeline.
load_flags=(--world-size 2 --rank 1 --micro-batch 4 --capacity 2048 --memcpy-buffer-mib 16 --dump-count 6)
"$bench" load --data "$prefix" --prompt-lengths "$prompts" "${load_flags[@]}" --dump-batches "$work/b-one" --json \
  >"$work/load-one.json" 2>"$work/err" || fail "load --data $prefix: $(cat "$work/err")"
"$bench" load --data "$shards/shard_*" --prompt-lengths "${shard_prompts[@]}" "${load_flags[@]}" \
  --dump-batches "$work/b-shards" --json >"$work/load-shards.json" 2>"$work/err" || fail "load --data shard_*: $(cat "$work/err")"
[[ $(find "$work/b-one" -name '*.npy' | wc -l) -eq 36 ]] || fail "load: expected 6 batches of 6 arrays in $work/b-one"
diff -r "$work/b-one" "$work/b-shards" >/dev/null || fail "load --data shard_*: other batches than the single file"
same_report "$work/load-one.json" "$work/load-shards.json"
ok "load --data shard_* --prompt-lengths (one a shard): the single file's 6 batches, byte for byte, and report"
# Files named PREFIX.prompt_lengths go with their shard in any order: a shell pattern lists
# shard_10 before shard_2, where a directory's or a pattern's shards are in natural order.
reversed=()
for ((k = ${#shard_prompts[@]} - 1; k >= 0; k--)); do reversed+=("${shard_prompts[k]}"); done
"$bench" load --data "$shards" --prompt-lengths "${reversed[@]}" "${load_flags[@]}" \
  --dump-batches "$work/b-reversed" --json >/dev/null 2>"$work/err" || fail "load --prompt-lengths reversed: $(cat "$work/err")"
diff -r "$work/b-one" "$work/b-reversed" >/dev/null || fail "load --prompt-lengths reversed: other batches than in order"
ok "load --prompt-lengths named for their shards, given in reverse: each with its shard, the same 6 batches"

# The views pipeline: the same batches as the plan pipeline, over two epochs from a start step,
# on the shards; both report their memory before the first batch.
views_flags=(--data "$shards/shard_*" --prompt-lengths "${shard_prompts[@]}" --world-size 3 --rank 2 --micro-batch 4
  --capacity 2048 --start-step 3 --epochs 2 --algorithm randomized-exact-fit --seed 3 --threads 2
  --memcpy-buffer-mib 16 --dump-count 1000 --json)
for pipeline in plan views; do
  "$bench" load "${views_flags[@]}" --pipeline "$pipeline" --dump-batches "$work/p-$pipeline" >"$work/p-$pipeline.json" \
    2>"$work/err" || fail "load --pipeline $pipeline: $(cat "$work/err")"
  "$python" - "$work/p-$pipeline.json" "$pipeline" <<'PY' || fail "load --pipeline $pipeline: the report"
import json, sys
from dump_format import die
r = json.load(open(sys.argv[1]))
if r['pipeline'] != sys.argv[2] or not r['rss_before_first_batch_bytes'] > 0 or r['dumped_batches'] != r['batches'] \
        or not r['batches'] > 0:
    die(f'pipeline {r["pipeline"]}, rss_before_first_batch_bytes {r["rss_before_first_batch_bytes"]}, '
        f'{r["dumped_batches"]} of {r["batches"]} batches dumped')
PY
done
diff -r "$work/p-plan" "$work/p-views" >/dev/null || fail "load --pipeline views: other batches than --pipeline plan"
same_report "$work/p-plan.json" "$work/p-views.json"
ok "load --pipeline views: every batch of 2 epochs from step 3 byte for byte as --pipeline plan; the same counts"

# ---------------------------------------------------------------------------------------------
# 4. A weighted blend: w x N samples from each corpus, adding up to N (given or the corpora's sum).
for n in 0 3001; do
  blend=(--data 0.7 "$prefix" 0.3 "$shards/shard_*")
  [[ $n -eq 0 ]] || blend+=(--blend-samples "$n")
  expect_success "${blend[@]}" --json
  "$python" - "$work/out" "$n" <<'PY' || fail "pack ${blend[*]}: the corpora"
import json, sys
from dump_format import die
r, n = json.load(open(sys.argv[1])), int(sys.argv[2])
n = n or 10000
corpora = r['corpora']
if [c['weight'] for c in corpora] != [0.7, 0.3]:
    die(f'weights {[c["weight"] for c in corpora]}')
# w x N rounded so that the corpora's add up to N: the first corpus's share rounded (half up),
# the second the rest.
first = int(0.7 * n + 0.5)
for c, w, want in zip(corpora, (0.7, 0.3), (first, n - first)):
    if c['taken'] != want or c['samples'] != c['taken'] or c['available'] != 5000:
        die(f'corpus {c}: expected {want} samples (of {w} x {n}) taken of 5000')
    if c['whole_passes'] * 5000 + c['subset'] != c['taken']:
        die(f'corpus {c}: whole passes and subset do not make what was taken')
if r['samples'] != sum(c['taken'] for c in corpora) or r['tokens'] != sum(c['tokens'] for c in corpora):
    die(f'samples {r["samples"]}, tokens {r["tokens"]}: not the corpora summed')
PY
  ok "pack --data 0.7 alpaca 0.3 shard_* --blend-samples $n (0: the corpora's sum): w x N samples a corpus, N in all"
done
"$bench" plan --data 0.5 "$prefix" 0.5 "$shards" --world-size 2 --micro-batch 2 --epoch 1 --dump-plan "$work/b1.txt" >/dev/null
"$bench" plan --data 0.5 "$prefix" 0.5 "$shards" --world-size 2 --micro-batch 2 --epoch 1 --dump-plan "$work/b2.txt" >/dev/null
"$bench" plan --data 0.5 "$prefix" 0.5 "$shards" --world-size 2 --micro-batch 2 --epoch 2 --dump-plan "$work/b3.txt" >/dev/null
cmp -s "$work/b1.txt" "$work/b2.txt" || fail "plan of a blend: two runs, two plans"
! cmp -s "$work/b1.txt" "$work/b3.txt" || fail "plan of a blend: epochs 1 and 2 have the same plan"
ok "plan of a blend: the same plan twice, another for another epoch"

# ---------------------------------------------------------------------------------------------
# 5. Bad input: one-line errors.
expect_error "alternate" --data 0.7 "$prefix" 0.3
expect_error "above 0" --data 0 "$prefix"
expect_error "above 0" --data -1 "$prefix"
expect_error "above 0" --data inf "$prefix"
expect_error "'$shards/shard_1'" --data 0.5 "$prefix" "$shards/shard_1" "$shards/shard_2"
expect_error "$shards/nothing_*" --data "$prefix" "$shards/nothing_*"
expect_error "$work/missing" --data 1 "$work/missing"
expect_error "--blend-samples" --data "$prefix" --blend-samples 10
expect_error "--blend-samples" --lengths "$lengths_txt" --blend-samples 10
subcommand=load
expect_error "not supported yet" --data 1 "$prefix" 1 "$shards" --prompt-lengths "$prompts"
expect_error "not supported yet" --data 1 "$prefix" 1 "$shards" --loss-mask "$prefix"
expect_error "3 files for 8 prefixes" --data "$prefix" "$shards" --prompt-lengths "$prompts" "$prompts" "$prompts"
expect_error "$shards/shard_1.prompt_lengths" --data "$shards/shard_0" "$shards/shard_3" \
  --prompt-lengths "$shards/shard_0.prompt_lengths" "$shards/shard_1.prompt_lengths"
# Among files not named for the shards, one named for another shard than the one at its place.
copies=()
for k in "${!shard_prompts[@]}"; do cp "${shard_prompts[k]}" "$work/copy_$k"; copies+=("$work/copy_$k"); done
expect_error "shard_1.prompt_lengths is named for prefix 2" --data "$shards" \
  --prompt-lengths "${shard_prompts[1]}" "${copies[@]:1}"
expect_error "--epochs" --data 1 "$prefix" 1 "$shards" --epochs 2
expect_error "--pipeline" --pipeline bogus
expect_error "--pipeline" --pipeline views --device

rm -rf "$work"
echo "all inputs command checks passed"
