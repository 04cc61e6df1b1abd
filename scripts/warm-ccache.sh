#!/usr/bin/env bash
# Fills ccache with the objects a build of the current commit in CHECKOUT will look for: clones
# HEAD to CHECKOUT (replacing what is there) and runs the three builds `.ci/run` makes (plain,
# ASan+UBSan, TSan) in it, without running their tests.
#
# Why a path: every build compiles with -g1, and for such compiles ccache hashes the build
# directory (hash_dir), so an object serves only a build in the same directory
# (docs/testing.md "CI time: what a cold ccache costs").
#
# Usage: scripts/warm-ccache.sh CHECKOUT     e.g. scripts/warm-ccache.sh /check/work/main
# Prints, per build, its exit status, seconds and ccache's hits and misses; exits non-zero when a
# build failed. The shared/ folder beside this checkout is linked beside CHECKOUT when missing.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 CHECKOUT   (the directory CI's clone will have, e.g. /check/work/main)" >&2
  exit 2
fi
command -v ccache >/dev/null || { echo "warm-ccache: ccache is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
src="$(cd "$(dirname "$0")/.." && pwd)"
dest="$1"
case "$dest" in /*) ;; *) echo "warm-ccache: CHECKOUT must be an absolute path, not '$dest'" >&2; exit 2 ;; esac
[ "$dest" != "$src" ] || { echo "warm-ccache: CHECKOUT is this checkout itself" >&2; exit 2; }
commit="$(git -C "$src" rev-parse HEAD)"
mkdir -p "$(dirname "$dest")"
if [ -d "$dest/.git" ]; then
  # An earlier warm: move it to this commit, keeping its build trees (only what changed recompiles).
  git -C "$dest" fetch -q "$src" "$commit"
  git -C "$dest" checkout -q --force "$commit"
  git -C "$dest" clean -q -fd
else
  rm -rf "$dest"
  git clone -q "$src" "$dest"
  git -C "$dest" checkout -q "$commit"
fi
if [ ! -e "$(dirname "$dest")/shared" ] && [ -d "$src/../shared" ]; then
  ln -s "$(cd "$src/../shared" && pwd)" "$(dirname "$dest")/shared"
fi
cd "$dest"
rc=0
stats() { ccache --print-stats 2>/dev/null | awk -F'\t' '$1=="direct_cache_hit"||$1=="preprocessed_cache_hit"{h+=$2} $1=="cache_miss"{m+=$2} END{printf "hits %d misses %d", h, m}'; }
step() {
  local name="$1"; shift
  local s=$SECONDS
  ccache -z >/dev/null
  if "$@" > "$dest/warm-$name.log" 2>&1; then
    echo "warm-ccache: $name built in $((SECONDS - s)) s ($(stats)), log $dest/warm-$name.log"
  else
    echo "warm-ccache: $name FAILED after $((SECONDS - s)) s, log $dest/warm-$name.log" >&2
    rc=1
  fi
}
step plain scripts/build.sh
# A test filter that matches nothing: the passes build, then run no test.
step asan env AF_ASAN_TESTS='^WarmCcacheBuildsOnly\.$' scripts/test-sanitizers.sh
step tsan env AF_TSAN_TESTS='^WarmCcacheBuildsOnly\.$' scripts/test-tsan.sh
echo "warm-ccache: $commit in $dest, rc $rc"
exit $rc
