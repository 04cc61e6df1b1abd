#!/usr/bin/env bash
# Configures and builds actorflow into ./build (CUDA kernels too when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"${AF_JOBS:-2}"
