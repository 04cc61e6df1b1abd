"""Reads the graph of an event file with TensorBoard's own event reader (tf_export_test).

  tb_read_graph.py LOGDIR > OUT.json

Uses tensorboard's EventAccumulator (pip's tensorboard) and says so in "reader"; without
tensorboard, TensorFlow's tf.compat.v1.train.summary_iterator reads the file instead. OUT:
{"reader": "EventAccumulator" | "summary_iterator", "nodes": {name: {"op": op, "input": [...],
"device": device}}}.
"""
import glob
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    logdir = sys.argv[1]
    try:
        from tensorboard.backend.event_processing import event_accumulator
        from tensorboard.compat.proto import graph_pb2  # noqa: F401 (the GraphDef class it returns)
    except ImportError:
        event_accumulator = None
    if event_accumulator is not None:
        acc = event_accumulator.EventAccumulator(logdir)
        acc.Reload()
        gd = acc.Graph()  # raises ValueError when the file holds no graph
        reader = "EventAccumulator"
    else:
        import tensorflow as tf
        gd = None
        for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
            for ev in tf.compat.v1.train.summary_iterator(path):
                if ev.graph_def:
                    gd = tf.compat.v1.GraphDef()
                    gd.ParseFromString(ev.graph_def)
        if gd is None:
            raise SystemExit("no graph in " + logdir)
        reader = "summary_iterator"
    nodes = {n.name: {"op": n.op, "input": list(n.input), "device": n.device} for n in gd.node}
    json.dump({"reader": reader, "nodes": nodes}, sys.stdout)


if __name__ == "__main__":
    main()
