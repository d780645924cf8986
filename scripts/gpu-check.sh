#!/usr/bin/env bash
# The device check, for a machine with an NVIDIA GPU, in under 5 minutes: builds the CUDA
# tests and multipack-bench, runs every test labelled cuda (the device ones, skipped
# elsewhere, included), then `multipack-bench load --device` at seven settings (the last over
# three epochs through one device_epoch_loader: the boundary waits); where python3
# has PyTorch with CUDA, builds the libtorch device test against its libtorch and runs it
# (torch.real.device_tensors); prints a table last. Figures and logs go to $OUT (or
# build-gpu/out).
#
# Dependencies: the Debian packages of scripts/install-deps where apt works; on a machine
# that reaches no registry, the copy scripts/gpu-deps leaves in .gpu-deps/root (carry it).
# The CUDA Toolkit: /usr/local/cuda, or nvcc on the PATH. CUDA_ARCHITECTURES (default 90,
# the H100 and H200) picks what nvcc builds for.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build-gpu/out}
mkdir -p "$out"
started=$(date +%s)
log() { echo "gpu-check [$(($(date +%s) - started)) s] $*"; }

# A device check without a device would pass with its device tests skipped: fail instead.
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader ||
  { log "nvidia-smi failed: no GPU to check"; exit 1; }

# Not libtorch: Debian's is CPU-only, so its device tensors cannot run on the GPU either.
configure=(-DCMAKE_BUILD_TYPE=Release -DMULTIPACK_WERROR=ON -DMULTIPACK_BUILD_EXAMPLES=OFF -DMULTIPACK_TORCH=OFF
           "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90}")
if [[ -d .gpu-deps/root ]]; then
  root=$PWD/.gpu-deps/root
  # The include directory as a compiler flag too: doctest's copied config names /usr/include.
  configure+=("-DCMAKE_PREFIX_PATH=$root/usr" "-DCMAKE_INCLUDE_PATH=$root/usr/include"
              "-DCMAKE_CXX_FLAGS=-isystem \"$root/usr/include\"")  # quoted inside: a path with a space
  export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "dependencies from .gpu-deps"
elif ! scripts/install-deps; then
  log "the build's dependencies are missing and apt cannot install them: run scripts/gpu-deps where apt works and carry .gpu-deps"
  exit 2
fi
command -v ninja >/dev/null && configure+=(-G Ninja)
if [[ ! -x /usr/local/cuda/bin/nvcc ]] && command -v nvcc >/dev/null; then
  configure+=("-DCUDAToolkit_ROOT=$(dirname "$(dirname "$(command -v nvcc)")")")
fi

log "configuring"
cmake -S . -B build-gpu "${configure[@]}" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep -q "multipack::cuda is available" "$out/configure.log" || { log "no CUDA Toolkit found"; tail -30 "$out/configure.log"; exit 1; }
log "building"
cmake --build build-gpu -j"$(nproc)" --target test_cuda_device_loader_real test_cuda_device_loader_simulated \
  test_cuda_api_simulated test_cuda_nvcc_translation_unit multipack-bench >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }

log "CUDA tests"
# timeout(1), not ctest's --timeout, which tests with a TIMEOUT property (the device ones) ignore.
timeout 240 ctest --test-dir build-gpu -L cuda --output-on-failure 2>&1 | tee "$out/ctest.txt"
tests_ok=${PIPESTATUS[0]}
# Skipped counts as passed for ctest: on this machine the device tests must have run.
if grep -E '(cuda[.]device_loader|examples[.]cuda_loader) .*Skipped' "$out/ctest.txt"; then
  log "a device test was skipped on the GPU machine"
  tests_ok=1
fi

