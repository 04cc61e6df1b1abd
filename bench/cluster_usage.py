#!/usr/bin/env python3
"""Seed 004's measurements, taken by actorflow itself: per-task CPU and network use of the seed CNN.

Runs the seed-002 CNN (samples/distributed_cnn) with 1 ps + W workers under `actorflow up`, every
task serving its metrics (`[tasks."<job>/<i>"] metrics_port`), scrapes every task's /metrics once a
second while it trains, and prints per task: role, CPU (% of one core, from
process_cpu_seconds_total), peak RSS, and the data plane's and control plane's traffic in and out
(actorflow_data_plane_*_bytes_total, actorflow_control_plane_*_bytes_total: MB/s and bytes per
global step), measured over the training window (from the first scrape that sees the global step
move to the last before the job ends).

  bench/cluster_usage.py [--build build] [--workers 3] [--steps 3000] [--sync] [--interval 1.0] [--bf16]

--bf16 runs the job with `[server] mixed_precision = "bfloat16"` (MatMul and the convolutions take
bfloat16 operands; graph/mixed_precision.h); the FLOP rate is still set against the FP32 peak.

Then, per task, where its CPU goes per step (the step's breakdown): kernel CPU time per op
type (`actorflow_kernel_cpu_microseconds_total{op}`, the calling thread's CPU time in each
kernel), the rest of the process's CPU (framework, data plane, copies, the other threads), and for
the workers the FLOP rate of the convolution and matrix-multiply kernels against the core's FP32
peak (--peak-gflops; by default what `build/bench/kernels --peak` measures). FLOPs are counted for the
seed model (conv1 32, conv2 64, hidden 500, batch 50) with only the taps that fall inside the
input, as bench/kernels counts them: 62.1 MFLOP per image for the forward and backward pass.

Only python3's standard library; nothing but the job's own /metrics is read.
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROGRESS = re.compile(r"Worker : (\d+), Step: (\d+)")


def follow(cmd, log, timeout, on_line=None):
    """Runs `cmd` (stderr to the file `log`), timing its stdout's progress lines as they arrive:
    returns (exit code, [(monotonic time, global step)]); `on_line(line)` sees every line. Kills
    the job after `timeout` seconds."""
    points = []
    with open(log, "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        deadline = time.monotonic() + timeout
        for line in p.stdout:
            m = PROGRESS.search(line)
            if m:
                points.append((time.monotonic(), int(m.group(2))))
            if on_line:
                on_line(line)
            if time.monotonic() > deadline:
                p.kill()
                break
        rc = p.wait()
    return rc, points


def scrape(port):
    """{(name, labels): value} of one /metrics page, or None when the task does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as r:
            text = r.read().decode()
    except Exception:
        return None
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def total(sample, name):
    return sum(v for (n, _), v in sample.items() if n == name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--bf16", action="store_true", help="[server] mixed_precision = \"bfloat16\"")
    ap.add_argument("--peak-gflops", type=float, default=0.0,
                    help="single-core FP32 peak; 0: ask build/bench/kernels --peak")
    args = ap.parse_args()
    actorflow = os.path.join(args.build, "actorflow")
    cnn = os.path.join(args.build, "samples", "distributed_cnn")
    for p in (actorflow, cnn):
        if not os.access(p, os.X_OK):
            print("cluster_usage: %s is missing (build first)" % p, file=sys.stderr)
            return 2
    if args.workers < 1 or args.steps < 1 or args.interval <= 0:
        print("cluster_usage: --workers, --steps and --interval must be positive", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="af_cluster_usage_")
    tasks = [("ps", 0)] + [("worker", i) for i in range(args.workers)]
    mport = {t: free_port() for t in tasks}
    with open(os.path.join(tmp, "cluster.toml"), "w") as f:
        f.write("[jobs]\nps = [\"localhost:%d\"]\nworker = [%s]\n" % (
            free_port(), ", ".join("\"localhost:%d\"" % free_port() for _ in range(args.workers))))
        if args.bf16:
            f.write("[server]\nmixed_precision = \"bfloat16\"\n")
        f.write("[supervisor]\nlogdir = \"%s\"\n" % os.path.join(tmp, "logs"))
        for (job, i), port in mport.items():
            f.write("[tasks.\"%s/%d\"]\nmetrics_port = %d\n" % (job, i, port))
    cmd = [actorflow, "up", "--cluster", os.path.join(tmp, "cluster.toml"), "--", cnn, "--steps", str(args.steps),
           "--print-every", "500"]
    if args.sync:
        cmd.append("--sync")
    log = open(os.path.join(tmp, "up.log"), "w")
    up = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    series = {t: [] for t in tasks}  # (time, sample)
    t0 = time.time()
    try:
        while up.poll() is None:
            if time.time() - t0 > 1800:
                up.kill()
                print("cluster_usage: the job did not finish within 30 minutes; log in %s" % tmp, file=sys.stderr)
                return 1
            now = time.time()
            for t in tasks:
                s = scrape(mport[t])
                if s is not None:
                    series[t].append((now, s))
            time.sleep(max(0.0, args.interval - (time.time() - now)))  # the sampling period
    finally:
        if up.poll() is None:
            up.kill()
        up.wait()
    wall = time.time() - t0
    if up.returncode != 0:
        print("cluster_usage: the job failed (exit %d); log in %s" % (up.returncode, tmp), file=sys.stderr)
        return 1
    # The training window: from the first scrape of worker/0 that saw a global step > 0 to its last.
    w0 = series[("worker", 0)]
    moving = [(at, s) for at, s in w0 if total(s, "actorflow_global_step") > 0]
    if len(moving) < 2:
        print("cluster_usage: too few scrapes while training (%d); try more --steps" % len(moving), file=sys.stderr)
        return 1
    start, end = moving[0][0], moving[-1][0]
    steps = total(moving[-1][1], "actorflow_global_step") - total(moving[0][1], "actorflow_global_step")
    mode = "sync" if args.sync else "async"
    print("Seed CNN, 1 ps + %d workers, %s, %d global steps (%.1f s wall); window %.1f s, %d global steps (%.1f steps/s)"
          % (args.workers, mode, args.steps, wall, end - start, steps, steps / (end - start)))
    print()
    print("| task | CPU % of a core | peak RSS MiB | data in MB/s | data out MB/s | control in kB/s | control out kB/s "
          "| data in+out KB/step | control in+out B/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in tasks:
        inside = [(at, s) for at, s in series[t] if start <= at <= end]
        if len(inside) < 2:
            print("| %s/%d | (no scrapes in the window) |" % t)
            continue
        (a_t, a), (b_t, b) = inside[0], inside[-1]
        dt = b_t - a_t
        d = lambda name: total(b, name) - total(a, name)  # noqa: E731
        cpu = 100 * d("process_cpu_seconds_total") / dt
        rss = max(total(s, "process_resident_memory_bytes") for _, s in series[t]) / 2 ** 20
        din, dout = d("actorflow_data_plane_received_bytes_total"), d("actorflow_data_plane_sent_bytes_total")
        cin, cout = d("actorflow_control_plane_received_bytes_total"), d("actorflow_control_plane_sent_bytes_total")
        gs = total(b, "actorflow_global_step") - total(a, "actorflow_global_step")
        if t[0] == "ps":  # the ps sees no global step of its own: use the workers' window
            gs = steps * dt / (end - start)
        per = lambda x: x / gs if gs > 0 else float("nan")  # noqa: E731
        print("| %s/%d | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f |" % (
            t[0], t[1], cpu, rss, din / dt / 1e6, dout / dt / 1e6, cin / dt / 1e3, cout / dt / 1e3,
            per(din + dout) / 1e3, per(cin + cout)))
    peak = args.peak_gflops
    if peak <= 0:
        try:
            peak = float(subprocess.run([os.path.join(args.build, "bench", "kernels"), "--peak"], capture_output=True,
                                        text=True, timeout=60).stdout.strip())
        except (OSError, ValueError, subprocess.TimeoutExpired):
            peak = 0.0
    print_breakdown(tasks, series, start, end, steps, peak)
    return 0


# FLOPs per image of the seed model's kernels (in-bounds taps of the 5x5 SAME convolutions:
# 134 of 140 per dimension at 28 wide, 64 of 70 at 14 wide).
CONV1 = 2 * 32 * 1 * 134 * 134      # 1x28x28 -> 32 channels
CONV2 = 2 * 64 * 32 * 64 * 64       # 32x14x14 -> 64 channels
FC = 2 * 3136 * 500 + 2 * 500 * 10  # both dense layers, one pass
BATCH = 50


def labelled(sample, name):
    """{op: value} of a family labelled by op."""
    out = {}
    for (n, labels), v in sample.items():
        if n == name:
            m = re.search(r'op="([^"]*)"', labels)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def print_breakdown(tasks, series, start, end, global_steps, peak):
    print()
    print("Where each task's CPU goes, per step (a worker's own step; the ps per global step), ms of CPU;"
          " single-core FP32 peak %.1f GFLOP/s:" % peak)
    print()
    print("| task | steps | process CPU | kernels | rest | top kernels (ms per step) | conv+matmul GFLOP/s | share of peak |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in tasks:
        inside = [(at, s) for at, s in series[t] if start <= at <= end]
        if len(inside) < 2:
            continue
        (a_t, a), (b_t, b) = inside[0], inside[-1]
        us = {k: v - labelled(a, "actorflow_kernel_cpu_microseconds_total").get(k, 0.0)
              for k, v in labelled(b, "actorflow_kernel_cpu_microseconds_total").items()}
        calls = {k: v - labelled(a, "actorflow_kernel_calls_total").get(k, 0.0)
                 for k, v in labelled(b, "actorflow_kernel_calls_total").items()}
        cpu = total(b, "process_cpu_seconds_total") - total(a, "process_cpu_seconds_total")
        if t[0] == "ps":
            n = global_steps * (b_t - a_t) / (end - start)
        else:
            # A worker's training steps: each runs both convolutions' filter gradients once
            # (other runs of the session, summaries and checkpoints, run no backward pass).
            n = calls.get("Conv2DBackpropFilter", 0) / 2
        if n <= 0:
            continue
        kern = sum(us.values()) / 1e3
        top = sorted(us.items(), key=lambda kv: -kv[1])[:int(os.environ.get("AF_TOP_KERNELS", "6"))]
        tops = ", ".join("%s %.2f" % (k, v / 1e3 / n) for k, v in top if v > 0)
        flops_cell = share_cell = "-"
        if t[0] == "worker":
            # FLOPs from each kernel's own calls: convolutions come in (conv1, conv2) pairs, the
            # dense layers' matmuls in (fc1, fc2) pairs; a backprop-input call count equal to the
            # filter gradients' means conv1's input gradient was computed too.
            bf = calls.get("Conv2DBackpropFilter", 0)
            bi = calls.get("Conv2DBackpropInput", 0)
            # Fused kernels (graph/fusion.h) count as their convolution or matmul: the bias
            # and ReLU they absorb are a few FLOPs per output, well under 1 % of the step's.
            conv = calls.get("Conv2D", 0) + calls.get("_FusedConv2D", 0)
            mm = calls.get("MatMul", 0) + calls.get("_FusedMatMul", 0)
            flops = BATCH * (conv / 2 * (CONV1 + CONV2) + bf / 2 * (CONV1 + CONV2) +
                             (bi / 2 * (CONV1 + CONV2) if bi >= bf else bi * CONV2) +
                             mm / 2 * FC)
            secs = sum(us.get(k, 0.0) for k in ("Conv2D", "_FusedConv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                                                "MatMul", "_FusedMatMul")) / 1e6
            if secs > 0:
                flops_cell = "%.1f" % (flops / secs / 1e9)
                if peak > 0:
                    share_cell = "%.0f %%" % (100 * flops / secs / 1e9 / peak)
        print("| %s/%d | %.0f | %.2f | %.2f | %.2f | %s | %s | %s |" % (
            t[0], t[1], n, cpu * 1e3 / n, kern / n, cpu * 1e3 / n - kern / n, tops, flops_cell, share_cell))


if __name__ == "__main__":
    sys.exit(main())
