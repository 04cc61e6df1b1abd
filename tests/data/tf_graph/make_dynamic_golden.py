#!/usr/bin/env python3
"""Writes the half-precision and run-time-shape golden files that tests/tf_import_test.cc imports.

Run with TensorFlow's python (bench/tf_venv.sh makes one):
    .venv-tf/bin/python tests/data/tf_graph/make_dynamic_golden.py [OUT_DIR]   (default: this directory)

  half_consts.pbtxt     x [2,3] * cast(float16 constant "h") + cast(bfloat16 constant "hb") ("y")
  dynamic_batch.pb      x [?,6]: s = tf.shape(x), b = s[0] (StridedSlice), "r" = reshape(x,
                        stack([b, 2, 3])), "f" = fill(stack([b, 4]), 1.5), "flat" = reshape(r,
                        [-1, prod(shape(r)[1:])]), "y" = concat([reduce_sum(r, 2), f], 1) * 2
  dynamic_train_{ref,resource}_adam.pb
                        make_golden.py's small CNN with x [None,4,4,1], y [None,3], Adam: its
                        gradients compute shapes at run time
  ftrl_{v1,v2}_{ref,resource}.pb
                        the same CNN at batch None trained by tf.compat.v1.train.FtrlOptimizer
                        (v1: ApplyFtrl; v2: ApplyFtrlV2 with an l2 shrinkage), with a Saver
  dynamic_expected.json TensorFlow's outputs: half_consts' y; dynamic_batch's s, b, r, f, flat, y
                        at batch 3 and batch 5; the training graphs' loss and variables after
                        a step at batch 3, then one at batch 5; the FTRL graphs' variables
                        and slots after three steps at batch 3
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


def training_graph(name, resource, make_optimizer, saver, model_only):
    """Writes <name>.pb: make_golden.py's small CNN at batch None (x [None,4,4,1], y [None,3]) under
    replica_device_setter, its mean softmax cross-entropy "loss" minimised by make_optimizer() as
    "train", "init", and with `saver` a tf.compat.v1.train.Saver. Returns the same graph with its
    devices cleared (as TensorFlow runs it in one process) and a read of each variable (the model's
    only with `model_only`, else the slots too)."""
    from make_golden import small_cnn
    g = tf.Graph()
    with g.as_default():
        with v1.device(v1.train.replica_device_setter(ps_tasks=1)):
            x = v1.placeholder(tf.float32, [None, 4, 4, 1], name="x")
            y = v1.placeholder(tf.float32, [None, 3], name="y")
            logits = small_cnn(x, resource)
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
            make_optimizer().minimize(loss, name="train")
            v1.global_variables_initializer()
        if saver:
            v1.train.Saver()
    gd = g.as_graph_def()
    tf.io.write_graph(gd, OUT, name + ".pb", as_text=False)
    variables = [n.name for n in gd.node
                 if n.op in ("VariableV2", "VarHandleOp") and (not model_only or "/" not in n.name)]
    for n in gd.node:
        n.device = ""
    run = tf.Graph()
    with run.as_default():
        v1.import_graph_def(gd, name="")
        reads = {}
        for n in variables:
            t = run.get_tensor_by_name(n + ":0")
            reads[n] = tf.raw_ops.ReadVariableOp(resource=t, dtype=tf.float32) if resource else tf.identity(t)
    return run, reads


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

    # Training graphs whose batch is known only at run time, as TensorFlow 1.x users write them
    # (x [None, 4, 4, 1], y [None, 3]): their gradients compute shapes at run time (Shape, ShapeN,
    # BroadcastGradientArgs, Sum over run-time axes, Tile, Prod, GatherV2, ...). small_cnn is
    # make_golden.py's (conv, maxpool, matmul + bias through AddV2); two steps, batch 3 then 5.
    yv = {b: np.eye(3, dtype=np.float32)[np.arange(b) % 3] for b in (3, 5)}
    xv = {b: np.random.RandomState(20 + b).standard_normal((b, 4, 4, 1)).astype(np.float32) for b in (3, 5)}
    for form in ("ref", "resource"):
        name = "dynamic_train_%s_adam" % form
        run, reads = training_graph(name, form == "resource", lambda: v1.train.AdamOptimizer(0.01), saver=False,
                                    model_only=True)
        steps = []
        with v1.Session(graph=run) as sess:
            sess.run("init")
            for b in (3, 5):
                feeds = {"x:0": xv[b], "y:0": yv[b]}
                l0 = sess.run("loss:0", feeds)
                sess.run("train", feeds)
                after = sess.run(reads)
                steps.append({"batch": b, "x": xv[b].tolist(), "y": yv[b].tolist(), "loss": float(l0),
                              "after": {k: np.asarray(v).ravel().tolist() for k, v in after.items()}})
        expected[name] = steps

    # FTRL (the wide-and-deep optimizer), both variable forms: ApplyFtrl with l1/l2 and lr_power
    # -0.5, and ApplyFtrlV2 (an l2 shrinkage) with lr_power -0.7; three steps at batch 3.
    ftrl = {
        "v1": lambda: v1.train.FtrlOptimizer(0.05, learning_rate_power=-0.5, initial_accumulator_value=0.2,
                                             l1_regularization_strength=0.001, l2_regularization_strength=0.01),
        "v2": lambda: v1.train.FtrlOptimizer(0.05, learning_rate_power=-0.7, initial_accumulator_value=0.1,
                                             l1_regularization_strength=0.002, l2_regularization_strength=0.0,
                                             l2_shrinkage_regularization_strength=0.03),
    }
    for form in ("ref", "resource"):
        for version, make_opt in ftrl.items():
            resource = form == "resource"
            name = "ftrl_%s_%s" % (version, form)
            run, reads = training_graph(name, resource, make_opt, saver=True, model_only=False)
            ops = {n.op for n in run.as_graph_def().node}
            assert ("ResourceApplyFtrl" if resource else "ApplyFtrl") + ("V2" if version == "v2" else "") in ops, ops
            feeds = {"x:0": xv[3], "y:0": yv[3]}
            with v1.Session(graph=run) as sess:
                sess.run("init")
                for _ in range(3):
                    sess.run("train", feeds)
                after = sess.run(reads)
            expected[name] = {"x": xv[3].tolist(), "y": yv[3].tolist(),
                              "after": {k: np.asarray(v).ravel().tolist() for k, v in after.items()}}
    with open(os.path.join(OUT, "dynamic_expected.json"), "w") as fh:
        json.dump(expected, fh, sort_keys=True)
        fh.write("\n")


if __name__ == "__main__":
    main()
