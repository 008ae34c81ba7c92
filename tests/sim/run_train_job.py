#!/usr/bin/env python3
"""kiln-train --distributed --device cuda --amp fp16 under kiln-run, 2 processes on 2 simulated
GPUs through kiln's NCCL model (docs/simulator.md, "NCCL"): 256 synthetic images in batches of 64
per rank (two steps each) and an evaluation of 64 more, with DataLoader workers. The job must exit 0 with rank 0 alone printing (one
"test accuracy") and writing (metrics.csv with one epoch, the checkpoint); every rank makes CUDA
contexts on its own device only (KILN_SIM_ONE_DEVICE_PER_PROCESS=1 ends a process that makes a
second).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="kiln-run")
    ap.add_argument("--train", required=True, help="kiln-train")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        start = time.monotonic()
        p = subprocess.run(
            [args.run, "--nproc-per-node", "2", args.train, "--distributed", "--device", "cuda",
             "--amp", "fp16", "--dataset", "synthetic", "--synthetic-size", "256", "--batch-size", "64",
             "--epochs", "1", "--threads", "1", "--workers", "2", "--checkpoint-dir", d],
            capture_output=True, text=True, timeout=600,
            env=dict(os.environ, KILN_SIM_DEVICES="2", KILN_SIM_ONE_DEVICE_PER_PROCESS="1"))
        seconds = time.monotonic() - start
        print(f"exit {p.returncode} in {seconds:.0f} s\nstdout: {p.stdout.strip()}\nstderr: {p.stderr.strip()}")
        rows = []
        if os.path.exists(os.path.join(d, "metrics.csv")):
            rows = open(os.path.join(d, "metrics.csv")).read().splitlines()
        checks = {
            "exit 0": p.returncode == 0,
            "rank 0 of 2 on nccl": "rank 0 of 2 (nccl)" in p.stdout,
            "rank 0 on cuda:0": "device cuda:0" in p.stdout,
            "rank 0 alone reports the test accuracy": p.stdout.count("test accuracy") == 1,
            "metrics.csv holds one epoch": len(rows) == 2,
            "the checkpoint is written": os.path.exists(os.path.join(d, "last.safetensors")),
        }
        failed = [what for what, ok in checks.items() if not ok]
        for what in failed:
            print(f"FAIL {what}")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
