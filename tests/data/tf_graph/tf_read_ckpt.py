#!/usr/bin/env python3
"""Prints, as JSON, what TensorFlow's own reader (tf.train.load_checkpoint) finds in a checkpoint:
{name: {"dtype": ..., "shape": [...], "hex": little-endian bytes}} for every entry.

    .venv-tf/bin/python tests/data/tf_graph/tf_read_ckpt.py PREFIX
"""
import json
import sys

import tensorflow as tf


def main():
    r = tf.train.load_checkpoint(sys.argv[1])
    out = {}
    for name, shape in r.get_variable_to_shape_map().items():
        t = r.get_tensor(name)
        out[name] = {"dtype": str(t.dtype), "shape": list(shape), "hex": t.astype(t.dtype.newbyteorder("<")).tobytes().hex()}
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