bench=build-gpu/bin/multipack-bench
prompts=data/alpaca/prompt_lengths.txt
runs=(
  "int32-step0|--micro-batch 16 --capacity 4096 --repeat-data 40 --step-ms 0"
  "int64-step0|--micro-batch 16 --capacity 4096 --repeat-data 40 --step-ms 0 --int64"
  "int32-step5|--micro-batch 16 --capacity 4096 --repeat-data 40 --step-ms 5 --max-steps 300"
  "int64-step5|--micro-batch 16 --capacity 4096 --repeat-data 40 --step-ms 5 --max-steps 300 --int64"
  "int64-pad64-step5|--micro-batch 16 --capacity 4096 --repeat-data 40 --step-ms 5 --max-steps 300 --int64 --pad-to-multiple 64"
  "int64-1x65536-step5|--micro-batch 1 --capacity 65536 --repeat-data 40 --step-ms 5 --max-steps 300 --int64"
  "int32-3epochs-step5|--micro-batch 16 --capacity 4096 --repeat-data 10 --step-ms 5 --epochs 3"
)
for entry in "${runs[@]}"; do
  name=${entry%%|*}
  log "load --device: $name"
  # shellcheck disable=SC2086  # the flags are words
  "$bench" load --device --prompt-lengths "$prompts" --threads 4 --depth 8 \
    --batches-in-flight 3 ${entry#*|} --json >"$out/load-$name.json" 2>"$out/load-$name.err" ||
    { log "load --device $name failed: $(cat "$out/load-$name.err")"; rm -f "$out/load-$name.json"; tests_ok=1; }
done

# libtorch with CUDA, where python3 has PyTorch built with it: the device batches as CUDA
# tensors that libtorch reads back (torch.real.device_tensors). A build of its own, so that a
# libtorch that does not configure costs the figures above nothing.
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path if torch.version.cuda else "")' 2>/dev/null || true)
if [[ -n $torch_prefix ]]; then
  log "libtorch with CUDA from PyTorch: $torch_prefix"
  torch_configure=("${configure[@]/-DMULTIPACK_TORCH=OFF/-DMULTIPACK_TORCH=ON}")
  torch_configure=("${torch_configure[@]/#-DCMAKE_PREFIX_PATH=/-DCMAKE_PREFIX_PATH=$torch_prefix;}")
  [[ " ${torch_configure[*]} " == *" -DCMAKE_PREFIX_PATH="* ]] || torch_configure+=("-DCMAKE_PREFIX_PATH=$torch_prefix")
  if cmake -S . -B build-gpu-torch "${torch_configure[@]}" >"$out/torch-configure.log" 2>&1 &&
     cmake --build build-gpu-torch -j"$(nproc)" --target test_torch_device_tensors_real >"$out/torch-build.log" 2>&1; then
    timeout 240 ctest --test-dir build-gpu-torch -R '^torch[.]real[.]' --output-on-failure 2>&1 | tee "$out/torch-ctest.txt"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || tests_ok=1
  else
    log "libtorch build failed:"; tail -30 "$out/torch-build.log" 2>/dev/null || tail -30 "$out/torch-configure.log"
    tests_ok=1
  fi
else
  log "no PyTorch with CUDA for python3: the libtorch device test is not built"
fi

log "done"
python3 - "$out" <<'PY'
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "load-*.json"))):
    r = json.load(open(path))
    name = os.path.basename(path)[5:-5]
    rows.append("| {} | {} | {:.2f} | {:.2f} | {:.3f} | {:.2f} | {:.3f} % | {} | {:.2f} | {:.0f} / {:.0f} us |".format(
        name, r["batches"], r["h2d_bytes_per_second"] / 1e9, r["pinned_peak_bytes_per_second"] / 1e9,
        r["h2d_over_pinned_peak"], r["pageable_bytes_per_second"] / 1e9, 100 * r["trainer_stream_wait_fraction"],
        r["pinned_allocations_after_start"], r["output_bytes_per_second"] / 1e9,
        1e6 * r["max_epoch_switch_seconds"], 1e6 * r["max_step_wait_seconds"]))
print("| run (16 x 4096 unless named, prompts masked, 4 threads, depth 8, 3 in flight) | batches | h2d GB/s | pinned peak GB/s | h2d / peak | pageable GB/s | trainer stream waited | pinned allocations after start | host build GB/s | longest wait: a boundary / any other step |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
print("\n".join(rows) if rows else "| (no load run succeeded) |")
PY
exit "$tests_ok"
