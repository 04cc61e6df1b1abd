#!/usr/bin/env python3
"""Synchronous training with a straggler: images/s of the seed CNN in sync mode, three ways in one run.

  1. baseline: 1 ps + 2 healthy workers, 2 of 2 gradients a step;
  2. backup:   1 ps + 3 workers, worker/2 slowed 5x by a fault plan (`slow`, factor 5), 2 of 3
               gradients a step (one backup worker);
  3. no backup: 1 ps + 2 workers, worker/1 slowed 5x, 2 of 2 (what the backup saves);
and a control: 1 ps + 3 healthy workers, 2 of 3 (what a third worker process costs by itself, on
a machine with few cores: the backup job minus its straggler).

Each job runs under `actorflow up` on loopback (`--plan` gives the slow fault to every task's first
start). Throughput is the images the job aggregates per second: global steps/s x
replicas_to_aggregate x batch (50), the global step rate timed from the workers' progress lines
("Worker : i, Step: S, ...") as they arrive, between the first line at or past 20 % of the job's
steps and the highest step seen: start-up, initialisation and the final evaluation are left out.
Prints each job's rate, its workers' Stale-Gradients and Short-Steps summary lines, and the ratio
backup / baseline (the goal: >= 90 %).

  bench/stragglers.py [--build build] [--steps 600] [--factor 5] [--repeats 1] [-- extra distributed_cnn flags]

Only python3's standard library.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from cluster_usage import follow, free_port  # same folder: python puts a script's folder on sys.path
SUMMARY = re.compile(r"^(Stale-Gradients|Short-Steps|Images-Per-Sec): ([0-9.]+)")
BATCH = 50


def run(build, name, workers, replicas, slow_task, factor, steps, extra, timeout):
    """(images/s, {summary key: [values of each worker]}) of one job; raises RuntimeError naming the log."""
    d = tempfile.mkdtemp(prefix="af_stragglers_")
    ps = '"localhost:%d"' % free_port()
    ws = ", ".join('"localhost:%d"' % free_port() for _ in range(workers))
    cluster = os.path.join(d, "cluster.toml")
    with open(cluster, "w") as f:
        f.write("[jobs]\nps = [%s]\nworker = [%s]\n[supervisor]\nsave_checkpoint_secs = 0\nlogdir = \"%s\"\n"
                % (ps, ws, os.path.join(d, "logs")))
    cmd = [os.path.join(build, "actorflow"), "up", "--cluster", cluster]
    if slow_task:
        plan = os.path.join(d, "plan.toml")
        with open(plan, "w") as f:
            f.write('seed = 1\n[[fault]]\nkind = "slow"\ntask = "%s"\nfactor = %g\n' % (slow_task, factor))
        cmd += ["--plan", plan]
    cmd += ["--", os.path.join(build, "samples", "distributed_cnn"), "--sync", "--replicas-to-aggregate",
            str(replicas), "--steps", str(steps), "--print-every", "10"] + extra
    log = os.path.join(d, "up.log")
    summary = {}

    def on_line(line):
        s = SUMMARY.search(line)
        if s:
            summary.setdefault(s.group(1), []).append(float(s.group(2)))

    rc, points = follow(cmd, log, timeout, on_line)
    if rc != 0:
        raise RuntimeError("%s failed with exit %d; log: %s" % (name, rc, log))
    window = [(t, s) for t, s in points if s >= steps // 5]
    if len(window) < 2:
        raise RuntimeError("%s: too few progress lines to time (log: %s)" % (name, log))
    t0, s0 = window[0]
    t1, s1 = max(window, key=lambda q: (q[1], -q[0]))
    if t1 <= t0:
        raise RuntimeError("%s: no progress past %d to time (log: %s)" % (name, s0, log))
    subprocess.run(["rm", "-rf", d])
    return (s1 - s0) / (t1 - t0) * replicas * BATCH, summary


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--factor", type=float, default=5)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("extra", nargs="*", help="more distributed_cnn flags (after --)")
    a = ap.parse_args()
    if a.steps < 100 or a.repeats < 1 or not (1 < a.factor <= 1000):
        print("stragglers: --steps >= 100, --repeats >= 1, 1 < --factor <= 1000", file=sys.stderr)
        return 2
    for exe in ("actorflow", "samples/distributed_cnn"):
        if not os.access(os.path.join(a.build, exe), os.X_OK):
            print("stragglers: %s not built in %s (cmake --build build)" % (exe, a.build), file=sys.stderr)
            return 2
    jobs = [
        ("baseline: 2 workers, 2 of 2", 2, 2, None),
        ("backup: 3 workers, worker/2 x%g, 2 of 3" % a.factor, 3, 2, "worker/2"),
        ("no backup: 2 workers, worker/1 x%g, 2 of 2" % a.factor, 2, 2, "worker/1"),
        ("control: 3 healthy workers, 2 of 3", 3, 2, None),
    ]
    print("1 ps + N workers on loopback, seed CNN, synchronous; images aggregated per second "
          "(global steps/s x replicas_to_aggregate x %d)" % BATCH, flush=True)
    rates = {name: [] for name, _, _, _ in jobs}
    for _ in range(a.repeats):
        for name, workers, replicas, slow in jobs:
            try:
                r, summary = run(a.build, name, workers, replicas, slow, a.factor, a.steps, a.extra, timeout=1800)
            except RuntimeError as e:
                print("stragglers: %s" % e, file=sys.stderr)
                return 1
            rates[name].append(r)
            print("  %-42s %8.1f images/s  (workers' Stale-Gradients %s, Short-Steps %s)"
                  % (name, r, summary.get("Stale-Gradients", []), summary.get("Short-Steps", [])), flush=True)
    base = statistics.median(rates[jobs[0][0]])
    for name, _, _, _ in jobs[1:]:
        m = statistics.median(rates[name])
        print("%-44s %8.1f images/s = %5.1f %% of the baseline's %.1f" % (name, m, 100.0 * m / base, base), flush=True)
    print("ratio backup / baseline: %.1f %% (goal >= 90 %%)" % (100.0 * statistics.median(rates[jobs[1][0]]) / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
