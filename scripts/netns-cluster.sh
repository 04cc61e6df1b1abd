#!/usr/bin/env bash
# netns-cluster.sh: N "hosts" on this machine, each a network namespace with its own address on
# one bridge, to run actorflow across hosts for real (tests/multihost/, docs/testing.md).
#
#   netns-cluster.sh up N [--owner PID] [--dir DIR] [--ps K] [--metrics-port P] [--actorflow BIN]
#       creates namespaces afmh<PID>-h0 .. -h<N-1> (host i has address 10.213.0.<i+1>/24 on eth0)
#       joined by the bridge afmh<PID>br. PID (default: the caller, $PPID) owns them: a later `up`
#       of anyone first removes every afmh* namespace, bridge and veth whose owner no longer runs.
#       With --dir it writes DIR/hosts ("index namespace address" per line) and a cluster file
#       DIR/cluster.toml: ps/0 on host 0, worker/i-1 on host i (port 2222; with --ps K the first K
#       hosts are ps/0..K-1 and the rest workers; with --metrics-port P every task serves its
#       metrics on P, `[server] metrics_port`), a cluster secret
#       (DIR/cluster.key) and, with the actorflow binary (--actorflow, default build/actorflow),
#       TLS certificates (DIR/certs). Prints the hosts' lines.
#   netns-cluster.sh start --dir DIR [--owner PID] [--actorflow BIN] [-- PROGRAM ARGS...]
#       starts `actorflow up --cluster DIR/cluster.toml [-- PROGRAM ARGS...]` inside every host
#       of DIR/hosts (each runs the tasks at its own address), in the background, output in
#       DIR/host-<i>.log. `down` stops them.
#   netns-cluster.sh down [--owner PID]     stops every process in the owner's namespaces, removes
#                                           them, their veths and the bridge. Idempotent.
#   netns-cluster.sh exec I [--owner PID] -- CMD...   runs CMD inside host I.
#   netns-cluster.sh link I up|down [--owner PID]     takes host I's link down (a partition of the
#                                           host from every other: both directions, all traffic)
#                                           or back up.
#   netns-cluster.sh kill I [--owner PID]   SIGKILLs every process in host I's namespace and waits
#                                           (bounded, 10 s) until none is left.
#   netns-cluster.sh shape I RATE [--owner PID]   caps host I's bandwidth to RATE (tc's units,
#                                           e.g. 1gbit, 100mbit) in both directions with tbf.
#   netns-cluster.sh unshape I [--owner PID]
#
# Exit status: 0 done; 2 bad usage; 77 network namespaces are not available here (not root, or
# `ip netns add` fails: the reason is printed); 1 anything else (the failing command is printed).
# `up` removes what it created if it fails half-way (and on SIGINT/SIGTERM).
set -euo pipefail

readonly SUBNET=10.213.0
readonly MAX_HOSTS=100

die() { echo "netns-cluster.sh: $*" >&2; exit 1; }
usage() {
  echo "netns-cluster.sh: $*" >&2
  echo "usage: netns-cluster.sh up N [--owner PID] [--dir DIR] [--actorflow BIN] | down [--owner PID] |" \
       "start --dir DIR [-- PROGRAM...] | exec I [--owner PID] -- CMD... | link I up|down | kill I | shape I RATE | unshape I" >&2
  exit 2
}
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

