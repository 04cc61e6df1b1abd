#!/usr/bin/env bash
# The seed CNN's throughput against the parameter servers' link bandwidth, on
# hosts made of network namespaces (scripts/netns-cluster.sh): K ps hosts + 3 worker hosts, TLS and
# a secret on, each ps host's link capped with tbf (both directions) to each RATE in turn; the
# workers train asynchronously and `actorflow status --json`, run from a worker host, measures the
# steps per second of every worker over a window after a warm-up. Prints per (K, RATE): images/s
# (50 per step), and what the cap allows: each worker step moves the model's variables (6.5 MB of
# float32) from the ps and its gradients (6.5 MB) back, so K ps links of R bit/s carry at most
# K x R / 8 / 6.5 MB steps per second in each direction.
#
#   bench/bandwidth.sh [--ps "1 2"] [--rates "none 10gbit 1gbit 100mbit"] [--window 20] [--warmup 15]
#                      [--partition-fc]     (the CNN's fully connected weight split over the ps hosts)
#
# Needs root and network namespaces (exit 77 otherwise, as netns-cluster.sh); build/ built.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NETNS="$ROOT/scripts/netns-cluster.sh"
AF="$ROOT/build/actorflow"
CNN="$ROOT/build/samples/distributed_cnn"
PS_LIST="1 2"
RATES="none 10gbit 1gbit 100mbit"
WINDOW=20
WARMUP=15
CNN_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ps) PS_LIST=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --window) WINDOW=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --partition-fc) CNN_ARGS+=(--partition-fc); shift ;;
    *) echo "bandwidth.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for b in "$AF" "$CNN"; do [[ -x "$b" ]] || { echo "bandwidth.sh: $b is missing (build first)" >&2; exit 2; }; done
[[ $(id -u) -eq 0 ]] || { echo "bandwidth.sh: needs root (network namespaces)"; exit 77; }
OWNER=$$
DIR=""
cleanup() { "$NETNS" down --owner "$OWNER" >/dev/null 2>&1 || true; [[ -z "$DIR" ]] || rm -rf "$DIR"; }
trap cleanup EXIT

# Model bytes per worker step each way: the seed CNN's variables (conv 5x5x1x32 + 32, 5x5x32x64 +
# 64, 3136x500 + 500, 500x10 + 10 float32).
MODEL_BYTES=$(( (5*5*1*32 + 32 + 5*5*32*64 + 64 + 3136*500 + 500 + 500*10 + 10) * 4 ))
echo "seed CNN (batch 50, Adam, async${CNN_ARGS[*]+, ${CNN_ARGS[*]}}), 3 worker hosts; the model is $MODEL_BYTES bytes each way per worker step"
echo "| ps hosts | ps link cap | images/s | steps/s | what the cap allows (steps/s) |"
echo "| --- | --- | --- | --- | --- |"
for K in $PS_LIST; do
  for RATE in $RATES; do
    DIR=$(mktemp -d)
    "$NETNS" up $((K + 3)) --ps "$K" --metrics-port 9100 --dir "$DIR" --owner "$OWNER" >/dev/null
    if [[ "$RATE" != none ]]; then
      for ((i = 0; i < K; i++)); do "$NETNS" shape "$i" "$RATE" --owner "$OWNER" >/dev/null; done
    fi
    "$NETNS" start --dir "$DIR" --owner "$OWNER" -- "$CNN" --steps 100000000 --print-every 1000 ${CNN_ARGS[@]+"${CNN_ARGS[@]}"} >/dev/null
    sleep "$WARMUP"   # graph registration, initialisation, the first steps: not measured
    json=$("$NETNS" exec "$K" --owner "$OWNER" -- "$AF" status --cluster "$DIR/cluster.toml" --json \
             --interval-ms $((WINDOW * 1000)) 2>/dev/null || true)
    steps=$(python3 -c '
import json, sys
try:
    doc = json.loads(sys.stdin.read())
except ValueError:
    print("nan"); sys.exit()
tasks = doc["tasks"] if isinstance(doc, dict) and "tasks" in doc else doc
print(sum(t.get("steps_per_sec") or 0 for t in tasks if t.get("role") in ("worker", "chief")))' <<< "$json")
    if [[ "$RATE" == none ]]; then
      allows="(no cap)"
    else
      allows=$(python3 -c '
import re, sys
k, rate, model = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
m = re.match(r"(\d+)(gbit|mbit|kbit|bit)$", rate)
bits = int(m.group(1)) * {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1}[m.group(2)]
print("%.1f" % (k * bits / 8 / model))' "$K" "$RATE" "$MODEL_BYTES")
    fi
    printf "| %s | %s | %s | %s | %s |\n" "$K" "$RATE" \
      "$(python3 -c "import sys; s=float(sys.argv[1]); print('%.0f' % (50 * s) if s == s else 'failed')" "$steps")" \
      "$(python3 -c "import sys; s=float(sys.argv[1]); print('%.1f' % s if s == s else 'failed')" "$steps")" "$allows"
    "$NETNS" down --owner "$OWNER" >/dev/null
    rm -rf "$DIR"
    DIR=""
  done
done
