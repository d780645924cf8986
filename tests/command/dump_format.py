"""What the command checkers share: failing with a message, reading a lengths file, the
grammar of a piece in --dump-rows and --dump-plan (`i`, or `i:b:e` for tokens [b, e)), and
the one line of JSON that --json prints."""
import re
import sys


def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def read_lengths(path):
    with open(path) as f:
        return [int(line) for line in f.read().split('\n') if line.strip() != '']


number_re = re.compile(r'^(0|[1-9][0-9]*)$')
piece_re = re.compile(r'^(0|[1-9][0-9]*)(?::(0|[1-9][0-9]*):(0|[1-9][0-9]*))?$')


def read_json_line(path):
    """The object that --json printed to `path`: exactly one line, one JSON object."""
    import json
    with open(path, 'rb') as f:
        raw = f.read()
    if raw.count(b'\n') != 1 or not raw.endswith(b'\n'):
        die('--json printed %d newline(s), expected exactly one line: %r' % (raw.count(b'\n'), raw[:200]))
    try:
        r = json.loads(raw)
    except ValueError as e:
        die(f'--json output does not parse: {e}: {raw[:200]!r}')
    if not isinstance(r, dict):
        die(f'--json output is not an object: {raw[:200]!r}')
    return r
