#!/usr/bin/env python3
"""Writes the Saver golden files that tests/tf_import_test.cc runs (no TensorFlow needed there).

Run with TensorFlow's python (bench/tf_venv.sh makes one):
    .venv-tf/bin/python tests/data/tf_graph/make_saver_golden.py [OUT_DIR]   (default: this directory)

  mlp_train_saver_adam.pb    the MLP of make_golden.py (reference variables) with a mean softmax
                              cross-entropy loss, AdamOptimizer(0.01) ("train"), built under
                              replica_device_setter(ps_tasks=1), and a tf.compat.v1.train.Saver
                              (save/SaveV2, save/RestoreV2, save/restore_all over every variable,
                              Adam's slots and beta powers included)
  saver_ckpt/tf.ckpt.*        the checkpoint TensorFlow wrote after two "train" runs, running the
                              SaverDef's save tensor with its filename tensor fed
  mlp_train_saver_sharded.pb  the same over two ps tasks with tf.compat.v1.train.Saver(sharded=True)
                              (ShardedFilename, SaveV2 per device, MergeV2Checkpoints)
  saver_ckpt/tf_sharded.ckpt.* its checkpoint after the same two steps (two data files)
  saver_expected.json         the feeds; every saved tensor after the two steps ("saved") and after
                              a third ("third"), as TensorFlow computed them (device strings cleared)
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


def mlp_graph(init, ps_tasks, sharded):
    """make_golden.py's MLP (reference variables from `init`) with a mean softmax cross-entropy
    "loss", AdamOptimizer(0.01) as "train" and "init", under replica_device_setter(ps_tasks), and a
    tf.compat.v1.train.Saver (sharded=True: made outside the device scope, one shard per device).
    Returns the graph and the Saver."""
    g = tf.Graph()
    with g.as_default():
        with v1.device(v1.train.replica_device_setter(ps_tasks=ps_tasks)):
            x = v1.placeholder(tf.float32, [4, 6], name="x")
            y = v1.placeholder(tf.float32, [4, 3], name="y")
            w1, b1, w2, b2 = [v1.Variable(v, name=n, use_resource=False) for v, n in zip(init, ["w1", "b1", "w2", "b2"])]
            h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w1), b1), name="h")
            logits = tf.add(tf.matmul(h, w2), b2, name="logits")
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
            v1.train.AdamOptimizer(0.01).minimize(loss, name="train")
            v1.global_variables_initializer()
            saver = None if sharded else v1.train.Saver()
        if sharded:
            saver = v1.train.Saver(sharded=True)
    return g, saver


def main():
    rng = np.random.RandomState(1)
    shapes = [(6, 5), (5,), (5, 3), (3,)]
    init = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in shapes]
    xv = np.random.RandomState(9).standard_normal((4, 6)).astype(np.float32)
    yv = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    g, saver = mlp_graph(init, ps_tasks=1, sharded=False)
    gd = g.as_graph_def()
    tf.io.write_graph(gd, OUT, "mlp_train_saver_adam.pb", as_text=False)
    names = sorted(v.op.name for v in g.get_collection(v1.GraphKeys.GLOBAL_VARIABLES))
    sd = saver.as_saver_def()
    # TensorFlow runs it in one process: the same graph with its device strings cleared, saved by
    # running the SaverDef's ops by name (as TensorFlow's C++ users do).
    for n in gd.node:
        n.device = ""
    run = tf.Graph()
    with run.as_default():
        v1.import_graph_def(gd, name="")
    feeds = {"x:0": xv, "y:0": yv}
    prefix = os.path.join(OUT, "saver_ckpt", "tf.ckpt")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with v1.Session(graph=run) as s:
        s.run("init")
        for _ in range(2):
            s.run("train", feeds)
        s.run(sd.save_tensor_name, {sd.filename_tensor_name: prefix})
        saved = {n: s.run(n + ":0").tolist() for n in names}
        s.run("train", feeds)
        third = {n: s.run(n + ":0").tolist() for n in names}
    # The same model with its variables on two ps tasks and a sharded Saver (Saver(sharded=True),
    # as MonitoredTrainingSession's Scaffold makes it): one SaveV2 per device writing
    # "<prefix>_temp/part-0000k-of-00002", a MergeV2Checkpoints, a restore per device. TensorFlow
    # saves it after the same two steps (the values equal the unsharded run's).
    g, sharded = mlp_graph(init, ps_tasks=2, sharded=True)
    gd = g.as_graph_def()
    tf.io.write_graph(gd, OUT, "mlp_train_saver_sharded.pb", as_text=False)
    sd = sharded.as_saver_def()
    assert sd.save_tensor_name == "save/Identity:0" and sd.restore_op_name == "save/restore_all", sd
    for n in gd.node:
        n.device = ""
    run = tf.Graph()
    with run.as_default():
        v1.import_graph_def(gd, name="")
    with v1.Session(graph=run) as s:
        s.run("init")
        for _ in range(2):
            s.run("train", feeds)
        s.run(sd.save_tensor_name, {sd.filename_tensor_name: os.path.join(OUT, "saver_ckpt", "tf_sharded.ckpt")})
        sharded_saved = {n: s.run(n + ":0").tolist() for n in names}
    assert sharded_saved == saved
    with open(os.path.join(OUT, "saver_expected.json"), "w") as f:
        json.dump({"feeds": {"x": xv.tolist(), "y": yv.tolist()}, "saved": saved, "third": third}, f, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
