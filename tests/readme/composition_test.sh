#!/usr/bin/env bash
# readme.composition: every ```cpp block of the README's "Composing the pipeline" section,
# compiled (each block the body of a function of its own, after multipack's umbrella header)
# and run from the repository root, so that the README shows only code that works.
# Usage: composition_test.sh COMPILER SOURCE_DIR WORK_DIR
set -euo pipefail
compiler=$1 source_dir=$2 work=$3
mkdir -p "$work"
program="$work/readme_composition.cpp"
awk '
  /^## / { inside = ($0 == "## Composing the pipeline") }
  inside && /^```cpp$/ { block++; printf "static void readme_block_%d() {\n", block; in_code = 1; next }
  in_code && /^```$/ { print "}"; in_code = 0; next }
  in_code { print }
  END {
    if (block == 0) { print "#error no cpp block in the section" }
    print "int main() {"
    for (b = 1; b <= block; b++) printf "  readme_block_%d();\n", b
    print "}"
  }
' "$source_dir/README.md" > "$work/blocks.inc"
blocks=$(grep -c '^static void readme_block_' "$work/blocks.inc" || true)
{
  echo '#include <cstddef>'
  echo '#include <cstdint>'
  echo '#include <ranges>'
  echo '#include <span>'
  echo '#include <vector>'
  echo '#include <multipack/multipack.hpp>'
  cat "$work/blocks.inc"
} > "$program"
"$compiler" -std=c++20 -O1 -Wall -Wextra -Wpedantic -Werror -pthread -I"$source_dir/include" "$program" -o "$work/readme_composition"
cd "$source_dir"
"$work/readme_composition"
echo "the README's $blocks composition blocks compiled and ran"
