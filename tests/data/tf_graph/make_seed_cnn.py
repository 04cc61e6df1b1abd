#!/usr/bin/env python3
"""Writes seed 002's CNN training graph as TensorFlow 1.x users write it, for actorflow to import
and train (samples/distributed_cnn --graph-def, bench/training's imported-graph part).

    .venv-tf/bin/python tests/data/tf_graph/make_seed_cnn.py [OUT_DIR]   (default: this directory)

seed_cnn_train_ref.pb (reference variables) and seed_cnn_train_resource.pb (resource variables),
both built in graph mode (tf.compat.v1) under replica_device_setter(ps_tasks=1):
  x-input [None, 784], y-input [None, 10] (the batch known only at run time, as TensorFlow 1.x
  users write it: the gradients compute shapes at run time); conv 5x5x32 SAME + bias + relu,
  maxpool 2x2, conv 5x5x64, maxpool, fc 1024 + relu, fc 10 ("logits"); "loss" the mean softmax
  cross-entropy; AdamOptimizer(1e-4).minimize(loss, global_step) as "train"; "init" initialises
  every variable (truncated normal 0.1 weights, 0.1 biases).
"""
import os
import sys

import tensorflow as tf

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
v1 = tf.compat.v1
v1.disable_eager_execution()


def model(resource):
    def weight(name, shape):
        return v1.get_variable(name, shape, initializer=v1.truncated_normal_initializer(stddev=0.1),
                               use_resource=resource)

    def bias(name, n):
        return v1.get_variable(name, [n], initializer=v1.constant_initializer(0.1), use_resource=resource)

    x = v1.placeholder(tf.float32, [None, 784], name="x-input")
    y = v1.placeholder(tf.float32, [None, 10], name="y-input")
    img = tf.reshape(x, [-1, 28, 28, 1])
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(img, weight("conv1/weights", [5, 5, 1, 32]), [1, 1, 1, 1], "SAME"),
                                  bias("conv1/biases", 32)))
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, weight("conv2/weights", [5, 5, 32, 64]), [1, 1, 1, 1], "SAME"),
                                  bias("conv2/biases", 64)))
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = tf.reshape(h, [-1, 7 * 7 * 64])
    h = tf.nn.relu(tf.nn.bias_add(tf.matmul(h, weight("fc1/weights", [3136, 1024])), bias("fc1/biases", 1024)))
    logits = tf.nn.bias_add(tf.matmul(h, weight("fc2/weights", [1024, 10])), bias("fc2/biases", 10), name="logits")
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
    gs = v1.train.get_or_create_global_step()
    v1.train.AdamOptimizer(1e-4).minimize(loss, global_step=gs, name="train")
    v1.global_variables_initializer()


for form in ("ref", "resource"):
    g = tf.Graph()
    with g.as_default():
        with v1.device(v1.train.replica_device_setter(ps_tasks=1)):
            model(form == "resource")
    tf.io.write_graph(g.as_graph_def(), OUT, "seed_cnn_train_%s.pb" % form, as_text=False)
    print("seed_cnn_train_%s.pb" % form, len(g.as_graph_def().node), "nodes")
