#!/usr/bin/env bash
# readme.snippets: every ```cpp block of the README outside its libtorch section, compiled with
# warnings as errors and run from the repository root (on data/alpaca), so that the README
# shows only code that works (extract_blocks.awk makes the programs). The blocks of the section
# "On the GPU" need multipack::cuda: with a CUDA include directory they are compiled and run
# against the runtime simulated on the host (tests/cuda/simulated_runtime.cpp); without one
# they are reported as not compiled. The libtorch section's blocks are built by CMake with
# multipack::torch (the test readme.torch_snippets).
# Usage: snippets_test.sh COMPILER SOURCE_DIR WORK_DIR [CUDA_INCLUDE_DIR]
set -euo pipefail
compiler=$1 source_dir=$2 work=$3 cuda_include=${4:-}
rm -rf "$work"
mkdir -p "$work"
extract() {  # extract KIND: writes $work/readme_KIND.cpp, prints its number of blocks
  awk -v kind="$1" -f "$source_dir/tests/readme/extract_blocks.awk" "$source_dir/README.md" \
    >"$work/readme_$1.cpp" 2>"$work/$1.count"
  sed -n 's/^blocks: //p' "$work/$1.count"
}
flags=(-std=c++20 -O1 -Wall -Wextra -Wpedantic -Werror -pthread -I"$source_dir/include")

host_blocks=$(extract host)
[[ $host_blocks -gt 0 ]] || { echo "FAIL: no cpp block in the README" >&2; exit 1; }
# Each block with only its section's #include lines up to it (the program below has them all,
# which would hide a block that needs another section's): compiled for syntax, two at a time.
for b in $(seq 1 "$host_blocks"); do
  awk -v kind=host -v only="$b" -f "$source_dir/tests/readme/extract_blocks.awk" "$source_dir/README.md" \
    >"$work/readme_host_$b.cpp" 2>/dev/null
done
if ! printf '%s\n' "$work"/readme_host_[0-9]*.cpp |
    xargs -P 2 -I{} "$compiler" "${flags[@]}" -fsyntax-only {} 2>"$work/own_includes.txt"; then
  echo "FAIL: a README block does not compile with its section's #include lines:" >&2
  head -40 "$work/own_includes.txt" >&2
  exit 1
fi
echo "each of the README's $host_blocks host blocks compiles with its section's #include lines"
"$compiler" "${flags[@]}" "$work/readme_host.cpp" -o "$work/readme_host"
(cd "$source_dir" && "$work/readme_host")
echo "the README's $host_blocks host blocks compiled and ran"

gpu_blocks=$(extract gpu)
if [[ $gpu_blocks -gt 0 && -n $cuda_include ]]; then
  # The simulated runtime: its file is not ours to hold to -Werror, only to compile.
  "$compiler" -std=c++20 -O1 -pthread -isystem "$cuda_include" -c "$source_dir/tests/cuda/simulated_runtime.cpp" \
    -o "$work/simulated_runtime.o"
  "$compiler" "${flags[@]}" -isystem "$cuda_include" "$work/readme_gpu.cpp" "$work/simulated_runtime.o" \
    -o "$work/readme_gpu"
  (cd "$source_dir" && MULTIPACK_SIMULATED_DEVICES=1 "$work/readme_gpu")
  echo "the README's $gpu_blocks GPU blocks compiled and ran against the simulated runtime"
elif [[ $gpu_blocks -gt 0 ]]; then
  echo "the README's $gpu_blocks GPU blocks were not compiled: no CUDA toolkit"
fi
