#!/usr/bin/env bash
# Configures and builds actorflow into ./build (CUDA kernels too when nvcc is found).
#   scripts/build.sh [TARGET...]   every target (the library, actorflow, tests, samples, benches),
#                                  or only the TARGETs named (scripts/demo.sh: actorflow)
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache, when installed, makes rebuilds on the same machine cheap; paths are hashed relative to
# the checkout's parent so another clone of the project hits the same cache.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
targets=()
if [ $# -gt 0 ]; then targets=(--target "$@"); fi
cmake --build build -j"${AF_JOBS:-2}" "${targets[@]}"
