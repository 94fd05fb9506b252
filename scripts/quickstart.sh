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
          libtorch-dev bible-kjv libopenblas0-pthread)  # the LibTorch adapter, char_lm's text, a BLAS 8x faster than the reference one
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
  cuda_arch=()
  if [[ -z ${CUDAARCHS:-} ]]; then cuda_arch=(-DCMAKE_CUDA_ARCHITECTURES=90); fi
  # Each phase's wall time is printed, so that a CI log says where its time
  # went (CI should stay under 30 minutes on two cores).
  phase() {
    local name=$1 started=$SECONDS
    shift
    "$@"
    echo "quickstart: $name took $((SECONDS - started)) s"
  }
  phase configure cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDILOCO_WERROR=ON "${cuda_arch[@]}"
  phase build cmake --build build -j"$jobs"
  # Everything but the long quality runs (label `quality`, docs/compression.md).
  phase ctest ctest --test-dir build --output-on-failure -j"$jobs" -LE quality
  # The same unit tests built by clang 14 under the sanitizers.
  phase ASan+UBSan bash scripts/sanitize.sh address
  phase TSan bash scripts/sanitize.sh thread
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$jobs" --target fashion_mnist
  ./build/examples/01_fashion_mnist/fashion_mnist --mode decoupled --learners 4 --speeds 1,1,0.7,0.5
fi
