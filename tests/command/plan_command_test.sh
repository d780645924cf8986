#!/usr/bin/env bash
# multipack-bench plan, the way a user sees it: the plan written by --dump-plan checked against
# the lengths (every sample once, every rank the same steps and micro_batch rows a step, padding
# and dropping only at the end), the epoch's sequence independent of the world size and
# micro-batch, resuming (--start-step, --consumed-rows with another world size), determinism
# and epochs, the balance figures recomputed from the dump, and one-line errors on bad input.
#
#   bash tests/command/plan_command_test.sh <multipack-bench> <source-dir> <scratch-dir>
#
# Each check prints one line; the first failure prints FAIL and exits non-zero. Needs bash and
# python3 (standard library only). Every figure the checks compare with is computed by the
# checker from data/alpaca/lengths.txt and the dumps, never taken from the program's report.
set -euo pipefail

source "$(dirname "$0")/harness.sh" plan "$@"

# ---------------------------------------------------------------------------------------------
# The checker: python3, standard library only.
#   check.py plan    REPORT DUMP LENGTHS SEQUENCE W B REMAINDER CAPACITY EPOCH BALANCE CONSUMED
#       (prints the steps). SEQUENCE: the dump of a plan with --world-size 1 --micro-batch 1
#       --remainder pad and the same seed, epoch, capacity and algorithm, whose rows in step
#       order are the epoch's sequence; '-' when DUMP is that plan. BALANCE: yes|no.
#   check.py resume  FULL_DUMP K RESUMED_DUMP SEQUENCE
#   check.py epochs  DUMP_A DUMP_B same-rows|other-rows
#   check.py tail    DUMP K OUT           (writes the lines of DUMP whose step is >= K)
#   check.py steps   DUMP                 (prints the steps of a dump)
cat >"$work/check.py" <<'PY'
import json, re, sys
from collections import Counter

from dump_format import die, number_re, piece_re, read_json_line, read_lengths


def read_lines(path):
    with open(path) as f:
        text = f.read()
    if text and not text.endswith('\n'):
        die(f'{path}: the last line does not end with a newline')
    return text.split('\n')[:-1] if text else []

def read_dump(path, lengths):
    """[(epoch, step, rank, slot, row)], a row being the sorted tuple of its pieces (i, b, e);
    () for a padding row."""
    entries = []
    for n, line in enumerate(read_lines(path), 1):
        fields = line.split(' ')
        if len(fields) < 4 or not all(number_re.match(f) for f in fields[:4]):
            die(f'{path}: line {n} does not start with `epoch step rank slot` '
                f'(numbers separated by single spaces): {line[:120]!r}')
        pieces = []
        for token in fields[4:]:
            m = piece_re.match(token)
            if not m:
                die(f'{path}: line {n}: piece {token!r} is neither "i" nor "i:b:e"')
            i = int(m.group(1))
            if i >= len(lengths):
                die(f'{path}: line {n}: sample {i} does not exist ({len(lengths)} samples)')
            if m.group(2) is None:
                b, e = 0, lengths[i]
            else:
                b, e = int(m.group(2)), int(m.group(3))
                if not b < e <= lengths[i]:
                    die(f'{path}: line {n}: piece {token}: expected b < e <= {lengths[i]} (the length of sample {i})')
                if (b, e) == (0, lengths[i]):
                    die(f'{path}: line {n}: piece {token} is the whole sample, written as "i:b:e" rather than "i"')
            pieces.append((i, b, e))
        entries.append(tuple(int(f) for f in fields[:4]) + (tuple(sorted(pieces)),))
    if not entries:
        die(f'{path}: no lines')
    return entries

def read_sequence(path, lengths):
    entries = read_dump(path, lengths)
    for n, (epoch, step, rank, slot, row) in enumerate(entries):
        if (step, rank, slot) != (n, 0, 0):
            die(f'{path}: the plan of one rank and one row a step should have step {n}, rank 0, '
                f'slot 0 on line {n + 1}, has {(step, rank, slot)}')
        if row == ():
            die(f'{path}: line {n + 1}: a padding row with one rank and one row a step')
    return [row for *_, row in entries]

