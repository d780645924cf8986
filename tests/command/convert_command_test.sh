#!/usr/bin/env bash
# multipack-bench convert, the way a user sees it: the Alpaca samples written as JSON Lines
# (with prompt lengths, with labels, with tokens only) come back as the same .bin and .idx
# byte for byte (uint16, as the original), with the prompt lengths or the token mask their
# loss-mask companion describes, and load as a dataset; bad lines are one-line errors that
# name the line and leave no output behind; a companion that cannot be written keeps the
# earlier outputs, and one of another kind is removed.
#
#   bash tests/command/convert_command_test.sh <multipack-bench> <source-dir> <scratch-dir>
set -euo pipefail

source "$(dirname "$0")/harness.sh" convert "$@"
prompts=$source_dir/data/alpaca/prompt_lengths.txt

# The checker: python3, standard library only. Reads Megatron's format by itself.
cat >"$work/check.py" <<'PY'
import json, struct, sys
from dump_format import die

def read_index(prefix):
    idx = open(prefix + '.idx', 'rb').read()
    assert idx[:9] == b'MMIDIDX\x00\x00', prefix
    dtype = idx[17]
    n, d = struct.unpack_from('<QQ', idx, 18)
    sizes = struct.unpack_from('<%di' % n, idx, 34)
    pointers = struct.unpack_from('<%dq' % n, idx, 34 + 4 * n)
    width = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2}[dtype]
    code = {1: 'B', 2: 'b', 3: 'h', 4: 'i', 5: 'q', 8: 'H'}[dtype]
    binary = open(prefix + '.bin', 'rb').read()
    return [list(struct.unpack_from('<%d%s' % (s, code), binary, p)) for s, p in zip(sizes, pointers)]

def read_prompts(path):
    raw = open(path, 'rb').read()
    if raw[:8] == b'MPPROMPT':
        n = struct.unpack_from('<Q', raw, 16)[0]
        if len(raw) != 24 + 4 * n: die('%s: %d bytes for %d prompt lengths' % (path, len(raw), n))
        return list(struct.unpack_from('<%dI' % n, raw, 24))
    return [int(x) for x in raw.split()]

what = sys.argv[1]
if what == 'write':  # write OUT PREFIX PROMPTS KIND: the samples as JSON Lines
    out, prefix, prompts, kind = sys.argv[2:6]
    samples, lengths = read_index(prefix), read_prompts(prompts)
    with open(out, 'w') as f:
        for i, (tokens, p) in enumerate(zip(samples, lengths)):
            record = {'input_ids': tokens}
            if kind == 'prompt': record['prompt_length'] = p
            if kind == 'labels': record['labels'] = [-100] * p + tokens[p:]
            f.write(json.dumps(record) + '\n')
            if i % 1000 == 999: f.write('\n')  # blank lines are skipped
elif what == 'mask':  # mask OUT PROMPTS: the token mask says prompt tokens carry no loss
    out, prompts = sys.argv[2:4]
    mask, lengths = read_index(out + '.loss_mask'), read_prompts(prompts)
    tokens = read_index(out)
    if len(mask) != len(lengths): die('%d mask samples, %d prompt lengths' % (len(mask), len(lengths)))
    for i, (m, p, t) in enumerate(zip(mask, lengths, tokens)):
        if m != [0] * p + [1] * (len(t) - p): die('sample %d: mask %r, prompt length %d' % (i, m[:p + 2], p))
elif what == 'prompts':  # prompts FILE PROMPTS: the binary companion holds the text's values
    got, want = read_prompts(sys.argv[2]), read_prompts(sys.argv[3])
    if got != want: die('prompt lengths differ')
elif what == 'report':  # report JSON SAMPLES TOKENS KIND
    r = json.load(open(sys.argv[2]))
    if r['samples'] != int(sys.argv[3]) or r['tokens'] != int(sys.argv[4]) or r['loss_mask'] != sys.argv[5]:
        die('report %r' % r)
    if r['blank_lines'] != 5: die('blank lines: %r' % r['blank_lines'])
    if r['removed'] != []: die('removed: %r' % r['removed'])
