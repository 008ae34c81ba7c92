#!/usr/bin/env python3
"""The kernel lab's tables and plots, made from kiln-bench's CSV (never typed by hand).

    kiln-bench lab all --csv lab.csv
    scripts/lab-report.py lab.csv [--docs docs/kernels] [--commit SHA]

For each family in the CSV (gemm, gemm_tc, reduction, softmax, layernorm_forward,
layernorm_backward, attention_forward, attention_tc, attention_backward) it writes a markdown
table between the markers

    <!-- lab-table:<family> begin -->
    <!-- lab-table:<family> end -->

of whichever page under --docs holds them, replacing what was there (until a GPU run, the line
"Not yet measured on a GPU."), and a plot under <docs>/plots/: a roofline for the GEMMs (the
versions' TFLOP/s at the problem's arithmetic intensity, under min(peak, intensity x DRAM
bandwidth)) and, for the memory-bound families, each version's GB/s against the DRAM peak and the
measured copy bandwidth. The plots are gnuplot scripts with their data; where gnuplot is installed
they are rendered to PNG (gnuplot runs with an argument vector, no shell).

The CSV starts with "# key=value" lines (gpu, compute_capability, sms, dram_gbps, f32_tflops,
tensor_tflops, copy_gbps, date), then the header
family,version,name,ms,rate,unit,pct_v0,pct_peak,checked,problem,flops,bytes.

--self-test runs the script on a made-up CSV in a temporary folder and checks what it wrote;
nothing in the repository is touched.
"""
import argparse
import csv
import io
import math
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

FAMILY_TITLES = {
    "gemm": "f32 GEMM (no tensor cores)",
    "gemm_tc": "tensor-core GEMM (bf16/f16 in, f32 accumulate)",
    "reduction": "reduction (sum of each row)",
    "softmax": "softmax over rows",
    "layernorm_forward": "layer norm, forward",
    "layernorm_backward": "layer norm, backward",
    "attention_forward": "attention forward, f32",
    "attention_tc": "attention forward on tensor cores (bf16/f16 in, f32 accumulate)",
    "attention_backward": "attention backward, f32",
}
PLACEHOLDER = "Not yet measured on a GPU."