def cost(row):
    return sum((e - b) + (e - b) ** 2 for _, b, e in row)

def balance_of(rank_costs):
    total = sum(rank_costs)
    return 1.0 if total == 0 else max(rank_costs) * len(rank_costs) / total

def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))

def load_report(path):
    r = read_json_line(path)
    keys = ['world_size', 'micro_batch', 'steps', 'padded_rows', 'dropped_rows', 'dropped_samples',
            'overlong_dropped_samples', 'remainder_dropped_samples', 'scheduled_rows', 'consumed_rows',
            'rows', 'plan_seconds', 'balance_mean', 'balance_worst', 'balance_mean_unbalanced',
            'balance_worst_unbalanced', 'seed', 'epoch', 'capacity']
    if not isinstance(r, dict) or [k for k in keys if k not in r]:
        die(f'--json lacks keys {[k for k in keys if k not in r] if isinstance(r, dict) else keys}: {str(r)[:300]!r}')
    for k in keys:
        if not isinstance(r[k], (int, float)) or isinstance(r[k], bool) or r[k] < 0:
            die(f'--json: {k} = {r[k]!r}, expected a non-negative number')
    return r

def check_plan(report, dump, lengths_file, sequence, world, batch, remainder, capacity, epoch, balance, consumed):
    world, batch, capacity, epoch, consumed = int(world), int(batch), int(capacity), int(epoch), int(consumed)
    group = world * batch
    balanced = balance == 'yes'
    lengths = read_lengths(lengths_file)
    r = load_report(report)
    for key, want in [('world_size', world), ('micro_batch', batch), ('capacity', capacity), ('epoch', epoch),
                      ('consumed_rows', consumed)]:
        if r[key] != want:
            die(f'--json: {key} = {r[key]}, expected {want}, as given')
    entries = read_dump(dump, lengths)

    # The layout: rank 0's lines first, then rank 1's...; within a rank steps 0.. in order,
    # within a step slots 0..B-1; every rank the same steps.
    if len(entries) % group:
        die(f'{dump}: {len(entries)} lines, not a multiple of world x micro_batch = {group}')
    steps = len(entries) // group
    for n, (e, step, rank, slot, _) in enumerate(entries):
        want = (epoch, n % (steps * batch) // batch, n // (steps * batch), n % batch)
        if (e, step, rank, slot) != want:
            die(f'{dump}: line {n + 1} is (epoch, step, rank, slot) {(e, step, rank, slot)}, expected {want} '
                f'({steps} steps x {world} ranks x {batch} rows)')
    if r['steps'] != steps:
        die(f'--json: steps = {r["steps"]}, the dump has {steps}')
    # cell[step][rank] = the rows in slot order
    cell = [[[entries[(rank * steps + step) * batch + slot][4] for slot in range(batch)]
             for rank in range(world)] for step in range(steps)]

    # Rows: within the capacity; every sample at most once, whole.
    seen = Counter()
    for n, (*_, row) in enumerate(entries, 1):
        used = sum(e - b for _, b, e in row)
        if used > capacity:
            die(f'{dump}: line {n} holds {used} tokens, more than the capacity {capacity}')
        for i, b, e in row:
            if (b, e) != (0, lengths[i]):
                die(f'{dump}: line {n}: sample {i} (length {lengths[i]}) is not whole: {b}:{e}')
            seen[i] += 1
    twice = [i for i, c in seen.items() if c > 1]
    if twice:
        die(f'{dump}: samples in more than one row (or twice in one): {twice[:10]}')
    # Samples longer than a row are dropped by the packer (--overlong drop, the default).
    overlong = [i for i in seen if lengths[i] > capacity]
    if overlong:
        die(f'{dump}: samples longer than the capacity {capacity} are in rows: {overlong[:10]}')
    fits = Counter(i for i, length in enumerate(lengths) if 0 < length <= capacity)
    too_long = sum(1 for length in lengths if length > capacity)
    if r['overlong_dropped_samples'] != too_long:
        die(f'--json: overlong_dropped_samples = {r["overlong_dropped_samples"]}, but {too_long} samples are '
            f'longer than the capacity {capacity}')
    missing = [i for i, length in enumerate(lengths) if length > 0 and i not in seen]

    # Padding: only in the last step, fewer than one step, counted.
    padding = [(n, step) for n, (_, step, _, _, row) in enumerate(entries, 1) if row == ()]
    early = [n for n, step in padding if step != steps - 1]
    if early:
        die(f'{dump}: padding rows (no pieces) before the last step, lines {early[:10]}')
    if len(padding) >= group:
        die(f'{dump}: {len(padding)} padding rows, a whole step (world x micro_batch = {group}) or more')
    if r['padded_rows'] != len(padding):
        die(f'--json: padded_rows = {r["padded_rows"]}, the dump has {len(padding)} padding rows')
    if remainder == 'drop' and padding:
        die(f'{dump}: remainder drop, yet {len(padding)} padding rows')
    if remainder == 'pad' and r['dropped_rows'] != 0:
        die(f'--json: remainder pad, yet dropped_rows = {r["dropped_rows"]}')
    if consumed == 0:
        if remainder == 'pad' and len(missing) != too_long:
            die(f'{dump}: remainder pad, yet {len(missing) - too_long} samples no longer than the capacity '
                f'are in no row: {[i for i in missing if lengths[i] <= capacity][:10]}')
        if r['dropped_samples'] != len(missing):
            die(f'--json: dropped_samples = {r["dropped_samples"]}, but {len(missing)} samples are in no row of the dump')

    # The epoch's sequence: step s holds rows [consumed + sG, consumed + (s+1)G) of it.
    seq = [entries[n][4] for n in range(len(entries))] if sequence == '-' else read_sequence(sequence, lengths)
    if Counter(s for row in seq for s, _, _ in row) != fits:
        die(f'{sequence}: the sequence does not hold every sample of {lengths_file} no longer than the '
            f'capacity exactly once')
    position = {row: n for n, row in enumerate(seq)}
    left = len(seq) - consumed
    want_steps = -(-left // group) if remainder == 'pad' else left // group
    if steps != want_steps:
        die(f'{dump}: {steps} steps; {len(seq)} rows of the epoch, {consumed} consumed, {group} a step, '
            f'remainder {remainder}: expected {want_steps}')
    if r['rows'] != len(seq):
        die(f'--json: rows = {r["rows"]}, the epoch has {len(seq)} (the sequence)')
    if r['scheduled_rows'] != min(left, steps * group):
        die(f'--json: scheduled_rows = {r["scheduled_rows"]}, expected {min(left, steps * group)}')
    want_dropped = left - steps * group if remainder == 'drop' else 0
    if r['dropped_rows'] != want_dropped:
        die(f'--json: dropped_rows = {r["dropped_rows"]}, expected {want_dropped}')
    tail_samples = {i for row in seq[consumed + steps * group:] for i, _, _ in row}
    if r['remainder_dropped_samples'] != (len(tail_samples) if remainder == 'drop' else 0):
        die(f'--json: remainder_dropped_samples = {r["remainder_dropped_samples"]}, the rows left out hold '
            f'{len(tail_samples) if remainder == "drop" else 0} samples')
    if r['dropped_samples'] != too_long + r['remainder_dropped_samples']:
        die(f'--json: dropped_samples = {r["dropped_samples"]}: {too_long} samples longer than a row and '
            f'{r["remainder_dropped_samples"]} in the rows left out')
    mean = worst = plain_mean = plain_worst = 0.0
    for step in range(steps):
        first = consumed + step * group
        expected = seq[first:first + group]
        expected += [()] * (group - len(expected))
        got = [row for rank in cell[step] for row in rank]
        if sorted(got) != sorted(expected):
            die(f'{dump}: step {step} does not hold rows [{first}, {first + group}) of the sequence '
                f'(the plan with one rank and one row a step)')
        # Unbalanced, rank k takes the k-th consecutive rows of the step; in a last step that is
        # not full, its rows k, k + world, ... (a real row each while there are enough).
        real = len(seq[first:first + group])
        if real == group:
            plain_rows = [expected[k * batch:(k + 1) * batch] for k in range(world)]
        else:
            plain_rows = [expected[k:real:world] for k in range(world)]
            plain_rows = [rows + [()] * (batch - len(rows)) for rows in plain_rows]
        for rank in range(world):
            rows = cell[step][rank]
            if balanced:
                # A rank's rows in the order of the sequence, padding last.
                order = [position[row] if row else len(seq) for row in rows]
                if order != sorted(order):
                    die(f'{dump}: step {step}, rank {rank}: rows not in the order of the sequence, padding last')
            elif rows != plain_rows[rank]:
                die(f'{dump}: --no-balance: step {step}, rank {rank} should take rows '
                    f'[{first + rank * batch}, {first + (rank + 1) * batch}) of the sequence, in order '
                    f'(rows {rank}, {rank + world}, ... of a last step that is not full)')
            if real >= world and not rows[0]:
                die(f'{dump}: step {step}, rank {rank}: only padding, while the step has a row for every rank')
        b = balance_of([sum(cost(row) for row in rows) for rows in cell[step]])
        p = balance_of([sum(cost(row) for row in plain_rows[k] if row) for k in range(world)])
        mean, worst, plain_mean, plain_worst = mean + b, max(worst, b), plain_mean + p, max(plain_worst, p)
    mean, plain_mean = mean / steps, plain_mean / steps
    for key, value in [('balance_mean', mean), ('balance_worst', worst),
                       ('balance_mean_unbalanced', plain_mean), ('balance_worst_unbalanced', plain_worst)]:
        if not close(r[key], value):
            die(f'--json: {key} = {r[key]!r}, recomputed from the dump {value!r}')
    if not balanced and (r['balance_mean'] != r['balance_mean_unbalanced'] or
                         r['balance_worst'] != r['balance_worst_unbalanced']):
        die(f'--json: --no-balance, yet balance_mean/worst {r["balance_mean"]}/{r["balance_worst"]} differ from '
            f'balance_mean/worst_unbalanced {r["balance_mean_unbalanced"]}/{r["balance_worst_unbalanced"]}')
    print(steps)

def check_resume(full, k, resumed, sequence, lengths_file):
    k = int(k)
    lengths = read_lengths(lengths_file)
    before = [row for _, step, _, _, row in read_dump(full, lengths) if step < k and row]
    after = [row for *_, row in read_dump(resumed, lengths) if row]
    epoch = Counter(read_sequence(sequence, lengths))
    both = Counter(before) + Counter(after)
    if both != epoch:
        extra, lost = both - epoch, epoch - both
        die(f'steps < {k} of {full} and {resumed}: {sum(extra.values())} rows too many (or twice), '
            f'{sum(lost.values())} rows of the epoch missing')

def check_epochs(a, b, mode, lengths_file):
    lengths = read_lengths(lengths_file)
    sa, sb = [row for *_, row in read_dump(a, lengths)], [row for *_, row in read_dump(b, lengths)]
    if sa == sb:
        die(f'{a} and {b}: the same rows in the same order')
    if mode == 'same-rows' and sorted(sa) != sorted(sb):
        die(f'{a} and {b}: the rows differ; expected the same rows in another order')
    if mode == 'other-rows' and sorted(sa) == sorted(sb):
        die(f'{a} and {b}: the same rows (in another order); expected a repacking')

def tail(dump, k, out):
    k = int(k)
    with open(out, 'w') as f:
        for line in read_lines(dump):
            if int(line.split(' ')[1]) >= k:
                f.write(line + '\n')

if __name__ == '__main__':
    what, args = sys.argv[1], sys.argv[2:]
    if what == 'plan':
        check_plan(*args)
    elif what == 'resume':
        check_resume(*args)
    elif what == 'epochs':
        check_epochs(*args)
    elif what == 'tail':
        tail(*args)
    elif what == 'steps':
        print(1 + max(int(line.split(' ')[1]) for line in read_lines(args[0])))
    else:
        die(f'unknown check {what}')
PY
check() { "$python" "$work/check.py" "$@"; }


# plan_checked NAME W B REMAINDER CAPACITY ALGORITHM EPOCH BALANCE CONSUMED SEQUENCE [FLAGS...]:
# runs the plan with --json --dump-plan $work/NAME.txt (the report kept in $work/NAME.json)
# and checks both; sets steps.
plan_checked() {
  local name=$1 w=$2 b=$3 remainder=$4 capacity=$5 algorithm=$6 epoch=$7 balance=$8 consumed=$9 sequence=${10}
  shift 10
  local flags=(--lengths "$lengths_txt" --world-size "$w" --micro-batch "$b" --remainder "$remainder"
    --capacity "$capacity" --algorithm "$algorithm" --epoch "$epoch" --consumed-rows "$consumed"
    --json --dump-plan "$work/$name.txt" "$@")
  [[ $balance == yes ]] || flags+=(--no-balance)
  expect_success "${flags[@]}"
  cp "$work/out" "$work/$name.json"
  steps=$(check plan "$work/$name.json" "$work/$name.txt" "$lengths_txt" "$sequence" "$w" "$b" "$remainder" \
    "$capacity" "$epoch" "$balance" "$consumed") || fail "plan ${flags[*]}"
}

# ---------------------------------------------------------------------------------------------
# 1. The layout and contents of every plan, and 2. the epoch's sequence, whatever W and B: for
#    each capacity and algorithm, the plan with one rank and one row a step is the sequence;
#    every other plan's step s holds rows [sG, (s+1)G) of it, every sample at most once, the
#    padding (pad) or the samples left out (drop) only at the end, the balance recomputed.
for capacity in 2048 4096; do
  for algorithm in exact-fit randomized-exact-fit; do
    seq=$work/seq-$capacity-$algorithm.txt
    plan_checked "seq-$capacity-$algorithm" 1 1 pad "$capacity" "$algorithm" 0 yes 0 -
    for w in 1 3 8; do
      for b in 1 16; do
        for remainder in pad drop; do
          [[ $w$b$remainder != 11pad ]] || continue
          plan_checked plan "$w" "$b" "$remainder" "$capacity" "$algorithm" 0 yes 0 "$seq"
        done
      done
    done
    ok "--capacity $capacity --algorithm $algorithm, W 1 3 8 x B 1 16 x pad drop: steps x W x B lines, every rank the same steps, every sample once (or counted as dropped), padding only at the end, the balance as recomputed"
  done
done

for capacity in 2048 4096; do
  for algorithm in exact-fit randomized-exact-fit; do
    plan_checked w3b4 3 4 pad "$capacity" "$algorithm" 0 yes 0 "$work/seq-$capacity-$algorithm.txt"
  done
done
ok "W 3 B 4: step s holds rows [12s, 12s+12) of the W 1 B 1 plan, both capacities and algorithms"

# Capacity 512: three samples are longer than a row (dropped by the packer, --overlong drop);
# dropped_samples counts them and the samples of the rows left out by remainder drop.
for algorithm in exact-fit randomized-exact-fit; do
  plan_checked seq-512 1 1 pad 512 "$algorithm" 1 yes 0 - --seed 2
  for remainder in pad drop; do
    plan_checked plan 8 16 "$remainder" 512 "$algorithm" 1 yes 0 "$work/seq-512.txt" --seed 2
  done
done
ok "--capacity 512, W 8 B 16: dropped_samples counts the $(awk '$1 > 512' "$lengths_txt" | wc -l) samples longer than a row and those of the rows left out"

# ---------------------------------------------------------------------------------------------
# 3. --start-step K dumps exactly the steps >= K of the full plan.
for setup in "3 16 2048 exact-fit" "8 16 2048 randomized-exact-fit" "3 4 4096 exact-fit"; do
  read -r w b capacity algorithm <<<"$setup"
  flags=(--lengths "$lengths_txt" --world-size "$w" --micro-batch "$b" --capacity "$capacity" --algorithm "$algorithm" --seed 3)
  expect_success "${flags[@]}" --dump-plan "$work/full.txt"
  steps=$(check steps "$work/full.txt") || fail "the steps of $work/full.txt"
  for k in 1 $((steps - 1)); do
    expect_success "${flags[@]}" --start-step "$k" --dump-plan "$work/from.txt"
    check tail "$work/full.txt" "$k" "$work/tail.txt" || fail "the tail of $work/full.txt"
    cmp -s "$work/from.txt" "$work/tail.txt" ||
      fail "plan ${flags[*]} --start-step $k: the dump is not the lines of the full dump with step >= $k"
  done
  ok "--start-step 1 and $((steps - 1)) (W $w B $b $algorithm): the dump is the full dump's steps from there, byte for byte"
done

# ---------------------------------------------------------------------------------------------
# 4. Resuming with another world size: W 4 B 2 for k steps, then W 3 B 1 from --consumed-rows 8k.
for algorithm in exact-fit randomized-exact-fit; do
  plan_checked seq-resume 1 1 pad 4096 "$algorithm" 2 yes 0 - --seed 5
  plan_checked resume-full 4 2 pad 4096 "$algorithm" 2 yes 0 "$work/seq-resume.txt" --seed 5
  full_steps=$steps
  for k in 1 7 $((full_steps - 1)); do
    plan_checked resumed 3 1 pad 4096 "$algorithm" 2 yes $((8 * k)) "$work/seq-resume.txt" --seed 5
    check resume "$work/resume-full.txt" "$k" "$work/resumed.txt" "$work/seq-resume.txt" "$lengths_txt" ||
      fail "resume after $k steps of W 4 B 2 with W 3 B 1 --consumed-rows $((8 * k)) ($algorithm)"
  done
  ok "W 4 B 2 for k steps, then W 3 B 1 --consumed-rows 8k (k = 1, 7, $((full_steps - 1)); $algorithm): every row of the epoch once"
done

# ---------------------------------------------------------------------------------------------
# 5. Determinism, epochs and seeds.
flags=(--world-size 3 --micro-batch 4 --capacity 2048 --algorithm randomized-exact-fit --seed 9 --epoch 4)
expect_success "${flags[@]}" --dump-plan "$work/again-1.txt"
expect_success "${flags[@]}" --dump-plan "$work/again-2.txt"
cmp -s "$work/again-1.txt" "$work/again-2.txt" || fail "plan ${flags[*]} twice: different dumps"
expect_success "${flags[@]}" --lengths "$lengths_txt" --dump-plan "$work/again-3.txt"
cmp -s "$work/again-1.txt" "$work/again-3.txt" || fail "plan ${flags[*]}: --data and --lengths of the same data dump different plans"
ok "the same command twice, and with --lengths instead of --data, dumps the same plan byte for byte"

for algorithm in exact-fit randomized-exact-fit; do
  mode=$([[ $algorithm == exact-fit ]] && echo same-rows || echo other-rows)
  flags=(--lengths "$lengths_txt" --world-size 1 --micro-batch 1 --capacity 2048 --algorithm "$algorithm")
  expect_success "${flags[@]}" --dump-plan "$work/epoch-0.txt"
  expect_success "${flags[@]}" --epoch 1 --dump-plan "$work/epoch-1.txt"
  check epochs "$work/epoch-0.txt" "$work/epoch-1.txt" "$mode" "$lengths_txt" || fail "--epoch 0 and 1, $algorithm"
  expect_success "${flags[@]}" --seed 1 --dump-plan "$work/seed-1.txt"
  check epochs "$work/epoch-0.txt" "$work/seed-1.txt" "$mode" "$lengths_txt" || fail "--seed 0 and 1, $algorithm"
  ok "$algorithm: --epoch 1 and --seed 1 give another order$([[ $mode == other-rows ]] && echo ' and another packing' || echo ' of the same rows')"
done

# ---------------------------------------------------------------------------------------------
# 6. Balance: --no-balance gives rank r the r-th consecutive B rows of each step (checked with
#    the figures recomputed by plan_checked); balancing lowers the mean at W 8 B 16.
for capacity in 2048 4096; do
  for algorithm in exact-fit randomized-exact-fit; do
    for setup in "3 16 pad" "8 16 pad" "8 16 drop" "3 4 pad"; do
      read -r w b remainder <<<"$setup"
      plan_checked plain "$w" "$b" "$remainder" "$capacity" "$algorithm" 0 no 0 "$work/seq-$capacity-$algorithm.txt"
    done
  done
done
ok "--no-balance: rank r takes the r-th consecutive B rows of each step; balance_mean/worst are the unbalanced ones, as recomputed"

for capacity in 2048 4096; do
  plan_checked balanced 8 16 pad "$capacity" exact-fit 0 yes 0 "$work/seq-$capacity-exact-fit.txt"
  plan_checked plain 8 16 pad "$capacity" exact-fit 0 no 0 "$work/seq-$capacity-exact-fit.txt"
  "$python" -c '
import json, sys
balanced, plain = (json.load(open(p))["balance_mean"] for p in sys.argv[1:3])
if not balanced < plain:
    sys.exit(f"W 8 B 16: balance_mean {balanced} balanced, {plain} not balanced")' "$work/balanced.json" "$work/plain.json" ||
    fail "balancing does not lower balance_mean at W 8 B 16, capacity $capacity"
done
ok "W 8 B 16: the balanced mean (as recomputed) is below the unbalanced one"

# ---------------------------------------------------------------------------------------------
# 7. The human report.
expect_success --world-size 3 --micro-batch 4
grep -qw 'steps' "$work/out" || fail "the report does not mention steps: $(cat "$work/out")"
grep -qw 'balance' "$work/out" || fail "the report does not mention the balance: $(cat "$work/out")"
ok "the human report exits 0 and mentions steps and balance"

# ---------------------------------------------------------------------------------------------
# 8. Bad input: one-line errors (expect_error, in harness.sh).

printf '5\n7\n9\n' >"$work/three.txt"
: >"$work/empty.txt"
expect_success --world-size 3 --micro-batch 16 --json
steps_3x16=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["steps"])' "$work/out")
# 158 rows at the default capacity 4096 (from the W 1 B 1 plan above).
rows_4096=$(wc -l <"$work/seq-4096-exact-fit.txt")

expect_error "world_size" --world-size 0 --micro-batch 1
expect_error "micro_batch" --world-size 1 --micro-batch 0
expect_error "--world-size" --micro-batch 1
expect_error "--micro-batch" --world-size 1
expect_error "the directory $work/missing does not exist" --world-size 1 --micro-batch 1 --dump-plan "$work/missing/plan.txt"
expect_error "--dump-plan $work: a directory; give a file name" --world-size 1 --micro-batch 1 --dump-plan "$work"
expect_error "--dump-plan: expected a path, got an empty value" --world-size 1 --micro-batch 1 --dump-plan ""
expect_error "bogus" --world-size 1 --micro-batch 1 --remainder bogus
expect_error "--start-step $steps_3x16" --world-size 3 --micro-batch 16 --start-step "$steps_3x16"
expect_error "4 ranks" --lengths "$work/three.txt" --world-size 4 --micro-batch 1
expect_error "remainder drop" --world-size 8 --micro-batch $(((rows_4096 + 8) / 8)) --remainder drop
expect_error "consumed_rows $((rows_4096 + 1))" --world-size 1 --micro-batch 1 --consumed-rows $((rows_4096 + 1))
# Every row consumed (a checkpoint after the epoch's last step): a plan of no step, not an error
# about a --start-step 0 the user did not give.
expect_success --world-size 2 --micro-batch 1 --consumed-rows "$rows_4096" --json
"$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["steps"] == 0, r["steps"]' "$work/out" ||
  fail "--consumed-rows $rows_4096 (every row): not a plan of no step"
ok "--consumed-rows $rows_4096 (every row): a plan of no step"
expect_error "--start-step 1 is past the end of the epoch (0 steps" --world-size 2 --micro-batch 1 \
  --consumed-rows "$rows_4096" --start-step 1
expect_error "--repeat" --world-size 1 --micro-batch 1 --repeat 0
expect_error "no rows" --lengths "$work/empty.txt" --world-size 1 --micro-batch 1
expect_error "'-1'" --world-size 1 --micro-batch 1 --epoch -1
expect_error "'18446744073709551616'" --world-size 1 --micro-batch 1 --seed 18446744073709551616
expect_error "'-2'" --world-size 1 --micro-batch 1 --consumed-rows -2
expect_error "at most 16777216" --world-size 1 --micro-batch 100000000
expect_error "$work/no-such-dir/plan.txt" --world-size 1 --micro-batch 1 --dump-plan "$work/no-such-dir/plan.txt"

rm -rf "$work"
echo "all plan command checks passed"
