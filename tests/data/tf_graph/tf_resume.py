#!/usr/bin/env python3
"""Takes a model trained by actorflow back into TensorFlow: imports a golden training GraphDef with
tf.compat.v1.import_graph_def, restores every variable of it (optimizer slots and Adam's beta
powers included) with TensorFlow's own tf.compat.v1.train.Saver from a checkpoint actorflow wrote,
and runs one more training step with the golden feeds.

    $(bench/tf_venv.sh) tests/data/tf_graph/tf_resume.py GRAPH.pbtxt KEY PREFIX

KEY names the graph's entry of expected.json (its feeds). Output (JSON):
{"restored": {variable: [values]}, "loss": loss before the step, "after": {variable: [values]}}.
TfGoldenTest.TensorFlowResumesAGraphActorflowTrained runs it when the project's .venv-tf (and .venv-tf1) exist.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402

v1 = tf.compat.v1
graph_file, key, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
here = os.path.dirname(os.path.abspath(__file__))
feeds = json.load(open(os.path.join(here, "expected.json")))[key]["feeds"]
gd = tf.compat.v1.GraphDef()
with open(graph_file, "rb") as f:
    data = f.read()
if graph_file.endswith(".pbtxt"):
    text_format.Parse(data.decode(), gd)
else:
    gd.ParseFromString(data)
for n in gd.node:  # one process here: the graph's /job:ps/task:0 devices are dropped, as make_golden.py ran it
    n.device = ""
g = tf.Graph()
with g.as_default():
    tf.compat.v1.import_graph_def(gd, name="")
    names = [n.name for n in gd.node if n.op in ("VariableV2", "VarHandleOp")]
    var_list = {n: g.get_tensor_by_name(n + ":0") for n in names}
    saver = v1.train.Saver(var_list=var_list)
    with v1.Session(graph=g) as sess:
        saver.restore(sess, prefix)
        fd = {g.get_tensor_by_name(k + ":0"): np.array(v["values"], dtype=np.float32).reshape(v["shape"])
              for k, v in feeds.items()}
        restored = {n: np.asarray(sess.run(var_list[n])).ravel().tolist() for n in names}
        loss = float(sess.run(g.get_tensor_by_name("loss:0"), fd))
        sess.run(g.get_operation_by_name("train"), fd)
        after = {n: np.asarray(sess.run(var_list[n])).ravel().tolist() for n in names}
print(json.dumps({"restored": restored, "loss": loss, "after": after}))
