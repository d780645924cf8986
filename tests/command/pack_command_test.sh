#!/usr/bin/env bash
# multipack-bench pack, the way a user sees it: exit statuses, the text and JSON reports, the
# rows written by --dump-rows (checked against the lengths), and one-line errors on bad input.
#
#   bash tests/command/pack_command_test.sh <multipack-bench> <source-dir> <scratch-dir>
#
# Each check prints one line; the first failure prints FAIL and exits non-zero. Needs bash and
# python3 (standard library only).
set -euo pipefail

source "$(dirname "$0")/harness.sh" pack "$@"
algorithms=(exact-fit best-fit-decreasing first-fit-decreasing next-fit randomized-exact-fit)

# ---------------------------------------------------------------------------------------------
# The checker: python3, standard library only.
#   check.py json   REPORT LENGTHS_FILE SAMPLES ALGORITHM CAPACITY   (prints the rows)
#   check.py dump   DUMP LENGTHS_FILE CAPACITY ROWS MODE              (MODE: whole|split|truncate)
cat >"$work/check.py" <<'PY'
import json, re, sys

from dump_format import die, piece_re, read_json_line, read_lengths

def check_json(report, lengths_file, samples, algorithm, capacity):
    r = read_json_line(report)
    keys = ['samples', 'tokens', 'capacity', 'algorithm', 'rows', 'lower_bound', 'efficiency',
            'pack_seconds', 'pack_seconds_reusing_memory', 'dropped_samples', 'dropped_tokens', 'truncated_samples',
            'split_samples', 'peak_rss_bytes']
    missing = [k for k in keys if k not in r]
    if missing:
        die(f'--json lacks keys {missing}: {sorted(r)}')
    for k in keys:
        if k == 'algorithm':
            continue
        if not isinstance(r[k], (int, float)) or isinstance(r[k], bool) or r[k] < 0:
            die(f'--json: {k} = {r[k]!r}, expected a non-negative number')
    lengths = read_lengths(lengths_file)
    if r['samples'] != int(samples) or r['samples'] != len(lengths):
        die(f'--json: samples = {r["samples"]}, expected {samples} (and {len(lengths)} lines in {lengths_file})')
    if r['tokens'] != sum(lengths):
        die(f'--json: tokens = {r["tokens"]}, expected {sum(lengths)}, the sum of {lengths_file}')
    if r['algorithm'] != algorithm:
        die(f'--json: algorithm = {r["algorithm"]!r}, expected {algorithm!r}')
    if r['capacity'] != int(capacity):
        die(f'--json: capacity = {r["capacity"]}, expected {capacity}')
    if r['rows'] < r['lower_bound']:
        die(f'--json: rows {r["rows"]} < lower_bound {r["lower_bound"]}')
    if r['lower_bound'] < -(-sum(lengths) // int(capacity)):
        die(f'--json: lower_bound {r["lower_bound"]} < ceil(tokens / capacity)')
    if not 0 < r['efficiency'] <= 1:
        die(f'--json: efficiency = {r["efficiency"]}, expected in (0, 1]')
    if r['dropped_samples'] or r['truncated_samples'] or r['split_samples']:
        die(f'--json: no sample is longer than the capacity, yet some were dropped, truncated or split: {r}')
    print(r['rows'])


def check_dump(dump, lengths_file, capacity, rows, mode):
    capacity, rows = int(capacity), int(rows)
    lengths = read_lengths(lengths_file)
    with open(dump) as f:
        text = f.read()
    if text and not text.endswith('\n'):
        die(f'{dump}: the last line does not end with a newline')
    lines = text.split('\n')[:-1] if text else []
    if len(lines) != rows:
        die(f'{dump}: {len(lines)} lines, but --json reports rows = {rows}')
    pieces = {}  # sample -> list of (begin, end, whole-form)
    for n, line in enumerate(lines, 1):
        if line == '':
            die(f'{dump}: line {n} is empty (a row without pieces)')
        used = 0
        for token in line.split(' '):
            m = piece_re.match(token)
            if not m:
                die(f'{dump}: line {n}: piece {token!r} is neither "i" nor "i:b:e" '
                    f'(pieces are separated by single spaces)')
            i = int(m.group(1))
            if i >= len(lengths):
                die(f'{dump}: line {n}: sample {i} does not exist ({len(lengths)} samples)')
            if m.group(2) is None:
                b, e, whole = 0, lengths[i], True
            else:
                b, e, whole = int(m.group(2)), int(m.group(3)), False
                if not b < e <= lengths[i]:
                    die(f'{dump}: line {n}: piece {token}: expected b < e <= {lengths[i]} (the length of sample {i})')
            used += e - b
            pieces.setdefault(i, []).append((b, e, whole))
        if used > capacity:
            die(f'{dump}: line {n} holds {used} tokens, more than the capacity {capacity}')
    for i, length in enumerate(lengths):
        got = sorted(pieces.get(i, []))
        if length == 0:
            if got:
                die(f'{dump}: sample {i} has length 0 but is packed: {got}')
            continue
        if not got:
            die(f'{dump}: sample {i} (length {length}) is in no row')
        if length <= capacity or mode == 'whole':
            if len(got) != 1 or (got[0][0], got[0][1]) != (0, length):
                die(f'{dump}: sample {i} (length {length}) should be one whole piece, is {got}')
        elif mode == 'truncate':
            if len(got) != 1 or (got[0][0], got[0][1]) != (0, capacity):
                die(f'{dump}: sample {i} (length {length}) truncated should be one piece 0:{capacity}, is {got}')
        elif mode == 'split':
            at = 0
            for b, e, _ in got:
                if b != at:
                    die(f'{dump}: sample {i} (length {length}) split: pieces {got} do not tile [0, {length})')
                at = e
            if at != length:
                die(f'{dump}: sample {i} (length {length}) split: pieces {got} end at {at}')
        else:
            die(f'unknown mode {mode}')

if __name__ == '__main__':
    what = sys.argv[1]
    if what == 'json':
        check_json(*sys.argv[2:])
    elif what == 'dump':
        check_dump(*sys.argv[2:])
    else:
        die(f'unknown check {what}')
PY
check() { "$python" "$work/check.py" "$@"; }


# ---------------------------------------------------------------------------------------------
# 1. The default run.
expect_success
grep -q 'rows' "$work/out" || fail "the default report does not mention rows: $(cat "$work/out")"
grep -qi 'lower bound' "$work/out" || fail "the default report does not mention the lower bound: $(cat "$work/out")"
ok "default run exits 0 and reports rows and the lower bound"

# --help names every algorithm and overlong policy the command accepts.
expect_success --help
for name in "${algorithms[@]}" drop truncate split error; do
  grep -qw -- "$name" "$work/out" || fail "pack --help does not name '$name': $(grep -- --algorithm "$work/out")"
done
ok "--help exits 0 and names every algorithm and overlong policy"

# ---------------------------------------------------------------------------------------------
# 2. --json, every algorithm (default data, default capacity 4096).
for algorithm in "${algorithms[@]}"; do
  expect_success --json --algorithm "$algorithm"
  check json "$work/out" "$lengths_txt" 5000 "$algorithm" 4096 >/dev/null || fail "--json --algorithm $algorithm"
  ok "--json --algorithm $algorithm: one JSON line, 5000 samples, all tokens, rows >= lower_bound"
done

# ---------------------------------------------------------------------------------------------
# 3. --dump-rows at capacity 2048 on the default data, every algorithm.
for algorithm in "${algorithms[@]}"; do
  dump=$work/rows-$algorithm.txt
  expect_success --json --capacity 2048 --algorithm "$algorithm" --dump-rows "$dump"
  rows=$(check json "$work/out" "$lengths_txt" 5000 "$algorithm" 2048) || fail "--json --capacity 2048 --algorithm $algorithm"
  check dump "$dump" "$lengths_txt" 2048 "$rows" whole || fail "--dump-rows, --capacity 2048 --algorithm $algorithm"
  ok "--dump-rows --capacity 2048 --algorithm $algorithm: $rows rows, every sample once and whole, none over capacity"
done

# Lengths over the capacity (100), and one empty sample, with --overlong split and truncate.
small=$work/small.txt
printf '%s\n' 30 250 100 7 101 0 300 99 1 200 55 45 >"$small"
small_overlong=$(awk '$1 > 100' "$small" | wc -l)
for policy in split truncate; do
  for algorithm in "${algorithms[@]}"; do
    dump=$work/small-$policy-$algorithm.txt
    expect_success --lengths "$small" --capacity 100 --overlong "$policy" --algorithm "$algorithm" --json --dump-rows "$dump"
    rows=$("$python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
policy, over = sys.argv[2], int(sys.argv[3])
counted = r["split_samples"] if policy == "split" else r["truncated_samples"]
rows, bound, dropped = r["rows"], r["lower_bound"], r["dropped_samples"]
if counted != over or dropped != 0:
    sys.exit(f"--overlong {policy}: split/truncated samples {counted}, dropped {dropped}; expected {over} and 0")
empty = r["empty_samples"]
if empty != 1:
    sys.exit(f"empty_samples {empty}, expected 1 (the sample of length 0)")
if rows < bound:
    sys.exit(f"rows {rows} < lower_bound {bound}")
print(rows)' "$work/out" "$policy" "$small_overlong") || fail "--lengths $small --overlong $policy --algorithm $algorithm: $(cat "$work/out")"
    check dump "$dump" "$small" 100 "$rows" "$policy" || fail "--dump-rows, --overlong $policy --algorithm $algorithm"
  done
  ok "--dump-rows --overlong $policy, lengths over the capacity: pieces $([[ $policy == split ]] && echo 'tile each sample' || echo 'are 0:C'), every algorithm"
done

# Every sample longer than the row and dropped: no rows, no pieces, every sample counted; and
# --idle-before reported with the packing into the first one's memory and the first touch of as
# much memory (here none).
printf '%s\n' 5 6 >"$work/all-overlong.txt"
expect_success --lengths "$work/all-overlong.txt" --capacity 4 --idle-before 1 --json
"$python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
if (r["rows"], r["dropped_samples"], r["idle_before_seconds"]) != (0, 2, 1) or r["first_touch_seconds"] < 0 or r["pack_seconds_reusing_memory"] < 0:
    sys.exit(f"all samples overlong: {r}")' "$work/out" || fail "--lengths all-overlong.txt --capacity 4"
ok "every sample dropped: 0 rows, 2 dropped, --idle-before 1, pack_seconds_reusing_memory and first_touch_seconds reported"

# ---------------------------------------------------------------------------------------------
# 4. --lengths and --data on the same data give the same rows.
for algorithm in exact-fit randomized-exact-fit; do
  expect_success --json --capacity 1024 --algorithm "$algorithm" --data "$prefix" --dump-rows "$work/by-data.txt"
  rows_data=$(check json "$work/out" "$lengths_txt" 5000 "$algorithm" 1024) || fail "--data $prefix --json"
  expect_success --json --capacity 1024 --algorithm "$algorithm" --lengths "$lengths_txt" --dump-rows "$work/by-lengths.txt"
  rows_lengths=$(check json "$work/out" "$lengths_txt" 5000 "$algorithm" 1024) || fail "--lengths $lengths_txt --json"
  [[ $rows_data == "$rows_lengths" ]] || fail "--data gives $rows_data rows, --lengths $rows_lengths"
  cmp -s "$work/by-data.txt" "$work/by-lengths.txt" || fail "--data and --lengths on the same data dump different rows ($algorithm)"
  ok "--lengths lengths.txt and --data alpaca_llama dump the same $rows_data rows ($algorithm)"
done

# ---------------------------------------------------------------------------------------------
# 5. Bad input: one-line errors (expect_error, in harness.sh).

printf '5\n12\nabc\n7\n' >"$work/not-integer.txt"
printf '5\n-3\n7\n' >"$work/negative.txt"
printf '5\n12\n\n7\n' >"$work/empty-line.txt"
printf '10\n20\n30\n5000\n40\n' >"$work/overlong.txt"
cat "$prefix.idx" >"$work/truncated.idx"
cat "$prefix.bin" >"$work/truncated.bin"
truncate -s 100 "$work/truncated.idx"

expect_error "$work/missing.txt" --lengths "$work/missing.txt"
expect_error "line 3" --lengths "$work/not-integer.txt"
expect_error "line 2" --lengths "$work/negative.txt"
expect_error "line 3" --lengths "$work/empty-line.txt"
expect_error "capacity" --capacity 0
expect_error "capacity" --capacity -5
expect_error "capacity" --capacity abc
expect_error "bogus" --algorithm bogus
expect_error "bogus" --overlong bogus
expect_error "'-1'" --seed -1
expect_error "'0x100'" --lengths "$lengths_txt" --capacity 0x100
expect_error "the directory $work/missing does not exist" --dump-rows "$work/missing/rows.txt"
# A directory is refused before the packing, not at the dump after it.
expect_error "--dump-rows $work: a directory; give a file name" --dump-rows "$work"
expect_error "--dump-rows $work/: names a directory, not a file" --dump-rows "$work/"
# A path given empty is refused: --lengths "" packed the default data, --dump-rows "" wrote nothing.
expect_error "--lengths: expected a path, got an empty value" --lengths ""
expect_error "--dump-rows: expected a path, got an empty value" --dump-rows ""
expect_error "'0x1'" --idle-before 0x1
expect_error "--repeat" --repeat 0
# Integers are decimal: a leading zero is not octal (CLI11 alone reads 010 as 8).
expect_success --lengths "$lengths_txt" --capacity 02048 --seed 010 --max-per-row 08 --json
"$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert (r["capacity"], r["seed"], r["max_per_row"]) == (2048, 10, 8), r' \
  "$work/out" || fail "--capacity 02048 --seed 010: not read as decimal"
ok "--capacity 02048 --seed 010 --max-per-row 08: decimal 2048, 10 and 8"
expect_error "'99999999999999999999'" --resample 99999999999999999999
# Past what a packing takes: refused before 4 bytes a sample are allocated and drawn.
expect_error "--resample 4294967295: at most 2^32 - 2 samples" --lengths "$lengths_txt" --resample 4294967295
expect_error "--resample 18446744073709551615: at most 2^32 - 2" --lengths "$lengths_txt" --resample 18446744073709551615
# --resample-seed alone would have no effect: refused.
expect_error "--resample-seed requires --resample" --lengths "$lengths_txt" --resample-seed 3
expect_error "--no-such-flag" --no-such-flag
# Each integer flag states its own range: --capacity is 1 to 2^26 (it said "0 to
# 18446744073709551615" for -5, and only "Could not convert" for 2^32).
expect_error "--capacity: expected an integer from 1 to 67108864, got '-5'" --lengths "$lengths_txt" --capacity -5
expect_error "--capacity: expected an integer from 1 to 67108864, got '4294967296'" --lengths "$lengths_txt" --capacity 4294967296
expect_error "--pack-threads: expected an integer from 1 to 256, got '0'" --lengths "$lengths_txt" --pack-threads 0
# A mistyped command is named, with the commands there are (CLI11 alone: "A subcommand is required").
rc=0
"$bench" pakc --capacity 5 >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 && ! -s $work/out ]] && grep -qF "unknown command 'pakc' (the commands: pack, plan, load, convert)" "$work/err" ||
  fail "a mistyped command: status $rc, $(cat "$work/err")"
expect_error "$work/missing" --data "$work/missing"
expect_error "$work/truncated.idx" --data "$work/truncated"
expect_error "sample 3 " --lengths "$work/overlong.txt" --capacity 4096 --overlong error
expect_error "" --data "$prefix" --lengths "$lengths_txt"

rm -rf "$work"
echo "all pack command checks passed"
