#!/usr/bin/env python3
"""The kernel lab's counted tables, made from `kiln-bench lab all --metrics` (never typed by hand).

    scripts/lab-counts-report.py --kiln-bench build-sim/benchmarks/kiln_bench/kiln-bench
    scripts/lab-counts-report.py --csv counts.csv [--docs docs/kernels] [--check]

With --kiln-bench it runs the lab on the CUDA simulator (a -DKILN_CUDA=SIM build, Release) with
--metrics and --csv into a temporary folder (an argument vector, no shell); with --csv it reads
such a file. For each family in it (reduction, softmax, layernorm_forward, layernorm_backward,
gemm, gemm_tc, attention_forward, attention_tc, attention_backward) it writes a markdown table
between the markers

    <!-- lab-counts:<family> begin -->
    <!-- lab-counts:<family> end -->

of whichever page under --docs holds them, replacing what was there. --check writes nothing and
exits 1 when a page's table differs from the counts (the ctest lab_counts_docs: the walkthroughs
cannot drift from the kernels).
"""
import argparse
import csv
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
GPUS = ["H100", "H200", "A100"]


def read_rows(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def run_lab(kiln_bench):
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "counts.csv"
        result = subprocess.run([kiln_bench, "lab", "all", "--metrics", "--csv", str(path)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stdout[-4000:], result.stderr[-4000:])
            raise SystemExit("lab-counts-report: kiln-bench failed")
        return read_rows(path)


def fixed(text, decimals):
    return f"{float(text):.{decimals}f}"


def bytes_text(text):
    value = float(text)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def ways(requests, value):
    return fixed(value, 2) if int(requests) > 0 else "-"


def table(rows):
    problem = rows[0]["problem"]
    intro = (f"Counted on the CUDA simulator at {problem} by `kiln-bench lab all --metrics`, "
             "written by `scripts/lab-counts-report.py` (the columns: docs/kernels/README.md, "
             "\"Counted on the simulator\"). **The three estimates are roofline times from the "
             "counts (us, and the bound: memory, f32 or tensor math), not measurements**, for "
             "this small problem.")
    lines = textwrap.wrap(intro, width=100, break_long_words=False, break_on_hyphens=False) + [
        "",
        "| version | global requests | sectors / request | coalescing | shared loads | ways (loads) "
        "| ways (stores) | lanes active | occupancy | DRAM bytes | FLOP / byte | "
        + " | ".join(f"{gpu} estimate" for gpu in GPUS) + " |",
        "| --- |" + " ---: |" * (10 + len(GPUS)),
    ]
    for row in rows:
        if int(row["counted_kernels"]) == 0:
            why = ("a CPU stand-in for the library on the simulator" if int(row["kernels"]) == 0
                   else "kiln's op kernel, not compiled for counting")
            lines.append(f"| {row['version']} | {why} |" + " |" * (9 + len(GPUS)))
            continue
        occupancy = row["occupancy_pct"]
        cells = [
            row["version"], row["global_requests"], fixed(row["sectors_per_request"], 2),
            fixed(row["coalescing_pct"], 1) + "%", row["shared_load_requests"],
            ways(row["shared_load_requests"], row["shared_load_ways"]),
            ways(row["shared_store_requests"], row["shared_store_ways"]),
            fixed(row["lanes_pct"], 1) + "%", occupancy + ("%" if occupancy != "?" else ""),
            bytes_text(row["bytes"]), fixed(row["intensity"], 2),
        ] + [row[f"{gpu}_estimate"] for gpu in GPUS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kiln-bench", help="run this kiln-bench (a simulator build)")
    source.add_argument("--csv", help="read the counts of `kiln-bench lab all --metrics --csv`")
    parser.add_argument("--docs", type=pathlib.Path, default=ROOT / "docs" / "kernels")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a page differs from the counts")
    args = parser.parse_args()
    rows = run_lab(args.kiln_bench) if args.kiln_bench else read_rows(args.csv)
    families = {}
    for row in rows:
        families.setdefault(row["family"], []).append(row)
    if not families:
        raise SystemExit("lab-counts-report: no rows in the counts")
    pages = {path: path.read_text() for path in sorted(args.docs.glob("*.md"))}
    stale = []
    for family, family_rows in families.items():
        pattern = re.compile(rf"(<!-- lab-counts:{re.escape(family)} begin -->)(.*?)"
                             rf"(<!-- lab-counts:{re.escape(family)} end -->)", re.S)
        holders = [path for path, text in pages.items() if pattern.search(text)]
        if len(holders) != 1:
            raise SystemExit(f"lab-counts-report: {len(holders)} pages under {args.docs} hold "
                             f"the markers of {family}, expected 1")
        text = pages[holders[0]]
        updated = pattern.sub(
            lambda m: m.group(1) + "\n" + table(family_rows) + "\n" + m.group(3), text)
        if updated != text:
            stale.append(f"{holders[0].name} ({family})")
            pages[holders[0]] = updated
    if args.check:
        if stale:
            print("lab-counts-report: these tables differ from the counts: " + ", ".join(stale) +
                  "; rerun scripts/lab-counts-report.py --kiln-bench ...")
            return 1
        print(f"lab-counts-report: {len(families)} tables agree with the counts")
        return 0
    for path, text in pages.items():
        if path.read_text() != text:
            path.write_text(text)
    print(f"lab-counts-report: {len(families)} tables; rewritten: {', '.join(stale) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
