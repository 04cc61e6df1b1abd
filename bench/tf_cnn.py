"""TensorFlow's own distributed runtime on the seed CNN job (bench/training's baseline).

Seed 002's job as the seed writes it, in tf.compat.v1 with raw ops and get_variable (Keras 3 has no
tf1 layers): conv 5x5x1x32 SAME + ReLU, max-pool 2x2, conv 5x5x32x64 SAME + ReLU, max-pool 2x2,
fully connected 3136 -> 500 + ReLU, 500 -> 10, softmax cross-entropy, Adam 1e-4, batch 50,
glorot-uniform weights and zero biases (as models/mnist_cnn.cc), variables on the ps through
replica_device_setter, on Debian's Fashion-MNIST. 1 ps + W workers, each its own process with a
tf.train.Server on 127.0.0.1 (thread pools of 1), asynchronous; every worker trains until the
global step reaches STEPS, then worker 0 evaluates the 10 000 test images.

  python tf_cnn.py --steps 5000 [--workers 3] [--seed 1] [--data /usr/share/datasets/fashion-mnist]

Prints `tf wall_secs=<launch to last worker's exit> test_accuracy=<a> final_step=<g>` (exit 0) or the
reason on stderr (exit 1).
"""
import argparse
import gzip
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import cluster_spec, run_job, start_task  # noqa: E402


def idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def run_task(args):
    tf, tf1, cluster, cfg, server = start_task(args)
    import numpy as np

    x_train = idx(os.path.join(args.data, "train-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255
    y_train = np.eye(10, dtype=np.float32)[idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))]
    x_test = idx(os.path.join(args.data, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255
    y_test = np.eye(10, dtype=np.float32)[idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz"))]
    with tf1.device(tf1.train.replica_device_setter(worker_device="/job:worker/task:%d" % args.task, cluster=cluster)):
        gs = tf1.train.get_or_create_global_step()
        x = tf1.placeholder(tf.float32, [None, 784], "x-input")
        y = tf1.placeholder(tf.float32, [None, 10], "y-input")
        seed = [args.seed]

        def weight(name, shape):
            seed[0] += 1
            return tf1.get_variable(name, shape, tf.float32, tf1.glorot_uniform_initializer(seed=seed[0]))

        def mixed(op, a, b, *rest):
            # --bf16: the op's operands in bfloat16 and its result back in float32 (Keras'
            # mixed_bfloat16 policy per layer; the variables stay float32).
            if not args.bf16:
                return op(a, b, *rest)
            return tf.cast(op(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16), *rest), tf.float32)

        def bias(name, n):
            return tf1.get_variable(name, [n], tf.float32, tf1.zeros_initializer())

        def conv(name, inp, cin, cout):
            k, b = weight(name + "/weights", [5, 5, cin, cout]), bias(name + "/biases", cout)
            return tf.nn.relu(tf.nn.bias_add(mixed(tf.nn.conv2d, inp, k, [1, 1, 1, 1], "SAME"), b))

        def pool(inp):
            return tf.nn.max_pool2d(inp, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")

        net = pool(conv("conv1", tf.reshape(x, [-1, 28, 28, 1]), 1, 32))
        net = pool(conv("conv2", net, 32, 64))
        net = tf.reshape(net, [-1, 7 * 7 * 64])
        net = tf.nn.relu(mixed(tf.matmul, net, weight("fully_connected/weights", [3136, 500])) +
                         bias("fully_connected/biases", 500))
        # The logits layer stays float32 with --bf16, as actorflow keeps every product with a
        # dimension below 16 (device/cpu/nn_kernels.cc, kBf16MinMatMulDim; Keras' guide likewise).
        logits = tf.matmul(net, weight("pred/weights", [500, 10])) + bias("pred/biases", 10)
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
        correct = tf.equal(tf.argmax(logits, 1), tf.argmax(y, 1))
        accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
        train = tf1.train.AdamOptimizer(1e-4).minimize(loss, global_step=gs)
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
    rng = np.random.default_rng(1000 * args.seed + args.task)
    order, at, step = rng.permutation(len(x_train)), 0, 0
    while step < args.steps:
        if at + 50 > len(order):
            order, at = rng.permutation(len(x_train)), 0
        b = order[at:at + 50]
        at += 50
        _, step = sess.run([train, gs], {x: x_train[b], y: y_train[b]})
    if args.task == 0:
        acc = np.mean([sess.run(accuracy, {x: x_test[i:i + 1000], y: y_test[i:i + 1000]}) for i in range(0, 10000, 1000)])
        with open(args.out, "w") as f:
            f.write("%.4f %d\n" % (acc, sess.run(gs)))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--job")
    ap.add_argument("--task", type=int, default=0)
    ap.add_argument("--spec")
    ap.add_argument("--out")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 operands for the convolutions and matmuls")
    ap.add_argument("--seed", type=int, default=1,
                    help="initializers' seeds (seed+1, seed+2, ...) and data order (1000*seed + task)")
    args = ap.parse_args()
    if args.job:
        return run_task(args)
    spec = cluster_spec(1, args.workers)
    out = os.path.join(tempfile.mkdtemp(prefix="tf_cnn_"), "result.txt")
    base = ["--steps", str(args.steps), "--workers", str(args.workers), "--data", args.data, "--spec", json.dumps(spec),
            "--out", out, "--seed", str(args.seed)] + (["--bf16"] if args.bf16 else [])
    t0 = time.time()
    ok = run_job(os.path.abspath(__file__), base, spec, 3600)
    wall = time.time() - t0
    if not ok or not os.path.exists(out):
        print("tf_cnn: a worker failed", file=sys.stderr)
        return 1
    acc, final = open(out).read().split()
    print("tf wall_secs=%.2f test_accuracy=%s final_step=%s" % (wall, acc, final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
