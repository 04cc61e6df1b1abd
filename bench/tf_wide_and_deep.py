"""TensorFlow's own runtime on samples/wide_and_deep's job (bench/ps_throughput's sparse case).

The same model and data as samples/wide_and_deep.cc: a VOCAB x 64 embedding table ("deep") and a
VOCAB x 1 table ("wide"), each partitioned over the ps tasks (fixed_size_partitioner(num_ps),
embedding_lookup with partition_strategy "mod"), 4 categorical ids per example drawn from the
sample's generating model, the mean of the ids' embeddings through a 32-unit ReLU layer plus the
wide weights' sum, sigmoid cross-entropy, Adagrad (lr 0.5: sparse updates of the touched rows on
the ps), batch 256, asynchronous. tf.compat.v1 train.Server per task on 127.0.0.1, thread pools of
1. Every worker steps as fast as it can; worker 0 reads the global step at the start and the end
of the measured window (after a warm-up) and reports the global steps per second.

  python tf_wide_and_deep.py --seconds S [--warmup 10] [--ps 2] [--workers 2] [--vocab 1000000]

Prints `tf global_steps_per_sec=<r> steps=<n> loss=<last batch loss>` (exit 0) or the reason on
stderr (exit 1).
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import cluster_spec, run_job, start_task  # noqa: E402


def run_task(args):
    tf, tf1, cluster, cfg, server = start_task(args)
    import numpy as np
    dim, hidden, k, batch = 64, 32, 4, 256
    with tf1.device(tf1.train.replica_device_setter(worker_device="/job:worker/task:%d" % args.task, cluster=cluster)):
        gs = tf1.train.get_or_create_global_step()
        part = tf1.fixed_size_partitioner(args.ps)
        deep = tf1.get_variable("deep/embeddings", [args.vocab, dim], tf.float32,
                                tf1.random_uniform_initializer(-0.05, 0.05, seed=1), partitioner=part)
        wide = tf1.get_variable("wide/weights", [args.vocab, 1], tf.float32, tf1.zeros_initializer(), partitioner=part)
        w1 = tf1.get_variable("deep/w1", [dim, hidden], tf.float32, tf1.glorot_uniform_initializer(seed=2))
        b1 = tf1.get_variable("deep/b1", [hidden], tf.float32, tf1.zeros_initializer())
        w2 = tf1.get_variable("deep/w2", [hidden, 1], tf.float32, tf1.glorot_uniform_initializer(seed=3))
        b2 = tf1.get_variable("bias", [1], tf.float32, tf1.zeros_initializer())
        ids = tf1.placeholder(tf.int64, [None, k], "ids")
        labels = tf1.placeholder(tf.float32, [None], "labels")
        e = tf.reduce_mean(tf1.nn.embedding_lookup(deep, ids, partition_strategy="mod"), 1)
        h = tf.nn.relu(tf.matmul(e, w1) + b1)
        wide_logit = tf.reduce_sum(tf1.nn.embedding_lookup(wide, ids, partition_strategy="mod"), 1)
        logit = tf.reshape(tf.matmul(h, w2) + wide_logit + b2, [-1])
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
        train = tf1.train.AdagradOptimizer(0.5).minimize(loss, global_step=gs)
        init = tf1.global_variables_initializer()
        ready = tf1.report_uninitialized_variables()
    sess = tf1.Session(server.target, config=cfg)
    if args.task == 0:
        sess.run(init)
    else:
        deadline = time.time() + 300
        while len(sess.run(ready)) > 0:
            if time.time() > deadline:
                print("tf worker %d: the model was never initialised" % args.task, file=sys.stderr)
                return 1
            time.sleep(0.1)
    # The generating model (samples/wide_and_deep.cc's): 10 000 signal ids with N(0, 1) weights.
    rng = np.random.default_rng(7)
    signal = rng.choice(args.vocab, size=10000, replace=False)
    truth = rng.standard_normal(10000).astype(np.float32)
    drng = np.random.default_rng(1000 + args.task)

    def draw():
        pick = drng.random((batch, k)) < 0.5
        s = drng.integers(0, 10000, (batch, k))
        x = np.where(pick, signal[s], drng.integers(0, args.vocab, (batch, k)))
        logits = -0.5 + np.where(pick, truth[s], 0.0).sum(1)
        y = (drng.random(batch) < 1 / (1 + np.exp(-logits))).astype(np.float32)
        return x.astype(np.int64), y

    last = 0.0
    t_start = time.time()
    window = None
    while True:
        x, y = draw()  # fresh examples every step, as the sample draws them
        last, _ = sess.run([loss, train], {ids: x, labels: y})
        now = time.time()
        if args.task != 0:
            if os.path.exists(os.path.join(os.path.dirname(args.out), "done")):
                return 0
            continue
        if window is None and now - t_start >= args.warmup:
            window = (now, sess.run(gs))
        if window is not None and now - window[0] >= args.seconds:
            g1 = sess.run(gs)
            with open(args.out, "w") as f:
                f.write("%.6f %d %.4f\n" % ((g1 - window[1]) / (now - window[0]), g1 - window[1], last))
            open(os.path.join(os.path.dirname(args.out), "done"), "w").close()
            return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1000000)
    ap.add_argument("--job")
    ap.add_argument("--task", type=int, default=0)
    ap.add_argument("--spec")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.job:
        return run_task(args)
    spec = cluster_spec(args.ps, args.workers)
    out = os.path.join(tempfile.mkdtemp(prefix="tf_wide_and_deep_"), "w0.txt")
    base = ["--seconds", str(args.seconds), "--warmup", str(args.warmup), "--ps", str(args.ps), "--workers",
            str(args.workers), "--vocab", str(args.vocab), "--spec", json.dumps(spec), "--out", out]
    if not run_job(os.path.abspath(__file__), base, spec, args.seconds + args.warmup + 600) or not os.path.exists(out):
        print("tf_wide_and_deep: a worker failed", file=sys.stderr)
        return 1
    rate, steps, last = open(out).read().split()
    print("tf global_steps_per_sec=%s steps=%s loss=%s" % (rate, steps, last))
    return 0


if __name__ == "__main__":
    sys.exit(main())
