#!/usr/bin/env python3
"""Runs benchmarks/train_throughput on the CUDA simulator and fails if a training step launches
more than --max kernels, counting each cuBLAS/cuDNN call as one (docs/results.md's table of launch
counts; issue 24's targets). The count depends on the model, not on the batch or the image size,
so a batch of 2 keeps it cheap.

    check_launches_per_step.py --bin build/benchmarks/train_throughput --max 400 -- --model resnet20
"""
import argparse
import re
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--max", type=float, required=True)
    parser.add_argument("args", nargs="*", help="train_throughput's own arguments")
    args = parser.parse_args()
    command = [args.bin, "--device", "cuda", "--batch-size", "2", "--warmup", "1", "--steps", "1",
               "--launches"] + args.args
    run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout)
    if run.returncode != 0:
        print(f"check_launches_per_step: {' '.join(command)} exited with {run.returncode}")
        return 1
    found = re.search(r"([0-9.]+) kernel launches of kiln and ([0-9.]+) library calls", run.stdout)
    if not found:
        print("check_launches_per_step: no launch count in train_throughput's output")
        return 1
    kernels, library = float(found.group(1)), float(found.group(2))
    total = kernels + library
    print(f"check_launches_per_step: {kernels:g} kernels + {library:g} library calls = {total:g} "
          f"per step, at most {args.max:g} allowed")
    return 0 if total <= args.max else 1


if __name__ == "__main__":
    sys.exit(main())
