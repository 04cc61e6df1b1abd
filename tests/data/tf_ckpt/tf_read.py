#!/usr/bin/env python3
"""Prints, as JSON, what TensorFlow's own reader returns for every tensor of a checkpoint.

    $(bench/tf_venv.sh) tests/data/tf_ckpt/tf_read.py PREFIX [DIR]

Output: {"tensors": {name: {"dtype", "shape", "hex"}}, "latest": tf.train.latest_checkpoint(DIR)}
(hex: the little-endian bytes). TfCheckpointTest.TensorFlowReadsWhatActorflowWrites runs it on a
checkpoint actorflow wrote, when the project's .venv-tf exists (skipped otherwise: CI needs no
TensorFlow).
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

prefix = sys.argv[1]
reader = tf.train.load_checkpoint(prefix)
out = {}
for name, shape in sorted(reader.get_variable_to_shape_map().items()):
    dt = reader.get_variable_to_dtype_map()[name]
    value = np.asarray(reader.get_tensor(name))
    if dt == tf.bfloat16:
        raw = value.view(np.uint16).astype("<u2").tobytes()
    else:
        raw = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
    out[name] = {"dtype": dt.name, "shape": list(shape), "hex": raw.hex()}
latest = tf.train.latest_checkpoint(sys.argv[2]) if len(sys.argv) > 2 else None
print(json.dumps({"tensors": out, "latest": latest}))