elif what == 'removed':  # removed JSON FILES...: the report names the files removed
    r = json.load(open(sys.argv[2]))
    if r['removed'] != sys.argv[3:]: die('removed %r, expected %r' % (r['removed'], sys.argv[3:]))
PY

tokens_total=$(awk '{ s += $1 } END { print s }' "$lengths_txt")
samples_total=$(wc -l <"$lengths_txt")

for kind in prompt labels none; do
  "$python" "$work/check.py" write "$work/$kind.jsonl" "$prefix" "$prompts" "$kind"
  expect_success --input "$work/$kind.jsonl" --output "$work/out_$kind" --dtype uint16 --json
  mask_name=$([[ $kind == prompt ]] && echo "prompt lengths" || ([[ $kind == labels ]] && echo labels || echo "no loss mask"))
  "$python" "$work/check.py" report "$work/out" "$samples_total" "$tokens_total" "$mask_name" || fail "$kind: report"
  cmp "$work/out_$kind.bin" "$prefix.bin" || fail "$kind: .bin differs from the original"
  cmp "$work/out_$kind.idx" "$prefix.idx" || fail "$kind: .idx differs from the original"
  case $kind in
    prompt) "$python" "$work/check.py" prompts "$work/out_$kind.prompt_lengths" "$prompts" || fail "prompt lengths"
            [[ ! -e $work/out_$kind.loss_mask.idx ]] || fail "prompt: a token mask was written too" ;;
    labels) "$python" "$work/check.py" mask "$work/out_$kind" "$prompts" || fail "token mask"
            [[ ! -e $work/out_$kind.prompt_lengths ]] || fail "labels: prompt lengths were written too" ;;
    none) [[ ! -e $work/out_$kind.prompt_lengths && ! -e $work/out_$kind.loss_mask.idx ]] || fail "none: a mask was written" ;;
  esac
  ok "$kind: $samples_total samples, $tokens_total tokens: .bin and .idx byte for byte the original's; mask as given"
done

# The converted dataset, with its prompt lengths, feeds the loader as the original does.
"$bench" load --data "$work/out_prompt" --prompt-lengths "$work/out_prompt.prompt_lengths" --json >"$work/a.json"
"$bench" load --data "$prefix" --prompt-lengths "$prompts" --json >"$work/b.json"
"$python" - "$work/a.json" "$work/b.json" <<'PY' || fail "load of the converted set differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ('batches', 'tokens', 'real_tokens', 'loss_tokens'):
    assert a[k] == b[k], (k, a[k], b[k])
PY
ok "the converted set loads as the original: the same batches, tokens and loss tokens"

# The token mask that convert writes from labels feeds load as the prompt lengths do: the same
# loss tokens, also when the data is seen several times over (the copies take the mask by their
# sample's index in the data), in both pipelines; and the two forms are one or the other.
for extra in "" "--repeat-data 3" "--pipeline views --repeat-data 2"; do
  # shellcheck disable=SC2086
  "$bench" load --data "$work/out_labels" --loss-mask "$work/out_labels.loss_mask" $extra --json >"$work/m.json"
  # shellcheck disable=SC2086
  "$bench" load --data "$prefix" --prompt-lengths "$prompts" $extra --json >"$work/p.json"
  "$python" - "$work/m.json" "$work/p.json" <<'PY' || fail "load --loss-mask $extra: not the prompt lengths' loss tokens"
import json, sys
m, p = (json.load(open(x)) for x in sys.argv[1:3])
for k in ('batches', 'real_tokens', 'loss_tokens'):
    assert m[k] == p[k], (k, m[k], p[k])
assert m['loss_tokens'] < m['real_tokens']
PY
done
expect_load_error() {  # MESSAGE load-flags...: load fails with one line naming MESSAGE
  local message=$1
  shift
  local status=0
  "$bench" load "$@" >"$work/err.out" 2>"$work/err.txt" || status=$?
  [[ $status -ne 0 ]] || fail "load $*: succeeded"
  [[ $status -lt 128 ]] || fail "load $*: exit status $status, a crash"
  grep -q -- "$message" "$work/err.txt" || fail "load $*: $(cat "$work/err.txt")"
}
expect_load_error "excludes" --data "$work/out_labels" --loss-mask "$work/out_labels.loss_mask" --prompt-lengths "$prompts"
expect_load_error "describes 5000 samples, the dataset has 10000" --data "$work/out_labels" "$work/out_labels" \
  --loss-mask "$work/out_labels.loss_mask"
