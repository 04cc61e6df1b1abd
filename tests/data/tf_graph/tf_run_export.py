"""Runs a GraphDef actorflow exported with TensorFlow itself (tf_export_test).

  tf_run_export.py GRAPHDEF SPEC.json > OUT.json

GRAPHDEF is binary, or text when its name ends in .pbtxt. SPEC: {"init": node name or "",
"feeds": {tensor name: {"dtype": "float32", "shape": [...], "values": [...]}}, "fetches": [tensor
names]}, optionally "restore": a checkpoint prefix (after init, every variable of the graph that the
checkpoint holds is restored by a tf.compat.v1.train.Saver over those variables; Adam's shared
beta1_power/beta2_power, which actorflow does not write, are set from "<var>/Adam_t" as
beta^(t+1), the betas read from the graph's Adam_beta_powers/beta and beta_1 constants), and
"train": a target run "steps" times (with the feeds) before the fetches. The device strings are cleared before tf.compat.v1.import_graph_def (they name
actorflow's jobs) and reported. OUT: {"fetches": {name: {"shape": [...], "values": [...]}},
"devices": {node: device}, "ops": {node: op}}.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402


def main():
    path, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    gd = tf.compat.v1.GraphDef()
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".pbtxt"):
        text_format.Parse(data.decode("utf-8"), gd)
    else:
        gd.ParseFromString(data)
    devices = {n.name: n.device for n in gd.node if n.device}
    ops = {n.name: n.op for n in gd.node}
    for n in gd.node:
        n.device = ""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as sess:
        if spec.get("init"):
            sess.run(spec["init"])
        feeds = {}
        for name, t in spec["feeds"].items():
            feeds[name if ":" in name else name + ":0"] = np.array(t["values"], dtype=t["dtype"]).reshape(t["shape"])
        if spec.get("restore"):
            reader = tf.train.load_checkpoint(spec["restore"])
            held = reader.get_variable_to_shape_map()
            var_ops = [n.name for n in gd.node if n.op == "VariableV2" and n.name in held]
            with g.as_default():
                saver = tf.compat.v1.train.Saver({n: g.get_tensor_by_name(n + ":0") for n in var_ops})
            saver.restore(sess, spec["restore"])
            result_restored = sorted(var_ops)
            counts = [int(reader.get_tensor(k)) for k in held if k.endswith("/Adam_t")]
            if counts and "beta1_power" in ops:
                t = counts[0]
                for power, beta in (("beta1_power", "Adam_beta_powers/beta"), ("beta2_power", "Adam_beta_powers/beta_1")):
                    b = sess.run(beta + ":0")
                    with g.as_default():
                        sess.run(tf.compat.v1.assign(g.get_tensor_by_name(power + ":0"), np.float32(b ** (t + 1))))
        for _ in range(int(spec.get("steps", 0))):
            sess.run(spec["train"], feed_dict=feeds)
        names = [n if ":" in n else n + ":0" for n in spec["fetches"]]
        outs = sess.run(names, feed_dict=feeds)
    result = {"fetches": {}, "devices": devices, "ops": ops}
    if spec.get("restore"):
        result["restored"] = result_restored
    for name, v in zip(spec["fetches"], outs):
        v = np.asarray(v)
        result["fetches"][name] = {"shape": list(v.shape), "values": v.astype(np.float64).ravel().tolist()}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
