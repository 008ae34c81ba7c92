#!/usr/bin/env python3
"""`kiln-bench lab all --metrics` twice, under two simulator schedules, must count the same.

    check_lab_metrics.py KILN_BENCH

Runs the lab on the CUDA simulator with KILN_SIM_SEED=1 on one worker, then KILN_SIM_SEED=7 with
every thread a fiber on two workers, each writing its counts as CSV (--csv), and compares every
column but the CPU time. Also fails when a run fails, when a version's row is missing from either,
or when a version other than v0 counted nothing (its kernels would not be compiled for counting).
The program runs with an argument vector, no shell.
"""
import csv
import os
import subprocess
import sys
import tempfile

SCHEDULES = [
    {"KILN_SIM_SEED": "1", "KILN_SIM_WORKERS": "1"},
    {"KILN_SIM_SEED": "7", "KILN_SIM_WORKERS": "2", "KILN_SIM_FIBERS": "1"},
]


def run(kiln_bench, schedule, path):
    env = dict(os.environ, **schedule)
    result = subprocess.run([kiln_bench, "lab", "all", "--metrics", "--csv", path], env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:])
        raise SystemExit(f"check-lab-metrics: kiln-bench failed under {schedule}")
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    return {(r["family"], r["problem"], r["version"]): r for r in rows}


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory() as folder:
        runs = [run(sys.argv[1], s, os.path.join(folder, f"{i}.csv"))
                for i, s in enumerate(SCHEDULES)]
    problems = []
    if runs[0].keys() != runs[1].keys():
        problems.append(f"rows differ: {sorted(runs[0].keys() ^ runs[1].keys())}")
    for key in sorted(runs[0].keys() & runs[1].keys()):
        a, b = runs[0][key], runs[1][key]
        for column in a:
            if column != "cpu_seconds" and a[column] != b[column]:
                problems.append(f"{key}: {column} {a[column]} under {SCHEDULES[0]}, "
                                f"{b[column]} under {SCHEDULES[1]}")
        if not key[2].startswith("v0_") and a["counted_kernels"] in ("", "0"):
            problems.append(f"{key}: nothing counted")
    for problem in problems:
        print(problem)
    if problems or not runs[0]:
        raise SystemExit(f"check-lab-metrics: {len(problems)} problems")
    print(f"check-lab-metrics: {len(runs[0])} versions counted alike under two schedules")


if __name__ == "__main__":
    main()
