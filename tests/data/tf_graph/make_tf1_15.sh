#!/usr/bin/env bash
# Writes tests/data/tf_graph/tf1_15/: the golden files of make_golden.py, make_dynamic_golden.py,
# make_saver_golden.py and make_seed_cnn.py, as TensorFlow 1.15 writes and computes them (the same
# generators, unchanged: TensorFlow 1.15 has tf.compat.v1). tests/tf_import_test.cc runs its
# TfGoldenTest cases on these and on TensorFlow 2.21's files beside this script.
#   tests/data/tf_graph/make_tf1_15.sh            (PYTHON37 names a Python 3.7; default: pyenv's)
#   tests/data/tf_graph/make_tf1_15.sh --venv-only   only make .venv-tf1 (scripts/test.sh: the
#                                                    tests that run TensorFlow 1.15 itself use it)
# TensorFlow 1.15 installs only into Python <= 3.7: the venv .venv-tf1 is made from $PYTHON37 with
# pip's tensorflow-cpu==1.15.0 and the numpy and protobuf it was built against. CI needs none of
# this: the files are in the tree. A rerun writes the same JSON files and GraphDefs equal as
# messages (TensorFlow 1.15 serialises attribute maps in no fixed order, so the bytes may differ;
# the sharded Saver's temporary-name constant holds a fresh random id each time).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
VENV="$ROOT/.venv-tf1"
PYTHON37=${PYTHON37:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.7*/bin/python 2>/dev/null | tail -1)}
if ! "$VENV/bin/python" -c 'import tensorflow as tf; assert tf.__version__.startswith("1.15")' 2>/dev/null; then
  [ -n "$PYTHON37" ] && [ -x "$PYTHON37" ] || { echo "make_tf1_15: no Python 3.7 (set PYTHON37)" >&2; exit 1; }
  rm -rf "$VENV"
  "$PYTHON37" -m venv "$VENV" >&2 || { echo "make_tf1_15: cannot create $VENV" >&2; exit 1; }
  timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check "tensorflow-cpu==1.15.0" "numpy<1.19" \
    "protobuf<3.21" "h5py<3" >&2 || { rm -rf "$VENV"; echo "make_tf1_15: cannot install tensorflow-cpu 1.15.0" >&2; exit 1; }
fi
[ "${1:-}" = --venv-only ] && exit 0
OUT="$HERE/tf1_15"
mkdir -p "$OUT"
cd "$HERE"
for gen in make_golden.py make_dynamic_golden.py make_saver_golden.py make_seed_cnn.py; do
  "$VENV/bin/python" "$gen" "$OUT" 2>/dev/null
done
ls "$OUT"