[[ $# -ge 1 ]] || usage "no command given"
cmd=$1
shift
owner=$PPID
# Under sudo the caller is the shell that ran sudo (sudo's pid is gone once it returns).
if [[ "$(cat /proc/$PPID/comm 2>/dev/null)" == sudo ]]; then
  owner=$(awk '{print $4}' /proc/$PPID/stat)
fi
dir=""
num_ps=1
metrics_port=""
actorflow="$(cd "$(dirname "$0")/.." && pwd)/build/actorflow"
positional=()
program=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --owner) [[ $# -ge 2 ]] || usage "--owner needs a pid"; owner=$2; shift 2 ;;
    --dir) [[ $# -ge 2 ]] || usage "--dir needs a directory"; dir=$2; shift 2 ;;
    --actorflow) [[ $# -ge 2 ]] || usage "--actorflow needs a path"; actorflow=$2; shift 2 ;;
    --ps) [[ $# -ge 2 ]] && is_uint "$2" && [[ $2 -ge 1 ]] || usage "--ps needs a number of ps hosts >= 1"; num_ps=$2; shift 2 ;;
    --metrics-port) [[ $# -ge 2 ]] && is_uint "$2" && [[ $2 -ge 1 && $2 -le 65535 && $2 -ne 2222 ]] ||
                      usage "--metrics-port needs a port 1..65535 other than 2222"; metrics_port=$2; shift 2 ;;
    --) shift; program=("$@"); break ;;
    -*) usage "unknown option '$1'" ;;
    *) positional+=("$1"); shift ;;
  esac
done
is_uint "$owner" && [[ ${#owner} -le 7 ]] || usage "--owner must be a pid, got '$owner'"

readonly P="afmh$owner"
ns_name() { echo "$P-h$1"; }
veth_name() { echo "${P}h$1"; }   # the root namespace's end; at most 15 characters
bridge_name() { echo "${P}br"; }
addr_of() { echo "$SUBNET.$(($1 + 1))"; }

# Every network namespace's name, one per line ("ip netns list" adds " (id: N)" to some).
namespace_names() { ip netns list 2>/dev/null | awk '{print $1}'; }
# Succeeds when namespace $1 exists.
has_namespace() { grep -qx "$1" <<<"$(namespace_names)"; }

# The owner's namespaces, in index order.
owned_namespaces() {
  namespace_names | grep -E "^$P-h[0-9]+\$" | sort -t h -k 3 -n || true
}

# Host index argument: an existing host of this owner.
host_arg() {
  [[ ${#positional[@]} -ge 1 ]] || usage "$cmd: which host? (an index)"
  is_uint "${positional[0]}" || usage "$cmd: host index must be a number, got '${positional[0]}'"
  has_namespace "$(ns_name "${positional[0]}")" ||
    die "$cmd: host ${positional[0]} does not exist (no namespace $(ns_name "${positional[0]}"); run 'up' first)"
  echo "${positional[0]}"
}

# SIGKILLs every process in namespace $1 and waits until none is left (10 s at most).
kill_namespace() {
  local ns=$1 pids deadline=$((SECONDS + 10))
  while true; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z "$pids" ]] && return 0
    [[ $SECONDS -ge $deadline ]] && { echo "netns-cluster.sh: processes still in $ns after 10 s: $pids" >&2; return 1; }
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.05
  done
}

# Removes everything of prefix $1 (afmh<pid>): processes, namespaces, veths, the bridge.
remove_prefix() {
  local p=$1 ns link rc=0
  for ns in $(namespace_names | grep -E "^$p-h[0-9]+\$" || true); do
    kill_namespace "$ns" || rc=1
    ip netns del "$ns" 2>/dev/null || { echo "netns-cluster.sh: cannot remove namespace $ns" >&2; rc=1; }
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${p}(h[0-9]+|br)\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  if command -v iptables >/dev/null; then
    while iptables -D FORWARD -i "${p}br" -o "${p}br" -m comment --comment "$p netns-cluster" -j ACCEPT 2>/dev/null; do :; done
  fi
  return $rc
}

# A host where bridged frames pass through iptables (br_netfilter loaded, as Docker does) and
# whose FORWARD policy drops (Docker sets DROP) would silently cut the hosts off from each other:
# accept what stays on our bridge, in a rule that remove_prefix deletes again.
allow_bridge_forwarding() {
  local br=$1
  [[ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" == 1 ]] || return 0
  command -v iptables >/dev/null || { echo "netns-cluster.sh: bridged traffic passes iptables, but iptables is missing" >&2; return 0; }
  iptables -I FORWARD -i "$br" -o "$br" -m comment --comment "$P netns-cluster" -j ACCEPT ||
    die "up: cannot let traffic through bridge $br (iptables FORWARD)"
}

# Removes the namespaces, veths and bridges of owners that no longer run (a test killed hard).
remove_stale() {
  local p pid
  for p in $( { namespace_names; ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1; } |
              grep -oE '^afmh[0-9]+(-h[0-9]+|h[0-9]+|br)$' | grep -oE '^afmh[0-9]+' | sort -u); do
    pid=${p#afmh}
    [[ -d /proc/$pid ]] && continue
    echo "netns-cluster.sh: removing $p* left by pid $pid, which no longer runs" >&2
    remove_prefix "$p" || true
  done
}

cmd_up() {
  [[ ${#positional[@]} -eq 1 ]] || usage "up: give the number of hosts"
  local n=${positional[0]}
  is_uint "$n" && [[ $n -ge 1 && $n -le $MAX_HOSTS ]] || usage "up: number of hosts must be 1..$MAX_HOSTS, got '$n'"
  [[ $num_ps -le $n ]] || usage "up: --ps $num_ps exceeds the $n hosts"
  if [[ $(id -u) -ne 0 ]]; then
    echo "netns-cluster.sh: network namespaces need root (running as uid $(id -u))" >&2
    exit 77
  fi
  command -v ip >/dev/null || { echo "netns-cluster.sh: the ip command (iproute2) is missing" >&2; exit 77; }
  remove_stale
  [[ -z "$(owned_namespaces)" ]] || die "up: $P is already up (run 'down --owner $owner' first)"
  # From here on a failure or a signal removes what was made.
  trap 'remove_prefix "$P" || true' EXIT
  trap 'exit 130' INT TERM
  local err
  if ! err=$(ip netns add "$(ns_name 0)" 2>&1); then
    echo "netns-cluster.sh: network namespaces are not available: ip netns add: $err" >&2
    exit 77
  fi
  ip link add "$(bridge_name)" type bridge || die "up: cannot create bridge $(bridge_name)"
  ip link set "$(bridge_name)" up
  allow_bridge_forwarding "$(bridge_name)"
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$(ns_name "$i")
    [[ $i -eq 0 ]] || ip netns add "$ns" || die "up: ip netns add $ns failed"
    ip link add "$(veth_name "$i")" type veth peer name eth0 netns "$ns" || die "up: cannot create the veth of $ns"
    ip link set "$(veth_name "$i")" master "$(bridge_name)" up
    ip -n "$ns" addr add "$(addr_of "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  if [[ -n "$dir" ]]; then
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    : > "$dir/hosts"
    for ((i = 0; i < n; i++)); do echo "$i $(ns_name "$i") $(addr_of "$i")" >> "$dir/hosts"; done
    write_cluster_file "$n"
  fi
  trap - EXIT INT TERM
  for ((i = 0; i < n; i++)); do echo "$i $(ns_name "$i") $(addr_of "$i")"; done
}

# DIR/cluster.toml for N hosts: ps/0..K-1 on hosts 0..K-1 (K = --ps, default 1), workers on the rest.
write_cluster_file() {
  local n=$1 i workers="" ps=""
  for ((i = 0; i < num_ps; i++)); do ps+="${ps:+, }\"$(addr_of "$i"):2222\""; done
  for ((i = num_ps; i < n; i++)); do workers+="${workers:+, }\"$(addr_of "$i"):2222\""; done
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/cluster.key")
  local tls=""
  if [[ -x "$actorflow" ]]; then tls="tls_dir = \"certs\""; fi
  {
    echo "[cluster]"
    echo "name = \"$P\""
    echo "secret_file = \"cluster.key\""
    [[ -n "$tls" ]] && echo "$tls"
    echo "[jobs]"
    echo "ps = [$ps]"
    [[ $n -gt $num_ps ]] && echo "worker = [$workers]"
    if [[ -n "$metrics_port" ]]; then
      echo "[server]"
      echo "metrics_port = $metrics_port"
    fi
    echo "[supervisor]"
    echo "logdir = \"$dir/logs\""
  } > "$dir/cluster.toml"
  if [[ -n "$tls" ]]; then
    "$actorflow" certs --cluster "$dir/cluster.toml" --out "$dir/certs" --force >/dev/null ||
      die "up: actorflow certs failed"
  fi
}

cmd_down() {
  [[ ${#positional[@]} -eq 0 ]] || usage "down takes no host index"
  remove_prefix "$P"
}

cmd_start() {
  [[ -n "$dir" ]] || usage "start: give --dir DIR (as given to up)"
  [[ -f "$dir/hosts" && -f "$dir/cluster.toml" ]] || die "start: $dir has no hosts or cluster.toml (run 'up N --dir $dir' first)"
  [[ -x "$actorflow" ]] || die "start: $actorflow is not an executable (build it, or give --actorflow BIN)"
  local i ns addr pid
  while read -r i ns addr; do
    has_namespace "$ns" || die "start: namespace $ns of $dir/hosts does not exist"
    if [[ ${#program[@]} -gt 0 ]]; then
      ip netns exec "$ns" "$actorflow" up --cluster "$dir/cluster.toml" -- "${program[@]}" > "$dir/host-$i.log" 2>&1 < /dev/null &
    else
      ip netns exec "$ns" "$actorflow" up --cluster "$dir/cluster.toml" > "$dir/host-$i.log" 2>&1 < /dev/null &
    fi
    pid=$!
    echo "host $i ($addr): actorflow up, pid $pid, output in $dir/host-$i.log"
  done < "$dir/hosts"
}

cmd_exec() {
  local i
  i=$(host_arg)
  [[ ${#program[@]} -ge 1 ]] || usage "exec: give the command after --"
  exec ip netns exec "$(ns_name "$i")" "${program[@]}"
}

cmd_link() {
  local i
  i=$(host_arg)
  [[ ${#positional[@]} -eq 2 && ( ${positional[1]} == up || ${positional[1]} == down ) ]] ||
    usage "link: give 'up' or 'down' after the host index"
  ip -n "$(ns_name "$i")" link set eth0 "${positional[1]}"
}

cmd_kill() {
  local i
  i=$(host_arg)
  kill_namespace "$(ns_name "$i")"
}

# tbf on both ends of the host's veth: eth0's egress (what the host sends) and the root end's
# egress (what it receives). burst: at least 1/100 s of traffic at the rate, and 64 KiB.
cmd_shape() {
  local i rate
  i=$(host_arg)
  [[ ${#positional[@]} -eq 2 && ${positional[1]} =~ ^[0-9]+(bit|kbit|mbit|gbit)$ ]] ||
    usage "shape: give a rate like 1gbit or 100mbit after the host index"
  rate=${positional[1]}
  local num=${rate%%[a-z]*} unit=${rate##*[0-9]} bps
  case $unit in bit) bps=$num ;; kbit) bps=$((num * 1000)) ;; mbit) bps=$((num * 1000000)) ;; gbit) bps=$((num * 1000000000)) ;; esac
  local burst=$((bps / 8 / 100))
  [[ $burst -ge 65536 ]] || burst=65536
  tc -n "$(ns_name "$i")" qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
  tc qdisc replace dev "$(veth_name "$i")" root tbf rate "$rate" burst "$burst" latency 100ms
}

cmd_unshape() {
  local i
  i=$(host_arg)
  tc -n "$(ns_name "$i")" qdisc del dev eth0 root 2>/dev/null || true
  tc qdisc del dev "$(veth_name "$i")" root 2>/dev/null || true
}

case "$cmd" in
  up) cmd_up ;;
  start) cmd_start ;;
  down) cmd_down ;;
  exec) cmd_exec ;;
  link) cmd_link ;;
  kill) cmd_kill ;;
  shape) cmd_shape ;;
  unshape) cmd_unshape ;;
  -h|--help|help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) usage "unknown command '$cmd'" ;;
esac