ok "load --loss-mask (the token mask of labels): the loss tokens of the prompt lengths, repeated data and views included"

# A field named explicitly that every line has: the mask is written as with the default.
expect_success --input "$work/prompt.jsonl" --output "$work/out_named" --dtype uint16 --prompt-field prompt_length
cmp "$work/out_named.prompt_lengths" "$work/out_prompt.prompt_lengths" || fail "--prompt-field named: other prompt lengths"
ok "--prompt-field given and present on every line: the same prompt lengths"

# Lines with both kinds of mask: the one a flag names is written, the other field ignored;
# with neither flag, which one is meant is unknown.
printf '%s\n' '{"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4], "prompt_length": 1}' \
  '{"input_ids": [5, 6], "labels": [-100, 6], "prompt_length": 2}' >"$work/both.jsonl"
expect_success --input "$work/both.jsonl" --output "$work/both_labels" --labels-field labels
[[ -e $work/both_labels.loss_mask.idx && ! -e $work/both_labels.prompt_lengths ]] || fail "--labels-field: not a token mask"
expect_success --input "$work/both.jsonl" --output "$work/both_prompts" --prompt-field prompt_length
[[ -e $work/both_prompts.prompt_lengths && ! -e $work/both_prompts.loss_mask.idx ]] || fail "--prompt-field: no prompt lengths"
expect_error "give one kind of loss mask" --input "$work/both.jsonl" --output "$work/both_neither"
# --output DIR/ names no file: it wrote the hidden DIR/.bin and DIR/.idx, which no reader
# opens; a prefix in a missing directory is named as such. An existing directory's name is a
# prefix like any other (DIR.bin beside it).
mkdir -p "$work/outdir"
expect_error "--output $work/outdir/: names a directory, not a file prefix" --input "$work/both.jsonl" --output "$work/outdir/" --labels-field labels
[[ -z $(ls -A "$work/outdir") ]] || fail "--output DIR/: wrote $(ls -A "$work/outdir")"
expect_error "--output $work/nodir/x: the directory $work/nodir does not exist" --input "$work/both.jsonl" --output "$work/nodir/x" --labels-field labels
expect_success --input "$work/both.jsonl" --output "$work/outdir" --labels-field labels
[[ -f $work/outdir.bin && -f $work/outdir.idx ]] || fail "--output DIR (no slash): not DIR.bin and DIR.idx"
ok "both kinds of mask on a line: the one named by its flag"
# Lone UTF-16 surrogate escapes in a field convert does not read (Python's json.dumps writes
# them for a str cut inside an emoji): converted; a pair, and an escaped backslash before a
# "u", as they are.
"$python" - "$work/surrogates.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, text in enumerate(["cut \ud83d", "\udc00 alone", "a pair \U0001F600", "\\ud800 is text", "\ud800\ud800"]):
        f.write(json.dumps({"input_ids": [i + 1, i + 2], "text": text}) + "\n")
PY
grep -q 'ud83d"' "$work/surrogates.jsonl" || fail "the file has no lone surrogate escape to convert"
expect_success --input "$work/surrogates.jsonl" --output "$work/surrogates" --dtype int32 --json
"$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert (r["samples"], r["tokens"]) == (5, 10), r' \
  "$work/out" || fail "lone surrogates: not every sample converted"
ok "lone surrogate escapes in a text field: every line converted"

# input_bytes is the file's size, with or without a newline after the last line.
printf '{"input_ids": [1, 2]}\n{"input_ids": [3]}' >"$work/no_newline.jsonl"
printf '{"input_ids": [1, 2]}\n{"input_ids": [3]}\n' >"$work/newline.jsonl"
for f in newline no_newline; do
  expect_success --input "$work/$f.jsonl" --output "$work/bytes_$f" --json
  "$python" -c 'import json, os, sys; r = json.load(open(sys.argv[1])); assert r["input_bytes"] == os.path.getsize(sys.argv[2]), r' \
    "$work/out" "$work/$f.jsonl" || fail "$f: input_bytes is not the file's size"
