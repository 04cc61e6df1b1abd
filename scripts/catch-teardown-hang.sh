#!/usr/bin/env bash
# Waits for a process whose command line matches PATTERN (a pgrep -f regex) to be left alone for
# 1.5 s after its job's workers are gone (no process with the same --cluster file and "--job
# worker"), then attaches gdb with scripts/gdb/teardown_holders.py and writes the threads and the
# holders of any detached actor the teardown waits for to OUT (default teardown-hang.gdb). Run it
# beside a loop that reproduces the hang, e.g. under ASan:
#   scripts/catch-teardown-hang.sh 'build-asan/samples/distributed_cnn' &
#   while ! grep -q holder teardown-hang.gdb 2>/dev/null; do
#     AF_SOAK_CLUSTER_CYCLES=3 AF_TEST_SLOWDOWN=4 build-asan/tests/shutdown_soak_test --gtest_filter='*ThreeProcess*'; done
# (docs/testing.md, "A teardown that waits for a detached actor").
set -uo pipefail
pattern="${1:?usage: catch-teardown-hang.sh PATTERN [OUT]}"
out="${2:-teardown-hang.gdb}"
here="$(cd "$(dirname "$0")" && pwd)"
declare -A alone
while true; do
  for pid in $(pgrep -f "$pattern"); do
    cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || continue
    case "$cmd" in *"--job ps"*) ;; *) continue;; esac
    f=$(echo "$cmd" | sed 's/.*--cluster \([^ ]*\).*/\1/')
    if pgrep -f "cluster $f --job worker" > /dev/null; then alone[$pid]=0; continue; fi
    alone[$pid]=$(( ${alone[$pid]:-0} + 1 ))
    if [ "${alone[$pid]}" -ge 3 ]; then
      gdb -p "$pid" -batch -ex "source $here/gdb/teardown_holders.py" -ex "thread apply all bt 12" > "$out" 2>&1
      echo "catch-teardown-hang: process $pid written to $out"
      exit 0
    fi
  done
  sleep 0.5
done
