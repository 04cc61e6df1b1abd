#!/usr/bin/env python3
"""Lost replies under load: the fetch loop per size (plain TCP and TLS) and the seed job with checkpoints.

Part 1 runs samples/fetch_loop (build/samples/fetch_loop, public API only) across two processes on loopback: one ps task
holding one float variable per size, one worker fetching each size back to back with a per-fetch
deadline; once with plain TCP and once with TLS 1.3 (`actorflow certs`). It reports, per size, the
fetches, the lost ones (an error, or other values than written) and the p50/p99/worst latency.

Part 2 runs the seed job as users do: `actorflow up` with 1 ps + 2 workers, samples/distributed_cnn
with the seed's real model (conv 32/64, fc --hidden, default 1024: a 12.8 MB fc1), a checkpoint
every --checkpoint-secs, for --job-steps global steps, repeated until --seconds have passed. No step
timeout is set: the steps' only bound is the default deadline. It reports, per job, whether it ended
on its own, the failed steps ("step failed", DeadlineExceeded) and the worst training run (the
workers' "Worst-Step-Ms", a chief's checkpoint included).

  bench/reply_stress.py [--build build] [--fetches 10000] [--sizes 1024,...] [--tls both|off|on]
                        [--seconds 600] [--job-steps 5000] [--checkpoint-secs 2] [--hidden 1024]
                        [--skip-fetch] [--skip-job]

Exit 0 when nothing was lost and every job ended on its own, 1 otherwise. Only python3's standard
library.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from cluster_usage import free_port  # same folder: python puts a script's folder on sys.path

SIZE_LINE = re.compile(r"^size (\d+) B: (\d+) fetches, (\d+) lost, p50 ([\d.]+) ms, p99 ([\d.]+) ms, max ([\d.]+) ms")


def fetch_part(build, tls, sizes, fetches, timeout_secs):
    """Runs the fetch loop once; returns (lost, lines) or raises RuntimeError naming the log."""
    d = tempfile.mkdtemp(prefix="af_reply_stress_")
    try:
        cluster = os.path.join(d, "cluster.toml")
        with open(cluster, "w") as f:
            f.write("[cluster]\nname = \"reply-stress\"\n")
            if tls:
                f.write("tls_dir = \"certs\"\n")
            f.write("[jobs]\nps = [\"127.0.0.1:%d\"]\nworker = [\"127.0.0.1:%d\"]\n" % (free_port(), free_port()))
        actorflow = os.path.join(build, "actorflow")
        if tls:
            subprocess.run([actorflow, "certs", "--cluster", cluster, "--out", os.path.join(d, "certs")], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        exe = os.path.join(build, "samples", "fetch_loop")
        with open(os.path.join(d, "ps.log"), "w") as pl:
            ps = subprocess.Popen([exe, "--cluster", cluster, "--job", "ps"], stdout=pl, stderr=subprocess.STDOUT)
            try:
                w = subprocess.run([exe, "--cluster", cluster, "--job", "worker", "--sizes", sizes, "--fetches",
                                    str(fetches), "--timeout-secs", str(timeout_secs)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            finally:
                ps.terminate()
                try:
                    ps.wait(30)
                except subprocess.TimeoutExpired:
                    ps.kill()
        lines = [l for l in w.stdout.splitlines() if SIZE_LINE.match(l)]
        lost = re.search(r"^LOST (\d+)", w.stdout, re.M)
        if not lost or not lines:
            raise RuntimeError("fetch_loop (tls %s) printed no result (exit %d):\n%s" %
                               ("on" if tls else "off", w.returncode, w.stderr[-2000:]))
        return int(lost.group(1)), lines
    finally:
        shutil.rmtree(d, ignore_errors=True)


def job_part(build, steps, checkpoint_secs, hidden, timeout):
    """One seed job; returns a dict of what it showed."""
    d = tempfile.mkdtemp(prefix="af_reply_stress_job_")
    try:
        cluster = os.path.join(d, "cluster.toml")
        with open(cluster, "w") as f:
            f.write("[jobs]\nps = [\"localhost:%d\"]\nworker = [\"localhost:%d\", \"localhost:%d\"]\n"
                    "[supervisor]\nlogdir = \"%s\"\nsave_checkpoint_secs = %g\n"
                    % (free_port(), free_port(), free_port(), os.path.join(d, "logs"), checkpoint_secs))
        cmd = [os.path.join(build, "actorflow"), "up", "--cluster", cluster, "--",
               os.path.join(build, "samples", "distributed_cnn"), "--steps", str(steps), "--hidden", str(hidden),
               "--print-every", "500"]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
            out, rc, hung = p.stdout, p.returncode, False
        except subprocess.TimeoutExpired as e:
            out, rc, hung = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), -1, True
        worst = [float(x) for x in re.findall(r"Worst-Step-Ms: ([\d.]+)", out)]
        return {
            "secs": time.monotonic() - t0,
            "ended": not hung and rc == 0,
            "rc": rc,
            "failed_steps": len(re.findall(r"step failed", out)) + len(re.findall(r"DeadlineExceeded", out)),
            "checkpoints": len(re.findall(r"saved checkpoint", out)),
            "worst_ms": max(worst) if worst else -1,
            "workers_done": len(re.findall(r"Test-Accuracy: ", out)),
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--fetches", type=int, default=10000)
    ap.add_argument("--sizes", default="1024,65536,1048576,2097152,4194304,6272000,12845056,16777216,67108864")
    ap.add_argument("--timeout-secs", type=float, default=10)
    ap.add_argument("--tls", choices=["both", "off", "on"], default="both")
    ap.add_argument("--seconds", type=float, default=600, help="how long to repeat the seed job")
    ap.add_argument("--job-steps", type=int, default=5000)
    ap.add_argument("--checkpoint-secs", type=float, default=2)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--skip-fetch", action="store_true")
    ap.add_argument("--skip-job", action="store_true")
    a = ap.parse_args()
    for exe in ("actorflow", "samples/fetch_loop", "samples/distributed_cnn"):
        if not os.access(os.path.join(a.build, exe), os.X_OK):
            print("reply_stress: %s not built in %s (cmake --build build)" % (exe, a.build), file=sys.stderr)
            return 2
    bad = False
    if not a.skip_fetch:
        for tls in ([False, True] if a.tls == "both" else [a.tls == "on"]):
            try:
                lost, lines = fetch_part(a.build, tls, a.sizes, a.fetches, a.timeout_secs)
            except (RuntimeError, subprocess.CalledProcessError) as e:
                print("reply_stress: %s" % e, file=sys.stderr)
                return 1
            print("fetch loop, %s, %d fetches per size, deadline %g s:" % ("TLS 1.3" if tls else "plain TCP", a.fetches,
                                                                          a.timeout_secs))
            for l in lines:
                print("  " + l)
            print("  lost replies: %d" % lost, flush=True)
            bad = bad or lost > 0
    if not a.skip_job:
        end = time.monotonic() + a.seconds
        jobs = 0
        worst = 0.0
        while True:
            r = job_part(a.build, a.job_steps, a.checkpoint_secs, a.hidden, timeout=max(600, 10 * a.job_steps / 50))
            jobs += 1
            worst = max(worst, r["worst_ms"])
            print("seed job %d (1 ps + 2 workers, fc %d, checkpoint every %g s, %d steps): %s in %.0f s, %d checkpoints, "
                  "%d failed steps, worst training run %.0f ms"
                  % (jobs, a.hidden, a.checkpoint_secs, a.job_steps, "ended" if r["ended"] else "DID NOT END (exit %d)" % r["rc"],
                     r["secs"], r["checkpoints"], r["failed_steps"], r["worst_ms"]), flush=True)
            bad = bad or not r["ended"] or r["failed_steps"] > 0 or r["workers_done"] < 2
            if time.monotonic() >= end:
                break
        print("seed jobs: %d, worst training run %.0f ms" % (jobs, worst))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