done
ok "input_bytes: the file's size, also without a last newline"
# The report of a run whose standard output cannot be written is a failure, not exit 0.
if [[ -w /dev/full ]]; then
  rc=0
  "$bench" convert --input "$work/both.jsonl" --output "$work/full" --labels-field labels --json >/dev/full 2>"$work/err" || rc=$?
  [[ $rc -eq 1 ]] && grep -q "standard output" "$work/err" || fail "--json >/dev/full: exit $rc: $(cat "$work/err")"
  ok "--json >/dev/full: exit 1, the error says so"
else
  fail "/dev/full is not writable: the full-disk checks need it (every Linux has it)"
fi

expect_error "a directory; convert reads one JSON Lines file" --input "$work" --output "$work/from_a_directory"

# --ignore-index is decimal, leading zeros and all (CLI11 alone reads -0100 as octal -64).
expect_success --input "$work/labels.jsonl" --output "$work/out_ignore" --dtype uint16 --ignore-index -0100
cmp "$work/out_ignore.loss_mask.bin" "$work/out_labels.loss_mask.bin" || fail "--ignore-index -0100: another mask"
expect_error "'0x10'" --input "$work/labels.jsonl" --output "$work/out_hex" --ignore-index 0x10
ok "--ignore-index -0100 is -100; 0x10 is refused"

# Bad lines: one-line errors naming the line; no output left behind.
bad() {  # bad NAME MESSAGE CONTENT [convert flags...]
  local name=$1 message=$2 content=$3
  shift 3
  printf '%b' "$content" >"$work/$name.jsonl"
  expect_error "$message" --input "$work/$name.jsonl" --output "$work/bad_$name" "$@"
  local left
  left=$(find "$work" -name "bad_$name*" | head -3)
  [[ -z $left ]] || fail "$name: the failed conversion left $left"
}
bad not_json "line 2 (byte 22): not JSON" '{"input_ids": [1, 2]}\n{"input_ids": [1,\n'
bad no_field 'line 1 (byte 0): no "input_ids" field' '{"tokens": [1]}\n'
# A NUL byte ended the parse there: the sample after it was dropped without an error.
bad nul_byte 'line 2 (byte 19): not JSON: a NUL byte at column 19' \
  '{"input_ids": [0]}\n{"input_ids": [1]}\0{"input_ids": [2, 3]}\n{"input_ids": [4]}\n'
bad not_object "expected a JSON object" '[1, 2, 3]\n'
bad number_overflow 'line 2 (byte 19): not JSON' '{"input_ids": [1]}\n{"input_ids": [2e999]}\n'
bad float_token '"input_ids"[1] = 2.5 is not an integer' '{"input_ids": [1, 2.5]}\n'
bad wide_token "line 2" '{"input_ids": [1]}\n{"input_ids": [70000]}\n' --dtype uint16
bad prompt_long '"prompt_length" must be an integer from 0 to' '{"input_ids": [1, 2], "prompt_length": 3}\n'
bad labels_length "3 labels for 2 tokens" '{"input_ids": [1, 2], "labels": [1, 2, 3]}\n'
bad labels_shifted 'label 1 is 9, its token 8: "labels" must be the tokens (unshifted' \
  '{"input_ids": [7, 8, 9], "labels": [-100, 8, 9]}\n{"input_ids": [7, 8, 9], "labels": [-100, 9, -100]}\n'
bad labels_shifted_hint "(these look shifted by one)" '{"input_ids": [7, 8, 9], "labels": [-100, 9, -100]}\n'
bad labels_other 'label 0 is 5, its token 7' '{"input_ids": [7, 8], "labels": [5, 8]}\n'
bad mixed "the first sample (line 1) has prompt lengths" '{"input_ids": [1], "prompt_length": 0}\n{"input_ids": [1]}\n'
bad both "give one kind of loss mask" '{"input_ids": [1], "prompt_length": 0, "labels": [1]}\n'
bad field_typo 'line 1 (byte 0): no "prompt_len" field, which --prompt-field names (is the field' \
  '{"input_ids": [1, 2], "prompt_length": 1}\n' --prompt-field prompt_len
