#!/usr/bin/env python3
"""kiln-gpt against its PyTorch twin (apps/gpt/gpt_torch.py): from the same initial weights
(--save-init, a .pth file) on the same batches, the two loss curves agree (each logged train loss
within 2%, the last validation loss within 2%), and kiln-gpt prints sampled text. Exits 77 (ctest's
skip) where python3 has no torch.

    gpt_twin_test.py --gpt build/apps/kiln-gpt --twin apps/gpt/gpt_torch.py --work-dir /tmp/gpt
"""
import argparse
import csv
import os
import subprocess
import sys

SMALL = ["--steps", "40", "--batch-size", "16", "--context", "32", "--dim", "48", "--depth", "2",
         "--heads", "4", "--log-every", "20", "--eval-batches", "4", "--threads", "2"]


def curve(path):
    with open(path) as f:
        return [(int(r["step"]), float(r["train_loss"]), float(r["validation_loss"]))
                for r in csv.DictReader(f)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpt", required=True)
    parser.add_argument("--twin", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIPPED: no torch in this python3")
        return 77
    os.makedirs(args.work_dir, exist_ok=True)
    init = os.path.join(args.work_dir, "init.pth")
    kiln_csv = os.path.join(args.work_dir, "kiln.csv")
    torch_csv = os.path.join(args.work_dir, "torch.csv")
    k = subprocess.run([args.gpt, *SMALL, "--device", "cpu", "--save-init", init, "--loss-csv",
                        kiln_csv, "--sample", "80"], capture_output=True, text=True, timeout=240)
    print(k.stdout, k.stderr)
    if k.returncode != 0:
        return 1
    t = subprocess.run([sys.executable, args.twin, *SMALL, "--init", init, "--loss-csv",
                        torch_csv], capture_output=True, text=True, timeout=240)
    print(t.stdout, t.stderr)
    if t.returncode != 0:
        return 1
    ok = "--- sampled" in k.stdout
    kc, tc = curve(kiln_csv), curve(torch_csv)
    ok &= [s for s, _, _ in kc] == [s for s, _, _ in tc] == [20, 40]
    for (step, kt, kv), (_, tt, tv) in zip(kc, tc):
        print(f"step {step}: train kiln {kt:.4f} torch {tt:.4f}; validation kiln {kv:.4f} "
              f"torch {tv:.4f}")
        ok &= abs(kt - tt) <= 0.02 * tt
    ok &= abs(kc[-1][2] - tc[-1][2]) <= 0.02 * tc[-1][2]
    # Training did something: the last train loss is well under the first (ln 256 = 5.55).
    ok &= kc[-1][1] < 0.8 * kc[0][1]
    print("PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
