#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (the README's test command; CI runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure -j2 --timeout 600