bad field_missing 'line 2 (byte 42): no "prompt_length" field, which --prompt-field names' \
  '{"input_ids": [1, 2], "prompt_length": 1}\n{"input_ids": [1]}\n' --prompt-field prompt_length
bad labels_typo 'line 1 (byte 0): no "label" field, which --labels-field names' \
  '{"input_ids": [1, 2], "labels": [-100, 2]}\n' --labels-field label
bad empty "no samples" ''
bad blank_only "no samples" '\n\n  \n'
expect_error "--dtype float32" --input "$work/none.jsonl" --output "$work/bad_dtype" --dtype float32
expect_error "$work/missing.jsonl" --input "$work/missing.jsonl" --output "$work/bad_missing"
# An empty --output wrote the hidden files .bin and .idx in the working directory.
expect_error "--output: expected a path, got an empty value" --input "$work/none.jsonl" --output ""

# A failed conversion keeps an earlier output of the same name as it was.
cp "$work/out_none.idx" "$work/keep.idx" && cp "$work/out_none.bin" "$work/keep.bin"
printf '{"input_ids": [1]}\n{"input_ids": x}\n' >"$work/late.jsonl"
expect_error "line 2" --input "$work/late.jsonl" --output "$work/keep"
cmp "$work/keep.idx" "$work/out_none.idx" && cmp "$work/keep.bin" "$work/out_none.bin" || fail "the earlier output changed"
ok "a failed conversion leaves the earlier output of the same name untouched"

# A companion that cannot be completed (a full disk: its temporary is /dev/full) fails the
# conversion before any file is renamed: the earlier dataset and companion stay as they were
# (not a new dataset beside the old mask), and no temporary is left.
if [[ -w /dev/full ]]; then
  printf '{"input_ids": [1, 2, 3], "prompt_length": 1}\n' >"$work/full_prompt.jsonl"
  printf '{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}\n' >"$work/full_labels.jsonl"
  for kind in prompt labels; do
    for file in "$work/out_$kind".*; do cp "$file" "$work/full_$kind${file#"$work/out_$kind"}"; done
    companion=$([[ $kind == prompt ]] && echo prompt_lengths || echo loss_mask.idx)
    ln -s /dev/full "$work/full_$kind.$companion.tmp"
    expect_error "full_$kind.$companion.tmp: write failed" --input "$work/full_$kind.jsonl" --output "$work/full_$kind"
    for file in "$work/out_$kind".*; do
      cmp "$file" "$work/full_$kind${file#"$work/out_$kind"}" || fail "$kind: $file changed though its companion failed"
    done
    left=$(find "$work" -name "full_$kind*.tmp" | head -3)
    [[ -z $left ]] || fail "$kind: the failed conversion left $left"
  done
  ok "a companion that cannot be written: the earlier dataset and companion as they were, no temporary"
else
  fail "/dev/full is not writable: the full-disk checks need it (every Linux has it)"
fi

# Converting again into a prefix with another kind of mask (or none) removes the other kind's
# companion, which a loader named by it would pair with the new samples; the report says so.
expect_success --input "$work/both.jsonl" --output "$work/again" --prompt-field prompt_length --json
"$python" "$work/check.py" removed "$work/out" || fail "a first conversion removed something"
expect_success --input "$work/both.jsonl" --output "$work/again" --labels-field labels --json
"$python" "$work/check.py" removed "$work/out" "$work/again.prompt_lengths" || fail "labels after prompt lengths"
[[ ! -e $work/again.prompt_lengths && -e $work/again.loss_mask.idx ]] || fail "labels: the prompt lengths were left"
expect_success --input "$work/both.jsonl" --output "$work/again" --prompt-field prompt_length
grep -qF "removed        $work/again.loss_mask.idx" "$work/out" && grep -qF "removed        $work/again.loss_mask.bin" "$work/out" ||
  fail "prompt lengths after labels: the report does not name the token mask: $(cat "$work/out")"
[[ ! -e $work/again.loss_mask.idx && ! -e $work/again.loss_mask.bin && -e $work/again.prompt_lengths ]] ||
  fail "prompt lengths: the token mask was left"
