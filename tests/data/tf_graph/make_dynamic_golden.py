#!/usr/bin/env python3
"""Writes the half-precision and run-time-shape golden files that tests/tf_import_test.cc imports.

Run with TensorFlow's python (bench/tf_venv.sh makes one):
    .venv-tf/bin/python tests/data/tf_graph/make_dynamic_golden.py [OUT_DIR]   (default: this directory)

  half_consts.pbtxt     x [2,3] * cast(float16 constant "h") + cast(bfloat16 constant "hb") ("y")
  dynamic_batch.pb      x [?,6]: s = tf.shape(x), b = s[0] (StridedSlice), "r" = reshape(x,
                        stack([b, 2, 3])), "f" = fill(stack([b, 4]), 1.5), "flat" = reshape(r,
                        [-1, prod(shape(r)[1:])]), "y" = concat([reduce_sum(r, 2), f], 1) * 2
  dynamic_expected.json TensorFlow's outputs: half_consts' y; dynamic_batch's s, b, r, f, flat, y
                        at batch 3 and batch 5
All values are fixed (no randomness): a rerun writes the same.
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
v1 = tf.compat.v1
v1.disable_eager_execution()


def main():
    expected = {}
    xs = np.random.RandomState(3).standard_normal((2, 3)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [2, 3], name="x")
        h = tf.constant([[0.5, -1.25, 3.0e-5], [65504.0, -0.0, 1.0 / 3.0]], dtype=tf.float16, name="h")
        hb = tf.constant([[1.0e30, -2.5, 0.1], [3.0, 7.0, -1.0e-3]], dtype=tf.bfloat16, name="hb")
        tf.add(x * tf.cast(h, tf.float32), tf.cast(hb, tf.float32), name="y")
    tf.io.write_graph(g.as_graph_def(), OUT, "half_consts.pbtxt", as_text=True)
    with v1.Session(graph=g) as s:
        expected["half_consts"] = {"x": xs.tolist(), "y": s.run("y:0", {"x:0": xs}).tolist()}

    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [None, 6], name="x")
        s = tf.shape(x, name="s")
        b = tf.identity(s[0], name="b")
        r = tf.reshape(x, tf.stack([b, 2, 3]), name="r")
        f = tf.fill(tf.stack([b, 4]), 1.5, name="f")
        tf.reshape(r, [-1, tf.reduce_prod(tf.shape(r)[1:])], name="flat")
        tf.multiply(tf.concat([tf.reduce_sum(r, 2), f], 1), 2.0, name="y")
    tf.io.write_graph(g.as_graph_def(), OUT, "dynamic_batch.pb", as_text=False)
    runs = {}
    with v1.Session(graph=g) as sess:
        for batch in (3, 5):
            xv = np.random.RandomState(batch).standard_normal((batch, 6)).astype(np.float32)
            out = sess.run({n: n + ":0" for n in ("s", "b", "r", "f", "flat", "y")}, {"x:0": xv})
            runs[str(batch)] = {"x": xv.tolist(), **{k: np.asarray(v).tolist() for k, v in out.items()}}
    expected["dynamic_batch"] = runs
    with open(os.path.join(OUT, "dynamic_expected.json"), "w") as fh:
        json.dump(expected, fh, sort_keys=True)
        fh.write("\n")


if __name__ == "__main__":
    main()
