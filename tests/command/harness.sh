# What the command tests share; sourced as
#   source "$(dirname "$0")/harness.sh" SUBCOMMAND "$@"
# with the test's own arguments: <multipack-bench> <source-dir> <scratch-dir>. Sets bench,
# source_dir, work (a fresh scratch directory), lengths_txt, prefix and python, and defines
# fail, ok, run, expect_success and expect_error for SUBCOMMAND.

subcommand=$1
shift
if [[ $# -ne 3 ]]; then
  echo "usage: $0 <path-to-multipack-bench> <source-dir> <scratch-dir>" >&2
  exit 2
fi
bench=$1
source_dir=$2
work=$3/${subcommand}_command_test

lengths_txt=$source_dir/data/alpaca/lengths.txt
prefix=$source_dir/data/alpaca/alpaca_llama

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() { echo "ok - $*"; }

[[ -x $bench ]] || fail "$bench is not an executable"
[[ -f $lengths_txt && -f $prefix.idx && -f $prefix.bin ]] || fail "$source_dir/data/alpaca is incomplete"
command -v python3 >/dev/null || fail "python3 is needed"
# The interpreter itself, once: a version manager's python3 shim can take most of a second a call.
python=$(python3 -c 'import sys; print(sys.executable)')

# The checkers written to $work import dump_format.py from here.
PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH

rm -rf "$work"
mkdir -p "$work"

# Runs the subcommand, stdout to $work/out, stderr to $work/err; sets rc.
run() {
  rc=0
  "$bench" "$subcommand" "$@" >"$work/out" 2>"$work/err" || rc=$?
}
expect_success() {
  run "$@"
  [[ $rc -eq 0 ]] || fail "$subcommand $* exited $rc: $(head -c 500 "$work/err")"
  [[ ! -s $work/err ]] || fail "$subcommand $* succeeded but wrote on stderr: $(head -c 500 "$work/err")"
}

# Bad input: a non-zero status below 128, nothing on stdout, exactly one line on stderr
# ("multipack-bench: error: ..."), containing the first argument (a fixed string; empty for
# none).
expect_error() {
  local must_contain=$1
  shift
  run "$@"
  local what="$subcommand $*"
  [[ $rc -ne 0 ]] || fail "$what: exit status 0, expected an error"
  [[ $rc -lt 128 ]] || fail "$what: exit status $rc, a crash (signal $((rc - 128)))"
  [[ ! -s $work/out ]] || fail "$what: failed but wrote on stdout: $(head -c 300 "$work/out")"
  local lines
  lines=$(wc -l <"$work/err")
  [[ -s $work/err && $lines -eq 1 && $(tail -c 1 "$work/err" | od -An -c | tr -d ' ') == '\n' ]] ||
    fail "$what: expected exactly one line on stderr, got $lines newline(s): $(head -c 500 "$work/err")"
  local message
  message=$(cat "$work/err")
  [[ $message == "multipack-bench: error: "?* ]] || fail "$what: stderr is not 'multipack-bench: error: ...': $message"
  [[ -z $must_contain || $message == *"$must_contain"* ]] || fail "$what: the error does not mention '$must_contain': $message"
  ok "$what: exit $rc, one line: ${message#multipack-bench: error: }"
}
