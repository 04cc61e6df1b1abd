#!/usr/bin/env bash
# Checks that actorflow's public headers (include/actorflow/*.h except embedding.h) bring no CAF
# header, directly or through the headers they include, and that each compiles on its own.
#   scripts/check-public-headers.sh [CXX] [INCLUDE_ROOT...]
# CXX defaults to $CXX or c++; the include roots default to the source tree and its include/
# (pass an installed prefix's include/ and include/actorflow/internal to check an install).
# For each header it preprocesses a translation unit that includes only that header with
# `-H` and, when a caf/ header is opened, fails naming the chain of includes that led to it.
# Finally embedding.h is compiled, and must bring CAF (it is the one header that does).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
cxx="${1:-${CXX:-c++}}"
shift || true
roots=("$@")
if [[ ${#roots[@]} -eq 0 ]]; then roots=("$src" "$src/include"); fi
incs=()
for r in "${roots[@]}"; do incs+=("-I$r"); done
hdr_dir=""
for r in "${roots[@]}"; do
  if [[ -f "$r/actorflow/actorflow.h" ]]; then hdr_dir="$r/actorflow"; break; fi
done
[[ -n "$hdr_dir" ]] || { echo "FAILED: no actorflow/actorflow.h under ${roots[*]}"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for h in "$hdr_dir"/*.h; do
  name="$(basename "$h")"
  [[ "$name" == embedding.h ]] && continue
  n=$((n + 1))
  printf '#include <actorflow/%s>\nint main() { return 0; }\n' "$name" >"$tmp/tu.cc"
  if ! "$cxx" -std=c++17 -DMSGPACK_NO_BOOST=1 -fsyntax-only -H "${incs[@]}" "$tmp/tu.cc" 2>"$tmp/h.txt"; then
    grep -v '^\.' "$tmp/h.txt" | sed -n 1,30p
    echo "FAILED: <actorflow/$name> does not compile on its own"
    fail=1
    continue
  fi
  # -H prints one line per opened header: N dots (the include depth), a space, the path.
  chain="$(awk -v top="actorflow/$name" '
    /^\.+ / {
      d = index($0, " ") - 1; path = substr($0, d + 2); stack[d] = path
      if (path ~ /(^|\/)caf\//) {
        out = top
        for (i = 1; i <= d; ++i) out = out "\n  -> " stack[i]
        print out; exit
      }
    }' "$tmp/h.txt")"
  if [[ -n "$chain" ]]; then
    echo "FAILED: <actorflow/$name> brings a CAF header:"
    echo "$chain"
    fail=1
  fi
done
[[ $n -gt 0 ]] || { echo "FAILED: no public headers found in $hdr_dir"; exit 1; }
# embedding.h is the header that does bring CAF, and it must compile.
printf '#include <actorflow/embedding.h>\nint main() { caf::actor_system_config cfg; actorflow::Server::configure(cfg); return 0; }\n' >"$tmp/emb.cc"
if ! "$cxx" -std=c++17 -DMSGPACK_NO_BOOST=1 -fsyntax-only -H "${incs[@]}" "$tmp/emb.cc" 2>"$tmp/e.txt"; then
  grep -v '^\.' "$tmp/e.txt" | sed -n 1,30p
  echo "FAILED: <actorflow/embedding.h> does not compile"
  fail=1
elif ! grep -qE '^\.+ .*caf/' "$tmp/e.txt"; then
  echo "FAILED: <actorflow/embedding.h> brings no CAF header (the check itself may be broken)"
  fail=1
fi
[[ $fail -eq 0 ]] || exit 1
echo "OK: $n public headers bring no CAF header; embedding.h compiles and brings CAF"
