"""readme.commands: the README's multipack-bench command lines, as they stand.

- Every ```sh block with a `build/bin/multipack-bench` line runs, whole, from a scratch
  directory laid out as the repository root after `scripts/run` (build/bin/multipack-bench
  and data/), and must exit 0.
- Every synopsis (a bare ``` block that starts with `multipack-bench SUBCOMMAND`) names
  exactly the options of `multipack-bench SUBCOMMAND --help`: none missing, none unknown.
- Every inline `multipack-bench SUBCOMMAND ...` names only options of that subcommand, and
  every inline `--option` is an option of some subcommand.

Usage: python3 commands_test.py MULTIPACK_BENCH SOURCE_DIR WORK_DIR
"""
import os
import re
import shutil
import subprocess
import sys

# Options of other tools that the README names beside their tool.
FOREIGN_OPTIONS = {'--data-path'}  # Megatron-LM's, whose form --data takes
OPTION = re.compile(r'--[a-z0-9][a-z0-9-]*')


def fail(message):
    print('FAIL: ' + message, file=sys.stderr)
    sys.exit(1)


def help_options(bench, *subcommand):
    text = subprocess.run([bench, *subcommand, '--help'], check=True, capture_output=True, text=True).stdout
    return text, {m.group(1) for m in re.finditer(r'^\s+(?:-[a-z],)?(--[a-z0-9-]+)', text, re.M)} - {'--help'}


def readme_parts(path):
    """(kind, first line number, lines) for each fenced block, and (line number, span) for inline code."""
    blocks, spans = [], []
    fence, start, body = None, 0, []
    for number, line in enumerate(open(path, encoding='utf-8'), 1):
        line = line.rstrip('\n')
        if fence is None and line.startswith('```'):
            fence, start, body = line[3:].strip(), number + 1, []
        elif fence is not None and line == '```':
            blocks.append((fence, start, body))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            spans += [(number, m.group(1)) for m in re.finditer(r'`([^`]+)`', line)]
    if fence is not None:
        fail('README.md: a code block opened at line %d is not closed' % (start - 1))
    return blocks, spans


def main():
    bench, source_dir, work = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    readme = os.path.join(source_dir, 'README.md')
    top_help, _ = help_options(bench)
    subcommands = re.findall(r'^  ([a-z]+)\s', top_help.split('Subcommands:', 1)[1], re.M)
    options = {sub: help_options(bench, sub)[1] for sub in subcommands}
    every_option = set().union(*options.values()) | {'--help'}
    blocks, spans = readme_parts(readme)

    synopses = 0
    for fence, start, body in blocks:
        words = ' '.join(body).split()
        if fence or len(words) < 2 or words[0] != 'multipack-bench':
            continue
        sub = words[1]
        if sub not in options:
            fail('README.md:%d: a synopsis of "%s", which is not a subcommand (%s)' % (start, sub, ', '.join(subcommands)))
        named = set(OPTION.findall(' '.join(body)))
        missing, unknown = options[sub] - named, named - options[sub]
        if missing or unknown:
            fail('README.md:%d: the synopsis of "multipack-bench %s" differs from its --help: missing %s, unknown %s'
                 % (start, sub, sorted(missing) or 'none', sorted(unknown) or 'none'))
        synopses += 1

    for number, span in spans:
        words = span.split()
        if words[0] == 'multipack-bench' and len(words) > 1:
            if words[1] not in options:
                fail('README.md:%d: `%s`: "%s" is not a subcommand' % (number, span, words[1]))
            unknown = set(OPTION.findall(span)) - options[words[1]]
            if unknown:
                fail('README.md:%d: `%s`: %s not options of %s' % (number, span, sorted(unknown), words[1]))
        elif words[0].startswith('--'):
            unknown = set(OPTION.findall(words[0])) - every_option - FOREIGN_OPTIONS
            if unknown:
                fail('README.md:%d: `%s`: no subcommand has %s' % (number, span, sorted(unknown)))

    run_dir = os.path.join(work, 'repository')
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(run_dir, 'build', 'bin'))
    os.symlink(bench, os.path.join(run_dir, 'build', 'bin', 'multipack-bench'))
    os.symlink(os.path.abspath(os.path.join(source_dir, 'data')), os.path.join(run_dir, 'data'))
    commands = 0
    for fence, start, body in blocks:
        lines = [line for line in body if line.lstrip().startswith('build/bin/multipack-bench ')]
        if fence != 'sh' or not lines:
            continue
        for line in lines:
            sub = line.split()[1]
            if sub not in options:
                fail('README.md:%d: "%s" is not a subcommand' % (start, sub))
        script = 'set -euo pipefail\n' + '\n'.join(body) + '\n'
        result = subprocess.run(['bash', '-c', script], cwd=run_dir, capture_output=True, text=True)
        if result.returncode != 0:
            fail('README.md:%d: the block exited %d\n%s\n--- stdout (tail)\n%s\n--- stderr\n%s'
                 % (start, result.returncode, script, result.stdout[-2000:], result.stderr[-4000:]))
        print('ok - README.md:%d: %d command lines ran' % (start, len(lines)))
        commands += len(lines)
    if commands == 0 or synopses == 0:
        fail('README.md: %d command lines and %d synopses: the test would check nothing' % (commands, synopses))
    print('the README\'s %d multipack-bench command lines ran; its %d synopses match --help; %d inline spans checked'
          % (commands, synopses, len(spans)))


if __name__ == '__main__':
    main()
