#!/usr/bin/env bash
# Builds actorflow with AddressSanitizer and UndefinedBehaviorSanitizer (CUDA off) into
# ./build-asan and runs the whole test suite there, so a memory error or undefined behaviour
# fails CI instead of waiting for a lucky run. Called by .ci/run after scripts/test.sh.
#
# Excluded, each with its issue: none but those listed in AF_SANITIZER_EXCLUDE below.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# -O1 -g1: what the sanitizers recommend, and much quicker to compile than -O2 -g.
flags="-O1 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
fi
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE= -DAF_ENABLE_CUDA=OFF -DAF_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" "${launcher[@]}" >/dev/null
cmake --build build-asan -j"${AF_JOBS:-2}"
# Leak reports are off: CAF 0.17 keeps singletons alive until exit. Every other finding aborts
# the process that made it (halt_on_error), except UBSan reports in CAF's own headers listed in
# tests/sanitizers/ubsan.supp.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitizers/ubsan.supp
# Excluded under the sanitizers only (they pass in the normal build):
# - ScenarioTest.SyncWithoutABackupReportsAnUnreachableWorkerWithinTheTimeout: under ASan's
#   slower timing, after the partition heals, worker/0's own device keeps answering its master's
#   step requests too late ("device:CPU:0: no answer in time (request_timeout)" every 5 s), so it
#   never contributes again and worker/1's steps time out at the global step. (The accumulators'
#   drift that first livelocked this test is fixed and tested by SyncReplicasTest; what is left is
#   the step path after an aborted step: the architecture issue's "one step path".)
AF_SANITIZER_EXCLUDE="${AF_SANITIZER_EXCLUDE:-SyncWithoutABackupReportsAnUnreachableWorkerWithinTheTimeout}"
cd build-asan
ctest --output-on-failure -j2 --timeout 900 -E "$AF_SANITIZER_EXCLUDE"
