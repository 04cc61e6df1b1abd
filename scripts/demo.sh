#!/usr/bin/env bash
# Sets up, builds and runs the main job: `actorflow demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only what the demo runs: the actorflow binary (the tests, samples and benches are scripts/test.sh's).
scripts/build.sh actorflow
exec ./build/actorflow demo "$@"
