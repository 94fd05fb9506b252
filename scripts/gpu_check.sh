#!/usr/bin/env bash
# The first run on a GPU, in one command, from a clone (docs/cuda.md, "First
# run on a GPU"):
#
#   bash scripts/gpu_check.sh [build-dir]     # default build-gpu
#
# 1. says which toolkit it builds with, and configures with the CUDA and
#    NCCL parts required (CUDAARCHS: the first GPU's compute capability
#    where nvidia-smi can tell it, else 90);
# 2. builds only what the GPU checks need (the CUDA tests, the NCCL tests,
#    the GPU trainer's tests, the GPU bench), on every core;
# 3. prints the device, driver and compute capability, and stops here with
#    exit status 1 where there is no usable GPU;
# 4. runs every CUDA test (CTest label `cuda`) with DILOCO_REQUIRE_GPU=1, so
#    that a skip is a failure;
# 5. runs compute-sanitizer's memcheck, racecheck and synccheck over the
#    CUDA tests, where compute-sanitizer exists;
# 6. runs bench_gpu_passes: one JSON line per fused pass, its GB/s and the
#    ratio to a device-to-device copy of the same bytes (`of_copy`), also
#    written to <build-dir>/gpu_passes.json.
#
# Exit status 0 when every step passed. Needs what scripts/quickstart.sh
# installs, and NVIDIA's CUDA toolkit 12+ (nvcc on the PATH or in
# /usr/local/cuda/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-gpu}
jobs=$(nproc)
started=$SECONDS
step() { echo "gpu_check: [$((SECONDS - started)) s] $*"; }

nvcc=$(command -v nvcc || true)
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ -z $nvcc ]]; then
  echo "gpu_check: no nvcc on the PATH or in /usr/local/cuda/bin: install NVIDIA's CUDA toolkit 12+" >&2
  exit 1
fi
step "toolkit: $("$nvcc" --version | tail -n 1)"

capability=""
if command -v nvidia-smi > /dev/null; then
  capability=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n 1 | tr -d ' .' || true)
fi
export CUDAARCHS=${CUDAARCHS:-${capability:-90}}
step "configuring $dir for CUDA architecture $CUDAARCHS, CUDA and NCCL required"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" -DDILOCO_ENABLE_CUDA=ON \
  -DDILOCO_WITH_NCCL=ON -DDILOCO_WERROR=ON > "$dir.configure.log" 2>&1 || {
  tail -n 30 "$dir.configure.log"
  echo "gpu_check: the configure failed (the whole log: $dir.configure.log)" >&2
  exit 1
}
cat "$dir/diloco-parts.txt"

targets=(diloco_cuda_tests diloco_nccl_collectives bench_gpu_passes)
# The GPU trainer's tests where the examples are built (CLI11, zlib, ...).
# (grep without -q: it reads the whole list, and the pipe does not break.)
if cmake --build "$dir" --target help | grep fashion_mnist_gpu_tests > /dev/null; then
  targets+=(fashion_mnist_gpu_tests)
fi
step "building ${targets[*]} on $jobs cores"
cmake --build "$dir" -j"$jobs" --target "${targets[@]}"

step "the device"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv || true
fi
if ! "$dir/bench/gpu/bench_gpu_passes" --elements 1024 --repeat 1 > "$dir/gpu_probe.json" 2> "$dir/gpu_probe.log"; then
  echo "gpu_check: no usable GPU here ($(cat "$dir/gpu_probe.log")): stopping before the checks that need one" >&2
  exit 1
fi
head -n 1 "$dir/gpu_probe.json"

step "the CUDA tests, skips counted as failures"
DILOCO_REQUIRE_GPU=1 ctest --test-dir "$dir" -L cuda --output-on-failure

if command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck synccheck; do
    step "compute-sanitizer --tool $tool over the CUDA tests"
    DILOCO_REQUIRE_GPU=1 compute-sanitizer --tool "$tool" --error-exitcode 1 "$dir/tests/cuda/diloco_cuda_tests"
  done
else
  step "no compute-sanitizer on the PATH: memcheck, racecheck and synccheck not run"
fi

step "bench_gpu_passes (GB/s and the ratio to a device copy of the same bytes)"
"$dir/bench/gpu/bench_gpu_passes" | tee "$dir/gpu_passes.json"
step "passed"
