#!/usr/bin/env python3
"""A job of two "machines" on this one: two Linux network namespaces joined by a veth pair, with
addresses of a private network (10.77.0.1 and 10.77.0.2) and only loopback besides, each running
one kiln-run of 2 ranks (kiln-run --nnodes 2 --node-rank N --master-addr 10.77.0.1). Each rank
must find the address that routes to the master on its own (no GLOO_SOCKET_IFNAME): the host
name of this machine resolves to loopback in both namespaces.

  --case job:       kiln-train --distributed on 2 x 2 CPU ranks, a few steps of synthetic data;
                    its final weights equal, byte for byte, the same job's on one machine (4 ranks
                    under one kiln-run), and each rank said which address and interface it chose.
                    Then the same job named by a host name that resolves to loopback on the
                    master's machine (127.0.1.1, as Debian's /etc/hosts maps a machine's own name)
                    and to 10.77.0.1 on the other: the master's ranks take the address the other
                    machine reached the store at.
  --case lost-node: the link is taken down mid-run: the master's ranks end within the collective
                    timeout (--dist-timeout 3), naming ranks 2 and 3 as not answering, and so do
                    the other machine's (their store is gone).
  --case env:       kiln-run passes NCCL's environment (NCCL_*) and the others to its ranks as
                    they are (no namespaces needed).

The namespaces need root and iproute2's `ip`; without them a case reports itself skipped (exit 77,
ctest's SKIP_RETURN_CODE) and says why. Names carry this process's id (concurrent runs from two
clones do not meet), and every exit path removes the namespaces, the veth pair, the namespaces'
/etc/netns files and every process started in them; namespaces left by a run that was killed
(SIGKILL runs no cleanup) are removed by the next run, once their process is gone. Every wait has
a deadline, and each job runs under `timeout` so that none outlives this script by long.
"""
import argparse
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
PREFIX = "kiln-2m-"  # namespaces kiln-2m-<pid>-a and -b
MASTER, OTHER = "10.77.0.1", "10.77.0.2"
PORT = "29500"  # free in a fresh namespace
# Every job's wall-clock limit inside its namespace (each takes 1-2 s), and about how long this
# script waits for one: the job case's four jobs stay within ctest's TIMEOUT (300 s), so that
# this script, not ctest's kill (which runs no cleanup), ends a job that hangs.
JOB_LIMIT_S = 30


def find_ip():
    for path in (shutil.which("ip"), "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"):
        if path and os.access(path, os.X_OK):
            return path
    return None


IP = find_ip()


def ip(*args, check=True):
    return subprocess.run([IP, *args], capture_output=True, text=True, timeout=20, check=check)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_namespace_processes(ns):
    p = ip("netns", "pids", ns, check=False)
    for pid in p.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def remove_namespace(ns):
    kill_namespace_processes(ns)
    ip("netns", "del", ns, check=False)  # takes its end of the veth pair, and so the pair
    shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)


def remove_stale():
    """Namespaces of earlier runs whose script is gone (killed before its cleanup ran)."""
    p = ip("netns", "list", check=False)
    names = {line.split()[0] for line in p.stdout.splitlines() if line.strip()}
    if os.path.isdir("/etc/netns"):
        names |= set(os.listdir("/etc/netns"))
    for name in names:
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)-[ab]", name)
        if m and not pid_alive(int(m.group(1))):
            remove_namespace(name)


