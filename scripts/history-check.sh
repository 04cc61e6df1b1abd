#!/usr/bin/env bash
# Runs many seeded fault schedules against a replicated-ps job and checks each run's history
# (tests/history_test.cc, tests/util/history.h; docs/reliability.md "The history checker").
#
# Usage: scripts/history-check.sh [COUNT [FIRST_SEED]]     (default 500 schedules from seed 1)
# Needs the plain build (scripts/build.sh). Writes one report per schedule under
# build/history-reports/ and prints the totals: schedules run, failed, and violations. A failing
# schedule's seed reruns it alone: AF_HISTORY_SEED=<seed> build/tests/history_test
# --gtest_filter='Seeds/Schedules.*'. Exits non-zero when a schedule failed.
set -euo pipefail
cd "$(dirname "$0")/.."
count="${1:-500}"
first="${2:-1}"
case "$count$first" in *[!0-9]*) echo "usage: $0 [COUNT [FIRST_SEED]] (whole numbers)" >&2; exit 2 ;; esac
bin=build/tests/history_test
[ -x "$bin" ] || { echo "history-check: $bin is not built (scripts/build.sh)" >&2; exit 1; }
reports="$PWD/build/history-reports"
rm -rf "$reports"
mkdir -p "$reports"
start=$SECONDS
rc=0
# One process per schedule, so a crash or a hang (bounded by timeout) costs one schedule only.
for ((i = 0; i < count; i++)); do
  seed=$((first + i))
  if ! AF_HISTORY_SEED="$seed" AF_HISTORY_REPORT_DIR="$reports" timeout 300 "$bin" \
      --gtest_filter='Seeds/Schedules.*' > "$reports/run-$seed.log" 2>&1; then
    echo "history-check: schedule $seed FAILED (log $reports/run-$seed.log)"
    rc=1
  fi
done
ran=$(find "$reports" -name 'schedule-*.txt' | wc -l)
violations=$(cat "$reports"/schedule-*.txt 2>/dev/null | awk '/^history:/ { for (i = 1; i <= NF; i++) if ($i ~ /^violation/) v += $(i - 1) } END { print v + 0 }')
acked=$(cat "$reports"/schedule-*.txt 2>/dev/null | awk '/^history:/ { a += $4 } END { print a + 0 }')
echo "history-check: $count schedules from seed $first in $((SECONDS - start)) s: $ran checked, $acked acknowledged operations, $violations violation(s), exit $rc"
exit $rc
