#!/usr/bin/env bash
# Sets up, builds and runs the main job: `actorflow demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec ./build/actorflow demo "$@"
