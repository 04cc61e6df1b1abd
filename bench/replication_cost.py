#!/usr/bin/env python3
"""What replicated parameter servers cost: global steps per second with [supervisor] ps_replicas = 1 and 2.

Runs each workload under `actorflow up` on loopback with 2 ps tasks and W workers, once without
replication and once with every variable shard copied to the other ps task (each update
acknowledged only once both copies hold it), alternating the two R times, and prints the
training rate of each run and the ratio of the medians. The rate is measured from the workers' own
progress lines ("Worker : i, Step: S, ..."), timed as they arrive, between the first line at or past
20 % of the job's global steps and the last one: start-up, initialisation and the final evaluation
are left out.

  bench/replication_cost.py [--build build] [--workers 2] [--repeats 2]
                            [--cnn-steps 2000] [--wd-steps 1500] [--only cnn|wide_and_deep]

Workloads: the seed CNN (samples/distributed_cnn, Adam, its 6.5 MB of variables read and updated
every step) and the wide & deep sample (samples/wide_and_deep: 1 M x 64 embedding and 1 M x 1 wide
tables partitioned over both ps tasks, sparse Adagrad updates). Only python3's standard library.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from cluster_usage import follow, free_port  # same folder: python puts a script's folder on sys.path




def run(build, sample, args, workers, steps, replicas, timeout):
    """Global steps per second of one job, or raises RuntimeError naming the log."""
    d = tempfile.mkdtemp(prefix="af_repl_cost_")
    ps = ", ".join('"localhost:%d"' % free_port() for _ in range(2))
    ws = ", ".join('"localhost:%d"' % free_port() for _ in range(workers))
    cluster = os.path.join(d, "cluster.toml")
    with open(cluster, "w") as f:
        f.write("[jobs]\nps = [%s]\nworker = [%s]\n[supervisor]\nps_replicas = %d\nlogdir = \"%s\"\n"
                % (ps, ws, replicas, os.path.join(d, "logs")))
    log = os.path.join(d, "up.log")
    cmd = [os.path.join(build, "actorflow"), "up", "--cluster", cluster, "--",
           os.path.join(build, "samples", sample), "--steps", str(steps)] + args
    rc, points = follow(cmd, log, timeout)
    if rc != 0:
        raise RuntimeError("%s (ps_replicas = %d) failed with exit %d; log: %s" % (sample, replicas, rc, log))
    window = [(t, s) for t, s in points if s >= steps // 5]
    if len(window) < 2 or window[-1][0] <= window[0][0]:
        raise RuntimeError("%s: too few progress lines to time (log: %s)" % (sample, log))
    t0, s0 = window[0]
    t1, s1 = max(window, key=lambda p: p[1])
    subprocess.run(["rm", "-rf", d])
    return (s1 - s0) / (t1 - t0)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cnn-steps", type=int, default=2000)
    ap.add_argument("--wd-steps", type=int, default=1500)
    ap.add_argument("--only", choices=["cnn", "wide_and_deep"])
    a = ap.parse_args()
    if a.workers < 1 or a.repeats < 1 or a.cnn_steps < 100 or a.wd_steps < 100:
        print("replication_cost: --workers and --repeats must be >= 1, steps >= 100", file=sys.stderr)
        return 2
    for exe in ("actorflow", "samples/distributed_cnn", "samples/wide_and_deep"):
        if not os.access(os.path.join(a.build, exe), os.X_OK):
            print("replication_cost: %s not built in %s (cmake --build build)" % (exe, a.build), file=sys.stderr)
            return 2
    workloads = [
        ("cnn", "distributed_cnn", ["--print-every", "50"], a.cnn_steps),
        ("wide_and_deep", "wide_and_deep", ["--print-every", "50"], a.wd_steps),
    ]
    print("2 ps + %d workers on loopback, asynchronous; global steps/s from the workers' progress lines" % a.workers)
    for name, sample, args, steps in workloads:
        if a.only and a.only != name:
            continue
        rates = {1: [], 2: []}
        for _ in range(a.repeats):
            for replicas in (1, 2):
                try:
                    r = run(a.build, sample, args, a.workers, steps, replicas, timeout=900)
                except RuntimeError as e:
                    print("replication_cost: %s" % e, file=sys.stderr)
                    return 1
                rates[replicas].append(r)
                print("  %-14s ps_replicas = %d: %7.1f global steps/s" % (name, replicas, r), flush=True)
        one, two = statistics.median(rates[1]), statistics.median(rates[2])
        print("%-14s median %7.1f -> %7.1f global steps/s with replication: %.1f %% fewer (goal <= 15 %%)"
              % (name, one, two, 100.0 * (1 - two / one)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
