#!/usr/bin/env python3
"""kiln-device-info names the CPU kernels it picked at run time, and they are the best this CPU
runs, worked out here from /proc/cpuinfo's flags (independently of kiln's cpuid code); the
library is built without -march=native, so this is the check that a portable build still takes
the fast path. KILN_CPU_ISA caps the choice, and an unknown name is refused with a message.

    cpu_isa_test.py --device-info build/apps/kiln-device-info
"""
import argparse
import os
import re
import subprocess
import sys

LEVELS = ["baseline", "avx2", "avx512", "avx512_bf16"]


def expected_level():
    try:
        with open("/proc/cpuinfo") as f:
            line = next(l for l in f if l.startswith("flags"))
    except (OSError, StopIteration):
        return None
    flags = set(line.split(":", 1)[1].split())
    if not {"avx2", "fma", "f16c"} <= flags:
        return "baseline"
    if not {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "avx2"
    return "avx512_bf16" if "avx512_bf16" in flags else "avx512"


def run(device_info, cap=None):
    env = dict(os.environ)
    env.pop("KILN_CPU_ISA", None)
    if cap is not None:
        env["KILN_CPU_ISA"] = cap
    return subprocess.run([device_info], capture_output=True, text=True, env=env)


def chosen(result):
    found = re.search(r"CPU kernels: (\w+) \(this CPU runs up to (\w+);", result.stdout)
    if result.returncode != 0 or not found:
        sys.exit(f"FAILED: kiln-device-info exited {result.returncode}:\n{result.stdout}"
                 f"{result.stderr}")
    return found.group(1), found.group(2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device-info", required=True)
    args = parser.parse_args()
    want = expected_level()
    if want is None:
        print("SKIPPED: no /proc/cpuinfo to check the choice against")
        return
    used, best = chosen(run(args.device_info))
    if used != want or best != want:
        sys.exit(f"FAILED: /proc/cpuinfo says {want}, kiln uses {used} (best {best})")
    print(f"kernels picked at run time: {used}, as /proc/cpuinfo's flags say")
    for cap in LEVELS:
        expect = LEVELS[min(LEVELS.index(cap), LEVELS.index(want))]
        used, _ = chosen(run(args.device_info, cap.upper() if cap == "avx2" else cap))
        if used != expect:
            sys.exit(f"FAILED: KILN_CPU_ISA={cap} gave {used}, expected {expect}")
        print(f"KILN_CPU_ISA={cap}: {used}")
    bad = run(args.device_info, "sse9")
    if bad.returncode == 0 or "KILN_CPU_ISA" not in bad.stderr or "avx512" not in bad.stderr:
        sys.exit(f"FAILED: KILN_CPU_ISA=sse9 exited {bad.returncode}: {bad.stderr}")
    print(f"KILN_CPU_ISA=sse9 refused: {bad.stderr.strip()}")


if __name__ == "__main__":
    main()