class Machines:
    """Two namespaces joined by a veth pair; removed by close(), at exit and on SIGTERM/SIGINT."""

    def __init__(self):
        pid = os.getpid()
        self.a, self.b = f"{PREFIX}{pid}-a", f"{PREFIX}{pid}-b"
        self.veth_a, self.veth_b = f"k2m{pid}a", f"k2m{pid}b"  # at most 15 characters
        self.jobs = []
        self.closed = False
        atexit.register(self.close)
        ip("netns", "add", self.a)
        ip("netns", "add", self.b)
        ip("link", "add", self.veth_a, "type", "veth", "peer", "name", self.veth_b)
        ip("link", "set", self.veth_a, "netns", self.a)
        ip("link", "set", self.veth_b, "netns", self.b)
        for ns, dev, addr in ((self.a, self.veth_a, MASTER), (self.b, self.veth_b, OTHER)):
            ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def hosts(self, ns, text):
        """/etc/hosts as `ip netns exec` shows it to the namespace's programs."""
        os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
        with open(f"/etc/netns/{ns}/hosts", "w") as f:
            f.write(text)

    def start(self, ns, argv, out_dir, name, env=None, limit=JOB_LIMIT_S):
        """A program in namespace `ns`, its own session, stdout and stderr into files, ended
        after `limit` seconds."""
        out = open(os.path.join(out_dir, name + ".out"), "w")
        err = open(os.path.join(out_dir, name + ".err"), "w")
        cmd = [IP, "netns", "exec", ns, "timeout", "-k", "5", str(limit), *argv]
        p = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True, env=env)
        p.out_path, p.err_path = out.name, err.name
        out.close()
        err.close()
        self.jobs.append(p)
        return p

    def close(self):
        if self.closed:
            return
        self.closed = True
        for p in self.jobs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        for ns in (self.a, self.b):
            remove_namespace(ns)
        try:
            os.rmdir("/etc/netns")  # only when no other run's files are there
        except OSError:
            pass


def read(path):
    with open(path) as f:
        return f.read()


