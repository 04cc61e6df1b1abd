"""TensorFlow's own distributed runtime on bench/ps_throughput's dense workload (the baseline).

One float32 variable w of N elements on /job:ps/task:0, initialised to 1. Each step a worker reads
w, computes g = w * 0 + 1 on its own device and applies plain SGD on the ps
(ResourceApplyGradientDescent, lr 2^-20, use_locking=True, so no update is lost and the final
value is exact). 1 ps + W workers, each its own process with a tf.compat.v1 train.Server on
127.0.0.1, thread pools of 1 (ConfigProto(intra_op_parallelism_threads=1,
inter_op_parallelism_threads=1)), asynchronous, every worker stepping as fast as it can.

  python tf_ps_throughput.py --elements N --seconds S [--workers 2]

Prints one line `tf steps_per_sec=<sum over workers> steps=<total> check=ok` (exit 0), or the
reason on stderr (exit 1). The check: after every worker's window, every element of w must be
1 - lr * (steps applied by all workers).
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import cluster_spec, run_job, start_task  # noqa: E402

LR = 2.0 ** -20



def run_task(args):
    args.out = args.out.replace("%d", str(args.task))  # this task's file (the ps writes none)
    tf, tf1, cluster, cfg, server = start_task(args)
    import numpy as np

    with tf.device("/job:ps/task:0"):
        w = tf1.get_variable("w", shape=[args.elements], dtype=tf.float32,
                             initializer=tf1.ones_initializer(), use_resource=True)
    with tf.device("/job:worker/task:%d" % args.task):
        g = w.read_value() * 0.0 + 1.0
    with tf.device("/job:ps/task:0"):
        train = tf.raw_ops.ResourceApplyGradientDescent(var=w.handle, alpha=tf.constant(LR, tf.float32),
                                                        delta=g, use_locking=True)
        probe = tf.reduce_min(w.read_value()), tf.reduce_max(w.read_value())
    sess = tf1.Session(server.target, config=cfg)
    if args.task == 0:
        sess.run(w.initializer)
    else:
        deadline = time.time() + 120
        while not sess.run(tf1.is_variable_initialized(w)):
            if time.time() > deadline:
                print("tf worker %d: w was never initialised" % args.task, file=sys.stderr)
                return 1
            time.sleep(0.05)
    for _ in range(3):  # warm-up: the graph is registered with the ps and the first pulls made
        sess.run(train)
    warm = 3
    t0 = time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < args.seconds:
        sess.run(train)
        steps += 1
    elapsed = time.perf_counter() - t0
    with open(args.out, "w") as f:
        f.write("%d %d %.6f\n" % (steps, warm, elapsed))
    if args.task == 0:  # the check, once every worker has written its count
        deadline = time.time() + 120
        counts = []
        while True:
            counts = []
            for i in range(args.workers):
                p = os.path.join(os.path.dirname(args.out), "w%d.txt" % i)
                if os.path.exists(p) and open(p).read().endswith("\n"):
                    counts.append([float(x) for x in open(p).read().split()])
            if len(counts) == args.workers:
                break
            if time.time() > deadline:
                print("tf worker 0: the other workers never finished", file=sys.stderr)
                return 1
            time.sleep(0.05)
        lo, hi = sess.run(probe)
        total = int(sum(c[0] + c[1] for c in counts))
        want = np.float32(1.0 - LR * total)
        ok = lo == want and hi == want
        with open(os.path.join(os.path.dirname(args.out), "check.txt"), "w") as f:
            f.write("%s %r %r %r %d\n" % ("ok" if ok else "bad", float(lo), float(hi), float(want), total))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--job")
    ap.add_argument("--task", type=int, default=0)
    ap.add_argument("--spec")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.job:
        return run_task(args)
    spec = cluster_spec(1, args.workers)
    tmp = tempfile.mkdtemp(prefix="tf_ps_throughput_")
    base = ["--elements", str(args.elements), "--seconds", str(args.seconds), "--workers", str(args.workers), "--spec",
            json.dumps(spec), "--out", os.path.join(tmp, "w%d.txt")]
    if not run_job(os.path.abspath(__file__), base, spec, args.seconds + 300):
        print("tf_ps_throughput: a worker failed", file=sys.stderr)
        return 1
    rates, total = 0.0, 0
    for i in range(args.workers):
        steps, warm, elapsed = open(os.path.join(tmp, "w%d.txt" % i)).read().split()
        rates += float(steps) / float(elapsed)
        total += int(steps)
    check = open(os.path.join(tmp, "check.txt")).read().split()
    if check[0] != "ok":
        print("tf_ps_throughput: wrong final value: min %s max %s want %s after %s updates" % tuple(check[1:]),
              file=sys.stderr)
        return 1
    print("tf steps_per_sec=%.3f steps=%d check=ok" % (rates, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
