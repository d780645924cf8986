#!/usr/bin/env bash
# readme.snippets: every ```cpp block of the README, compiled with warnings as errors and run
# from the repository root (on data/alpaca), so that the README shows only code that works.
# Each block is the body of a function of its own; its #include lines go before them, after
# multipack's umbrella header. The prelude declares train(), the trainer's own step, which
# the blocks call. The blocks of the section "On the GPU" need multipack::cuda: with a CUDA
# include directory they are compiled and run against the runtime simulated on the host
# (tests/cuda/simulated_runtime.cpp); without one they are reported as not compiled.
# Usage: snippets_test.sh COMPILER SOURCE_DIR WORK_DIR [CUDA_INCLUDE_DIR]
set -euo pipefail
compiler=$1 source_dir=$2 work=$3 cuda_include=${4:-}
rm -rf "$work"
mkdir -p "$work"

# Splits the README's blocks into host.inc / gpu.inc (functions) and host.h / gpu.h (includes).
awk -v work="$work" '
  /^## / { gpu = ($0 ~ /^## On the GPU/) }
  /^```cpp$/ {
    kind = gpu ? "gpu" : "host"
    count[kind]++
    printf "static void readme_%s_block_%d() {  // README.md line %d\n", kind, count[kind], NR + 1 > (work "/" kind ".inc")
    in_code = 1
    next
  }
  in_code && /^```$/ { print "}" > (work "/" kind ".inc"); in_code = 0; next }
  in_code && /^#include / { print > (work "/" kind ".h"); next }
  in_code { print > (work "/" kind ".inc") }
  END { printf "%d %d\n", count["host"], count["gpu"] > (work "/counts") }
' "$source_dir/README.md"
read -r host_blocks gpu_blocks < "$work/counts"
[[ $host_blocks -gt 0 ]] || { echo "FAIL: no cpp block in the README" >&2; exit 1; }

# Writes the program of one kind: prelude, the blocks' includes, the blocks, a main calling each.
write_program() {
  local kind=$1 blocks=$2 umbrella=$3
  {
    printf '#include <cstddef>\n#include <cstdint>\n#include <cstdio>\n#include <ranges>\n#include <span>\n#include <vector>\n'
    printf '#include <%s>\n' "$umbrella"
    [[ -f $work/$kind.h ]] && cat "$work/$kind.h"
    printf '// The trainer'"'"'s own step, which the blocks call: here it takes the arrays and does nothing.\n'
    printf 'template <class... Arrays> void train(Arrays&&...) {}\n'
    cat "$work/$kind.inc"
    printf 'int main() {\n'
    for ((b = 1; b <= blocks; b++)); do printf '  readme_%s_block_%d();\n' "$kind" "$b"; done
    printf '}\n'
  } > "$work/readme_$kind.cpp"
}

flags=(-std=c++20 -O1 -Wall -Wextra -Wpedantic -Werror -pthread -I"$source_dir/include")
write_program host "$host_blocks" multipack/multipack.hpp
"$compiler" "${flags[@]}" "$work/readme_host.cpp" -o "$work/readme_host"
(cd "$source_dir" && "$work/readme_host")
echo "the README's $host_blocks host blocks compiled and ran"

if [[ $gpu_blocks -gt 0 ]]; then
  if [[ -n $cuda_include ]]; then
    write_program gpu "$gpu_blocks" multipack/multipack.hpp
    # The simulated runtime: its file is not ours to hold to -Werror, only to compile.
    "$compiler" -std=c++20 -O1 -pthread -isystem "$cuda_include" -c "$source_dir/tests/cuda/simulated_runtime.cpp" \
      -o "$work/simulated_runtime.o"
    "$compiler" "${flags[@]}" -isystem "$cuda_include" "$work/readme_gpu.cpp" "$work/simulated_runtime.o" \
      -o "$work/readme_gpu"
    (cd "$source_dir" && MULTIPACK_SIMULATED_DEVICES=1 "$work/readme_gpu")
    echo "the README's $gpu_blocks GPU blocks compiled and ran against the simulated runtime"
  else
    echo "the README's $gpu_blocks GPU blocks were not compiled: no CUDA toolkit"
  fi
fi
