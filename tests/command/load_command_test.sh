#!/usr/bin/env bash
# multipack-bench load, the way a user sees it: the batches written by --dump-batches (.npy)
# checked against the plan that `multipack-bench plan --dump-plan` dumps for the same options
# and against the tokens read independently from data/alpaca/alpaca_llama.bin/.idx (input_ids,
# labels with the prompts of prompt_lengths.txt masked or not, position_ids, sequence_ids,
# cu_seqlens, max_seqlen; int32 and int64; fixed rows and --pad-to-multiple); the JSON report's
# counts recomputed from the plan; --max-steps, --start-step, --epochs; the same bytes with any
# number of threads; one-line errors on bad input.
#
#   bash tests/command/load_command_test.sh <multipack-bench> <source-dir> <scratch-dir>
#
# Each check prints one line; the first failure prints FAIL and exits non-zero. Needs bash and
# python3 (standard library only; numpy, when importable, reads the .npy files a second time).
set -euo pipefail

source "$(dirname "$0")/harness.sh" load "$@"
prompts=$source_dir/data/alpaca/prompt_lengths.txt

# ---------------------------------------------------------------------------------------------
# The checker: python3, standard library only.
#   check.py batches DIR PREFIX PROMPTS RANK B CAPACITY START COUNT NAMING TOI DTYPE PAD PLAN...
#       DIR holds exactly the .npy files of the first COUNT batches of rank RANK, from step START
#       of the epoch of the first PLAN dump, then the epochs of the next ones from step 0; each
#       batch as the plan and the tokens say. NAMING: step (step{S}_rank{R}_...) or epoch
#       (epoch{E}_step{S}_rank{R}_...). TOI: yes|no (--train-on-inputs). DTYPE: i4|i8. PAD: the
#       --pad-to-multiple (0: rows of the capacity).
#   check.py report REPORT PREFIX PROMPTS RANK W B CAPACITY START MAX_STEPS TOI DTYPE PAD THREADS DEPTH
#                   LAYOUT PLAN_JSON PLAN...
#       The --json report against the plans (one dump and its --json for the first epoch, then
#       the dumps of the later epochs): batches, tokens, real_tokens, loss_tokens, output_bytes
#       recomputed; the rates and fractions consistent. MAX_STEPS: 0 for none. LAYOUT: yes to
#       check batch_bytes against the layout's formula (every packed row is in the dump).
#   check.py values DIR_A DIR_B   the same file names, the same values (int32 vs int64 dumps)
cat >"$work/check.py" <<'PY'
import ast, math, os, struct, sys

from dump_format import die, number_re, piece_re, read_json_line

IGNORE = -100
ARRAYS = ['input_ids', 'labels', 'position_ids', 'sequence_ids', 'cu_seqlens', 'max_seqlen']


def read_megatron(prefix):
    """Every sample's tokens, read from PREFIX.idx/.bin with struct alone."""
    with open(prefix + '.idx', 'rb') as f:
        idx = f.read()
    if idx[:9] != b'MMIDIDX\x00\x00':
        die(f'{prefix}.idx: bad magic {idx[:9]!r}')
    version, = struct.unpack_from('<Q', idx, 9)
    dtype = idx[17]
    count, _documents = struct.unpack_from('<QQ', idx, 18)
    if version != 1 or dtype != 8:
        die(f'{prefix}.idx: version {version}, dtype {dtype}; the checker reads version 1, uint16 (8)')
    sizes = struct.unpack_from(f'<{count}i', idx, 34)
    pointers = struct.unpack_from(f'<{count}q', idx, 34 + 4 * count)
    with open(prefix + '.bin', 'rb') as f:
        data = f.read()
    return [list(struct.unpack_from(f'<{n}H', data, p)) for n, p in zip(sizes, pointers)]


def read_prompts(path):
    with open(path) as f:
        return [int(line) for line in f.read().split('\n') if line.strip()]