def read_csv(text):
    """(meta, rows): the '# key=value' preamble and the rows as dicts."""
    meta, body = {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            match = re.match(r"#\s*([A-Za-z0-9_]+)=(.*)$", line)
            if match:
                meta[match.group(1)] = match.group(2).strip()
        elif line.strip():
            body.append(line)
    rows = list(csv.DictReader(io.StringIO("\n".join(body) + "\n")))
    return meta, rows


def number(text, decimals):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return ""
    if math.isnan(value):
        return ""
    return f"{value:.{decimals}f}"


def pct_copy(row, meta):
    try:
        return 100.0 * float(row["rate"]) / float(meta.get("copy_gbps", ""))
    except (ValueError, ZeroDivisionError):
        return float("nan")


def provenance(meta, commit):
    parts = [f"Measured on {meta.get('gpu', 'an unknown GPU')}"]
    if meta.get("compute_capability"):
        parts[0] += f" (compute capability {meta['compute_capability']}, {meta.get('sms', '?')} SMs)"
    parts.append(f"{meta.get('date', 'an unknown date')}")
    parts.append(f"commit {commit or 'unknown'}")
    line = ", ".join(parts) + ", by `kiln-bench lab` (scripts/gpu-lab.sh)."
    peaks = (f"Peaks from the device's attributes: DRAM {number(meta.get('dram_gbps'), 0)} GB/s, "
             f"f32 {number(meta.get('f32_tflops'), 1)} TFLOP/s, tensor bf16/f16 "
             f"{number(meta.get('tensor_tflops'), 0)} TFLOP/s")
    if number(meta.get("copy_gbps"), 0):
        peaks += f"; a device-to-device copy measured {number(meta.get('copy_gbps'), 0)} GB/s"
    return line + " " + peaks + "."


def table(family, rows, meta, commit, plot_link):
    memory = any(r["unit"] == "GB/s" for r in rows)
    unit = "GB/s" if memory else "TFLOP/s"
    header = ["problem", "version", "ms", unit, "% of v0", "% of peak"]
    if memory:
        header.append("% of copy")
    header.append("check")
    lines = [provenance(meta, commit), "", "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * len(header)) + "|"]
    for r in rows:
        cells = [r["problem"], f"`{r['name']}`", number(r["ms"], 3),
                 number(r["rate"], 1 if memory else 2), number(r["pct_v0"], 1),
                 number(r["pct_peak"], 1)]
        if memory:
            cells.append(number(pct_copy(r, meta), 1))
        cells.append(r["checked"].replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    if plot_link:
        lines += ["", plot_link]
    return "\n".join(lines)


def replace_block(text, family, block):
    """text with the lines between family's markers replaced by block; None without markers."""
    begin, end = f"<!-- lab-table:{family} begin -->", f"<!-- lab-table:{family} end -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        return None
    return pattern.sub(lambda _: begin + "\n" + block + "\n" + end, text, count=1)


def plot_files(family, rows, meta, plot_dir):
    """Writes <family>.dat and <family>.gp; returns the script's path."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    dat, script, png = (plot_dir / f"{family}.{ext}" for ext in ("dat", "gp", "png"))
    memory = any(r["unit"] == "GB/s" for r in rows)
    title = FAMILY_TITLES.get(family, family) + ", " + meta.get("gpu", "GPU")
    lines = []
    for i, r in enumerate(rows):
        rate = number(r["rate"], 4)
        if not rate:
            continue
        label = f"{r['name']} {r['problem']}".replace(" ", "_").replace('"', "")
        if memory:
            lines.append(f"{i} {rate} \"{label}\"")
        else:
            flops, nbytes = float(r["flops"] or 0), float(r["bytes"] or 0)
            intensity = flops / nbytes if nbytes else 0
            lines.append(f"{intensity:.4f} {rate} \"{label}\"")
    dat.write_text("\n".join(lines) + "\n")
    gp = [f'set terminal pngcairo size 1000,600', f'set output "{png.name}"',
          f'set title "{title}" noenhanced', "set key outside right noenhanced", "set grid"]
    dram = float(meta.get("dram_gbps") or 0)
    copy = float(meta.get("copy_gbps") or 0)
    if memory:
        gp += ['set ylabel "GB/s"', "set style fill solid 0.6", "set boxwidth 0.7",
               "set xtics rotate by -45 noenhanced", "set yrange [0:*]"]
        plot = [f'"{dat.name}" using 1:2:xtic(3) with boxes title "versions"']
        if dram:
            plot.append(f"{dram} with lines lw 2 title \"DRAM peak {dram:.0f} GB/s\"")
        if copy:
            plot.append(f"{copy} with lines lw 2 dt 2 title \"copy {copy:.0f} GB/s\"")
    else:
        key = "tensor_tflops" if family in ("gemm_tc", "attention_tc") else "f32_tflops"
        peak = float(meta.get(key) or 0)
        gp += ["set logscale xy", 'set xlabel "FLOP per byte (the least the problem moves)"',
               'set ylabel "TFLOP/s"', "set xrange [1:10000]"]
        gp.append("set samples 2000")
        plot = [f'"{dat.name}" using 1:2:3 with labels noenhanced left point pt 7 offset 1,0 '
                'font ",7" notitle']
        if peak and dram:
            plot.append(f"(x * {dram / 1000:.4f} < {peak:.4f} ? x * {dram / 1000:.4f} : {peak:.4f}) "
                        f"with lines lw 2 title \"roof: {peak:.1f} TFLOP/s, {dram:.0f} GB/s\"")
    gp.append("plot " + ", ".join(plot))
    script.write_text("\n".join(gp) + "\n")
    return script


def render(script):
    """Runs gnuplot on the script in its folder; True when the PNG was made."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        return False
    result = subprocess.run([gnuplot, script.name], cwd=script.parent, capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        print(f"lab-report: gnuplot failed on {script}: {result.stderr.strip()}", file=sys.stderr)
        return False
    return script.with_suffix(".png").exists()


def report(csv_path, docs, commit, plots=True):
    meta, rows = read_csv(pathlib.Path(csv_path).read_text())
    families = []
    for r in rows:
        if r["family"] not in families:
            families.append(r["family"])
    pages = sorted(pathlib.Path(docs).glob("*.md"))
    updated, missing = [], []
    for family in families:
        family_rows = [r for r in rows if r["family"] == family]
        plot_link = ""
        if plots:
            script = plot_files(family, family_rows, meta, pathlib.Path(docs) / "plots")
            if render(script):
                plot_link = f"![{FAMILY_TITLES.get(family, family)}](plots/{family}.png)"
            else:
                plot_link = (f"Plot: `gnuplot {script.name}` in docs/kernels/plots/ (gnuplot was "
                             "not available where the table was made).")
        block = table(family, family_rows, meta, commit, plot_link)
        for page in pages:
            text = page.read_text()
            new = replace_block(text, family, block)
            if new is not None:
                if new != text:
                    page.write_text(new)
                updated.append(f"{page.name}:{family}")
                break
        else:
            missing.append(family)
    for family in missing:
        print(f"lab-report: no page under {docs} has the markers of {family}", file=sys.stderr)
    print(f"lab-report: {len(rows)} rows; tables updated: {', '.join(updated) or 'none'}")
    return 1 if missing else 0


FAKE_CSV = """# kiln-bench lab
# gpu=Fake GPU (self-test)
# compute_capability=9.0
# sms=4
# dram_gbps=100.0
# f32_tflops=1.00
# tensor_tflops=10.0
# copy_gbps=90.0
# date=2000-01-01T00:00:00Z
family,version,name,ms,rate,unit,pct_v0,pct_peak,checked,problem,flops,bytes
gemm,0,v0_cublas,2.00000,0.500,TFLOP/s,100.00,50.00,reference,m=64 n=64 k=64,524288,49152
gemm,1,v1_naive,,,TFLOP/s,,,"FAIL C (worst 3.000 of tol)",m=64 n=64 k=64,524288,49152
reduction,0,v0_cub,1.00000,80.000,GB/s,100.00,80.00,reference,rows=1 cols=1000,0,4004
reduction,1,v1_shared_tree,2.00000,40.000,GB/s,50.00,40.00,pass (worst 0.000 of tol),rows=1 cols=1000,0,4004
"""

FAKE_PAGE = """# A page

Before.

<!-- lab-table:reduction begin -->
Not yet measured on a GPU.
<!-- lab-table:reduction end -->

Between.

<!-- lab-table:gemm begin -->
Not yet measured on a GPU.
<!-- lab-table:gemm end -->

After.
"""


def self_test():
    failures = []

    def expect(ok, what):
        print(f"  {'ok    ' if ok else 'FAILED'} {what}")
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "lab.csv").write_text(FAKE_CSV)
        docs = tmp / "docs"
        docs.mkdir()
        (docs / "page.md").write_text(FAKE_PAGE)
        meta, rows = read_csv(FAKE_CSV)
        expect(meta["gpu"] == "Fake GPU (self-test)" and len(rows) == 4, "reads the preamble and rows")
        expect(rows[1]["checked"] == "FAIL C (worst 3.000 of tol)", "reads a quoted field")
        status = report(tmp / "lab.csv", docs, "abc1234")
        text = (docs / "page.md").read_text()
        expect(status == 0, "every family found its markers")
        expect(PLACEHOLDER not in text, "the placeholders are replaced")
        expect(text.startswith("# A page\n\nBefore.\n") and "\nBetween.\n" in text and
               text.endswith("After.\n"), "the rest of the page is untouched")
        expect("| rows=1 cols=1000 | `v1_shared_tree` | 2.000 | 40.0 | 50.0 | 40.0 | 44.4 |" in text,
               "a memory-bound row, with % of copy")
        expect("| m=64 n=64 k=64 | `v1_naive` |  |  |  |  | FAIL C (worst 3.000 of tol) |" in text,
               "a failed row keeps its check and no figures")
        expect("commit abc1234" in text and "Fake GPU (self-test)" in text, "the provenance line")
        report(tmp / "lab.csv", docs, "abc1234")
        expect((docs / "page.md").read_text() == text, "a second run changes nothing")
        for family in ("gemm", "reduction"):
            expect((docs / "plots" / f"{family}.gp").exists(), f"the {family} gnuplot script")
        if shutil.which("gnuplot"):
            expect((docs / "plots" / "gemm.png").exists() and
                   (docs / "plots" / "reduction.png").exists(), "gnuplot rendered the plots")
        (docs / "page.md").write_text("no markers here\n")
        expect(report(tmp / "lab.csv", docs, None) == 1, "a family without markers is an error")
    print(f"lab-report self-test: {'passed' if not failures else f'{len(failures)} FAILED'}")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", help="kiln-bench lab's CSV (--csv)")
    parser.add_argument("--docs", default=str(pathlib.Path(__file__).resolve().parent.parent /
                                              "docs" / "kernels"),
                        help="the folder of the family pages (default docs/kernels)")
    parser.add_argument("--commit", help="the commit the run measured (for the provenance line)")
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    parser.add_argument("--self-test", action="store_true",
                        help="check the script on a made-up CSV in a temporary folder")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.csv:
        parser.error("a CSV file is needed (or --self-test)")
    return report(args.csv, args.docs, args.commit, plots=not args.no_plots)


if __name__ == "__main__":
    sys.exit(main())
