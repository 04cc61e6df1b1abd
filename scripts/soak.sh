#!/usr/bin/env bash
# The long shutdown soak (docs/testing.md, "Shutdown soaks"): tests/shutdown_soak_test.cc built
# with AddressSanitizer and UndefinedBehaviorSanitizer by scripts/test-sanitizers.sh (only the
# targets it needs; it runs the soak once at its short CI size), then run with 1 000
# create/run/stop cycles of an in-process server with sessions and 100 start/train/stop cycles
# of a 3-process job under `actorflow up` (a normal end, SIGTERM, a SIGKILLed peer then SIGTERM,
# in turn). Fails on any crash, hang, stop slower than 2 s (x AF_TEST_SLOWDOWN), or growth of
# threads, descriptors or memory; prints the stop times' p50/p99/max. AF_SOAK_SERVER_CYCLES and
# AF_SOAK_CLUSTER_CYCLES change the counts.
set -euo pipefail
cd "$(dirname "$0")/.."
AF_ASAN_TARGETS="shutdown_soak_test actorflow distributed_cnn" AF_ASAN_TESTS='^ShutdownSoakTest\.' \
  AF_SANITIZER_EXCLUDE='' scripts/test-sanitizers.sh
# The options scripts/test-sanitizers.sh runs its tests with (it says why), and a 64 MiB
# quarantine: use-after-free of the most recent 64 MiB of frees is still caught, and the memory
# the test allows for the quarantine (twice its size) stays well below a leak of one server per
# cycle. The normal build's run bounds memory tightly (docs/testing.md, "Shutdown soaks").
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1:quarantine_size_mb=64
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitizers/ubsan.supp
export AF_TEST_SLOWDOWN="${AF_TEST_SLOWDOWN:-4}"
export AF_SOAK_SERVER_CYCLES="${AF_SOAK_SERVER_CYCLES:-1000}"
export AF_SOAK_CLUSTER_CYCLES="${AF_SOAK_CLUSTER_CYCLES:-100}"
cd build-asan
exec tests/shutdown_soak_test