def read_npy(path):
    """(descr, shape, values) of a .npy file, version 1.0, C order, little-endian integers."""
    with open(path, 'rb') as f:
        raw = f.read()
    if raw[:6] != b'\x93NUMPY' or raw[6:8] != b'\x01\x00':
        die(f'{path}: not a .npy file of version 1.0: {raw[:8]!r}')
    length, = struct.unpack_from('<H', raw, 8)
    if (10 + length) % 64:
        die(f'{path}: the header ends at byte {10 + length}, not a multiple of 64')
    header = raw[10:10 + length].decode('latin1')
    if not header.endswith('\n'):
        die(f'{path}: the header does not end with a newline: {header!r}')
    try:
        d = ast.literal_eval(header)
    except (ValueError, SyntaxError) as e:
        die(f'{path}: the header is not a Python literal ({e}): {header!r}')
    if not isinstance(d, dict) or sorted(d) != ['descr', 'fortran_order', 'shape']:
        die(f'{path}: the header is not a dict of descr, fortran_order, shape: {header!r}')
    if d['fortran_order'] is not False:
        die(f'{path}: fortran_order is {d["fortran_order"]!r}')
    code = {'<i4': 'i', '<i8': 'q'}.get(d['descr'])
    if code is None:
        die(f'{path}: descr {d["descr"]!r}, expected <i4 or <i8')
    shape = d['shape']
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        die(f'{path}: shape {shape!r}')
    n = math.prod(shape)
    data = raw[10 + length:]
    if len(data) != n * struct.calcsize(code):
        die(f'{path}: {len(data)} bytes of data, shape {shape} of {d["descr"]} needs {n * struct.calcsize(code)}')
    values = list(struct.unpack(f'<{n}{code}', data))
    if numpy is not None:
        a = numpy.load(path)
        if a.dtype.str != d['descr'] or a.shape != shape or a.reshape(-1).tolist() != values:
            die(f'{path}: numpy.load reads {a.dtype.str} {a.shape}, not what the header and data say')
    return d['descr'], shape, values


try:
    import numpy
except ImportError:
    numpy = None


def read_plan(path, lengths):
    """{(step, rank): [row, ...] in slot order}, a row being [(sample, begin, end), ...]; the epoch."""
    cells, epochs = {}, set()
    with open(path) as f:
        for n, line in enumerate(f, 1):
            fields = line.split()
            if len(fields) < 4 or not all(number_re.match(x) for x in fields[:4]):
                die(f'{path}: line {n}: {line[:100]!r}')
            epoch, step, rank, slot = map(int, fields[:4])
            epochs.add(epoch)
            row = []
            for token in fields[4:]:
                m = piece_re.match(token)
                if not m:
                    die(f'{path}: line {n}: piece {token!r}')
                i = int(m.group(1))
                b, e = (0, lengths[i]) if m.group(2) is None else (int(m.group(2)), int(m.group(3)))
                row.append((i, b, e))
            rows = cells.setdefault((step, rank), [])
            if slot != len(rows):
                die(f'{path}: line {n}: slot {slot} of step {step}, rank {rank} out of order')
            rows.append(row)
    if len(epochs) != 1:
        die(f'{path}: epochs {sorted(epochs)} in one dump')
    steps = 1 + max(step for step, _ in cells)
    return epochs.pop(), steps, cells


