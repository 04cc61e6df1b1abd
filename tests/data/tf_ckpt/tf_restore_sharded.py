#!/usr/bin/env python3
"""Restores, with TensorFlow's own Saver, a sharded checkpoint actorflow wrote with a partitioned
variable, and prints what TensorFlow got, as JSON.

    $(bench/tf_venv.sh) tests/data/tf_ckpt/tf_restore_sharded.py PREFIX

The checkpoint holds "emb" ([7,3] float32, written as 3 slices), its Adam moments "emb/Adam" and
"emb/Adam_1", "f64" ([2,2] float64), "i32" ([2,2] int32), "i64" ([3] int64), "flags" ([3] bool),
"bias" ([3] float32) and "global_step". Output:
  {"data_files": [names of PREFIX's data files],
   "tensors": {name: hex of tf.train.load_checkpoint(PREFIX).get_tensor(name)} for every entry,
   "restored": {name: hex} of each variable after tf.compat.v1.train.Saver.restore into a graph
               that declares emb with get_variable(partitioner=fixed_size_partitioner(3)) and its
               Adam slots (the parts concatenated)}
(hex: little-endian bytes). SaverTest.TensorFlowRestoresAShardedSaveWithAPartitionedVariable runs it
when the project's .venv-tf exists.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
prefix = sys.argv[1]


def hexof(value):
    value = np.asarray(value)
    return np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes().hex()


reader = tf.train.load_checkpoint(prefix)
tensors = {name: hexof(reader.get_tensor(name)) for name in sorted(reader.get_variable_to_shape_map())}
d, base = os.path.split(prefix)
files = sorted(f for f in os.listdir(d or ".") if f.startswith(base + ".data-"))

g = tf.Graph()
with g.as_default():
    emb = v1.get_variable("emb", shape=[7, 3], dtype=tf.float32, initializer=v1.zeros_initializer(),
                          partitioner=v1.fixed_size_partitioner(3))
    others = {
        "f64": v1.get_variable("f64", shape=[2, 2], dtype=tf.float64, initializer=v1.zeros_initializer()),
        "i32": v1.get_variable("i32", shape=[2, 2], dtype=tf.int32, initializer=v1.zeros_initializer()),
        "i64": v1.get_variable("i64", shape=[3], dtype=tf.int64, initializer=v1.zeros_initializer()),
        "flags": v1.get_variable("flags", shape=[3], dtype=tf.bool, initializer=v1.zeros_initializer()),
        "bias": v1.get_variable("bias", shape=[3], dtype=tf.float32, initializer=v1.zeros_initializer()),
        "global_step": v1.train.get_or_create_global_step(),
    }
    opt = v1.train.AdamOptimizer(0.1)
    opt.minimize(tf.reduce_sum(tf.convert_to_tensor(emb)), var_list=list(emb))
    parts = list(emb)
    m = [opt.get_slot(p, "m") for p in parts]
    v = [opt.get_slot(p, "v") for p in parts]
    saver = v1.train.Saver(var_list=parts + m + v + list(others.values()))
    with v1.Session(graph=g) as sess:
        saver.restore(sess, prefix)
        restored = {
            "emb": hexof(np.concatenate(sess.run(parts))),
            "emb/Adam": hexof(np.concatenate(sess.run(m))),
            "emb/Adam_1": hexof(np.concatenate(sess.run(v))),
        }
        for name, var in others.items():
            restored[name] = hexof(sess.run(var))
print(json.dumps({"data_files": files, "tensors": tensors, "restored": restored}))
