#!/usr/bin/env bash
# Installs what is missing (Debian 12), builds diloco and runs either the main
# demo or the whole test suite.
#
#   bash scripts/quickstart.sh demo   # Decoupled DiLoCo, 4 learners, Fashion-MNIST
#   bash scripts/quickstart.sh test   # every test but the long quality runs (label `quality`), then
#                                     # the unit tests under ASan+UBSan and TSan (scripts/sanitize.sh)
#
# Both install every package of the list below that is missing, LibTorch
# (libtorch-dev) and clang 14 included; `demo` builds only fashion_mnist.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-}
if [[ $what != demo && $what != test ]]; then
  echo "usage: bash scripts/quickstart.sh demo|test" >&2
  exit 2
fi

packages=(g++ cmake make libeigen3-dev libboost-test-dev zlib1g-dev dataset-fashion-mnist python3 gzip
          libzmq3-dev cppzmq-dev libasio-dev clang-14 libclang-rt-14-dev python3-zmq python3-numpy
          libcli11-dev nlohmann-json3-dev python3-matplotlib time clang-format-14
          iproute2 iptables iputils-ping pkg-config libnetfilter-queue-dev  # these five: bench/wan
          libtorch-dev bible-kjv libopenblas0-pthread  # the LibTorch adapter, char_lm's text, a BLAS 8x faster than the reference one
          openmpi-bin libopenmpi-dev  # learner units of several ranks on MPI (diloco::mpi)
          slurm-wlm munge  # the Slurm recipes of docs/launch.md, run on a one-node cluster (tests/slurm)
          etcd-server)  # leader leases of standby syncers (diloco::etcd; tests/etcd starts its own server)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "quickstart: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo=sudo; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc)
if [[ $what == test ]]; then
  # CUDA code for one architecture here (90; the default is 80 and 90): the
  # GPU tests cannot run on a machine without a GPU anyway, and a second
  # architecture costs CI about a minute.
  cuda_flags=()
  if [[ -z ${CUDAARCHS:-} ]]; then cuda_flags=(-DCMAKE_CUDA_ARCHITECTURES=90); fi
  # Where NVIDIA's toolkit is installed, the CUDA part is required, not
  # AUTO: a toolkit that stopped working fails the build instead of leaving
  # the kernels (and their tests) out with a warning in a long log.
  if command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then cuda_flags+=(-DDILOCO_ENABLE_CUDA=ON); fi
  # Each phase's wall time is printed, so that a CI log says where its time
  # went (CI should stay under 20 minutes on two cores).
  phase() {
    local name=$1 started=$SECONDS
    shift
    "$@"
    echo "quickstart: $name took $((SECONDS - started)) s"
  }
  # -O1 rather than Release's -O3 (nvcc's host code and the benchmarks
  # too): g++ compiles fashion_mnist's main.cpp in half the time (57 s
  # against 111 s), and it trains 2 % slower than at -O2; the tests check
  # results, not speed. The demo below keeps -O3.
  phase configure cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DCMAKE_CUDA_FLAGS_RELEASE="-O1 -DNDEBUG" -DDILOCO_BENCH_OPTIMIZATION=-O1 -DDILOCO_WERROR=ON "${cuda_flags[@]}"
  phase build cmake --build build -j"$jobs"
  # The sanitizer builds (clang 14, scripts/sanitize.sh) compile meanwhile at
  # the lowest priority (nice 19): the suite's multi-process tests wait on
  # each other and on the network for part of their time, and the compiler
  # takes what CPU they leave idle instead of waiting for them to finish.
  sanitizer_log=build/sanitizer-builds.log
  # In a process group of their own (setsid), stopped together if ctest fails.
  setsid nice -n 19 bash -c 'bash scripts/sanitize.sh address --build && bash scripts/sanitize.sh thread --build' \
    > "$sanitizer_log" 2>&1 &
  sanitizer_builds=$!
  trap 'kill -- "-$sanitizer_builds" 2>/dev/null || true' EXIT
  # Everything but the long quality runs (label `quality`, docs/compression.md).
  phase ctest ctest --test-dir build --output-on-failure -j"$jobs" -LE quality
  finish_sanitizer_builds() {
    if ! wait "$sanitizer_builds"; then
      tail -n 60 "$sanitizer_log"
      echo "quickstart: the sanitizer builds failed (the whole log: $sanitizer_log)" >&2
      return 1
    fi
  }
  phase "sanitizer builds (what was left after ctest)" finish_sanitizer_builds
  trap - EXIT
  # The same unit tests built by clang 14 under the sanitizers.
  phase ASan+UBSan bash scripts/sanitize.sh address --test
  phase TSan bash scripts/sanitize.sh thread --test
  echo "quickstart: tested $(cat build/diloco-parts.txt)"
else
  # Release's own flags, whatever a test run left in build/'s cache.
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG" \
    -DCMAKE_CUDA_FLAGS_RELEASE="-O3 -DNDEBUG" -DDILOCO_BENCH_OPTIMIZATION=-O3
  cmake --build build -j"$jobs" --target fashion_mnist
  ./build/examples/01_fashion_mnist/fashion_mnist --mode decoupled --learners 4 --speeds 1,1,0.7,0.5
fi