def row_length(rows, capacity, pad):
    longest = max(sum(e - b for _, b, e in row) for row in rows)
    if pad == 0:
        return capacity
    return min(-(-max(longest, 1) // pad) * pad, capacity)


def expected_batch(rows, tokens, prompts, toi, capacity, pad):
    """The six arrays of a batch, by the conventions of collate.hpp, built from the plan's rows
    and the tokens: flat lists, and the row length."""
    length = row_length(rows, capacity, pad)
    ids, labels, positions, sequences, cu = [], [], [], [], [0]
    longest_segment = 0
    for row in rows:
        used = 0
        for n, (i, b, e) in enumerate(row, 1):
            t = tokens[i][b:e]
            ids += t
            piece_labels = [IGNORE if (not toi and b + k < prompts[i]) else t[k] for k in range(e - b)]
            piece_labels[0] = IGNORE
            labels += piece_labels
            positions += range(e - b)
            sequences += [n] * (e - b)
            used += e - b
            cu.append(cu[-1] + e - b)
            longest_segment = max(longest_segment, e - b)
        pad_tokens = length - used
        if pad_tokens < 0:
            die(f'a row of {used} tokens is longer than the row length {length}')
        ids += [0] * pad_tokens
        labels += [IGNORE] * pad_tokens
        positions += range(pad_tokens)
        sequences += [0] * pad_tokens
        if pad_tokens:
            cu.append(cu[-1] + pad_tokens)
            longest_segment = max(longest_segment, pad_tokens)
    return length, {'input_ids': ids, 'labels': labels, 'position_ids': positions, 'sequence_ids': sequences,
                    'cu_seqlens': cu, 'max_seqlen': [longest_segment]}


def schedule(plans, start, count):
    """The (epoch, step, rows) of the run, in order: the first plan from `start`, the others
    from 0, at most `count`."""
    out = []
    for k, (epoch, steps, cells, rank) in enumerate(plans):
        for step in range(start if k == 0 else 0, steps):
            if len(out) == count:
                return out
            out.append((epoch, step, cells[(step, rank)]))
    return out


def load_plans(paths, lengths, rank):
    plans = []
    for path in paths:
        epoch, steps, cells = read_plan(path, lengths)
        if (0, rank) not in cells:
            die(f'{path}: no rank {rank}')
        plans.append((epoch, steps, cells, rank))
    return plans


def check_batches(directory, prefix, prompts_path, rank, batch, capacity, start, count, naming, toi, dtype, pad, *plan_paths):
    rank, batch, capacity, start, count, pad = map(int, (rank, batch, capacity, start, count, pad))
    toi = toi == 'yes'
    tokens = read_megatron(prefix)
    prompts = read_prompts(prompts_path)
    plans = load_plans(plan_paths, [len(t) for t in tokens], rank)
    run = schedule(plans, start, count)
    expected_files = set()
    for epoch, step, rows in run:
        stem = (f'epoch{epoch}_' if naming == 'epoch' else '') + f'step{step:06d}_rank{rank}'
        if len(rows) != batch:
            die(f'the plan has {len(rows)} rows for step {step}, rank {rank}, not {batch}')
        length, want = expected_batch(rows, tokens, prompts, toi, capacity, pad)
        if pad and (length % pad or length < max(sum(e - b for _, b, e in row) for row in rows)):
            die(f'{stem}: the expected row length {length} is not a multiple of {pad} at least the longest row')
        for array in ARRAYS:
            path = os.path.join(directory, f'{stem}_{array}.npy')
            expected_files.add(os.path.basename(path))
            if not os.path.exists(path):
                die(f'{path}: missing (expected the first {count} batches of rank {rank} from step {start})')
            descr, shape, values = read_npy(path)
            want_descr = '<i4' if array in ('cu_seqlens', 'max_seqlen') else f'<{dtype}'
            want_shape = {'cu_seqlens': (len(want['cu_seqlens']),), 'max_seqlen': ()}.get(array, (batch, length))
            if descr != want_descr or shape != want_shape:
                die(f'{path}: {descr} {shape}, expected {want_descr} {want_shape}')
            if values != list(want[array]):
                bad = next(k for k, (a, b) in enumerate(zip(values, want[array])) if a != b)
                where = f'row {bad // length}, column {bad % length}' if len(shape) == 2 else f'element {bad}'
                row = rows[bad // length] if len(shape) == 2 else None
                die(f'{path}: {where}: {values[bad]}, expected {want[array][bad]} (epoch {epoch}, step {step}, '
                    f'rank {rank}' + ('' if row is None else f'; the row\'s pieces (sample, begin, end): {row[:8]}') + ')')
    present = set(os.listdir(directory))
    if present != expected_files:
        die(f'{directory}: unexpected files {sorted(present - expected_files)[:6]}, missing {sorted(expected_files - present)[:6]}')
    print(len(run))


def close(a, b, tolerance=1e-6):
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-300)


def check_report(report, prefix, prompts_path, rank, world, batch, capacity, start, max_steps, toi, dtype, pad,
                 threads, depth, layout, plan_json, *plan_paths):
    rank, world, batch, capacity, start, max_steps, pad, threads, depth = map(
        int, (rank, world, batch, capacity, start, max_steps, pad, threads, depth))
    toi = toi == 'yes'
    size = 4 if dtype == 'i4' else 8
    r = read_json_line(report)
    numbers = ['batches', 'tokens', 'real_tokens', 'loss_tokens', 'seconds', 'tokens_per_second',
               'output_bytes_per_second', 'memcpy_bytes_per_second', 'memcpy_bytes_per_second_one_thread',
               'consumer_wait_seconds', 'consumer_wait_fraction', 'producer_busy_fraction', 'mean_ready',
               'max_ready', 'depth', 'threads', 'peak_rss_bytes', 'batch_bytes', 'world_size', 'micro_batch',
               'capacity', 'steps', 'epochs', 'output_bytes', 'producer_busy_seconds', 'rank', 'start_step',
               'dump_seconds']
    missing = [k for k in numbers if k not in r]
    if missing:
        die(f'--json lacks keys {missing}: {sorted(r)}')
    for k in numbers:
        if not isinstance(r[k], (int, float)) or isinstance(r[k], bool) or r[k] < 0 or not math.isfinite(r[k]):
            die(f'--json: {k} = {r[k]!r}, expected a non-negative number')
    tokens = read_megatron(prefix)
    lengths = [len(t) for t in tokens]
    prompts = read_prompts(prompts_path)
    plans = load_plans(plan_paths, lengths, rank)
    plan_report = read_json_line(plan_json)
    if plan_report['steps'] != plans[0][1]:
        die(f'{plan_json}: steps {plan_report["steps"]}, its dump has {plans[0][1]}')
    total = sum(p[1] for p in plans) - start
    want_batches = min(total, max_steps) if max_steps else total
    run = schedule(plans, start, want_batches)
    want = dict(batches=want_batches, tokens=0, real_tokens=0, loss_tokens=0, output_bytes=0)
    for _, _, rows in run:
        length = row_length(rows, capacity, pad)
        want['tokens'] += batch * length
        segments = 0
        for row in rows:
            used = sum(e - b for _, b, e in row)
            want['real_tokens'] += used
            for i, b, e in row:
                want['loss_tokens'] += (e - b - 1) if toi else max(0, e - max(b + 1, prompts[i]))
            segments += len(row) + (1 if used < length else 0)
        want['output_bytes'] += 4 * batch * length * size + 4 * (segments + 1)
    want.update(world_size=world, rank=rank, micro_batch=batch, capacity=capacity, steps=plan_report['steps'],
                epochs=len(plans), start_step=start, threads=threads, depth=depth)
    for key, value in want.items():
        if r[key] != value:
            die(f'--json: {key} = {r[key]}, expected {value} (recomputed from the plan and the tokens)')
    s = r['seconds']
    if s <= 0:
        die(f'--json: seconds = {s}')
    for key, value in [('tokens_per_second', r['tokens'] / s), ('output_bytes_per_second', r['output_bytes'] / s),
                       ('consumer_wait_fraction', r['consumer_wait_seconds'] / s),
                       ('producer_busy_fraction', r['producer_busy_seconds'] / (threads * (s + r['dump_seconds'])))]:
        if not close(r[key], value):
            die(f'--json: {key} = {r[key]}, expected {value} from the other figures')
    for key in ['consumer_wait_fraction', 'producer_busy_fraction']:
        if r[key] > 1 + 1e-9:
            die(f'--json: {key} = {r[key]}, more than 1: a part of the time outside the run')
    if not (0 <= r['mean_ready'] <= r['max_ready'] <= depth):
        die(f'--json: mean_ready {r["mean_ready"]}, max_ready {r["max_ready"]}, depth {depth}: expected 0 <= mean <= max <= depth')
    if r['memcpy_bytes_per_second'] <= 0 or r['memcpy_bytes_per_second_one_thread'] <= 0 or r['peak_rss_bytes'] <= 0:
        die('--json: a memcpy rate or the peak memory is 0')
    if layout == 'yes':
        # batch_layout::bytes: 4 arrays of B x C, cu_seqlens of B x (most pieces a row + 1) + 1.
        most = max(len(row) for rows in plans[0][2].values() for row in rows)
        want_bytes = 4 * batch * capacity * size + 4 * (batch * (min(most, capacity) + 1) + 1)
        if r['batch_bytes'] != want_bytes:
            die(f'--json: batch_bytes = {r["batch_bytes"]}, the layout of the plan has {want_bytes}')
    print(r['batches'])


def check_values(a, b):
    names_a, names_b = sorted(os.listdir(a)), sorted(os.listdir(b))
    if names_a != names_b or not names_a:
        die(f'{a} and {b} hold different files')
    for name in names_a:
        da, sa, va = read_npy(os.path.join(a, name))
        db, sb, vb = read_npy(os.path.join(b, name))
        if sa != sb or va != vb:
            die(f'{name}: {da} {sa} in {a}, {db} {sb} in {b}: different shapes or values')


commands = {'batches': check_batches, 'report': check_report, 'values': check_values}
if len(sys.argv) < 2 or sys.argv[1] not in commands:
    die(f'usage: check.py {"|".join(commands)} ...')
commands[sys.argv[1]](*sys.argv[2:])
PY
check() { "$python" "$work/check.py" "$@"; }

# plan_dump NAME FLAGS...: the plan of the same options, --json to $work/NAME.json and
# --dump-plan to $work/NAME.txt.
plan_dump() {
  local name=$1
  shift
  "$bench" plan --data "$prefix" "$@" --json --dump-plan "$work/$name.txt" >"$work/$name.json" 2>"$work/plan.err" ||
    fail "plan $* exited non-zero: $(head -c 300 "$work/plan.err")"
}
steps_of() { "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["steps"])' "$1"; }

# ---------------------------------------------------------------------------------------------
# 1. The dumped batches: W 2, rank 1, B 4, capacity 2048, the prompts masked; checked array by
#    array against the plan's rows and the tokens of the .bin, then the report's counts.
# The memcpy floor's buffers: 16 MiB rather than the default (up to 2 x 256 MiB, whose first
# touch costs a second in some virtual machines); the human report below runs with the default.
floor=(--memcpy-buffer-mib 16)
common=(--world-size 2 --micro-batch 4 --capacity 2048)
load=(--data "$prefix" --prompt-lengths "$prompts" --rank 1 "${common[@]}" "${floor[@]}")
plan_dump plan "${common[@]}"
steps=$(steps_of "$work/plan.json")
expect_success "${load[@]}" --json --dump-batches "$work/d32" --dump-count 5
cp "$work/out" "$work/d32.json"
check batches "$work/d32" "$prefix" "$prompts" 1 4 2048 0 5 step no i4 0 "$work/plan.txt" >/dev/null ||
  fail "load ${load[*]} --dump-batches: the batches"
check report "$work/d32.json" "$prefix" "$prompts" 1 2 4 2048 0 0 no i4 0 1 4 yes "$work/plan.json" "$work/plan.txt" >/dev/null ||
  fail "load ${load[*]} --json: the report"
ok "W 2 rank 1 B 4 C 2048, prompts masked: 5 dumped batches = the plan's rows of rank 1 and the .bin's tokens (6 arrays each); the report's $steps batches and token counts as recomputed"

# Another algorithm, seed and first epoch: the schedule is still the plan's.
plan_dump plan-r "${common[@]}" --algorithm randomized-exact-fit --seed 7 --epoch 3
expect_success "${load[@]}" --algorithm randomized-exact-fit --seed 7 --epoch 3 --json --dump-batches "$work/dr" --dump-count 3
cp "$work/out" "$work/dr.json"
check batches "$work/dr" "$prefix" "$prompts" 1 4 2048 0 3 step no i4 0 "$work/plan-r.txt" >/dev/null ||
  fail "--algorithm randomized-exact-fit --seed 7 --epoch 3: the batches"
check report "$work/dr.json" "$prefix" "$prompts" 1 2 4 2048 0 0 no i4 0 1 4 yes "$work/plan-r.json" "$work/plan-r.txt" >/dev/null ||
  fail "--algorithm randomized-exact-fit --seed 7 --epoch 3: the report"
ok "--algorithm randomized-exact-fit --seed 7 --epoch 3: the batches and counts of the plan of the same options"

expect_success "${load[@]}" --train-on-inputs --json --dump-batches "$work/dt" --dump-count 3
cp "$work/out" "$work/dt.json"
check batches "$work/dt" "$prefix" "$prompts" 1 4 2048 0 3 step yes i4 0 "$work/plan.txt" >/dev/null ||
  fail "--train-on-inputs: the batches"
check report "$work/dt.json" "$prefix" "$prompts" 1 2 4 2048 0 0 yes i4 0 1 4 yes "$work/plan.json" "$work/plan.txt" >/dev/null ||
  fail "--train-on-inputs: the report"
ok "--train-on-inputs: prompt tokens labeled (only piece starts and padding ignored), loss_tokens as recomputed"

expect_success "${load[@]}" --int64 --json --dump-batches "$work/d64" --dump-count 5
cp "$work/out" "$work/d64.json"
check batches "$work/d64" "$prefix" "$prompts" 1 4 2048 0 5 step no i8 0 "$work/plan.txt" >/dev/null || fail "--int64: the batches"
check values "$work/d32" "$work/d64" || fail "--int64: other values than int32"
check report "$work/d64.json" "$prefix" "$prompts" 1 2 4 2048 0 0 no i8 0 1 4 yes "$work/plan.json" "$work/plan.txt" >/dev/null ||
  fail "--int64: the report"
ok "--int64: '<i8' token arrays holding the int32 dump's values; cu_seqlens and max_seqlen stay '<i4'"

expect_success "${load[@]}" --pad-to-multiple 64 --json --dump-batches "$work/dp" --dump-count 5
cp "$work/out" "$work/dp.json"
check batches "$work/dp" "$prefix" "$prompts" 1 4 2048 0 5 step no i4 64 "$work/plan.txt" >/dev/null ||
  fail "--pad-to-multiple 64: the batches"
check report "$work/dp.json" "$prefix" "$prompts" 1 2 4 2048 0 0 no i4 64 1 4 yes "$work/plan.json" "$work/plan.txt" >/dev/null ||
  fail "--pad-to-multiple 64: the report"
ok "--pad-to-multiple 64: each batch's rows are its longest row rounded up to a multiple of 64; tokens as recomputed"

# Without a loss mask every token but piece starts and padding carries loss; rank 0.
plan_dump plan-w1 --world-size 1 --micro-batch 16 --capacity 4096
expect_success "${floor[@]}" --json --dump-batches "$work/dd" --dump-count 2
cp "$work/out" "$work/dd.json"
check batches "$work/dd" "$prefix" "$prompts" 0 16 4096 0 2 step yes i4 0 "$work/plan-w1.txt" >/dev/null ||
  fail "the defaults (no --prompt-lengths): the batches"
check report "$work/dd.json" "$prefix" "$prompts" 0 1 16 4096 0 0 yes i4 0 1 4 yes "$work/plan-w1.json" "$work/plan-w1.txt" >/dev/null ||
  fail "the defaults: the report"
ok "the defaults (C 4096, B 16, W 1, no prompt lengths): batches and report as the plan says"

# Samples split over rows (--overlong split at capacity 256): pieces that start mid-sample
# restart their positions, and only their tokens before the prompt's end are masked. The dump
# starts at the first step that holds such a piece.
split=(--world-size 1 --micro-batch 2 --capacity 256 --overlong split)
plan_dump plan-split "${split[@]}"
k=$("$python" -c '
import sys
for line in open(sys.argv[1]):
    f = line.split()
    if any(p.count(":") == 2 and p.split(":")[1] != "0" for p in f[4:]):
        print(f[1]); break' "$work/plan-split.txt")
[[ -n $k ]] || fail "--overlong split at capacity 256: no piece starts mid-sample in $work/plan-split.txt"
expect_success --prompt-lengths "$prompts" "${split[@]}" "${floor[@]}" --start-step "$k" --json --dump-batches "$work/dsp" --dump-count 2
check batches "$work/dsp" "$prefix" "$prompts" 0 2 256 "$k" 2 step no i4 0 "$work/plan-split.txt" >/dev/null ||
  fail "--overlong split --capacity 256 --start-step $k: the batches"
ok "--overlong split --capacity 256: step $k's piece that starts mid-sample restarts its positions, masks only the prompt's tokens"

# ---------------------------------------------------------------------------------------------
# 2. Stopping early, resuming, several epochs, other schedules.
expect_success "${load[@]}" --max-steps 3 --json --dump-batches "$work/dm" --dump-count 10
cp "$work/out" "$work/dm.json"
check report "$work/dm.json" "$prefix" "$prompts" 1 2 4 2048 0 3 no i4 0 1 4 yes "$work/plan.json" "$work/plan.txt" >/dev/null ||
  fail "--max-steps 3: the report"
check batches "$work/dm" "$prefix" "$prompts" 1 4 2048 0 3 step no i4 0 "$work/plan.txt" >/dev/null ||
  fail "--max-steps 3 --dump-count 10: the batches"
ok "--max-steps 3: 3 batches (and 3 dumped of --dump-count 10), the loader stopped mid-epoch"

k=$((steps - 3))
expect_success "${load[@]}" --start-step "$k" --json --dump-batches "$work/ds" --dump-count 2
cp "$work/out" "$work/ds.json"
check report "$work/ds.json" "$prefix" "$prompts" 1 2 4 2048 "$k" 0 no i4 0 1 4 yes "$work/plan.json" "$work/plan.txt" >/dev/null ||
  fail "--start-step $k: the report"
check batches "$work/ds" "$prefix" "$prompts" 1 4 2048 "$k" 2 step no i4 0 "$work/plan.txt" >/dev/null ||
  fail "--start-step $k: the batches"
ok "--start-step $k: steps - $k = 3 batches, the first ones steps $k and $((k + 1)) of the plan"

plan_dump plan-e1 "${common[@]}" --epoch 1
k=$((steps - 2))
expect_success "${load[@]}" --epochs 2 --start-step "$k" --json --dump-batches "$work/de" --dump-count 4
cp "$work/out" "$work/de.json"
check batches "$work/de" "$prefix" "$prompts" 1 4 2048 "$k" 4 epoch no i4 0 "$work/plan.txt" "$work/plan-e1.txt" >/dev/null ||
  fail "--epochs 2 --start-step $k: the batches"
check report "$work/de.json" "$prefix" "$prompts" 1 2 4 2048 "$k" 0 no i4 0 1 4 yes "$work/plan.json" "$work/plan.txt" "$work/plan-e1.txt" >/dev/null ||
  fail "--epochs 2 --start-step $k: the report"
expect_success "${load[@]}" --epochs 2 --max-steps 3 --json
cp "$work/out" "$work/de3.json"
check report "$work/de3.json" "$prefix" "$prompts" 1 2 4 2048 0 3 no i4 0 1 4 yes "$work/plan.json" "$work/plan.txt" "$work/plan-e1.txt" >/dev/null ||
  fail "--epochs 2 --max-steps 3: the report"
ok "--epochs 2 --start-step $k: epoch 0's last 2 steps then epoch 1 from step 0 (epoch{E}_step... files), as the plans of epochs 0 and 1"

others=(--world-size 3 --micro-batch 4 --capacity 2048 --remainder drop --no-balance)
plan_dump plan-nb "${others[@]}"
expect_success --prompt-lengths "$prompts" --rank 2 "${others[@]}" "${floor[@]}" --json --dump-batches "$work/dn" --dump-count 2
cp "$work/out" "$work/dn.json"
check batches "$work/dn" "$prefix" "$prompts" 2 4 2048 0 2 step no i4 0 "$work/plan-nb.txt" >/dev/null ||
  fail "--world-size 3 --rank 2 --remainder drop --no-balance: the batches"
check report "$work/dn.json" "$prefix" "$prompts" 2 3 4 2048 0 0 no i4 0 1 4 no "$work/plan-nb.json" "$work/plan-nb.txt" >/dev/null ||
  fail "--world-size 3 --rank 2 --remainder drop --no-balance: the report"
ok "--world-size 3 --rank 2 --remainder drop --no-balance: the plan's steps and rows"

# ---------------------------------------------------------------------------------------------
# 3. The same bytes whatever the threads and depth.
for setup in "2 4" "3 2" "1 1"; do
  read -r threads depth <<<"$setup"
  expect_success "${load[@]}" --threads "$threads" --depth "$depth" --json --dump-batches "$work/t$threads" --dump-count 5
  cp "$work/out" "$work/t$threads.json"
  diff -r "$work/d32" "$work/t$threads" >/dev/null || fail "--threads $threads --depth $depth: other bytes than --threads 1 --depth 4"
  check report "$work/t$threads.json" "$prefix" "$prompts" 1 2 4 2048 0 0 no i4 0 "$threads" "$depth" yes "$work/plan.json" "$work/plan.txt" >/dev/null ||
    fail "--threads $threads --depth $depth: the report"
done
ok "--threads 2 --depth 4, --threads 3 --depth 2, --threads 1 --depth 1: dumps byte-identical to --threads 1 --depth 4"

# A simulated step changes when the batches are taken, never which: the same dump.
expect_success "${load[@]}" --step-ms 1 --threads 2 --json --dump-batches "$work/step1" --dump-count 5
"$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["step_ms"] == 1, r["step_ms"]' "$work/out" ||
  fail "--step-ms 1: the report"
diff -r "$work/d32" "$work/step1" >/dev/null || fail "--step-ms 1: other bytes than without a step"
ok "--step-ms 1: reported, and the dumps byte-identical to the run without a step"

# ---------------------------------------------------------------------------------------------
# 4. The human report, with the default memcpy floor.
expect_success --data "$prefix" --prompt-lengths "$prompts" --rank 1 "${common[@]}"
for word in batches tokens memcpy waited busy; do
  grep -qw "$word" "$work/out" || fail "the report does not mention $word: $(cat "$work/out")"
done
ok "the human report exits 0 and mentions batches, tokens, memcpy, waited, busy"

# --repeat-data N: the data seen N times over; the steps are those of a plan of the lengths
# repeated N times.
for copies in 1 2 3; do
  : >"$work/repeated.txt"
  for ((k = 0; k < copies; k++)); do cat "$lengths_txt" >>"$work/repeated.txt"; done
  "$bench" plan --lengths "$work/repeated.txt" --world-size 2 --micro-batch 4 --capacity 2048 --json >"$work/plan.json" ||
    fail "plan --lengths repeated.txt failed"
  expect_success --repeat-data "$copies" --world-size 2 --rank 1 --micro-batch 4 --capacity 2048 --json \
    --prompt-lengths "$source_dir/data/alpaca/prompt_lengths.txt"
  "$python" -c '
import json, sys
plan, load = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
if load["batches"] != plan["steps"]:
    sys.exit("--repeat-data %s: %d batches, the plan of the repeated lengths has %d steps"
             % (sys.argv[3], load["batches"], plan["steps"]))
if load["repeat_data"] != int(sys.argv[3]):
    sys.exit("--repeat-data %s: the report says %r" % (sys.argv[3], load["repeat_data"]))
' "$work/plan.json" "$work/out" "$copies" || fail "--repeat-data $copies"
done
ok "--repeat-data 1, 2, 3: as many batches as the plan of the lengths repeated has steps, and the report says N"
# Past 2^32 - 2 samples: refused at once. 5,000 x 3689348814741911 wrapped past 2^64 to 3,384
# samples, and 10^9 copies ran out of memory sizing the lengths.
samples=$(wc -l <"$lengths_txt")
expect_error "past 2^32 - 2 samples" --repeat-data $(( (4294967294 / samples) + 1 ))
expect_error "past 2^32 - 2 samples" --repeat-data 3689348814741911
ok "--repeat-data past 2^32 - 2 samples: a one-line error, before anything is sized by it"

# ---------------------------------------------------------------------------------------------
# 5. Bad input: one-line errors (expect_error, in harness.sh).
printf '5\n7\n9\n' >"$work/three.txt"
awk '{ print $1 + 1 }' "$lengths_txt" >"$work/too-long.txt"
: >"$work/a-file"
expect_error "rank 2" --world-size 2 --rank 2
expect_error "--world-size" --world-size 0
expect_error "--micro-batch" --micro-batch 0
expect_error "$work/three.txt" --prompt-lengths "$work/three.txt"
expect_error "exceeds" --prompt-lengths "$work/too-long.txt"
expect_error "$work/no-such-file" --prompt-lengths "$work/no-such-file"
expect_error "--threads" --threads 0
expect_error "--depth" --depth 0
expect_error "'-5'" --step-ms -5
expect_error "'nan'" --step-ms nan
expect_error "$work/no-such-data" --data "$work/no-such-data"
expect_error "--lengths" --lengths "$lengths_txt"
expect_error "--resample" --resample 10
expect_error "--epochs" --epochs 0
expect_error "--max-steps" --max-steps 0
expect_error "--start-step $steps" "${common[@]}" --start-step "$steps"
expect_error "bogus" --remainder bogus
expect_error "bogus" --algorithm bogus
expect_error "capacity" --capacity 0
expect_error "--repeat-data" --repeat-data 0
expect_error "--depth" --depth 1000000000
expect_error "--depth: expected an integer from 1 to 65536, got '-1'" --depth -1
expect_error "--threads: expected an integer from 1 to 1024, got '1025'" --threads 1025
# The most buffers the loader takes, of 256 rows of 65,536 tokens (about 18 TB in all), more
# memory than any machine has: refused before the pool is filled.
expect_error "--depth 65536" --depth 65536 --capacity 65536 --micro-batch 256
# A memcpy floor of two 1 TiB buffers: refused before the run, not at its end with std::bad_alloc.
expect_error "--memcpy-buffer-mib 1048576 (--threads 1): the memcpy floor's two buffers need" --memcpy-buffer-mib 1048576
expect_error "$work/a-file/batches" --dump-batches "$work/a-file/batches"
expect_error "--dump-batches" --device --dump-batches "$work/batches"
expect_error "--batches-in-flight" --device --batches-in-flight 0
# An option that only tunes another is refused without it: it would have no effect.
expect_error "--dump-count requires --dump-batches" --dump-count 3
expect_error "--batches-in-flight requires --device" --batches-in-flight 3
# A path given empty (an unset shell variable) is refused: it read as not given, and the run
# went on without a mask, or without the dump.
expect_error "--loss-mask: expected a path, got an empty value" --loss-mask ""
expect_error "--prompt-lengths: expected a path, got an empty value" --prompt-lengths ""
expect_error "--dump-batches: expected a path, got an empty value" --dump-batches ""
# The last epoch may be 2^64 - 1 (the library's epoch_loader runs it); one more is refused.
expect_success --epoch 18446744073709551615 --epochs 1 --max-steps 1
expect_error "the last epoch is past 2^64 - 1" --epoch 18446744073709551615 --epochs 2

# ---------------------------------------------------------------------------------------------
# 6. --device: on a machine with a GPU it copies the batches there (the figures are checked for
# sense, not speed); without one, or in a build without CUDA, one line says why.
run --device --max-steps 5 --step-ms 1 --json
if [[ $rc -eq 0 ]]; then
  python3 - "$work/out" <<'PY' || fail "--device: the report does not add up"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["device"] is True and r["batches"] == 5 and r["copies"] == 5, r
assert r["device_bytes_copied"] == r["output_bytes"], r
assert r["h2d_bytes_per_second"] > 0 and r["pinned_peak_bytes_per_second"] > 0 and r["pageable_bytes_per_second"] > 0, r
assert r["pinned_allocations_after_start"] == 0, r
assert 0 <= r["trainer_stream_wait_fraction"] <= 1, r
PY
  ok "--device: 5 batches copied, rates and the trainer stream's wait reported"
else
  # Only a missing GPU or a build without CUDA may refuse it: a failing copy on a GPU is a failure.
  expect_error "--device" --device --max-steps 5
  grep -q -e "no CUDA device to load to" -e "built without CUDA" "$work/err" ||
    fail "--device failed, and not for want of a GPU or of CUDA: $(cat "$work/err")"
fi

rm -rf "$work"
echo "all load command checks passed"
