#!/usr/bin/env python3
"""Writes the TensorFlow GraphDefs that tests/tf_import_test.cc imports, and TensorFlow's outputs.

Run with TensorFlow's python (bench/tf_venv.sh makes one):
    .venv-tf/bin/python tests/data/tf_graph/make_golden.py [OUT_DIR]   (default: this directory)

Every graph is built in graph mode (tf.compat.v1) and written with tf.io.write_graph, as binary
(.pb) and, where small, as text (.pbtxt):
  mlp_forward.{pb,pbtxt}   x [2,6] -> relu(x w1 + b1) -> logits = h w2 + b2 -> probs = softmax;
                           reference variables initialised from fixed values (init op "init")
  mlp_saver.pbtxt          mlp_forward with a tf.compat.v1.train.Saver (its save/ subgraph)
  cnn_forward.pb           the seed CNN on a 4x4x1 input: conv 5x5x32 SAME + bias + relu, maxpool
                           2x2, conv 5x5x64 SAME + bias + relu, maxpool 2x2, fc 1024 + relu, fc 10,
                           softmax ("probs"); binary only (its weights are 470 KB)
  mlp_train_{ref,resource}_{sgd,adam}.pbtxt (text only, to keep the files small)
                           the MLP with a mean softmax cross-entropy loss and
                           GradientDescentOptimizer(0.1) / AdamOptimizer(0.01) ("train"), its
                           variables reference (VariableV2) or resource (VarHandleOp) variables,
                           built under replica_device_setter(ps_tasks=1)
  cnn_train_ref_momentum.pb, cnn_train_resource_rmsprop.pb, mlp_train_ref_adagrad.pb (binary only)
                           the same with MomentumOptimizer(0.1, 0.9), RMSPropOptimizer(0.01, 0.9,
                           momentum 0.5) and AdagradOptimizer(0.1, initial accumulator 0.2); the
                           CNN is the seed CNN's layers with 4/8 conv channels and fc 16 on 4x4x1
and expected.json: for each graph the feeds, TensorFlow's fetched outputs, and for the training
graphs the loss before the step, the values of the model's variables (and Adam's beta powers)
after init and after one "train" run, and every variable node's device (slots included). All values are fixed (no randomness): a rerun writes the same.
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
v1 = tf.compat.v1
v1.disable_eager_execution()


def values(seed, shapes, scale):
    rng = np.random.RandomState(seed)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]


def mlp(x, resource):
    w1, b1, w2, b2 = values(1, [(6, 5), (5,), (5, 3), (3,)], 0.5)
    w1 = v1.Variable(w1, name="w1", use_resource=resource)
    b1 = v1.Variable(b1, name="b1", use_resource=resource)
    w2 = v1.Variable(w2, name="w2", use_resource=resource)
    b2 = v1.Variable(b2, name="b2", use_resource=resource)
    h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w1), b1), name="h")
    return tf.add(tf.matmul(h, w2), b2, name="logits")


def cnn(x):
    c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b = values(
        2, [(5, 5, 1, 32), (32,), (5, 5, 32, 64), (64,), (64, 1024), (1024,), (1024, 10), (10,)], 0.1)
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, tf.constant(c1w), [1, 1, 1, 1], "SAME"), tf.constant(c1b)))
    h = tf.nn.max_pool2d(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, tf.constant(c2w), [1, 1, 1, 1], "SAME"), tf.constant(c2b)))
    h = tf.nn.max_pool2d(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    h = tf.reshape(h, [-1, 64])
    h = tf.nn.relu(tf.matmul(h, tf.constant(f1w)) + tf.constant(f1b))
    logits = tf.add(tf.matmul(h, tf.constant(f2w)), tf.constant(f2b), name="logits")
    return tf.nn.softmax(logits, name="probs")


def small_cnn(x, resource):
    """The seed CNN's layer kinds with few channels (its training graph stays small)."""
    c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b = values(
        3, [(5, 5, 1, 4), (4,), (5, 5, 4, 8), (8,), (8, 16), (16,), (16, 3), (3,)], 0.3)
    var = lambda v, n: v1.Variable(v, name=n, use_resource=resource)
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, var(c1w, "c1w"), [1, 1, 1, 1], "SAME"), var(c1b, "c1b")))
    h = tf.nn.max_pool2d(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, var(c2w, "c2w"), [1, 1, 1, 1], "SAME"), var(c2b, "c2b")))
    h = tf.nn.max_pool2d(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    h = tf.reshape(h, [-1, 8])
    h = tf.nn.relu(tf.matmul(h, var(f1w, "f1w")) + var(f1b, "f1b"))
    return tf.add(tf.matmul(h, var(f2w, "f2w")), var(f2b, "f2b"), name="logits")


def write(g, name, text, binary=True):
    gd = g.as_graph_def()
    if binary:
        tf.io.write_graph(gd, OUT, name + ".pb", as_text=False)
    if text:
        tf.io.write_graph(gd, OUT, name + ".pbtxt", as_text=True)


def tolist(a):
    # float32 values in their shortest decimal form (read back as double and narrowed: exact)
    return {"shape": list(a.shape),
            "values": [float(np.format_float_positional(v, unique=True)) for v in np.asarray(a, np.float32).ravel()]}


def main():
    expected = {}
    rng = np.random.RandomState(7)
    xs = rng.standard_normal((2, 6)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [2, 6], name="x")
        logits = mlp(x, False)
        tf.nn.softmax(logits, name="probs")
        v1.global_variables_initializer()
    write(g, "mlp_forward", True)
    with v1.Session(graph=g) as s:
        s.run("init")
        lo, pr = s.run(["logits:0", "probs:0"], {"x:0": xs})
    expected["mlp_forward"] = {"feeds": {"x": tolist(xs)}, "fetches": {"logits": tolist(lo), "probs": tolist(pr)}}

    # The same MLP with a tf.compat.v1.train.Saver: its save/restore subgraph (SaveV2, RestoreV2,
    # string constants) is what ImportGraphDefOptions::drop_save_restore drops.
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [2, 6], name="x")
        tf.nn.softmax(mlp(x, False), name="probs")
        v1.global_variables_initializer()
        v1.train.Saver()
    write(g, "mlp_saver", True, binary=False)

    img = np.random.RandomState(8).standard_normal((2, 4, 4, 1)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        cnn(v1.placeholder(tf.float32, [2, 4, 4, 1], name="x"))
    write(g, "cnn_forward", False)
    with v1.Session(graph=g) as s:
        lo, pr = s.run(["logits:0", "probs:0"], {"x:0": img})
    expected["cnn_forward"] = {"feeds": {"x": tolist(img)}, "fetches": {"logits": tolist(lo), "probs": tolist(pr)}}

    xt = np.random.RandomState(9).standard_normal((4, 6)).astype(np.float32)
    xc = np.random.RandomState(10).standard_normal((4, 4, 4, 1)).astype(np.float32)
    yt = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    optimizers = {
        "sgd": lambda: v1.train.GradientDescentOptimizer(0.1),
        "adam": lambda: v1.train.AdamOptimizer(0.01),
        "momentum": lambda: v1.train.MomentumOptimizer(0.1, 0.9),
        "rmsprop": lambda: v1.train.RMSPropOptimizer(0.01, decay=0.9, momentum=0.5),
        "adagrad": lambda: v1.train.AdagradOptimizer(0.1, initial_accumulator_value=0.2),
    }
    runs = [("mlp", form, o, True) for form in ("ref", "resource") for o in ("sgd", "adam")]
    runs += [("cnn", "ref", "momentum", False), ("cnn", "resource", "rmsprop", False), ("mlp", "ref", "adagrad", False)]
    for model, form, oname, text in runs:
            resource = form == "resource"
            xv = xt if model == "mlp" else xc
            g = tf.Graph()
            with g.as_default():
                with v1.device(v1.train.replica_device_setter(ps_tasks=1)):
                    x = v1.placeholder(tf.float32, xv.shape, name="x")
                    y = v1.placeholder(tf.float32, [4, 3], name="y")
                    logits = mlp(x, resource) if model == "mlp" else small_cnn(x, resource)
                    loss = tf.reduce_mean(
                        tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
                    optimizers[oname]().minimize(loss, name="train")
                    v1.global_variables_initializer()
            name = "%s_train_%s_%s" % (model, form, oname)
            write(g, name, text, binary=not text)
            gd = g.as_graph_def()
            devices = {n.name: n.device for n in gd.node if n.op in ("VariableV2", "VarHandleOp")}
            # TensorFlow runs it in one process: the same graph with its device strings cleared.
            for n in gd.node:
                n.device = ""
            run = tf.Graph()
            with run.as_default():
                v1.import_graph_def(gd, name="")
                reads = {}
                for n in devices:
                    t = run.get_tensor_by_name(n + ":0")
                    reads[n] = (tf.raw_ops.ReadVariableOp(resource=t, dtype=tf.float32)
                                     if resource else tf.identity(t))
            with v1.Session(graph=run) as s:
                s.run("init")
                before = s.run(reads)
                l0 = s.run("loss:0", {"x:0": xv, "y:0": yt})
                s.run("train", {"x:0": xv, "y:0": yt})
                after = s.run(reads)
            expected[name] = {
                "feeds": {"x": tolist(xv), "y": tolist(yt)},
                "loss": float(l0),
                # the model's variables and Adam's beta powers; the slots ("w1/Adam", ...) are
                # compared by their effect on the variables
                "before": {k: tolist(np.asarray(v)) for k, v in before.items() if "/" not in k},
                "after": {k: tolist(np.asarray(v)) for k, v in after.items() if "/" not in k},
                "devices": devices,
            }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
