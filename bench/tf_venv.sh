#!/usr/bin/env bash
# Creates (once) the project-local venv .venv-tf with pip's tensorflow-cpu, the baseline the
# benchmarks in bench/ run beside actorflow, and prints its python's path.
#   bench/tf_venv.sh            exit 0 and the path; exit 1 with the reason when it cannot be made
# TENSORFLOW_SPEC overrides the requirement (default tensorflow-cpu==2.21.*, falling back to the
# newest tensorflow-cpu when that version is not on the index).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV="$ROOT/.venv-tf"
SPEC=${TENSORFLOW_SPEC:-tensorflow-cpu==2.21.*}
# pip's tensorboard: its event reader checks the event files actorflow writes (tf_export_test).
# Best effort: without it those checks read the file with tf.compat.v1.train.summary_iterator.
tensorboard() {
  "$VENV/bin/python" -c 'import tensorboard' 2>/dev/null ||
    timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check tensorboard >&2 ||
    echo "tf_venv: cannot install tensorboard (its checks fall back to summary_iterator)" >&2
}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import tensorflow' 2>/dev/null; then
  tensorboard
  echo "$VENV/bin/python"
  exit 0
fi
python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "tf_venv: python3-venv is missing (apt-get install python3-venv)" >&2; exit 1; }
rm -rf "$VENV"
python3 -m venv "$VENV" >&2 || { echo "tf_venv: cannot create $VENV" >&2; exit 1; }
pip() { timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check "$@" >&2; }
if ! pip "$SPEC"; then
  pip tensorflow-cpu || { rm -rf "$VENV"; echo "tf_venv: cannot install tensorflow-cpu from PyPI (no network?)" >&2; exit 1; }
fi
"$VENV/bin/python" -c 'import tensorflow' >&2 || { echo "tf_venv: tensorflow does not import" >&2; exit 1; }
tensorboard
echo "$VENV/bin/python"
