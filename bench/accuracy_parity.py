#!/usr/bin/env python3
"""Test accuracy of the seed CNN job on actorflow and on TensorFlow's own runtime, over seeds.

The same job as bench/training's job part (1 ps + W workers as processes on loopback, asynchronous,
Adam 1e-4, batch 50, fc 500, Fashion-MNIST, checkpoints every 60 s on actorflow as by default),
run for seeds 1..K on each side, alternating (actorflow seed 1, TensorFlow seed 1, actorflow
seed 2, ...). A seed sets the initializers and each worker's data order on both sides
(samples/distributed_cnn --seed, bench/tf_cnn.py --seed); the two sides' random streams differ, so
one seed is not the same run on both: the comparison is between the distributions.

Prints each run, then per side the mean and sample standard deviation, and the difference of the
means with its Welch 95 % interval: an interval that holds 0 means the runs cannot tell the two
runtimes' accuracies apart.

  python3 bench/accuracy_parity.py [--runs 3] [--steps 5000] [--workers 3] [--first-seed 1]
                                   [--only actorflow|tensorflow] [--build build]

TensorFlow is .venv-tf's python (bench/tf_venv.sh creates it); without it the TensorFlow side is
skipped, saying so. Exit 1 when a run failed.
"""
import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from tf_common import free_port  # noqa: E402


def actorflow_run(build, steps, workers, seed):
    d = tempfile.mkdtemp(prefix="af_parity_")
    try:
        ws = ", ".join('"localhost:%d"' % free_port() for _ in range(workers))
        cluster = os.path.join(d, "cluster.toml")
        with open(cluster, "w") as f:
            f.write('[jobs]\nps = ["localhost:%d"]\nworker = [%s]\n[supervisor]\nlogdir = "%s/logs"\n' % (free_port(), ws, d))
        cmd = [os.path.join(build, "actorflow"), "up", "--cluster", cluster, "--",
               os.path.join(build, "samples", "distributed_cnn"), "--steps", str(steps), "--seed", str(seed),
               "--print-every", "1000"]
        t0 = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3600)
        wall = time.time() - t0
        m = re.search(r"^Test-Accuracy: ([0-9.]+)", p.stdout, re.M)
        if p.returncode != 0 or not m:
            sys.stderr.write("actorflow seed %d failed (exit %d):\n%s\n" % (seed, p.returncode, p.stdout[-3000:]))
            return None
        return float(m.group(1)), wall
    finally:
        shutil.rmtree(d, ignore_errors=True)


def tensorflow_run(python, steps, workers, seed):
    cmd = [python, os.path.join(ROOT, "bench", "tf_cnn.py"), "--steps", str(steps), "--workers", str(workers),
           "--seed", str(seed)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=3600)
    m = re.search(r"tf wall_secs=([0-9.]+) test_accuracy=([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.stderr.write("TensorFlow seed %d failed (exit %d):\n%s\n" % (seed, p.returncode, p.stdout[-3000:]))
        return None
    return float(m.group(2)), float(m.group(1))


# Two-sided 95 % quantiles of Student's t by degrees of freedom (1..30); 1.96 beyond.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def welch(a, b):
    """(difference of means a - b, half-width of its 95 % interval), or None with fewer than 2 runs each."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.mean(a) - statistics.mean(b)
    if va + vb == 0:
        return diff, 0.0
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    t = T95[min(int(df), 30) - 1] if df >= 1 else T95[0]
    return diff, t * math.sqrt(va + vb)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--only", choices=["actorflow", "tensorflow"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    if args.runs < 1 or args.steps < 1 or args.workers < 1:
        ap.error("--runs, --steps and --workers must be >= 1")
    python = None
    if args.only != "actorflow":
        p = subprocess.run(["bash", os.path.join(ROOT, "bench", "tf_venv.sh")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        if p.returncode == 0 and os.access(last, os.X_OK):
            python = last
        else:
            print("TensorFlow side skipped: %s" % p.stdout.strip()[-500:])
    print("seed CNN job, 1 ps + %d workers, %d global steps, Adam 1e-4, batch 50, fc 500; seeds %d..%d" %
          (args.workers, args.steps, args.first_seed, args.first_seed + args.runs - 1), flush=True)
    acc = {"actorflow": [], "tensorflow": []}
    failed = False
    for seed in range(args.first_seed, args.first_seed + args.runs):
        for side in ("actorflow", "tensorflow"):
            if args.only and side != args.only:
                continue
            if side == "tensorflow" and not python:
                continue
            r = (actorflow_run(args.build, args.steps, args.workers, seed) if side == "actorflow" else
                 tensorflow_run(python, args.steps, args.workers, seed))
            if r is None:
                failed = True
                continue
            acc[side].append(r[0])
            print("%-10s seed %d: test accuracy %.4f, wall %.1f s" % (side, seed, r[0], r[1]), flush=True)
    for side, a in acc.items():
        if a:
            sd = statistics.stdev(a) if len(a) > 1 else float("nan")
            print("%-10s %d runs: mean %.4f, sd %.4f, min %.4f, max %.4f" % (side, len(a), statistics.mean(a), sd,
                                                                          min(a), max(a)))
    w = welch(acc["actorflow"], acc["tensorflow"])
    if w:
        diff, half = w
        verdict = "cannot tell them apart" if abs(diff) <= half else "differ"
        print("actorflow - tensorflow: %+.4f, 95 %% interval [%+.4f, %+.4f]: the runs %s" %
              (diff, diff - half, diff + half, verdict))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
