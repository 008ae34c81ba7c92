#!/usr/bin/env python3
"""Runs one scenario of nccl_job (tests/sim/nccl_job/) as a job of --ranks processes on simulated
GPUs, each started with kiln-run's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and KILN_SIM_DEVICES = max(2, ranks), so that rank r runs on its own
simulated device cuda:r and the ranks meet through kiln's NCCL model over loopback TCP.

Without --expect-failure every rank must print "rank R of N: ok" and exit 0 within --limit
seconds. With it (the fault scenarios), every rank must exit non-zero on its own within --limit
seconds, rank 1 by SIGKILL when --killed, and every other rank's stderr must name itself
("rank R of N") and contain each given text (the collective it was in, the rank that failed it).
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--limit", type=float, default=240.0)
    ap.add_argument("--expect-failure", metavar="TEXT", action="append",
                    help="the job must fail, each other rank naming TEXT (repeatable)")
    ap.add_argument("--killed", action="store_true", help="rank 1 ends by SIGKILL")
    ap.add_argument("scenario")
    args = ap.parse_args()
    n = args.ranks
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()), KILN_SIM_DEVICES=str(max(2, n)))
        procs = []
        for r in range(n):
            outputs = (open(os.path.join(scratch, f"out{r}"), "w+"),
                       open(os.path.join(scratch, f"err{r}"), "w+"))
            procs.append((subprocess.Popen([args.job, args.scenario, scratch],
                                           env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                           stdout=outputs[0], stderr=outputs[1]), outputs))
        start = time.monotonic()
        failures = []
        for r, (p, (out, err)) in enumerate(procs):
            try:
                p.wait(timeout=max(0.0, args.limit - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                failures.append(f"rank {r}: still running after {args.limit:.0f} s (killed)")
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
            print(f"rank {r}: exit {p.returncode}\n  stdout: {stdout.strip()}\n  stderr: {stderr.strip()}")
            if args.expect_failure is None:
                if p.returncode != 0 or f"rank {r} of {n}: ok" not in stdout:
                    failures.append(f"rank {r}: exit {p.returncode}")
            elif args.killed and r == 1:
                if p.returncode != -9:
                    failures.append(f"rank 1: exit {p.returncode}, expected SIGKILL")
            elif p.returncode in (0, -9):
                failures.append(f"rank {r}: exit {p.returncode}, expected a failure of its own")
            elif r != 1:
                for text in [f"rank {r} of {n}"] + args.expect_failure:
                    if text not in stderr:
                        failures.append(f"rank {r}: stderr does not name '{text}'")
        print(f"{args.scenario} over {n} ranks: {time.monotonic() - start:.1f} s")
        for f in failures:
            print(f"FAIL {f}")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
