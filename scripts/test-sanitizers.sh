#!/usr/bin/env bash
# Builds actorflow with AddressSanitizer and UndefinedBehaviorSanitizer (CUDA off) into
# ./build-asan and runs the whole test suite there, so a memory error or undefined behaviour
# fails CI instead of waiting for a lucky run. Called by .ci/run after scripts/test.sh.
#
# Excluded: the multi-host tests, ScaleTest and the source/packaging checks (see AF_SANITIZER_EXCLUDE below).
# For a part of the suite (scripts/soak.sh): AF_ASAN_TARGETS (the build targets, default all) and
# AF_ASAN_TESTS (a ctest -R regex, default every test).
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
# AF_WERROR=OFF: GCC's manual (-fsanitize=address) says sanitizers raise the rate of false-positive
# warnings (-Wmaybe-uninitialized above all) and recommends against combining -Werror with them.
# The plain build in scripts/test.sh, which runs first, is the one that fails on a warning.
# -no-pie: the sanitizers' per-check data is full of pointers, which a position-independent
# executable must relocate at load time; its relocation table alone was a third of each binary
# (training_test 472 MB as PIE, 321 MB without). The ASan tree held 23 GB with PIE and filled the
# disk of a CI machine; it costs no recompilation (the objects are unchanged, only the link).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE= -DAF_ENABLE_CUDA=OFF -DAF_BUILD_BENCH=OFF -DAF_WERROR=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined -no-pie" "${launcher[@]}" >/dev/null
# shellcheck disable=SC2086
cmake --build build-asan -j"${AF_JOBS:-2}" ${AF_ASAN_TARGETS:+--target $AF_ASAN_TARGETS}
# Leak reports are off: CAF 0.17 keeps singletons alive until exit. Every other finding aborts
# the process that made it (halt_on_error), except UBSan reports in CAF's own headers listed in
# tests/sanitizers/ubsan.supp.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitizers/ubsan.supp
# The sanitized code runs several times slower; fault-free jobs scale the step timeout that stands
# for "a message was lost" by this (tests/util/process.h: slowdown()). Without it a slow step of a
# fault-free job under ASan was taken for a lost one ("step failed (DeadlineExceeded ...)").
export AF_TEST_SLOWDOWN="${AF_TEST_SLOWDOWN:-4}"
# AF_SANITIZER_EXCLUDE is a ctest -E regex (set it empty to run everything).
# ScenarioTest.SyncWithoutABackupReportsAnUnreachableWorkerWithinTheTimeout, excluded until
# 2026-11-24 (under ASan worker/0 never contributed again after the partition healed), passes here
# since the seed CNN trains through MonitoredTrainingSession and a Prefetcher thread instead of a
# data actor in the worker's actor system (4 of 4 runs, one of them beside two busy loops).
# Excluded by default: the multi-host tests (MultiHostTest.*, tests/multihost/). They run in the
# normal pass; under ASan their four TLS hosts plus a loopback twin on two cores ran past their
# bounds (a worker's steps timed out repeatedly while the machine was also building), and what
# they add over the scenario suite (namespaces, tc, ss) is not memory-safety code.
# ScaleTest (17 node processes at once) asserts which TCP connections each task holds, which a
# sanitizer cannot change; under ASan its 17 instrumented processes on 2 cores only test the
# machine's patience. It runs in the normal pass.
# ScenarioTest.FaultFree, ThrowInADeviceActor and KillBothReplicasFallsBackToTheCheckpoint were
# excluded here until 2026-11-27 for "an open bug only ASan's timing shows": the chief's training
# steps on the ps never got an answer, and a checkpoint run failed sending a tensor to worker/1.
# The cause was not timing: partition handles were the address of the master's state, equal in
# the chief and worker/1 under ASan's fixed-address allocator, so each registration on the ps
# replaced the other process's partition of that handle (now "m<task>.<random nonce>_p<n>",
# partition_handle_prefix in actors/master_actor.h). They run here again.
# And the checks of sources, packaging and manifests, which run no instrumented code of ours that
# other tests do not (InstallTest builds an outside project against an installed copy: 50 s here
# for nothing new; PublicHeadersTest and LayersTest read headers, ShellTest scripts; the Kubernetes schema check):
# they run in the normal pass.
AF_SANITIZER_EXCLUDE="${AF_SANITIZER_EXCLUDE-MultiHostTest|ScaleTest|InstallTest\.|PublicHeadersTest\.|LayersTest\.|ShellTest\.|K8sTest\.ManifestsValidate}"
cd build-asan
args=(--output-on-failure -j2 --timeout 900)
[ -n "$AF_SANITIZER_EXCLUDE" ] && args+=(-E "$AF_SANITIZER_EXCLUDE")
[ -n "${AF_ASAN_TESTS:-}" ] && args+=(-R "$AF_ASAN_TESTS")
ctest "${args[@]}"
