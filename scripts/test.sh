#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (the README's test command; CI runs this).
# Under CI (CI=true) or with AF_SANITIZERS=1 it then builds and runs the suite again under
# AddressSanitizer and UndefinedBehaviorSanitizer (scripts/test-sanitizers.sh, CUDA off), then the
# threaded suites under ThreadSanitizer (scripts/test-tsan.sh; AF_TSAN=0 leaves that pass out:
# docs/testing.md, "ThreadSanitizer").
set -euo pipefail
cd "$(dirname "$0")/.."
# "test.sh: ... at N s" lines mark where the time goes (a CI run that ends by its time limit shows
# how far each pass got).
scripts/setup.sh
scripts/build.sh
echo "test.sh: built at ${SECONDS} s"
# TensorFlow itself (pip's tensorflow-cpu in the project-local .venv-tf) for the interop tests that
# compare with it; where PyPI cannot be reached they are skipped, saying so. AF_WITH_TF=0 skips it.
if [ "${AF_WITH_TF:-1}" != 0 ]; then
  bench/tf_venv.sh > /dev/null || echo "test.sh: no TensorFlow venv (.venv-tf): the tests that run TensorFlow itself are skipped" >&2
  # TensorFlow 1.15 (.venv-tf1, Python 3.7 from pyenv) for the same tests on 1.15's files.
  tests/data/tf_graph/make_tf1_15.sh --venv-only > /dev/null ||
    echo "test.sh: no TensorFlow 1.15 venv (.venv-tf1): the tests that run TensorFlow 1.15 itself are skipped" >&2
fi
echo "test.sh: the suite starts at ${SECONDS} s"
(cd build && ctest --output-on-failure -j2 --timeout 600)
echo "test.sh: the suite passed at ${SECONDS} s"
if [ "${AF_SANITIZERS:-}" = 1 ] || { [ "${CI:-}" = true ] && [ "${AF_SANITIZERS:-}" != 0 ]; }; then
  scripts/test-sanitizers.sh
  echo "test.sh: the sanitizer pass passed at ${SECONDS} s"
  if [ "${AF_TSAN:-1}" != 0 ]; then
    scripts/test-tsan.sh
    echo "test.sh: the ThreadSanitizer pass passed at ${SECONDS} s"
  fi
fi
