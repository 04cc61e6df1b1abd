#!/usr/bin/env python3
"""Restores, with TensorFlow's own tf.compat.v1.train.Saver, an Adam checkpoint actorflow wrote in
TensorFlow's format, then takes one more training step in TensorFlow.

    $(bench/tf_venv.sh) tests/data/tf_ckpt/tf_restore_adam.py PREFIX

The model is the golden adam/ one (make_golden.py): w = [1, 1] float32, loss = sum(w * w * [1, -2]),
AdamOptimizer(0.1), the global step. TensorFlow's Saver restores w, global_step and the slots
w/Adam and w/Adam_1 by name; beta1_power and beta2_power, which actorflow does not write, are set
from actorflow's update count w/Adam_t (after K updates TensorFlow holds beta^(K+1)).
Output (JSON): {"restored": {name: hex of the little-endian bytes}, "adam_t": K, "next_w": [..]}.
SaverTest.TensorFlowRestoresTheSaversCheckpointAndContinuesTheSameWay runs it when the project's
.venv-tf exists.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
prefix = sys.argv[1]
g = tf.Graph()
with g.as_default():
    w = v1.Variable(np.array([1.0, 1.0], dtype=np.float32), name="w")
    gs = v1.train.get_or_create_global_step()
    loss = tf.reduce_sum(w * w * tf.constant([1.0, -2.0]))
    opt = v1.train.AdamOptimizer(0.1)
    train = opt.minimize(loss, global_step=gs)
    m, v = opt.get_slot(w, "m"), opt.get_slot(w, "v")
    b1p, b2p = opt._get_beta_accumulators()
    saver = v1.train.Saver(var_list={"w": w, "global_step": gs, "w/Adam": m, "w/Adam_1": v})
    reader = tf.train.load_checkpoint(prefix)
    adam_t = int(reader.get_tensor("w/Adam_t"))
    with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        saver.restore(sess, prefix)
        restored = {}
        for name, var in [("w", w), ("global_step", gs), ("w/Adam", m), ("w/Adam_1", v)]:
            value = np.asarray(sess.run(var))
            restored[name] = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes().hex()
        sess.run([b1p.assign(np.float32(0.9) ** (adam_t + 1)), b2p.assign(np.float32(0.999) ** (adam_t + 1))])
        sess.run(train)
        next_w = [float(x) for x in sess.run(w)]
print(json.dumps({"restored": restored, "adam_t": adam_t, "next_w": next_w}))
