#!/usr/bin/env bash
# Runs the whole test suite RUNS times (default 10) in an existing build directory and reports
# every test that failed at least once, with its log. Every second run keeps both cores busy with
# a CPU load generator (two busy loops at nice 10), as a loaded CI machine would.
#
#   scripts/flake-rate.sh [RUNS] [BUILD_DIR]       e.g. scripts/flake-rate.sh 10 build
#
# Writes flake-report/run-N.log (ctest's output) and flake-report/summary.txt; exits 1 when any
# test failed in any run. Build first (scripts/build.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
build=${2:-build}
out=flake-report
[ -d "$build" ] || { echo "flake-rate: no build directory '$build' (run scripts/build.sh first)" >&2; exit 2; }
rm -rf "$out"; mkdir -p "$out"
load_pids=()
stop_load() { for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null; done; load_pids=(); }
trap stop_load EXIT
declare -A failed_in
nfailed=0  # distinct tests that failed (bash 5.2 calls an empty associative array unbound under set -u)
for i in $(seq 1 "$runs"); do
  loaded=no
  if (( i % 2 == 0 )); then
    loaded=yes
    for _ in 1 2; do nice -n 10 bash -c 'while :; do :; done' & load_pids+=($!); done
  fi
  start=$(date +%s)
  (cd "$build" && ctest -j2 --timeout 600 --output-on-failure) > "$out/run-$i.log" 2>&1
  rc=$?
  stop_load
  secs=$(( $(date +%s) - start ))
  summary=$(grep -E "tests passed|tests failed" "$out/run-$i.log" | tail -1)
  echo "run $i (cpu load: $loaded): exit $rc in ${secs}s: $summary" | tee -a "$out/summary.txt"
  while read -r name; do
    if [ -n "$name" ]; then
      [ -z "${failed_in[$name]+x}" ] && nfailed=$((nfailed + 1))
      failed_in[$name]+="$i "
    fi
  done < <(grep -E "^\s+[0-9]+ - .* \((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)" "$out/run-$i.log" | sed -E 's/^\s+[0-9]+ - ([^ ]+).*/\1/')
done
echo | tee -a "$out/summary.txt"
if [ "$nfailed" -eq 0 ]; then
  echo "no test failed in $runs runs" | tee -a "$out/summary.txt"
  exit 0
fi
echo "tests that failed at least once (run numbers; logs in $out/run-N.log):" | tee -a "$out/summary.txt"
for t in "${!failed_in[@]}"; do echo "  $t: runs ${failed_in[$t]}" | tee -a "$out/summary.txt"; done
exit 1