expect_success --input "$work/newline.jsonl" --output "$work/again" --json
"$python" "$work/check.py" removed "$work/out" "$work/again.prompt_lengths" || fail "no mask after prompt lengths"
[[ ! -e $work/again.prompt_lengths ]] || fail "no mask: the prompt lengths were left"
ok "a conversion with another kind of mask, or none, removes the earlier companion and names it"

# Stopped by a signal part way (Ctrl-C, a job's time limit): the temporaries go, the status is
# the signal's, and no output appears. The input is a pipe that stalls after its first lines.
mkfifo "$work/stalling.jsonl"
{ head -n 100 "$work/prompt.jsonl"; exec sleep 60; } >"$work/stalling.jsonl" &
feeder=$!  # the sleep, after exec: killed, it closes the pipe
"$bench" convert --input "$work/stalling.jsonl" --output "$work/stopped" >"$work/out" 2>"$work/err" &
converting=$!
trap 'kill "$feeder" "$converting" 2>/dev/null || true' EXIT  # nothing left running if a check fails
for ((i = 0; i < 200; i++)); do [[ -e $work/stopped.bin.tmp ]] && break; sleep 0.05; done
[[ -e $work/stopped.bin.tmp ]] || fail "convert from a pipe: no temporary after 10 s"
kill -TERM "$converting"  # noted while it waits for the next line ...
sleep 0.2
kill "$feeder"             # ... which never comes: the input ends
wait "$feeder" 2>/dev/null || true
rc=0
wait "$converting" || rc=$?
trap - EXIT
[[ $rc -eq 143 ]] || fail "convert stopped by SIGTERM: status $rc (expected 143): $(cat "$work/err")"
left=$(find "$work" -maxdepth 1 -name 'stopped*' | head -3)
[[ -z $left ]] || fail "convert stopped by SIGTERM left $left"
ok "convert stopped by a signal: its status, no temporary, no output"
# A second signal ends it at once, while its read still waits for a line (as one signal did
# before): the first is only noted.
mkfifo "$work/stalling2.jsonl"
{ head -n 100 "$work/prompt.jsonl"; exec sleep 60; } >"$work/stalling2.jsonl" &
feeder=$!
"$bench" convert --input "$work/stalling2.jsonl" --output "$work/stopped2" >"$work/out" 2>"$work/err" &
converting=$!
trap 'kill "$feeder" "$converting" 2>/dev/null || true' EXIT
for ((i = 0; i < 200; i++)); do [[ -e $work/stopped2.bin.tmp ]] && break; sleep 0.05; done
kill -TERM "$converting"
sleep 0.2
kill -TERM "$converting"
for ((i = 0; i < 200; i++)); do kill -0 "$converting" 2>/dev/null || break; sleep 0.05; done
kill -0 "$converting" 2>/dev/null && fail "convert went on after a second SIGTERM"
rc=0
wait "$converting" || rc=$?
kill "$feeder" 2>/dev/null || true
wait "$feeder" 2>/dev/null || true
trap - EXIT
[[ $rc -eq 143 ]] || fail "convert after a second SIGTERM: status $rc"
rm -f "$work"/stopped2*
ok "a second signal ends convert at once"

# A file name that is not UTF-8 (Latin-1 "é"): --json still prints one JSON object, the
# byte replaced, and the command succeeds (it threw at the report, after writing the files).
latin=$work/caf$'\xe9'
cp "$work/both.jsonl" "$latin.jsonl"
expect_success --input "$latin.jsonl" --output "$latin" --labels-field labels --json
"$python" - "$work/out" <<'PY' || fail "--json with a Latin-1 file name: not one JSON object naming the output"
import json, sys
report = json.loads(open(sys.argv[1], 'rb').read().decode('utf-8'))
assert report['output'].endswith('caf\ufffd'), report['output']
assert report['outputs'][1] == report['output'] + '.idx', report
PY
[[ -f $latin.idx && -f $latin.loss_mask.bin ]] || fail "--json with a Latin-1 file name: no output"
ok "--json with a file name that is not UTF-8: the report, the byte replaced"

rm -rf "$work"
echo "all convert command checks passed"
