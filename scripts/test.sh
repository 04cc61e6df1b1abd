#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (the README's test command; CI runs this).
# Under CI (CI=true) or with AF_SANITIZERS=1 it then builds and runs the suite again under
# AddressSanitizer and UndefinedBehaviorSanitizer (scripts/test-sanitizers.sh, CUDA off).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j2 --timeout 600)
if [ "${AF_SANITIZERS:-}" = 1 ] || { [ "${CI:-}" = true ] && [ "${AF_SANITIZERS:-}" != 0 ]; }; then
  scripts/test-sanitizers.sh
fi
