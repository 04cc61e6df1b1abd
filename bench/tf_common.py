"""What bench/'s TensorFlow baselines share: free loopback ports and running a ps/worker job whose
tasks are processes of the same script (the script's own main() re-executed with --job/--task)."""
import socket
import subprocess
import sys


def free_port():
    """A loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_spec(num_ps, num_workers):
    """{"ps": [...], "worker": [...]} with free loopback addresses."""
    return {"ps": ["127.0.0.1:%d" % free_port() for _ in range(num_ps)],
            "worker": ["127.0.0.1:%d" % free_port() for _ in range(num_workers)]}


def run_job(script, base_args, spec, timeout):
    """Starts every task of `spec` as `python script base_args --job J --task I`, waits for the
    workers (each at most `timeout` s), then kills the parameter servers (they serve forever).
    True when every worker exited 0."""
    def start(job, i):
        return subprocess.Popen([sys.executable, script] + base_args + ["--job", job, "--task", str(i)])
    ps = [start("ps", i) for i in range(len(spec["ps"]))]
    workers = [start("worker", i) for i in range(len(spec["worker"]))]
    ok = True
    try:
        for p in workers:
            try:
                ok = p.wait(timeout=timeout) == 0 and ok
            except subprocess.TimeoutExpired:
                ok = False
    finally:
        for p in ps + workers:
            if p.poll() is None:
                p.kill()
            p.wait()
    return ok


def start_task(args):
    """This process's tf.compat.v1 train.Server for task (args.job, args.task) of the cluster
    args.spec (JSON), with thread pools of 1, graph mode. A ps serves until killed (never
    returns); a worker gets (tf, tf.compat.v1, cluster, config, server)."""
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import json
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    cluster = tf.train.ClusterSpec(json.loads(args.spec))
    cfg = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    server = tf1.train.Server(cluster, job_name=args.job, task_index=args.task, config=cfg)
    if args.job == "ps":
        server.join()
        sys.exit(0)
    return tf, tf1, cluster, cfg, server