def wait(p, seconds):
    """p's exit status, or None when it is still running after `seconds`."""
    try:
        return p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def skip_reason():
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN"
    if IP is None:
        return "no `ip` (iproute2) on this machine"
    probe = f"{PREFIX}{os.getpid()}-probe"
    p = ip("netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"`ip netns add` fails here: {p.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def train_args(args, out_dir, *extra):
    return [args.train, "--distributed", "--dataset", "synthetic", "--batch-size", "4", "--threads",
            "1", "--workers", "0", "--epochs", "1", "--cpu-conv", "rule", *extra] + (
        ["--checkpoint-dir", out_dir] if out_dir else [])


class Checks:
    def __init__(self, show):
        self.failures = []
        self.show = show  # every job's output, also when it passes

    def __call__(self, ok, what, *logs):
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            self.failures.append(what)
        if not ok:
            for path in logs:
                print(f"  --- {os.path.basename(path)}\n{read(path).strip()}")


def job_case(args, m, tmp, check):
    # The reference: the same 4 ranks on one machine (this one's loopback).
    ref_dir = os.path.join(tmp, "one-machine")
    start = time.monotonic()
    p = subprocess.run(["timeout", "-k", "5", str(JOB_LIMIT_S), args.run, "--nproc-per-node", "4",
                        *train_args(args, ref_dir, "--synthetic-size", "64")],
                       capture_output=True, text=True, timeout=JOB_LIMIT_S + 10)
    print(f"     one machine, 4 ranks: {time.monotonic() - start:.1f} s", flush=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
    check(p.returncode == 0, "the 4-rank job on one machine")
    reference = open(os.path.join(ref_dir, "model.safetensors"), "rb").read() if p.returncode == 0 else b""
    ref_accuracy = re.findall(r"test accuracy: .*", p.stdout)

    def two_machines(name, master_addr):
        out_dir = os.path.join(tmp, name)
        start = time.monotonic()
        nodes = []
        for node, ns in ((0, m.a), (1, m.b)):
            nodes.append(m.start(ns, [args.run, "--nnodes", "2", "--node-rank", str(node),
                                      "--nproc-per-node", "2", "--master-addr", master_addr,
                                      "--master-port", PORT, *train_args(
                                          args, out_dir if node == 0 else None, "--synthetic-size",
                                          "64", "--dist-timeout", "20")],
                                 tmp, f"{name}-node{node}"))
        codes = [wait(n, JOB_LIMIT_S + 10) for n in nodes]
        print(f"     {name}: {time.monotonic() - start:.1f} s", flush=True)
        logs = [path for n in nodes for path in (n.out_path, n.err_path)]
        model = os.path.join(out_dir, "model.safetensors")
        same = os.path.exists(model) and open(model, "rb").read() == reference
        accuracy = re.findall(r"test accuracy: .*", read(nodes[0].out_path))
        return codes, same and accuracy == ref_accuracy, logs, [read(n.err_path) for n in nodes]

    codes, same, logs, (err_a, err_b) = two_machines("two-machines", MASTER)
    check(codes == [0, 0], f"2 machines x 2 ranks, --master-addr {MASTER}: both exit 0 ({codes})", *logs)
    check(same, "its weights and test accuracy equal the one-machine job's, byte for byte", *logs)
    said = [f"rank {r} of 4): listening on {addr} (interface {dev}), the address that routes to "
            f"the master (TCP store at {MASTER}:{PORT})"
            for r, addr, dev in ((0, MASTER, m.veth_a), (1, MASTER, m.veth_a),
                                 (2, OTHER, m.veth_b), (3, OTHER, m.veth_b))]
    check(all(s in err_a for s in said[:2]) and all(s in err_b for s in said[2:]),
          "each rank says which address and interface it listens on", *logs)

    # The master's name resolves to loopback on its own machine, to its address on the other.
    m.hosts(m.a, "127.0.0.1 localhost\n127.0.1.1 kiln-master\n")
    m.hosts(m.b, f"127.0.0.1 localhost\n{MASTER} kiln-master\n")
    codes, same, logs, (err_a, _) = two_machines("loopback-name", "kiln-master")
    check(codes == [0, 0] and same,
          f"--master-addr kiln-master, 127.0.1.1 on the master's machine: the same weights ({codes})",
          *logs)
    check(f"rank 1 of 4): listening on {MASTER} (interface {m.veth_a}), the address the other "
          "machines reached the master at (the route to it from here is loopback" in err_a,
          "the master's ranks listen where the other machine reached the store", *logs)

    # The variables srun sets (no srun here: each rank started by hand in its namespace), and
    # --dist-blocking-wait, which gloo's waits need not (they block already).
    out_dir = os.path.join(tmp, "srun")
    start = time.monotonic()
    ranks = []
    for r in range(4):
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
        env.update(SLURM_PROCID=str(r), SLURM_NTASKS="4", SLURM_LOCALID=str(r % 2),
                   SLURM_NTASKS_PER_NODE="2", SLURM_JOB_ID=str(os.getpid()), MASTER_ADDR=MASTER,
                   MASTER_PORT=PORT, OMP_NUM_THREADS="1")
        ranks.append(m.start(m.a if r < 2 else m.b,
                             train_args(args, out_dir if r == 0 else None, "--synthetic-size", "64",
                                        "--dist-timeout", "20", "--dist-blocking-wait"),
                             tmp, f"srun-rank{r}", env))
    codes = [wait(p, JOB_LIMIT_S + 10) for p in ranks]
    print(f"     srun's variables: {time.monotonic() - start:.1f} s", flush=True)
    model = os.path.join(out_dir, "model.safetensors")
    same = os.path.exists(model) and open(model, "rb").read() == reference
    check(codes == [0] * 4 and same,
          f"2 x 2 ranks started with srun's variables (SLURM_PROCID...): the same weights ({codes})",
          *[path for p in ranks for path in (p.out_path, p.err_path)])


def lost_node_case(args, m, tmp, check):
    timeout_s = 3
    nodes = []
    for node, ns in ((0, m.a), (1, m.b)):
        nodes.append(m.start(ns, [args.run, "--nnodes", "2", "--node-rank", str(node),
                                  "--nproc-per-node", "2", "--master-addr", MASTER,
                                  "--master-port", PORT, "--grace-seconds", "3",
                                  *train_args(args, None, "--synthetic-size", "100000",
                                              "--dist-timeout", str(timeout_s))],
                             tmp, f"lost-node{node}", limit=2 * JOB_LIMIT_S))
    logs = [path for n in nodes for path in (n.out_path, n.err_path)]
    # The first step's progress line: every rank has connected and reduced once.
    first_step = re.compile(r"\] 1/\d+ loss")
    deadline = time.monotonic() + 30
    while not first_step.search(read(nodes[0].err_path)) and time.monotonic() < deadline:
        if any(n.poll() is not None for n in nodes):
            break
        time.sleep(0.1)
    started = first_step.search(read(nodes[0].err_path)) and all(n.poll() is None for n in nodes)
    check(started, "the 2 x 2 job trains", *logs)
    if not started:
        return
    time.sleep(0.5)  # into the next steps
    ip("-n", m.a, "link", "set", m.veth_a, "down")
    lost_at = time.monotonic()
    # The documented bound: the timeout, then at most 5 s to diagnose (two heartbeat periods, or
    # the store's patience); 5 s more for a busy machine.
    bound = timeout_s + 5 + 5
    limit = 20
    code_a = wait(nodes[0], limit)
    seconds_a = time.monotonic() - lost_at
    code_b = wait(nodes[1], max(1.0, limit - seconds_a))
    seconds_b = time.monotonic() - lost_at
    err_a, err_b = read(nodes[0].err_path), read(nodes[1].err_path)
    check(code_a not in (None, 0) and seconds_a < bound
          and "not answering: ranks 2, 3 (no heartbeat" in err_a,
          f"the master's machine ends {seconds_a:.1f} s after the link went down (timeout "
          f"{timeout_s} s), naming ranks 2 and 3 (exit {code_a})", *logs)
    check(code_b not in (None, 0) and seconds_b < bound and "did not answer" in err_b
          and "unreachable from this machine" in err_b,
          f"the lost machine's ranks end too, {seconds_b:.1f} s after, saying the store did not "
          f"answer (exit {code_b})", *logs)


def env_case(args, check):
    env = dict(os.environ, NCCL_SOCKET_IFNAME="k2m-test0", NCCL_DEBUG="WARN",
               NCCL_IB_DISABLE="1", KILN_DIST_TIMEOUT="7")
    p = subprocess.run([args.run, "--nproc-per-node", "2", "env"], capture_output=True, text=True,
                       timeout=30, env=env)
    lines = p.stdout.splitlines()
    wanted = ["NCCL_SOCKET_IFNAME=k2m-test0", "NCCL_DEBUG=WARN", "NCCL_IB_DISABLE=1",
              "KILN_DIST_TIMEOUT=7", "RANK=0", "RANK=1"]
    counts = {w: lines.count(w) for w in wanted}
    ok = p.returncode == 0 and all(counts[w] == 2 for w in wanted[:4]) and counts["RANK=0"] == 1 \
        and counts["RANK=1"] == 1
    print(f"{'ok  ' if ok else 'FAIL'} kiln-run passes NCCL_* and KILN_DIST_TIMEOUT to every rank: {counts}")
    if not ok:
        check.failures.append("env")
        print(p.stdout, p.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="kiln-run")
    ap.add_argument("--train", help="kiln-train")
    ap.add_argument("--case", choices=["job", "lost-node", "env"], required=True)
    ap.add_argument("--show", action="store_true", help="print every job's output")
    args = ap.parse_args()
    check = Checks(args.show)
    if args.case == "env":
        env_case(args, check)
        return 1 if check.failures else 0
    reason = skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return SKIP
    # A SIGTERM (ctest's timeout, a user) runs the cleanup through SystemExit.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    remove_stale()
    m = Machines()
    env_tmp = tempfile.mkdtemp(prefix="kiln-two-machines-")
    try:
        os.environ["KILN_CPU_CONV"] = "rule"
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
        start = time.monotonic()
        if args.case == "job":
            job_case(args, m, env_tmp, check)
        else:
            lost_node_case(args, m, env_tmp, check)
        print(f"     {args.case}: {time.monotonic() - start:.1f} s in all")
        if args.show:
            for p in m.jobs:
                for path in (p.out_path, p.err_path):
                    print(f"  --- {os.path.basename(path)}\n{read(path).strip()}")
    finally:
        m.close()
        shutil.rmtree(env_tmp, ignore_errors=True)
    if check.failures:
        print(f"{len(check.failures)} failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
