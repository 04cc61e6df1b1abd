#!/usr/bin/env python3
"""Writes the TensorFlow V2 checkpoints (tensor bundles) that tests/tf_checkpoint_test.cc reads.

Run with TensorFlow's python (bench/tf_venv.sh makes one):
    $(bench/tf_venv.sh) tests/data/tf_ckpt/make_golden.py [OUT_DIR]   (default: this directory)

It writes, with TensorFlow's own tf.compat.v1.train.Saver (graph mode):
  plain/model.ckpt-7.{index,data-00000-of-00001} + plain/checkpoint
      one variable of each dtype the reader supports (float32, float64, float16, bfloat16, int32,
      int64, bool), scalars and matrices, plus the global step (7);
  partitioned/model.ckpt-3.*  + partitioned/checkpoint
      a [5,2] float32 variable split by fixed_size_partitioner(3) into slices of 2, 2 and 1 rows
      (saved as TensorFlow's slices: one full-tensor entry listing the slices, one entry per slice);
  sharded/model.ckpt-5.{index,data-0000[012]-of-00003} + sharded/checkpoint
      a sharded save (Saver(sharded=True)) of variables placed on two CPU devices (one shard per
      device plus one for the global step, which has no device).
  adam/model.ckpt-2.* + adam/checkpoint
      w = [1, 1] (float32) after 2 steps of AdamOptimizer(0.1) on loss = sum(w * w * [1, -2]), with its
      slots w/Adam and w/Adam_1, beta1_power/beta2_power and the global step (2); expected.json's
      "adam_third_step" holds w after one more step, which actorflow must reproduce from the file;
  ps_sharded/model.ckpt-4.{index,data-0000[01]-of-00002} + ps_sharded/checkpoint
      a sharded save (Saver(sharded=True)) over two CPU devices standing for two ps tasks, each
      holding variables (the global step on the first, so two data files): on the first "emb", a
      [7,3] float32 variable split by fixed_size_partitioner(3) into 3, 2 and 2 rows, after one
      step of AdamOptimizer(0.1) on loss = sum(emb * emb * c) (its slots "emb/Adam", "emb/Adam_1"
      sliced like it, beta1_power/beta2_power), and float64, float16 and int32 variables; on the
      second float32, bfloat16, int64 and bool variables;
and expected.json: for every checkpoint prefix and every variable, what TensorFlow's own reader
(tf.train.load_checkpoint) returns: dtype name, shape and the little-endian bytes in hex.
The values are fixed (no randomness), so a rerun writes the same tensors.
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
v1 = tf.compat.v1


def save(subdir, build, step, sharded=False, cpus=1):
    d = os.path.join(OUT, subdir)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    g = tf.Graph()
    with g.as_default():
        build()
        gs = v1.train.get_or_create_global_step()
        init = v1.global_variables_initializer()
        assign_step = v1.assign(gs, step)
        saver = v1.train.Saver(sharded=sharded, save_relative_paths=True)
        config = v1.ConfigProto(device_count={"CPU": cpus})
        with v1.Session(graph=g, config=config) as sess:
            sess.run(init)
            sess.run(assign_step)
            return saver.save(sess, os.path.join(d, "model.ckpt"), global_step=step, write_meta_graph=False)


def plain():
    v1.Variable(np.float32(1.5), name="scalar_f32")
    v1.Variable(np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(0.1) - np.float32(0.25), name="f32")
    v1.Variable(np.array([[1.0 / 3, -2.5e-300], [1e300, -0.0]], dtype=np.float64), name="f64")
    v1.Variable(np.array([0.5, -1.25, 65504.0, 6.1e-5], dtype=np.float16), name="f16")
    v1.Variable(tf.constant([1.0, -3.140625, 1e30, 0.0078125], dtype=tf.bfloat16), name="bf16")
    v1.Variable(np.array([[1, -2], [2147483647, -2147483648]], dtype=np.int32), name="i32")
    v1.Variable(np.array([9007199254740993, -1, 0], dtype=np.int64), name="i64")
    v1.Variable(np.array([True, False, True], dtype=np.bool_), name="flags")
    with v1.variable_scope("layer1"):
        v1.Variable(np.ones((3,), dtype=np.float32), name="bias")


def partitioned():
    full = np.arange(10, dtype=np.float32).reshape(5, 2) + np.float32(0.5)

    def init(shape, dtype=None, partition_info=None):  # each partition's rows of `full`
        row = partition_info.var_offset[0] if partition_info is not None else 0
        return tf.constant(full[row:row + shape[0]], dtype=tf.float32)

    v1.get_variable("part", shape=[5, 2], dtype=tf.float32, initializer=init,
                    partitioner=v1.fixed_size_partitioner(3))
    v1.Variable(np.float32(-2.0), name="other")


def sharded():
    with tf.device("/cpu:0"):
        v1.Variable(np.arange(4, dtype=np.float32), name="a")
        v1.Variable(np.array([7, 8], dtype=np.int64), name="c")
    with tf.device("/cpu:1"):
        v1.Variable(np.arange(3, dtype=np.float64) - 1.0, name="b")


def adam():
    """Trains two Adam steps and saves; returns (prefix, w after a third step)."""
    d = os.path.join(OUT, "adam")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    g = tf.Graph()
    with g.as_default():
        w = v1.Variable(np.array([1.0, 1.0], dtype=np.float32), name="w")
        gs = v1.train.get_or_create_global_step()
        loss = tf.reduce_sum(w * w * tf.constant([1.0, -2.0]))
        train = v1.train.AdamOptimizer(0.1).minimize(loss, global_step=gs)
        saver = v1.train.Saver(save_relative_paths=True)
        with v1.Session(graph=g) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train)
            sess.run(train)
            prefix = saver.save(sess, os.path.join(d, "model.ckpt"), global_step=2, write_meta_graph=False)
            sess.run(train)
            third = sess.run(w)
    return prefix, [float(x) for x in third]


def ps_sharded():
    """Writes ps_sharded/ (see the module docstring); returns the prefix."""
    d = os.path.join(OUT, "ps_sharded")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    full = (np.arange(21, dtype=np.float32).reshape(7, 3) - np.float32(10)) * np.float32(0.25)

    def init(shape, dtype=None, partition_info=None):  # each partition's rows of `full`
        row = partition_info.var_offset[0] if partition_info is not None else 0
        return tf.constant(full[row:row + shape[0]], dtype=tf.float32)

    g = tf.Graph()
    with g.as_default():
        with tf.device("/cpu:0"):
            gs = v1.train.get_or_create_global_step()
            emb = v1.get_variable("emb", shape=[7, 3], dtype=tf.float32, initializer=init,
                                  partitioner=v1.fixed_size_partitioner(3))
            v1.Variable(np.array([[1.0 / 3, -2.5e-300], [1e300, -0.0]], dtype=np.float64), name="f64")
            v1.Variable(np.array([0.5, -1.25, 65504.0, 6.1e-5], dtype=np.float16), name="f16")
            v1.Variable(np.array([[1, -2], [2147483647, -2147483648]], dtype=np.int32), name="i32")
        with tf.device("/cpu:1"):
            v1.Variable(np.array([0.1, -0.2, 0.3], dtype=np.float32), name="bias")
            v1.Variable(tf.constant([1.0, -3.140625, 1e30, 0.0078125], dtype=tf.bfloat16), name="bf16")
            v1.Variable(np.array([9007199254740993, -1, 0], dtype=np.int64), name="i64")
            v1.Variable(np.array([True, False, True], dtype=np.bool_), name="flags")
        c = tf.constant(np.arange(21, dtype=np.float32).reshape(7, 3) * np.float32(0.1) - np.float32(1.0))
        loss = tf.reduce_sum(tf.convert_to_tensor(emb) ** 2 * c)
        train = v1.train.AdamOptimizer(0.1).minimize(loss, var_list=list(emb))
        set_step = v1.assign(gs, 4)
        saver = v1.train.Saver(sharded=True, save_relative_paths=True)
        config = v1.ConfigProto(device_count={"CPU": 2})
        with v1.Session(graph=g, config=config) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train)
            sess.run(set_step)
            return saver.save(sess, os.path.join(d, "model.ckpt"), global_step=4, write_meta_graph=False)


def record(prefix):
    reader = tf.train.load_checkpoint(prefix)
    out = {}
    for name, shape in sorted(reader.get_variable_to_shape_map().items()):
        dt = reader.get_variable_to_dtype_map()[name]
        value = np.asarray(reader.get_tensor(name))
        if dt == tf.bfloat16:
            raw = np.asarray(value).view(np.uint16).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
        out[name] = {"dtype": dt.name, "shape": list(shape), "hex": raw.hex()}
    return out


def main():
    expected = {}
    for subdir, build, step, sharded_, cpus in [("plain", plain, 7, False, 1),
                                                 ("partitioned", partitioned, 3, False, 1),
                                                 ("sharded", sharded, 5, True, 2)]:
        prefix = save(subdir, build, step, sharded_, cpus)
        rel = os.path.relpath(prefix, OUT)
        expected[rel] = record(prefix)
        print(rel, sorted(os.listdir(os.path.dirname(prefix))))
    prefix = ps_sharded()
    rel = os.path.relpath(prefix, OUT)
    expected[rel] = record(prefix)
    print(rel, sorted(os.listdir(os.path.dirname(prefix))))
    prefix, third = adam()
    rel = os.path.relpath(prefix, OUT)
    expected[rel] = record(prefix)
    print(rel, sorted(os.listdir(os.path.dirname(prefix))))
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"tensorflow": tf.__version__, "checkpoints": expected, "adam_third_step": {"w": third}}, f,
                  indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
